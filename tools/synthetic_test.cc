#include "tools/synthetic.h"

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/metrics.h"
#include "models/model.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

SyntheticOptions SmallOptions() {
  SyntheticOptions options;
  options.rows = 3000;
  options.test_rows = 1000;
  options.features = 500;
  options.nnz = 10;
  return options;
}

struct Files {
  std::string train;
  std::string test;
  SyntheticSummary summary;
};

Files Generate(const SyntheticOptions& options) {
  std::ostringstream train, test;
  absl::StatusOr<SyntheticSummary> summary = WriteSynthetic(options, train, &test);
  EXPECT_TRUE(summary.ok()) << summary.status();
  return {train.str(), test.str(), summary.ok() ? *summary : SyntheticSummary{}};
}

std::string SaveToTempFile(const std::string& contents, const std::string& name) {
  const std::string path = absl::StrCat(testing::TempDir(), "synthetic_test_", name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
  return path;
}

TEST(SyntheticTest, SameSeedGivesSameBytes) {
  const Files a = Generate(SmallOptions());
  const Files b = Generate(SmallOptions());
  EXPECT_FALSE(a.train.empty());
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.test, b.test);
}

TEST(SyntheticTest, DifferentSeedGivesDifferentBytes) {
  SyntheticOptions other = SmallOptions();
  other.seed = 2;
  EXPECT_NE(Generate(SmallOptions()).train, Generate(other).train);
}

TEST(SyntheticTest, TrainBytesDoNotDependOnTheTestOutput) {
  std::ostringstream train_only;
  ASSERT_TRUE(WriteSynthetic(SmallOptions(), train_only, nullptr).ok());
  EXPECT_EQ(train_only.str(), Generate(SmallOptions()).train);
}

TEST(SyntheticTest, LibsvmParsesWithTheRequestedShape) {
  const SyntheticOptions options = SmallOptions();
  const Files files = Generate(options);
  absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "shape.libsvm"), {});
  ASSERT_TRUE(train.ok()) << train.status();
  ASSERT_EQ(train->size(), options.rows);
  EXPECT_EQ(train->index_base, IndexBase::kOne);
  EXPECT_LE(train->num_features, options.features);
  for (size_t i = 0; i < train->size(); ++i) {
    ASSERT_EQ(train->row_offsets[i + 1] - train->row_offsets[i], options.nnz);
  }
  // Zipf: feature 0 is far more common than the median feature.
  size_t first = 0, middle = 0;
  for (uint64_t id : train->ids) {
    first += id == 0;
    middle += id == options.features / 2;
  }
  EXPECT_GT(first, 10 * middle);

  const double positive_rate =
      std::accumulate(train->labels.begin(), train->labels.end(), 0.0) / train->size();
  EXPECT_GT(positive_rate, 0.05);
  EXPECT_LT(positive_rate, 0.95);
  EXPECT_DOUBLE_EQ(files.summary.PositiveRate(), positive_rate);
}

TEST(SyntheticTest, ZeroBasedGaussianLibsvmParses) {
  SyntheticOptions options = SmallOptions();
  options.index_base = 0;
  options.values = SyntheticValues::kGaussian;
  const Files files = Generate(options);
  absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "gauss.libsvm"), {});
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->index_base, IndexBase::kZero);
  EXPECT_NE(train->values[0], 1.0f);
}

// Rows stay distinct and complete when they must hold most of the Zipf mass, where plain
// rejection sampling would stall.
TEST(SyntheticTest, DenseRowsWithSteepZipfHaveDistinctIds) {
  for (const uint64_t nnz : {60, 100}) {
    SyntheticOptions options = SmallOptions();
    options.features = 100;
    options.nnz = nnz;
    options.zipf = 3;
    options.rows = 200;
    options.test_rows = 0;
    const Files files = Generate(options);
    absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "dense.libsvm"), {});
    ASSERT_TRUE(train.ok()) << train.status();
    for (size_t i = 0; i < train->size(); ++i) {
      std::vector<uint64_t> ids(train->ids.begin() + train->row_offsets[i],
                                train->ids.begin() + train->row_offsets[i + 1]);
      ASSERT_EQ(ids.size(), nnz);
      ASSERT_TRUE(std::is_sorted(ids.begin(), ids.end()));
      ASSERT_EQ(std::adjacent_find(ids.begin(), ids.end()), ids.end()) << "row " << i;
    }
  }
}

// Rows are Zipf draws without replacement. With 3 features of weight 1, 1/2, 1/3 (W = 11/6) and
// 2 per row: P({0,1}) = 1/W * (1/2)/(W-1) + (1/2)/W * 1/(W-1/2) = 0.5318, P({0,2}) = 0.3394.
TEST(SyntheticTest, RowsAreZipfDrawsWithoutReplacement) {
  SyntheticOptions options = SmallOptions();
  options.features = 3;
  options.nnz = 2;
  options.zipf = 1;
  options.rows = 20000;
  options.test_rows = 0;
  const Files files = Generate(options);
  absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "pairs.libsvm"), {});
  ASSERT_TRUE(train.ok()) << train.status();
  double pairs01 = 0, pairs02 = 0;
  for (size_t i = 0; i < train->size(); ++i) {
    const uint64_t second = train->ids[train->row_offsets[i] + 1];
    if (train->ids[train->row_offsets[i]] == 0) (second == 1 ? pairs01 : pairs02) += 1;
  }
  EXPECT_NEAR(pairs01 / train->size(), 0.5318, 0.015);
  EXPECT_NEAR(pairs02 / train->size(), 0.3394, 0.015);
}

TEST(SyntheticTest, MulticlassCsvParses) {
  SyntheticOptions options = SmallOptions();
  options.format = SyntheticFormat::kCsv;
  options.features = 20;
  options.nnz = 5;
  options.classes = 4;
  const Files files = Generate(options);
  ReadOptions read;
  read.num_classes = 4;
  absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "multi.csv"), read);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->size(), options.rows);
  EXPECT_EQ(train->num_features, 20u);
  ASSERT_EQ(files.summary.train_class_counts.size(), 4u);
  for (uint64_t count : files.summary.train_class_counts) EXPECT_GT(count, 0u);
}

TEST(SyntheticTest, NoiseChangesOnlyLabels) {
  SyntheticOptions noisy = SmallOptions();
  noisy.noise = 0.3;
  const Files clean_files = Generate(SmallOptions());
  const Files noisy_files = Generate(noisy);
  const std::string clean_path = SaveToTempFile(clean_files.train, "clean.libsvm");
  const std::string noisy_path = SaveToTempFile(noisy_files.train, "noisy.libsvm");
  absl::StatusOr<Dataset> clean = ReadDataset(clean_path, {});
  absl::StatusOr<Dataset> dirty = ReadDataset(noisy_path, {});
  ASSERT_TRUE(clean.ok() && dirty.ok());
  EXPECT_EQ(clean->ids, dirty->ids);
  size_t flipped = 0;
  for (size_t i = 0; i < clean->size(); ++i) flipped += clean->labels[i] != dirty->labels[i];
  EXPECT_NEAR(static_cast<double>(flipped) / clean->size(), 0.3, 0.05);
}

// A few epochs of plain SGD on the training file must rank the test file clearly better than
// chance, since both come from the same linear model.
TEST(SyntheticTest, LogregTrainedOnTrainBeatsChanceOnTest) {
  const Files files = Generate(SmallOptions());
  absl::StatusOr<Dataset> train = ReadDataset(SaveToTempFile(files.train, "learn.libsvm"), {});
  ASSERT_TRUE(train.ok()) << train.status();
  ReadOptions read;
  read.index_base = train->index_base;
  absl::StatusOr<Dataset> test = ReadDataset(SaveToTempFile(files.test, "learn_test.libsvm"), read);
  ASSERT_TRUE(test.ok()) << test.status();

  std::unique_ptr<Model> model = *Model::Create("logreg", 2);
  std::vector<uint64_t> keys(std::max(train->num_features, test->num_features));
  std::iota(keys.begin(), keys.end(), 0);
  std::vector<float> rows(keys.size()), bias(1);
  constexpr size_t kBatch = 50;
  constexpr float kLearningRate = 0.5f;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (size_t start = 0; start < train->size(); start += kBatch) {
      std::vector<uint32_t> batch;
      for (size_t i = start; i < std::min(start + kBatch, train->size()); ++i) batch.push_back(i);
      std::vector<float> row_grads(rows.size()), bias_grad(1);
      model->LossAndGradient(*train, batch, keys, rows, bias, absl::MakeSpan(row_grads),
                             absl::MakeSpan(bias_grad));
      for (size_t k = 0; k < rows.size(); ++k) rows[k] -= kLearningRate / kBatch * row_grads[k];
      bias[0] -= kLearningRate / kBatch * bias_grad[0];
    }
  }
  const Evaluation eval = Evaluate(*model, *test, keys, rows, bias);
  EXPECT_GT(eval.auc, 0.7);
  EXPECT_LT(eval.loss, std::log(2.0));
}

TEST(SyntheticTest, RejectsBadOptions) {
  auto error = [](SyntheticOptions options) {
    std::ostringstream out;
    return WriteSynthetic(options, out, nullptr).status();
  };
  SyntheticOptions o = SmallOptions();
  o.nnz = o.features + 1;
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.classes = 1;
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.noise = 1.5;
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.index_base = 2;
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.zipf = -1;
  EXPECT_EQ(error(o).code(), absl::StatusCode::kInvalidArgument);
  o = SmallOptions();
  o.format = SyntheticFormat::kCsv;
  o.features = kMaxCsvFeatures + 1;
  EXPECT_THAT(std::string(error(o).message()), HasSubstr("CSV"));
}

TEST(SyntheticTest, FailingStreamIsAnError) {
  std::ostringstream out;
  out.setstate(std::ios::badbit);
  EXPECT_EQ(WriteSynthetic(SmallOptions(), out, nullptr).status().code(),
            absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace syncline
