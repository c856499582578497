// `syncline-gen`: synthetic classification data from a known random sparse linear model.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "programs/gen_common.h"
#include "tools/synthetic.h"

namespace syncline::gen {
namespace {

// The flags' values: the options and what becomes them.
struct SyntheticFlags {
  SyntheticOptions options;
  std::string out_path;
  std::string test_path;
  std::string format = "auto";
  std::string values = "ones";
};

void AddSyntheticFlags(CLI::App& app, SyntheticFlags& f) {
  SyntheticOptions& options = f.options;
  app.option_defaults()->always_capture_default();
  const CLI::Validator kNotNegative = NotNegative();
  app.add_option("--out", f.out_path, "Training data file to write")->required();
  app.add_option("--test-out", f.test_path,
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
  app.add_option("--format", f.format,
                 "libsvm (sparse), csv (dense with a header; at most " +
                     std::to_string(kMaxCsvFeatures) +
                     " features), or auto: csv when --out ends in .csv, else libsvm")
      ->check(CLI::IsMember({"auto", "libsvm", "csv"}));
  app.add_option("--index-base", options.index_base, "First feature id in libsvm files (0 or 1)")
      ->check(CLI::IsMember({0, 1}));
  app.add_option("--values", f.values, "Feature values: ones, or gaussian for N(0, 1)")
      ->check(CLI::IsMember({"ones", "gaussian"}));
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

// Writes the files `f` names; the exit code.
int WriteSyntheticFiles(const SyntheticFlags& f) {
  const SyntheticOptions& options = f.options;
  std::cerr << "syncline-gen: seed " << options.seed << "\n";
  std::unique_ptr<std::ofstream> train = OpenOutput(f.out_path);
  if (train == nullptr) return kExitWriteFailed;
  std::unique_ptr<std::ofstream> test;
  if (!f.test_path.empty()) {
    test = OpenOutput(f.test_path);
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
  std::cout << Summary(options, *summary, f.out_path, f.test_path) << "\n";
  return 0;
}

}  // namespace

int SyntheticMain(int argc, char** argv) {
  CLI::App app(
      "Writes synthetic classification data drawn from a known random sparse linear model.\n"
      "Feature ids per row follow a Zipf distribution; true weights and bias are N(0, 1); labels\n"
      "are sampled from sigmoid(w.x + b) (binary) or softmax(W x + b) (--classes K > 2).\n"
      "The same flags and --seed always give the same bytes.\n"
      "`syncline-gen criteo --help` describes the Criteo-format click data generator, and\n"
      "`syncline-gen fashion-mnist --help` the converter of the Fashion-MNIST images.",
      "syncline-gen");
  SyntheticFlags f;
  AddSyntheticFlags(app, f);
  if (std::optional<int> exit = Parse(app, argc, argv, "syncline-gen")) return *exit;
  // Same rule as ReadDataset's DataFormat::kAuto, so the file reads back without flags.
  if (f.format == "auto") {
    f.format = absl::EndsWithIgnoreCase(f.out_path, ".csv") ? "csv" : "libsvm";
  }
  f.options.format = f.format == "csv" ? SyntheticFormat::kCsv : SyntheticFormat::kLibsvm;
  f.options.values = f.values == "gaussian" ? SyntheticValues::kGaussian : SyntheticValues::kOnes;
  if (absl::Status s = ValidateSyntheticOptions(f.options); !s.ok()) {
    std::cerr << "syncline-gen: " << s.message() << "\nRun with --help for more information.\n";
    return kExitUsage;
  }
  return WriteSyntheticFiles(f);
}

}  // namespace syncline::gen
