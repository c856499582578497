#include "models/metrics.h"

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace syncline {
namespace {

TEST(BinaryAucTest, PerfectRankingIsOne) {
  EXPECT_DOUBLE_EQ(BinaryAuc({0.1f, 0.2f, 0.8f, 0.9f}, {0, 0, 1, 1}), 1.0);
}

TEST(BinaryAucTest, ReversedRankingIsZero) {
  EXPECT_DOUBLE_EQ(BinaryAuc({0.9f, 0.8f, 0.2f, 0.1f}, {0, 0, 1, 1}), 0.0);
}

TEST(BinaryAucTest, AllTiedIsOneHalf) {
  EXPECT_DOUBLE_EQ(BinaryAuc({0.3f, 0.3f, 0.3f, 0.3f, 0.3f}, {0, 1, 1, 0, 1}), 0.5);
}

TEST(BinaryAucTest, OneClassAbsentIsOneHalf) {
  EXPECT_DOUBLE_EQ(BinaryAuc({0.1f, 0.7f}, {1, 1}), 0.5);
  EXPECT_DOUBLE_EQ(BinaryAuc({0.1f, 0.7f}, {0, 0}), 0.5);
  EXPECT_DOUBLE_EQ(BinaryAuc({}, {}), 0.5);
}

TEST(BinaryAucTest, HandComputedCases) {
  // Positives {0.35, 0.8} vs negatives {0.1, 0.4}: 3 of 4 pairs ordered right.
  EXPECT_DOUBLE_EQ(BinaryAuc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  // Positives {0.5, 0.9} vs negatives {0.5, 0.2}: the tied pair counts one half, so 3.5 / 4.
  EXPECT_DOUBLE_EQ(BinaryAuc({0.5f, 0.5f, 0.2f, 0.9f}, {1, 0, 0, 1}), 0.875);
}

TEST(BinaryAucTest, MatchesPairCountingWithManyTies) {
  std::mt19937_64 rng(42);
  std::vector<float> scores(500), labels(500);
  for (size_t i = 0; i < scores.size(); ++i) {
    scores[i] = static_cast<float>(rng() % 20) / 20;  // Heavy ties.
    labels[i] = (rng() % 3 == 0) ? 1 : 0;
  }
  double pairs = 0, right = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[i] != 1 || labels[j] != 0) continue;
      ++pairs;
      right += scores[i] > scores[j] ? 1 : scores[i] == scores[j] ? 0.5 : 0;
    }
  }
  EXPECT_NEAR(BinaryAuc(scores, labels), right / pairs, 1e-12);
}

TEST(BinaryAucTest, NanScoresRankLowest) {
  EXPECT_DOUBLE_EQ(BinaryAuc({NAN, 0.1f, 0.2f}, {0, 1, 1}), 1.0);
}

Dataset TwoFeatureData() {
  // Example i has feature i % 2 with value 1; labels 1, 0, 1, 1.
  Dataset data;
  data.labels = {1, 0, 1, 1};
  data.row_offsets = {0, 1, 2, 3, 4};
  data.ids = {0, 1, 0, 1};
  data.values = {1, 1, 1, 1};
  data.num_features = 2;
  return data;
}

TEST(EvaluateTest, BinaryModel) {
  std::unique_ptr<Model> model = *Model::Create("logreg", 2);
  const Dataset data = TwoFeatureData();
  const std::vector<uint64_t> keys = {0, 1};
  // P(y=1) is sigmoid(2) for feature 0 and sigmoid(-1) for feature 1.
  const std::vector<float> rows = {2, -1};
  const std::vector<float> bias = {0};
  const Evaluation eval = Evaluate(*model, data, keys, rows, bias);
  const double p0 = 1 / (1 + std::exp(-2.0));
  const double p1 = 1 / (1 + std::exp(1.0));
  EXPECT_EQ(eval.examples, 4u);
  EXPECT_NEAR(eval.loss, (-2 * std::log(p0) - std::log(1 - p1) - std::log(p1)) / 4, 1e-6);
  // Scores: positives {p0, p0, p1}, negative {p1}: pairs (p0,p1) x2 right, (p1,p1) tied.
  EXPECT_NEAR(eval.auc, 2.5 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(eval.accuracy, 0.75);
}

TEST(EvaluateTest, MulticlassModelWithZeroWeights) {
  std::unique_ptr<Model> model = *Model::Create("softmax", 3);
  Dataset data = TwoFeatureData();
  data.labels = {0, 2, 1, 0};
  const std::vector<uint64_t> keys = {0, 1};
  const std::vector<float> rows(6, 0);
  const std::vector<float> bias = {1, 0, 0};  // Always predicts class 0.
  const Evaluation eval = Evaluate(*model, data, keys, rows, bias);
  const double z = std::exp(1.0) + 2;
  EXPECT_NEAR(eval.loss, (-2 * std::log(std::exp(1.0) / z) - 2 * std::log(1 / z)) / 4, 1e-6);
  EXPECT_DOUBLE_EQ(eval.accuracy, 0.5);
  EXPECT_EQ(eval.auc, -1);
}

TEST(EvaluateTest, ClampsProbabilitiesInTheLogLoss) {
  std::unique_ptr<Model> model = *Model::Create("logreg", 2);
  const Dataset data = TwoFeatureData();
  const std::vector<uint64_t> keys = {0, 1};
  const std::vector<float> rows = {-100, -100};  // Sure of 0; three examples are 1.
  const std::vector<float> bias = {0};
  const Evaluation eval = Evaluate(*model, data, keys, rows, bias);
  EXPECT_NEAR(eval.loss, 3 * -std::log(1e-7) / 4, 1e-3);
}

TEST(EvaluateTest, EmptyDataset) {
  std::unique_ptr<Model> model = *Model::Create("logreg", 2);
  Dataset data;
  data.row_offsets = {0};
  const Evaluation eval = Evaluate(*model, data, {}, {}, std::vector<float>{0});
  EXPECT_EQ(eval.examples, 0u);
  EXPECT_EQ(eval.loss, 0);
}

}  // namespace
}  // namespace syncline
