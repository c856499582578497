#include "data/dataset.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Writes `contents` to a file named after the running test, so tests do not collide.
std::string WriteFile(const std::string& contents, const std::string& extension = ".libsvm") {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      absl::StrReplaceAll(absl::StrCat(info->test_suite_name(), "_", info->name()), {{"/", "_"}});
  const std::string path = absl::StrCat(testing::TempDir(), name, extension);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

// Feature ids of example i.
std::vector<uint64_t> Ids(const Dataset& data, size_t i) {
  return {data.ids.begin() + data.row_offsets[i], data.ids.begin() + data.row_offsets[i + 1]};
}

std::vector<float> Values(const Dataset& data, size_t i) {
  return {data.values.begin() + data.row_offsets[i], data.values.begin() + data.row_offsets[i + 1]};
}

TEST(ReadDatasetTest, DetectsOneBasedLibsvm) {
  const std::string path = WriteFile("1 1:0.5 3:2\n0 2:1\n");
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->index_base, IndexBase::kOne);
  EXPECT_EQ(data->num_features, 3u);
  ASSERT_EQ(data->size(), 2u);
  EXPECT_THAT(data->labels, ElementsAre(1.0f, 0.0f));
  EXPECT_THAT(data->row_offsets, ElementsAre(0u, 2u, 3u));
  EXPECT_THAT(Ids(*data, 0), ElementsAre(0u, 2u));
  EXPECT_THAT(Values(*data, 0), ElementsAre(0.5f, 2.0f));
  EXPECT_THAT(Ids(*data, 1), ElementsAre(1u));
}

TEST(ReadDatasetTest, DetectsZeroBasedLibsvmFromAnyLine) {
  // The only id 0 is on the last line, yet every line is read 0-based.
  const std::string path = WriteFile("1 1:1 5:1\n0 2:1\n1 0:3\n");
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->index_base, IndexBase::kZero);
  EXPECT_EQ(data->num_features, 6u);
  EXPECT_THAT(Ids(*data, 0), ElementsAre(1u, 5u));
  EXPECT_THAT(Ids(*data, 2), ElementsAre(0u));
  EXPECT_THAT(Values(*data, 2), ElementsAre(3.0f));
}

TEST(ReadDatasetTest, ExplicitIndexBaseOverridesDetection) {
  // A test file without id 0 must be read like its 0-based training file.
  const std::string path = WriteFile("1 1:1 5:1\n");
  ReadOptions options;
  options.index_base = IndexBase::kZero;
  absl::StatusOr<Dataset> data = ReadDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->index_base, IndexBase::kZero);
  EXPECT_EQ(data->num_features, 6u);
  EXPECT_THAT(Ids(*data, 0), ElementsAre(1u, 5u));
}

TEST(ReadDatasetTest, AcceptsPlusMinusOneLabelsCommentsBlankLinesAndCrlf) {
  const std::string path = WriteFile(
      "# a comment line\n"
      "+1 1:1 2:1.5e0   # trailing comment\r\n"
      "\n"
      "   \t\n"
      "-1\t3:-2\r\n"
      "1.0 4:.25\n"
      "0");  // Last line without a newline and without features.
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->labels, ElementsAre(1.0f, 0.0f, 1.0f, 0.0f));
  EXPECT_THAT(Ids(*data, 0), ElementsAre(0u, 1u));
  EXPECT_THAT(Values(*data, 0), ElementsAre(1.0f, 1.5f));
  EXPECT_THAT(Values(*data, 1), ElementsAre(-2.0f));
  EXPECT_THAT(Values(*data, 2), ElementsAre(0.25f));
  EXPECT_THAT(Ids(*data, 3), ElementsAre());
  EXPECT_EQ(data->num_features, 4u);
}

TEST(ReadDatasetTest, ReadsMulticlassLabels) {
  const std::string path = WriteFile("0 1:1\n2 1:1\n1 2:1\n");
  ReadOptions options;
  options.num_classes = 3;
  absl::StatusOr<Dataset> data = ReadDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_THAT(data->labels, ElementsAre(0.0f, 2.0f, 1.0f));
}

TEST(ReadDatasetTest, AMulticlassLabelInABinaryReadSaysWhatToGive) {
  const std::string path = WriteFile("0 1:1\n9 1:1\n");
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find(":2: binary label"), std::string::npos) << data.status();
  EXPECT_NE(data.status().message().find("--model softmax --classes K"), std::string::npos)
      << data.status();
}

TEST(ReadDatasetTest, PartitionsAreStridedAndTheirUnionIsTheWholeFile) {
  std::string contents = "# header comment is not a data line\n";
  for (int i = 0; i < 10; ++i) absl::StrAppend(&contents, i % 2, " ", i + 1, ":", i, "\n\n");
  const std::string path = WriteFile(contents);
  absl::StatusOr<Dataset> whole = ReadDataset(path, {});
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_EQ(whole->size(), 10u);

  constexpr int kParts = 3;
  std::vector<Dataset> parts;
  for (int p = 0; p < kParts; ++p) {
    ReadOptions options;
    options.partition = p;
    options.num_partitions = kParts;
    absl::StatusOr<Dataset> part = ReadDataset(path, options);
    ASSERT_TRUE(part.ok()) << part.status();
    // Every partition agrees on what the whole file implies.
    EXPECT_EQ(part->num_features, whole->num_features);
    EXPECT_EQ(part->index_base, whole->index_base);
    parts.push_back(*std::move(part));
  }
  EXPECT_EQ(parts[0].size(), 4u);
  EXPECT_EQ(parts[1].size(), 3u);
  EXPECT_EQ(parts[2].size(), 3u);
  // Data line i is example i / kParts of partition i % kParts.
  for (size_t i = 0; i < whole->size(); ++i) {
    const Dataset& part = parts[i % kParts];
    const size_t j = i / kParts;
    EXPECT_EQ(part.labels[j], whole->labels[i]) << i;
    EXPECT_EQ(Ids(part, j), Ids(*whole, i)) << i;
    EXPECT_EQ(Values(part, j), Values(*whole, i)) << i;
  }
}

TEST(ReadDatasetTest, ReadsCsvWithHeader) {
  const std::string path = WriteFile("label,a,b,c\n1,0.5,0,2\n0,0,0,0\n-1,1,2,3\n", ".csv");
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_features, 3u);
  EXPECT_EQ(data->index_base, IndexBase::kZero);
  EXPECT_THAT(data->labels, ElementsAre(1.0f, 0.0f, 0.0f));
  // Zeros are not stored.
  EXPECT_THAT(Ids(*data, 0), ElementsAre(0u, 2u));
  EXPECT_THAT(Values(*data, 0), ElementsAre(0.5f, 2.0f));
  EXPECT_THAT(Ids(*data, 1), ElementsAre());
  EXPECT_THAT(Ids(*data, 2), ElementsAre(0u, 1u, 2u));
}

TEST(ReadDatasetTest, ReadsCsvWithoutHeaderAndLabelColumnInTheMiddle) {
  const std::string path = WriteFile(" 4 , 1 ,5\n\n# comment\n6,0,7\n", ".CSV");
  ReadOptions options;
  options.csv_label_column = 1;
  absl::StatusOr<Dataset> data = ReadDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_features, 2u);
  EXPECT_THAT(data->labels, ElementsAre(1.0f, 0.0f));
  EXPECT_THAT(Ids(*data, 0), ElementsAre(0u, 1u));
  EXPECT_THAT(Values(*data, 0), ElementsAre(4.0f, 5.0f));
  EXPECT_THAT(Values(*data, 1), ElementsAre(6.0f, 7.0f));
}

TEST(ReadDatasetTest, ExplicitFormatOverridesExtension) {
  const std::string path = WriteFile("1,2,3\n", ".txt");
  ReadOptions options;
  options.format = DataFormat::kCsv;
  absl::StatusOr<Dataset> data = ReadDataset(path, options);
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->num_features, 2u);
}

TEST(ReadDatasetTest, ReadsLinesAcrossChunkBoundariesAndLongerThanAChunk) {
  // About 10 MB: several 4 MB read chunks, and one line of ~5 MB that must grow the buffer.
  std::string contents;
  constexpr int kRows = 200000;
  for (int i = 0; i < kRows; ++i) {
    absl::StrAppend(&contents, i % 2, " ", i % 1000 + 1, ":", i % 7, " 1001:0.5\n");
  }
  std::string long_line = "1";
  for (int id = 1; id <= 500000; ++id) absl::StrAppend(&long_line, " ", id, ":1");
  contents += long_line + "\n0 7:1\n";
  const std::string path = WriteFile(contents);
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), kRows + 2u);
  for (int i = 0; i < kRows; i += 997) {
    EXPECT_EQ(data->labels[i], i % 2);
    EXPECT_THAT(Ids(*data, i), ElementsAre(i % 1000, 1000u));
    EXPECT_THAT(Values(*data, i), ElementsAre(i % 7, 0.5f));
  }
  EXPECT_EQ(Ids(*data, kRows).size(), 500000u);
  EXPECT_EQ(Ids(*data, kRows).back(), 499999u);
  EXPECT_THAT(Ids(*data, kRows + 1), ElementsAre(6u));
  EXPECT_EQ(data->num_features, 500000u);
}

TEST(ReadDatasetTest, MissingFileIsNotFound) {
  const std::string path = testing::TempDir() + "no_such_file.libsvm";
  absl::StatusOr<Dataset> data = ReadDataset(path, {});
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(data.status().message()), HasSubstr(path));
}

TEST(ReadDatasetTest, BadOptionsAreInvalidArgument) {
  const std::string path = WriteFile("1 1:1\n");
  ReadOptions options;
  options.partition = 2;
  options.num_partitions = 2;
  EXPECT_EQ(ReadDataset(path, options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.num_partitions = 0;
  EXPECT_EQ(ReadDataset(path, options).status().code(), absl::StatusCode::kInvalidArgument);
  options = {};
  options.num_classes = 1;
  EXPECT_EQ(ReadDataset(path, options).status().code(), absl::StatusCode::kInvalidArgument);
}

struct BadFileCase {
  std::string name;
  std::string contents;
  std::string extension;
  int line;            // Expected line number in the message.
  std::string detail;  // Expected somewhere in the message (usually the token).
  int num_classes = 2;
  IndexBase index_base = IndexBase::kAuto;
};

class BadFileTest : public testing::TestWithParam<BadFileCase> {};

TEST_P(BadFileTest, IsInvalidArgumentNamingFileLineAndToken) {
  const BadFileCase& c = GetParam();
  const std::string path = WriteFile(c.contents, c.extension);
  // Every partition reports the error, even when the bad line belongs to another one.
  for (int partition = 0; partition < 2; ++partition) {
    ReadOptions options;
    options.num_classes = c.num_classes;
    options.index_base = c.index_base;
    options.partition = partition;
    options.num_partitions = 2;
    absl::StatusOr<Dataset> data = ReadDataset(path, options);
    ASSERT_FALSE(data.ok());
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(data.status().message()),
                StartsWith(absl::StrCat(path, ":", c.line, ": ")));
    EXPECT_THAT(std::string(data.status().message()), HasSubstr(c.detail));
  }
}

INSTANTIATE_TEST_SUITE_P(
    ReadDatasetTest, BadFileTest,
    testing::Values(
        BadFileCase{"NonNumericLabel", "1 1:1\nyes 1:1\n", ".libsvm", 2, "'yes'"},
        BadFileCase{"BinaryLabelOutOfRange", "1 1:1\n# c\n2 1:1\n", ".libsvm", 3, "'2'"},
        BadFileCase{"ClassOutOfRange", "0 1:1\n3 1:1\n", ".libsvm", 2, "'3'", 3},
        BadFileCase{"FractionalClass", "1.5 1:1\n", ".libsvm", 1, "'1.5'", 3},
        BadFileCase{"TokenWithoutColon", "1 1:1\n0 12\n", ".libsvm", 2, "'12'"},
        BadFileCase{"EmptyIndex", "1 :1\n", ".libsvm", 1, "':1'"},
        BadFileCase{"EmptyValue", "1 3:\n", ".libsvm", 1, "'3:'"},
        BadFileCase{"NonNumericIndex", "1 x:1\n", ".libsvm", 1, "'x:1'"},
        BadFileCase{"NonNumericValue", "1 1:1 2:abc\n", ".libsvm", 1, "'2:abc'"},
        BadFileCase{"NegativeIndex", "0 1:1\n1 -4:1\n", ".libsvm", 2, "'-4:1'"},
        BadFileCase{"IndexTooLarge", "1 99999999999999999999:1\n", ".libsvm", 1,
                    "'99999999999999999999:1'"},
        BadFileCase{"IndexZeroInOneBasedFile", "1 1:1\n1 0:1\n", ".libsvm", 2, "'0:1'", 2,
                    IndexBase::kOne},
        BadFileCase{"NanValue", "1 1:nan\n", ".libsvm", 1, "'1:nan'"},
        BadFileCase{"InfValue", "1 1:1\n0 2:-inf\n", ".libsvm", 2, "'2:-inf'"},
        BadFileCase{"ValueOutOfRange", "1 1:1e50\n", ".libsvm", 1, "'1:1e50'"},
        BadFileCase{"CsvTooFewColumns", "y,a,b\n1,2,3\n0,1\n", ".csv", 3, "'0,1'"},
        BadFileCase{"CsvTooManyColumnsWithoutHeader", "1,2\n0,1,5\n", ".csv", 2, "'0,1,5'"},
        BadFileCase{"CsvBadValue", "1,2\n0,x\n", ".csv", 2, "'x'"},
        BadFileCase{"CsvEmptyField", "1,2,3\n0,,1\n", ".csv", 2, "column 2"},
        BadFileCase{"CsvNanValue", "1,2\n0,NaN\n", ".csv", 2, "'NaN'"},
        BadFileCase{"CsvBadLabel", "1,2\n5,1\n", ".csv", 2, "'5'"}),
    [](const testing::TestParamInfo<BadFileCase>& info) { return info.param.name; });

TEST(ReadDatasetTest, CsvLabelColumnBeyondTheColumnsIsInvalidArgument) {
  const std::string path = WriteFile("1,2\n", ".csv");
  ReadOptions options;
  options.csv_label_column = 2;
  absl::StatusOr<Dataset> data = ReadDataset(path, options);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(data.status().message()), StartsWith(path + ":1: label column 2"));
}

}  // namespace
}  // namespace syncline
