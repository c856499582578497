#include "tools/criteo_gen.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_split.h"
#include "data/criteo.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

std::string Generate(const CriteoGenOptions& options, std::string* test_text = nullptr) {
  std::ostringstream train, test;
  auto summary = WriteCriteoSynthetic(options, train, test_text ? &test : nullptr);
  EXPECT_TRUE(summary.ok()) << summary.status();
  if (test_text != nullptr) *test_text = test.str();
  return train.str();
}

TEST(CriteoGenTest, SameSeedSameBytesAndTheTestFileDoesNotChangeTheTrainFile) {
  CriteoGenOptions options{.rows = 500, .test_rows = 100, .seed = 3};
  std::string test;
  const std::string a = Generate(options, &test);
  EXPECT_EQ(a, Generate(options));
  EXPECT_EQ(std::count(test.begin(), test.end(), '\n'), 100);
  options.seed = 4;
  EXPECT_NE(a, Generate(options));
}

TEST(CriteoGenTest, WritesValidCriteoLinesWithEmptyFieldsAndAPlausibleClickRate) {
  const std::string text = Generate({.rows = 3000, .seed = 1});
  const std::string path = testing::TempDir() + "criteo_gen_test.tsv";
  std::ofstream(path) << text;
  absl::StatusOr<Dataset> data = ReadDataset(path, {.format = DataFormat::kCriteo});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), 3000u);
  double positives = 0;
  for (float y : data->labels) positives += y;
  EXPECT_GT(positives / 3000, 0.1);
  EXPECT_LT(positives / 3000, 0.45);
  int empty_dense = 0, empty_categorical = 0, negative = 0;
  for (const absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    ASSERT_EQ(fields.size(), 40u);
    for (int i = 1; i <= 13; ++i) {
      empty_dense += fields[i].empty();
      negative += !fields[i].empty() && fields[i][0] == '-';
    }
    for (int i = 14; i < 40; ++i) {
      empty_categorical += fields[i].empty();
      if (!fields[i].empty()) {
        EXPECT_EQ(fields[i].size(), 8u) << fields[i];
      }
    }
  }
  EXPECT_GT(empty_dense, 0);
  EXPECT_GT(empty_categorical, 0);
  EXPECT_GT(negative, 0);
}

TEST(CriteoGenTest, RejectsBadOptions) {
  EXPECT_FALSE(ValidateCriteoGenOptions({.rows = 0}).ok());
  EXPECT_FALSE(ValidateCriteoGenOptions({.zipf = 1.0}).ok());
  EXPECT_FALSE(ValidateCriteoGenOptions({.interaction = -1}).ok());
  EXPECT_TRUE(ValidateCriteoGenOptions({}).ok());
}

}  // namespace
}  // namespace syncline
