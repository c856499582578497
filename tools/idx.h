// Reading IDX files (the format of MNIST and Fashion-MNIST: a big-endian header, then raw
// unsigned bytes), plain or gzip-compressed, and converting labeled images to the libsvm text
// that the workers read (data/dataset.h).
//
// IDX layout: a 4-byte magic 0x00 0x00 TYPE DIMS (TYPE 0x08 = unsigned byte), then DIMS
// big-endian uint32 sizes, then the elements in row-major order. Label files have magic
// 0x00000801 (one size: the count); image files 0x00000803 (count, rows, cols).
//
// Thread-safety: the functions have no shared state.
#ifndef SYNCLINE_TOOLS_IDX_H_
#define SYNCLINE_TOOLS_IDX_H_

#include <cstddef>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;
inline constexpr uint32_t kIdxImagesMagic = 0x00000803;

// Images of rows x cols unsigned bytes, one after the other.
struct IdxImages {
  uint32_t rows = 0;
  uint32_t cols = 0;
  std::vector<uint8_t> pixels;  // count() * pixels_per_image() bytes.

  uint64_t pixels_per_image() const { return uint64_t{rows} * cols; }
  uint64_t count() const {
    return pixels_per_image() == 0 ? 0 : pixels.size() / pixels_per_image();
  }
  const uint8_t* image(uint64_t i) const { return pixels.data() + i * pixels_per_image(); }
};

// Images and their labels, checked to match (same count, every label a class).
struct LabeledImages {
  IdxImages images;
  std::vector<uint8_t> labels;
};

// Both read plain or gzip files (zlib tells them apart by content, not by name), and check the
// whole file: magic, element type, sizes, and that the data holds exactly what the header
// promises (no fewer bytes, no more).
// Errors: NotFound / PermissionDenied naming the path when it cannot be opened; DataLoss
// "PATH: what is wrong" for a malformed, truncated or corrupt file.
absl::StatusOr<IdxImages> ReadIdxImages(const std::string& path);
absl::StatusOr<std::vector<uint8_t>> ReadIdxLabels(const std::string& path);

// Reads an image file and its label file, and checks that they hold as many entries and that
// every label is below num_classes. Errors as above, naming the file at fault.
absl::StatusOr<LabeledImages> ReadLabeledImages(const std::string& images_path,
                                                const std::string& labels_path,
                                                int num_classes = 10);

struct LibsvmConversion {
  uint64_t rows = 0;
  uint64_t features = 0;                 // Pixels per image: the features the workers infer.
  std::vector<uint64_t> rows_per_class;  // num_classes entries.
};

// Writes the first min(max_rows, count) examples as libsvm lines "label id:value ...": the
// class, then one entry per non-zero pixel with id = its 0-based index in the image (row-major)
// and value = pixel / 255 with at most 4 significant digits.
//
// Every line also has entries for the first and the last pixel, "0:0" and "783:0" for 28x28
// images when they are zero, so that the file needs no flags to be read right: with the default
// --index-base auto, the workers read a file as 0-based when any id 0 appears, and infer
// 1 + the largest id as the number of features. Without those two entries, a file (or a
// --limit prefix, or any subset of its lines) whose images all have a zero corner would be read
// as 1-based, shifting every pixel by one, or with fewer than rows * cols features. A zero value
// adds nothing to a linear model's score or gradient.
//
// Errors: InvalidArgument when num_classes does not cover a label, DataLoss when `out` fails.
absl::StatusOr<LibsvmConversion> WriteIdxAsLibsvm(
    const LabeledImages& data, std::ostream& out, int num_classes = 10,
    uint64_t max_rows = std::numeric_limits<uint64_t>::max());

}  // namespace syncline

#endif  // SYNCLINE_TOOLS_IDX_H_
