// syncline-gen: writes synthetic train/test data from a known random sparse model, with
// `syncline-gen criteo ...`, Criteo-format click data from a known model with interactions, or
// with `syncline-gen fashion-mnist ...`, the Fashion-MNIST images converted to libsvm files.
//
// Exit codes: 0 success (and --help), 1 when an output cannot be written, 2 for a bad flag or
// value, or an input file (fashion-mnist) that is missing or malformed.
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/command_line.h"
#include "tools/criteo_gen.h"
#include "tools/idx.h"
#include "tools/synthetic.h"

namespace syncline {
namespace {

constexpr int kExitWriteFailed = 1;
constexpr int kExitUsage = 2;

std::unique_ptr<std::ofstream> OpenOutput(const std::string& path) {
  auto out = std::make_unique<std::ofstream>(path, std::ios::binary | std::ios::trunc);
  if (!*out) {
    std::cerr << absl::StrFormat("syncline-gen: cannot open %s for writing: %s\n", path,
                                 std::strerror(errno));
    return nullptr;
  }
  return out;
}

std::string Summary(const SyntheticOptions& options, const SyntheticSummary& summary,
                    const std::string& out_path, const std::string& test_path) {
  std::string line =
      absl::StrFormat("syncline-gen: wrote %d train rows to %s", summary.train_rows, out_path);
  if (!test_path.empty()) {
    absl::StrAppend(&line,
                    absl::StrFormat(" and %d test rows to %s", summary.test_rows, test_path));
  }
  absl::StrAppend(&line,
                  absl::StrFormat(" (%d features, %d classes", options.features, options.classes));
  if (options.classes == 2) {
    absl::StrAppend(&line, absl::StrFormat(", train positive rate %.4f)", summary.PositiveRate()));
  } else {
    absl::StrAppend(&line, ", train rows per class");
    for (uint64_t count : summary.train_class_counts) absl::StrAppend(&line, " ", count);
    absl::StrAppend(&line, ")");
  }
  return line;
}

// `syncline-gen criteo`: argv[0] is "criteo".
// Refuses a negative count: CLI11 would wrap "-3" around to 2^64 - 3 for unsigned options.
CLI::Validator NotNegative() {
  return CLI::Validator(
      [](std::string& value) {
        return !value.empty() && value.front() == '-' ? "must not be negative: " + value
                                                      : std::string();
      },
      "", "NOT_NEGATIVE");
}

int CriteoMain(int argc, char** argv) {
  CriteoGenOptions options;
  std::string out_path = "-";
  std::string test_path;
  CLI::App app(
      "Writes synthetic Criteo-format click data (label, 13 integer and 26 hexadecimal\n"
      "categorical tab-separated fields, some empty) drawn from a known random model: Zipf-\n"
      "distributed values per field (vocabularies from 3 to 1M), a bias and a latent vector per\n"
      "value, and labels ~ Bernoulli(sigmoid(biases + pairwise latent dot products among 12\n"
      "fields + a dense term)). Most of the signal is in the pairwise terms, which the ctr model\n"
      "learns and logistic regression cannot. The same flags and --seed give the same bytes.",
      "syncline-gen criteo");
  app.option_defaults()->always_capture_default();
  const CLI::Validator kNotNegative = NotNegative();
  app.add_option("--rows", options.rows, "Rows in the training file (>= 1)")->check(kNotNegative);
  app.add_option("--out", out_path, "Training data file to write; - is standard output");
  app.add_option("--test-out", test_path, "Test data file to write, from the same model");
  app.add_option("--test-rows", options.test_rows, "Rows in the test file")->check(kNotNegative);
  app.add_option("--seed", options.seed, "Random seed for the model and the rows")
      ->check(kNotNegative);
  app.add_option("--zipf", options.zipf, "Zipf exponent of value popularity, > 0 and not 1");
  app.add_option("--interaction", options.interaction,
                 "Scale of the pairwise terms; 0 leaves a first-order model");
  if (auto code = ParseCommandLine(app, argc, argv, "syncline-gen criteo")) return *code;
  if (absl::Status s = ValidateCriteoGenOptions(options); !s.ok()) {
    std::cerr << "syncline-gen criteo: " << s.message()
              << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  std::cerr << "syncline-gen criteo: seed " << options.seed << "\n";
  std::unique_ptr<std::ofstream> file;
  if (out_path != "-") {
    file = OpenOutput(out_path);
    if (file == nullptr) return kExitWriteFailed;
  }
  std::ostream& train = file != nullptr ? *file : std::cout;
  std::unique_ptr<std::ofstream> test;
  if (!test_path.empty()) {
    test = OpenOutput(test_path);
    if (test == nullptr) return kExitWriteFailed;
  }
  absl::StatusOr<CriteoGenSummary> summary = WriteCriteoSynthetic(options, train, test.get());
  if (summary.ok()) {
    train.flush();
    if (file != nullptr) file->close();
    if (test != nullptr) test->close();
    if (!train || (file != nullptr && !*file) || (test != nullptr && !*test)) {
      summary = absl::DataLossError("closing an output file failed");
    }
  }
  if (!summary.ok()) {
    std::cerr << "syncline-gen criteo: " << summary.status().message() << "\n";
    return kExitWriteFailed;
  }
  // The data may be on standard output: the summary goes to standard error.
  std::cerr << absl::StrFormat("syncline-gen criteo: wrote %d train rows to %s",
                               summary->train_rows, out_path == "-" ? "standard output" : out_path);
  if (test != nullptr) {
    std::cerr << absl::StrFormat(" and %d test rows to %s", summary->test_rows, test_path);
  }
  std::cerr << absl::StrFormat(" (train positive rate %.4f)\n", summary->PositiveRate());
  return 0;
}

constexpr char kFashionMnistDir[] = "/usr/share/datasets/fashion-mnist";
constexpr int kFashionMnistClasses = 10;

// One half of Fashion-MNIST: the IDX files it is read from and the libsvm file it becomes.
struct FashionMnistSplit {
  const char* name;    // "train" or "test"
  const char* images;  // File names in --dir, without ".gz".
  const char* labels;
  std::string images_path;  // Found in --dir.
  std::string labels_path;
  std::string out_path;
  LabeledImages data;
  LibsvmConversion written;
};

// dir/name.gz (as the Debian package ships it) or dir/name (a gunzipped copy), whichever exists;
// zlib reads both. Empty when neither does.
std::string FindIdx(const std::string& dir, const std::string& name) {
  for (const std::string& path :
       {absl::StrCat(dir, "/", name, ".gz"), absl::StrCat(dir, "/", name)}) {
    std::error_code error;
    if (std::filesystem::exists(path, error)) return path;
  }
  return "";
}

std::string ClassCounts(const LibsvmConversion& written) {
  std::string counts;
  for (uint64_t count : written.rows_per_class) absl::StrAppend(&counts, " ", count);
  return counts;
}

// `syncline-gen fashion-mnist`: argv[0] is "fashion-mnist".
int FashionMnistMain(int argc, char** argv) {
  std::string dir = kFashionMnistDir;
  std::string out_dir;
  uint64_t limit = 0;
  CLI::App app(
      "Converts Fashion-MNIST (Zalando's 28x28 grayscale images of clothing, 60000 train and\n"
      "10000 test, 10 classes) from the IDX files of the Debian package dataset-fashion-mnist\n"
      "(scripts/install-deps.sh installs it) to libsvm files for --model softmax --classes 10:\n"
      "  OUT/fashion-mnist-train.libsvm and OUT/fashion-mnist-test.libsvm\n"
      "Each line is \"label id:value ...\": the class (0 T-shirt/top, 1 Trouser, 2 Pullover,\n"
      "3 Dress, 4 Coat, 5 Sandal, 6 Shirt, 7 Sneaker, 8 Bag, 9 Ankle boot), then the non-zero\n"
      "pixels, id = row * 28 + column (0-based), value = pixel / 255 to 4 significant digits.\n"
      "Every line also has the first and the last pixel (\"0:0\", \"783:0\" when zero), so the\n"
      "files are read as 0-based with 784 features under the default --index-base auto, even\n"
      "cut down by --limit. Then train with, for example:\n"
      "  syncline-launch --model softmax --classes 10 --train OUT/fashion-mnist-train.libsvm \\\n"
      "      --test OUT/fashion-mnist-test.libsvm --epochs 2 --out runs/fashion-mnist",
      "syncline-gen fashion-mnist");
  app.option_defaults()->always_capture_default();
  app.add_option("--dir", dir,
                 "Folder of the IDX files: train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                 "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each plain or .gz");
  app.add_option("--out", out_dir, "Folder to write the two libsvm files to (created if missing)")
      ->required();
  CLI::Option* limit_option =
      app.add_option("--limit", limit,
                     "Keep only the first N rows of each file (N >= 1), for quick experiments; "
                     "all rows when not given")
          ->check(NotNegative())
          ->default_str("");  // Not "=0": the default is no limit, and 0 is refused.
  if (auto code = ParseCommandLine(app, argc, argv, "syncline-gen fashion-mnist")) return *code;
  if (limit_option->count() > 0 && limit == 0) {
    std::cerr << "syncline-gen fashion-mnist: --limit must be at least 1"
              << "\nRun with --help for more information.\n";
    return kExitUsage;
  }

  std::vector<FashionMnistSplit> splits(2);
  splits[0] = {
      .name = "train", .images = "train-images-idx3-ubyte", .labels = "train-labels-idx1-ubyte"};
  splits[1] = {
      .name = "test", .images = "t10k-images-idx3-ubyte", .labels = "t10k-labels-idx1-ubyte"};
  // Every input is found and checked before anything is written.
  for (FashionMnistSplit& split : splits) {
    for (auto [name, path] : {std::pair{split.images, &split.images_path},
                              std::pair{split.labels, &split.labels_path}}) {
      *path = FindIdx(dir, name);
      if (path->empty()) {
        std::cerr << absl::StrFormat(
            "syncline-gen fashion-mnist: %s/%s.gz not found (nor %s/%s): install the Debian "
            "package dataset-fashion-mnist (scripts/install-deps.sh installs it), or pass --dir "
            "with the folder of the IDX files\n",
            dir, name, dir, name);
        return kExitUsage;
      }
    }
    absl::StatusOr<LabeledImages> data =
        ReadLabeledImages(split.images_path, split.labels_path, kFashionMnistClasses);
    if (!data.ok()) {
      std::cerr << "syncline-gen fashion-mnist: " << data.status().message() << "\n";
      return kExitUsage;
    }
    split.data = std::move(*data);
  }

  std::error_code error;
  std::filesystem::create_directories(out_dir, error);
  if (error) {
    std::cerr << absl::StrFormat("syncline-gen fashion-mnist: cannot create %s: %s\n", out_dir,
                                 error.message());
    return kExitWriteFailed;
  }
  for (FashionMnistSplit& split : splits) {
    split.out_path = absl::StrCat(out_dir, "/fashion-mnist-", split.name, ".libsvm");
    std::unique_ptr<std::ofstream> out = OpenOutput(split.out_path);
    if (out == nullptr) return kExitWriteFailed;
    absl::StatusOr<LibsvmConversion> written =
        WriteIdxAsLibsvm(split.data, *out, kFashionMnistClasses,
                         limit > 0 ? limit : std::numeric_limits<uint64_t>::max());
    if (written.ok()) {
      out->close();
      if (!*out) written = absl::DataLossError("closing the file failed");
    }
    if (!written.ok()) {
      std::cerr << absl::StrFormat("syncline-gen fashion-mnist: %s: %s\n", split.out_path,
                                   written.status().message());
      return kExitWriteFailed;
    }
    split.written = std::move(*written);
  }
  const FashionMnistSplit& train = splits[0];
  const FashionMnistSplit& test = splits[1];
  std::cout << absl::StrFormat(
      "syncline-gen fashion-mnist: wrote %d train rows to %s and %d test rows to %s (%d "
      "features, %d classes; train rows per class%s; test rows per class%s)\n",
      train.written.rows, train.out_path, test.written.rows, test.out_path, train.written.features,
      kFashionMnistClasses, ClassCounts(train.written), ClassCounts(test.written));
  return 0;
}

int Main(int argc, char** argv) {
  SyntheticOptions options;
  std::string out_path;
  std::string test_path;
  std::string format = "auto";
  std::string values = "ones";

  CLI::App app(
      "Writes synthetic classification data drawn from a known random sparse linear model.\n"
      "Feature ids per row follow a Zipf distribution; true weights and bias are N(0, 1); labels\n"
      "are sampled from sigmoid(w.x + b) (binary) or softmax(W x + b) (--classes K > 2).\n"
      "The same flags and --seed always give the same bytes.\n"
      "`syncline-gen criteo --help` describes the Criteo-format click data generator, and\n"
      "`syncline-gen fashion-mnist --help` the converter of the Fashion-MNIST images.",
      "syncline-gen");
  app.option_defaults()->always_capture_default();
  const CLI::Validator kNotNegative = NotNegative();
  app.add_option("--out", out_path, "Training data file to write")->required();
  app.add_option("--test-out", test_path,
                 "Test data file to write, drawn from the same model (none if empty)");
  app.add_option("--test-rows", options.test_rows, "Rows in the test file")->check(kNotNegative);
  app.add_option("--rows", options.rows, "Rows in the training file (>= 1)")->check(kNotNegative);
  app.add_option("--features", options.features,
                 "Number of features; ids are drawn from [0, features)")
      ->check(kNotNegative);
  app.add_option("--nnz", options.nnz, "Distinct features per row, in [1, features]")
      ->check(kNotNegative);
  app.add_option("--zipf", options.zipf,
                 "Zipf exponent s >= 0 of feature popularity, P(id) ~ (id+1)^-s; 0 is uniform");
  app.add_option("--classes", options.classes, "2 for binary labels 0/1; K > 2 for labels 0..K-1");
  app.add_option("--seed", options.seed, "Random seed for the model, rows and label noise")
      ->check(kNotNegative);
  app.add_option("--noise", options.noise,
                 "Probability in [0, 1] that a label is replaced by a different random class");
  app.add_option("--format", format,
                 "libsvm (sparse), csv (dense with a header; at most " +
                     std::to_string(kMaxCsvFeatures) +
                     " features), or auto: csv when --out ends in .csv, else libsvm")
      ->check(CLI::IsMember({"auto", "libsvm", "csv"}));
  app.add_option("--index-base", options.index_base, "First feature id in libsvm files (0 or 1)")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--values", values, "Feature values: ones, or gaussian for N(0, 1)")
      ->check(CLI::IsMember({"ones", "gaussian"}));

  if (auto code = ParseCommandLine(app, argc, argv, "syncline-gen")) return *code;
  // Same rule as ReadDataset's DataFormat::kAuto, so the file reads back without flags.
  if (format == "auto") format = absl::EndsWithIgnoreCase(out_path, ".csv") ? "csv" : "libsvm";
  options.format = format == "csv" ? SyntheticFormat::kCsv : SyntheticFormat::kLibsvm;
  options.values = values == "gaussian" ? SyntheticValues::kGaussian : SyntheticValues::kOnes;
  if (absl::Status s = ValidateSyntheticOptions(options); !s.ok()) {
    std::cerr << "syncline-gen: " << s.message() << "\nRun with --help for more information.\n";
    return kExitUsage;
  }

  std::cerr << "syncline-gen: seed " << options.seed << "\n";
  std::unique_ptr<std::ofstream> train = OpenOutput(out_path);
  if (train == nullptr) return kExitWriteFailed;
  std::unique_ptr<std::ofstream> test;
  if (!test_path.empty()) {
    test = OpenOutput(test_path);
    if (test == nullptr) return kExitWriteFailed;
  }
  absl::StatusOr<SyntheticSummary> summary = WriteSynthetic(options, *train, test.get());
  if (summary.ok()) {
    train->close();
    if (test != nullptr) test->close();
    if (!*train || (test != nullptr && !*test)) {
      summary = absl::DataLossError("closing an output file failed");
    }
  }
  if (!summary.ok()) {
    std::cerr << "syncline-gen: " << summary.status().message() << "\n";
    return kExitWriteFailed;
  }
  std::cout << Summary(options, *summary, out_path, test_path) << "\n";
  return 0;
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "criteo") {
    return syncline::CriteoMain(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string(argv[1]) == "fashion-mnist") {
    return syncline::FashionMnistMain(argc - 1, argv + 1);
  }
  return syncline::Main(argc, argv);
}
