// `syncline-gen fashion-mnist`: the Fashion-MNIST images of the Debian package converted to
// libsvm files.
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "programs/gen_common.h"
#include "tools/idx.h"

namespace syncline::gen {
namespace {

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

// Finds and reads both splits' IDX files in `dir`; 0, or the exit code after the message.
int ReadSplits(const std::string& dir, std::vector<FashionMnistSplit>& splits) {
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
  return 0;
}

// Writes each split to OUT_DIR/fashion-mnist-NAME.libsvm, its first `limit` rows (0: all); 0,
// or the exit code after the message.
int WriteSplits(const std::string& out_dir, uint64_t limit,
                std::vector<FashionMnistSplit>& splits) {
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
  return 0;
}

constexpr char kFashionMnistHelp[] =
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
    "      --test OUT/fashion-mnist-test.libsvm --epochs 2 --out runs/fashion-mnist";

}  // namespace

int FashionMnistMain(int argc, char** argv) {
  std::string dir = kFashionMnistDir;
  std::string out_dir;
  uint64_t limit = 0;
  CLI::App app(kFashionMnistHelp, "syncline-gen fashion-mnist");
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
  if (std::optional<int> exit = Parse(app, argc, argv, "syncline-gen fashion-mnist")) return *exit;
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
  if (int code = ReadSplits(dir, splits); code != 0) return code;
  if (int code = WriteSplits(out_dir, limit, splits); code != 0) return code;
  const FashionMnistSplit& train = splits[0];
  const FashionMnistSplit& test = splits[1];
  std::cout << absl::StrFormat(
      "syncline-gen fashion-mnist: wrote %d train rows to %s and %d test rows to %s (%d "
      "features, %d classes; train rows per class%s; test rows per class%s)\n",
      train.written.rows, train.out_path, test.written.rows, test.out_path, train.written.features,
      kFashionMnistClasses, ClassCounts(train.written), ClassCounts(test.written));
  return 0;
}

}  // namespace syncline::gen
