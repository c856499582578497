#include "tools/idx.h"

#include <zlib.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPackageDir[] = "/usr/share/datasets/fashion-mnist";

void AppendBigEndian(uint32_t v, std::string* out) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

std::string IdxBytes(uint32_t magic, const std::vector<uint32_t>& dims,
                     const std::vector<uint8_t>& data) {
  std::string bytes;
  AppendBigEndian(magic, &bytes);
  for (uint32_t d : dims) AppendBigEndian(d, &bytes);
  bytes.append(data.begin(), data.end());
  return bytes;
}

std::string ImagesBytes(uint32_t count, uint32_t rows, uint32_t cols,
                        const std::vector<uint8_t>& pixels) {
  return IdxBytes(kIdxImagesMagic, {count, rows, cols}, pixels);
}

std::string LabelsBytes(const std::vector<uint8_t>& labels) {
  return IdxBytes(kIdxLabelsMagic, {static_cast<uint32_t>(labels.size())}, labels);
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Three 2x3 images and their labels.
const std::vector<uint8_t> kPixels = {0,  1,  2,  3,   4, 5,   10, 20, 30,
                                      40, 50, 60, 255, 0, 128, 7,  0,  9};
const std::vector<uint8_t> kLabels = {4, 0, 9};

class IdxTest : public ::testing::Test {
 protected:
  testing_util::ScopedTempDir dir_{"idx_test"};
};

TEST_F(IdxTest, ReadsPlainAndGzippedFilesAlike) {
  for (const bool gzip : {false, true}) {
    SCOPED_TRACE(gzip ? "gzip" : "plain");
    const std::string images_path = dir_.Sub(gzip ? "images.gz" : "images");
    const std::string labels_path = dir_.Sub(gzip ? "labels.gz" : "labels");
    auto write = gzip ? WriteGzip : WritePlain;
    write(images_path, ImagesBytes(3, 2, 3, kPixels));
    write(labels_path, LabelsBytes(kLabels));
    if (gzip) {
      // Really compressed: a gzip file starts with 1f 8b.
      EXPECT_EQ(ReadAll(images_path).substr(0, 2), "\x1f\x8b");
    }

    absl::StatusOr<IdxImages> images = ReadIdxImages(images_path);
    ASSERT_TRUE(images.ok()) << images.status();
    EXPECT_EQ(images->rows, 2u);
    EXPECT_EQ(images->cols, 3u);
    EXPECT_EQ(images->count(), 3u);
    EXPECT_EQ(images->pixels, kPixels);
    EXPECT_EQ(images->image(2)[0], 255);

    absl::StatusOr<std::vector<uint8_t>> labels = ReadIdxLabels(labels_path);
    ASSERT_TRUE(labels.ok()) << labels.status();
    EXPECT_EQ(*labels, kLabels);

    absl::StatusOr<LabeledImages> both = ReadLabeledImages(images_path, labels_path);
    ASSERT_TRUE(both.ok()) << both.status();
    EXPECT_EQ(both->images.pixels, kPixels);
    EXPECT_EQ(both->labels, kLabels);
  }
}

TEST_F(IdxTest, ReadsAFileWithNoEntries) {
  const std::string path = dir_.Sub("empty-images");
  WritePlain(path, ImagesBytes(0, 28, 28, {}));
  absl::StatusOr<IdxImages> images = ReadIdxImages(path);
  ASSERT_TRUE(images.ok()) << images.status();
  EXPECT_EQ(images->count(), 0u);
}

struct BadFile {
  const char* name;
  bool images;  // Read with ReadIdxImages, else ReadIdxLabels.
  bool gzip;
  std::string bytes;
  const char* problem;  // What the error must say.
};

TEST_F(IdxTest, RefusesEveryMalformedFileNamingThePathAndTheProblem) {
  std::string gzip_bytes;
  {
    const std::string path = dir_.Sub("whole.gz");
    WriteGzip(path, ImagesBytes(3, 2, 3, kPixels));
    gzip_bytes = ReadAll(path);
  }
  std::string corrupt_gzip = gzip_bytes;
  for (size_t i = 10; i < corrupt_gzip.size(); ++i) corrupt_gzip[i] = static_cast<char>(0xff);
  const std::vector<BadFile> cases = {
      {"empty", true, false, "", "the file is empty"},
      {"short-magic", true, false, std::string("\0\0\x08", 3), "truncated header"},
      {"text", true, false, "hello, world, this is not IDX", "not an IDX file: wrong magic number"},
      {"wrong-magic", false, false, IdxBytes(0x12345678, {1}, {0}),
       "wrong magic number 0x12345678"},
      {"float-elements", true, false, IdxBytes(0x00000d03, {1, 1, 1}, {0, 0, 0, 0}),
       "element type 0x0d is not supported"},
      {"labels-as-images", true, false, LabelsBytes(kLabels),
       "wrong magic number 0x00000801, an IDX label file"},
      {"images-as-labels", false, false, ImagesBytes(3, 2, 3, kPixels),
       "wrong magic number 0x00000803, an IDX image file"},
      {"cut-in-sizes", true, false, ImagesBytes(3, 2, 3, {}).substr(0, 10), "truncated header"},
      {"zero-rows", true, false, ImagesBytes(1, 0, 3, {}), "rows and columns must be at least 1"},
      {"huge-count", true, false, ImagesBytes(0xffffffff, 0xffffffff, 0xffffffff, {}),
       "more than the"},
      {"truncated-images", true, false, ImagesBytes(4, 2, 3, kPixels),
       "truncated: the header promises 4 images"},
      {"truncated-images-gz", true, true, ImagesBytes(4, 2, 3, kPixels),
       "truncated: the header promises 4 images"},
      {"truncated-labels", false, false, IdxBytes(kIdxLabelsMagic, {5}, {1, 2, 3}),
       "truncated: the header promises 5 labels"},
      {"trailing-images", true, false, ImagesBytes(2, 2, 3, kPixels),
       "data after the last of the header's 2 images"},
      {"trailing-labels-gz", false, true, IdxBytes(kIdxLabelsMagic, {2}, kLabels),
       "data after the last of the header's 2 labels"},
      {"cut-off-gzip", true, false, gzip_bytes.substr(0, gzip_bytes.size() - 12),
       "gzip data is cut off"},
      {"corrupt-gzip", true, false, corrupt_gzip, "corrupt gzip data"},
  };
  for (const BadFile& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir_.Sub(c.name);
    if (c.gzip) {
      WriteGzip(path, c.bytes);
    } else {
      WritePlain(path, c.bytes);
    }
    const absl::Status status =
        c.images ? ReadIdxImages(path).status() : ReadIdxLabels(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
    EXPECT_THAT(status.message(), AllOf(HasSubstr(path), HasSubstr(c.problem)));
  }
}

TEST_F(IdxTest, AMissingFileIsNotFoundNamingThePath) {
  const std::string path = dir_.Sub("no-such-file");
  const absl::Status status = ReadIdxImages(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(IdxTest, RefusesImagesAndLabelsThatDoNotMatch) {
  const std::string images_path = dir_.Sub("images");
  const std::string labels_path = dir_.Sub("labels");
  WritePlain(images_path, ImagesBytes(3, 2, 3, kPixels));

  WritePlain(labels_path, LabelsBytes({1, 2}));
  absl::Status status = ReadLabeledImages(images_path, labels_path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(),
              AllOf(HasSubstr(images_path), HasSubstr("3 images"), HasSubstr(labels_path),
                    HasSubstr("2 labels"), HasSubstr("counts of images and labels differ")));

  WritePlain(labels_path, LabelsBytes({1, 10, 2}));
  status = ReadLabeledImages(images_path, labels_path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), AllOf(HasSubstr(labels_path), HasSubstr("label 10 of entry 1"),
                                      HasSubstr("not a class in [0, 10)")));
  // The same labels are fine with more classes.
  EXPECT_TRUE(ReadLabeledImages(images_path, labels_path, 11).ok());
}

TEST(IdxLibsvmTest, WritesNonZeroPixelsScaledToFourDigitsAndAlwaysTheCorners) {
  LabeledImages data;
  data.images.rows = 2;
  data.images.cols = 2;
  data.images.pixels = {0, 255, 128, 0,    // Corners zero: written anyway.
                        1, 0,   0,   77};  // Corners non-zero; the middle zeros are left out.
  data.labels = {3, 9};
  std::ostringstream out;
  absl::StatusOr<LibsvmConversion> written = WriteIdxAsLibsvm(data, out);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(out.str(), "3 0:0 1:1 2:0.502 3:0\n9 0:0.003922 3:0.302\n");
  EXPECT_EQ(written->rows, 2u);
  EXPECT_EQ(written->features, 4u);
  EXPECT_THAT(written->rows_per_class, ElementsAre(0, 0, 0, 1, 0, 0, 0, 0, 0, 1));

  std::ostringstream first;
  written = WriteIdxAsLibsvm(data, first, 10, /*max_rows=*/1);
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(first.str(), "3 0:0 1:1 2:0.502 3:0\n");
  EXPECT_EQ(written->rows, 1u);

  std::ostringstream unused;
  const absl::Status status = WriteIdxAsLibsvm(data, unused, /*num_classes=*/5).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("label 9 of row 1"));
}

// 28x28 images whose corners are all zero, as most Fashion-MNIST images are: the file must still
// read as 0-based with 784 features under IndexBase::kAuto, every pixel where it was.
TEST_F(IdxTest, ConvertedFileReadsBackWithTheWorkersReader) {
  constexpr int kImages = 20;
  LabeledImages data;
  data.images.rows = 28;
  data.images.cols = 28;
  data.images.pixels.assign(kImages * 784, 0);
  for (int i = 0; i < kImages; ++i) {
    data.labels.push_back(static_cast<uint8_t>(i % 10));
    for (int p = 1; p < 783; ++p) {
      if ((p * 7 + i * 13) % 5 == 0) {
        data.images.pixels[i * 784 + p] = static_cast<uint8_t>((p * 31 + i) % 256);
      }
    }
  }
  const std::string path = dir_.Sub("converted.libsvm");
  {
    std::ofstream out(path, std::ios::binary);
    absl::StatusOr<LibsvmConversion> written = WriteIdxAsLibsvm(data, out);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(written->features, 784u);
  }
  for (const int partitions : {1, 3}) {
    for (int partition = 0; partition < partitions; ++partition) {
      SCOPED_TRACE(absl::StrCat("partition ", partition, " of ", partitions));
      absl::StatusOr<Dataset> read = ReadDataset(path, {.index_base = IndexBase::kAuto,
                                                        .partition = partition,
                                                        .num_partitions = partitions,
                                                        .num_classes = 10});
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(read->index_base, IndexBase::kZero);
      EXPECT_EQ(read->num_features, 784u);
      for (size_t r = 0; r < read->size(); ++r) {
        const int i = partition + static_cast<int>(r) * partitions;
        EXPECT_EQ(read->labels[r], static_cast<float>(data.labels[i]));
        std::vector<float> dense(784, -1);  // -1: not in the row.
        for (uint64_t k = read->row_offsets[r]; k < read->row_offsets[r + 1]; ++k) {
          ASSERT_LT(read->ids[k], 784u);
          dense[read->ids[k]] = read->values[k];
        }
        for (int p = 0; p < 784; ++p) {
          const uint8_t pixel = data.images.pixels[i * 784 + p];
          if (pixel == 0 && p != 0 && p != 783) {
            EXPECT_EQ(dense[p], -1) << "zero pixel " << p << " of image " << i << " written";
          } else {
            EXPECT_NEAR(dense[p], pixel / 255.0, 6e-4 * pixel / 255.0)
                << "pixel " << p << " of image " << i;
          }
        }
      }
    }
  }
  // A one-row prefix (--limit 1) reads the same way.
  const std::string first_path = dir_.Sub("first.libsvm");
  {
    std::ofstream out(first_path, std::ios::binary);
    ASSERT_TRUE(WriteIdxAsLibsvm(data, out, 10, 1).ok());
  }
  absl::StatusOr<Dataset> first = ReadDataset(first_path, {.num_classes = 10});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->size(), 1u);
  EXPECT_EQ(first->index_base, IndexBase::kZero);
  EXPECT_EQ(first->num_features, 784u);
}

// The Debian package dataset-fashion-mnist, when it is installed.
TEST(IdxPackageTest, ReadsTheRealFashionMnistFiles) {
  if (!std::filesystem::exists(kPackageDir)) {
    GTEST_SKIP() << kPackageDir
                 << " does not exist: install dataset-fashion-mnist (scripts/install-deps.sh)";
  }
  struct Split {
    const char* images;
    const char* labels;
    uint64_t count;
  };
  for (const Split& split :
       {Split{"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", 60000},
        Split{"t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 10000}}) {
    SCOPED_TRACE(split.images);
    absl::StatusOr<LabeledImages> data = ReadLabeledImages(
        absl::StrCat(kPackageDir, "/", split.images), absl::StrCat(kPackageDir, "/", split.labels));
    ASSERT_TRUE(data.ok()) << data.status();
    EXPECT_EQ(data->images.rows, 28u);
    EXPECT_EQ(data->images.cols, 28u);
    EXPECT_EQ(data->images.count(), split.count);
    EXPECT_EQ(data->labels.size(), split.count);
    // Fashion-MNIST is balanced: a tenth of the images in every class.
    std::vector<uint64_t> per_class(10, 0);
    for (uint8_t label : data->labels) ++per_class[label];
    for (uint64_t count : per_class) EXPECT_EQ(count, split.count / 10);
    if (split.count == 10000) {  // the conversion of the smaller split (43 MB of text)
      std::ostringstream out;
      absl::StatusOr<LibsvmConversion> written = WriteIdxAsLibsvm(*data, out);
      ASSERT_TRUE(written.ok()) << written.status();
      EXPECT_EQ(written->features, 784u);
      EXPECT_EQ(written->rows_per_class, per_class);
    }
  }
}

}  // namespace
}  // namespace syncline
