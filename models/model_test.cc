#include "models/model.h"

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;

// Builds a Dataset from (label, {(id, value)...}) rows.
struct Example {
  float label;
  std::vector<std::pair<uint64_t, float>> features;
};

Dataset MakeDataset(const std::vector<Example>& examples) {
  Dataset data;
  data.row_offsets.push_back(0);
  for (const Example& e : examples) {
    data.labels.push_back(e.label);
    for (const auto& [id, value] : e.features) {
      data.ids.push_back(id);
      data.values.push_back(value);
      data.num_features = std::max(data.num_features, id + 1);
    }
    data.row_offsets.push_back(data.ids.size());
  }
  return data;
}

std::vector<uint32_t> AllExamples(const Dataset& data) {
  std::vector<uint32_t> examples(data.size());
  std::iota(examples.begin(), examples.end(), 0);
  return examples;
}

// Random examples over sparse ids {3, 10, 11, 40, 41}, labels in [0, classes).
Dataset RandomDataset(int classes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  const std::vector<uint64_t> ids = {3, 10, 11, 40, 41};
  std::vector<Example> examples;
  for (int i = 0; i < 8; ++i) {
    Example e{static_cast<float>(i % classes), {}};
    for (uint64_t id : ids) {
      if (rng() % 3 != 0) e.features.push_back({id, value(rng)});
    }
    examples.push_back(e);
  }
  return MakeDataset(examples);
}

std::unique_ptr<Model> MustCreate(std::string_view name, int classes) {
  absl::StatusOr<std::unique_ptr<Model>> model = Model::Create(name, classes);
  EXPECT_TRUE(model.ok()) << model.status();
  return *std::move(model);
}

TEST(ModelTest, CreateReportsDimensions) {
  std::unique_ptr<Model> logreg = MustCreate("logreg", 2);
  EXPECT_EQ(logreg->name(), "logreg");
  EXPECT_EQ(logreg->row_dim(), 1);
  EXPECT_EQ(logreg->bias_dim(), 1);
  EXPECT_TRUE(logreg->binary());
  std::unique_ptr<Model> softmax = MustCreate("softmax", 4);
  EXPECT_EQ(softmax->name(), "softmax");
  EXPECT_EQ(softmax->row_dim(), 4);
  EXPECT_EQ(softmax->bias_dim(), 4);
  EXPECT_FALSE(softmax->binary());
}

TEST(ModelTest, CreateRejectsUnknownNamesAndBadClassCounts) {
  EXPECT_EQ(Model::Create("svm", 2).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Model::Create("logreg", 3).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Model::Create("softmax", 1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelTest, UniqueKeysAreSortedAndUnique) {
  const Dataset data = MakeDataset({{1, {{9, 1}, {2, 1}}}, {0, {{5, 1}}}, {1, {{2, 1}, {7, 1}}}});
  EXPECT_THAT(UniqueKeys(data, AllExamples(data)), ElementsAre(2u, 5u, 7u, 9u));
  const std::vector<uint32_t> some = {2, 1};
  EXPECT_THAT(UniqueKeys(data, some), ElementsAre(2u, 5u, 7u));
}

class GradientTest : public testing::TestWithParam<std::pair<const char*, int>> {};

// The analytic gradient must match central finite differences of the loss, for every weight.
TEST_P(GradientTest, MatchesFiniteDifferences) {
  const auto [name, classes] = GetParam();
  std::unique_ptr<Model> model = MustCreate(name, classes);
  const Dataset data = RandomDataset(classes, /*seed=*/7);
  const std::vector<uint32_t> examples = AllExamples(data);
  const std::vector<uint64_t> keys = UniqueKeys(data, examples);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> weight(-1, 1);
  std::vector<float> rows(keys.size() * model->row_dim());
  std::vector<float> bias(model->bias_dim());
  for (float& w : rows) w = weight(rng);
  for (float& b : bias) b = weight(rng);

  std::vector<float> row_grads(rows.size());
  std::vector<float> bias_grad(bias.size());
  const double loss = model->LossAndGradient(data, examples, keys, rows, bias,
                                             absl::MakeSpan(row_grads), absl::MakeSpan(bias_grad));
  EXPECT_GT(loss, 0);

  auto numeric = [&](std::vector<float>& weights, size_t i) {
    std::vector<float> unused_rows(rows.size()), unused_bias(bias.size());
    const float saved = weights[i];
    weights[i] = saved + 1e-2f;
    const float plus = weights[i];
    const double loss_plus = model->LossAndGradient(
        data, examples, keys, rows, bias, absl::MakeSpan(unused_rows), absl::MakeSpan(unused_bias));
    weights[i] = saved - 1e-2f;
    const float minus = weights[i];
    const double loss_minus = model->LossAndGradient(
        data, examples, keys, rows, bias, absl::MakeSpan(unused_rows), absl::MakeSpan(unused_bias));
    weights[i] = saved;
    return (loss_plus - loss_minus) / (static_cast<double>(plus) - minus);
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_NEAR(row_grads[i], numeric(rows, i), 1e-3) << "row weight " << i;
  }
  for (size_t i = 0; i < bias.size(); ++i) {
    EXPECT_NEAR(bias_grad[i], numeric(bias, i), 1e-3) << "bias " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, GradientTest,
                         testing::Values(std::make_pair("logreg", 2), std::make_pair("softmax", 2),
                                         std::make_pair("softmax", 3)),
                         [](const auto& info) {
                           return std::string(info.param.first) + std::to_string(info.param.second);
                         });

TEST(ModelTest, GradientsAreAddedToTheOutputs) {
  std::unique_ptr<Model> model = MustCreate("softmax", 3);
  const Dataset data = RandomDataset(3, /*seed=*/3);
  const std::vector<uint32_t> examples = AllExamples(data);
  const std::vector<uint64_t> keys = UniqueKeys(data, examples);
  const std::vector<float> rows(keys.size() * 3, 0.25f);
  const std::vector<float> bias = {0.1f, -0.2f, 0.3f};
  std::vector<float> once(rows.size()), twice(rows.size());
  std::vector<float> bias_once(3), bias_twice(3);
  model->LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(once),
                         absl::MakeSpan(bias_once));
  for (int i = 0; i < 2; ++i) {
    model->LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(twice),
                           absl::MakeSpan(bias_twice));
  }
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
  for (size_t i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(bias_twice[i], 2 * bias_once[i]);
}

// Linearly separable: feature 1 marks positives, feature 2 negatives, feature 0 is noise.
TEST(ModelTest, SgdOnSeparableDataDrivesLossDown) {
  for (const auto& [name, classes] : {std::make_pair("logreg", 2), std::make_pair("softmax", 2)}) {
    std::unique_ptr<Model> model = MustCreate(name, classes);
    const Dataset data = MakeDataset(
        {{1, {{0, 1}, {1, 1}}}, {0, {{0, 1}, {2, 1}}}, {1, {{1, 2}}}, {0, {{2, 0.5}, {0, 1}}}});
    const std::vector<uint32_t> examples = AllExamples(data);
    const std::vector<uint64_t> keys = UniqueKeys(data, examples);
    std::vector<float> rows(keys.size() * model->row_dim());
    std::vector<float> bias(model->bias_dim());
    double previous = INFINITY;
    for (int step = 0; step < 50; ++step) {
      std::vector<float> row_grads(rows.size()), bias_grad(bias.size());
      const double loss = model->LossAndGradient(
          data, examples, keys, rows, bias, absl::MakeSpan(row_grads), absl::MakeSpan(bias_grad));
      EXPECT_LT(loss, previous) << name << " step " << step;
      previous = loss;
      for (size_t i = 0; i < rows.size(); ++i) rows[i] -= 0.5f * row_grads[i];
      for (size_t i = 0; i < bias.size(); ++i) bias[i] -= 0.5f * bias_grad[i];
    }
    EXPECT_LT(previous / data.size(), 0.05) << name;
  }
}

// The loss is the sum of -log P(true class) under Predict's probabilities.
TEST(ModelTest, PredictIsConsistentWithLoss) {
  for (const auto& [name, classes] : {std::make_pair("logreg", 2), std::make_pair("softmax", 3)}) {
    std::unique_ptr<Model> model = MustCreate(name, classes);
    const Dataset data = RandomDataset(classes, /*seed=*/5);
    const std::vector<uint32_t> examples = AllExamples(data);
    const std::vector<uint64_t> keys = UniqueKeys(data, examples);
    std::vector<float> rows(keys.size() * model->row_dim());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = std::sin(static_cast<float>(i));
    std::vector<float> bias(model->bias_dim(), 0.3f);
    std::vector<float> row_grads(rows.size()), bias_grad(bias.size());
    const double loss = model->LossAndGradient(
        data, examples, keys, rows, bias, absl::MakeSpan(row_grads), absl::MakeSpan(bias_grad));
    std::vector<float> scores;
    model->Predict(data, examples, keys, rows, bias, &scores);
    double expected = 0;
    if (model->binary()) {
      ASSERT_EQ(scores.size(), data.size());
      for (size_t i = 0; i < data.size(); ++i) {
        expected -= std::log(data.labels[i] == 1 ? scores[i] : 1 - scores[i]);
      }
    } else {
      ASSERT_EQ(scores.size(), data.size() * classes);
      for (size_t i = 0; i < data.size(); ++i) {
        double total = 0;
        for (int k = 0; k < classes; ++k) total += scores[i * classes + k];
        EXPECT_NEAR(total, 1.0, 1e-5);
        expected -= std::log(scores[i * classes + static_cast<int>(data.labels[i])]);
      }
    }
    EXPECT_NEAR(loss, expected, 1e-4 * expected) << name;
  }
}

TEST(ModelTest, MissingKeysActAsZeroWeightsWithoutGradient) {
  std::unique_ptr<Model> model = MustCreate("logreg", 2);
  const Dataset data = MakeDataset({{1, {{4, 1}, {8, 2}}}});
  const std::vector<uint32_t> examples = {0};
  const std::vector<uint64_t> keys = {8};  // Feature 4 has no row.
  const std::vector<float> rows = {0.5f};
  const std::vector<float> bias = {0};
  std::vector<float> row_grads(1), bias_grad(1);
  const double loss = model->LossAndGradient(data, examples, keys, rows, bias,
                                             absl::MakeSpan(row_grads), absl::MakeSpan(bias_grad));
  // z = 2 * 0.5 = 1: loss = log(1 + e^-1), dz = sigmoid(1) - 1.
  EXPECT_NEAR(loss, std::log1p(std::exp(-1.0)), 1e-6);
  const double dz = 1 / (1 + std::exp(-1.0)) - 1;
  EXPECT_NEAR(row_grads[0], 2 * dz, 1e-6);
  EXPECT_NEAR(bias_grad[0], dz, 1e-6);
}

// A batch split into single-example calls (as threads might) must add up to the whole-batch
// call, with some features missing from the keys. The two look keys up differently (a hash map
// for the batch, binary search for one example among many keys).
TEST(ModelTest, SplitBatchAddsUpToTheWholeBatch) {
  std::unique_ptr<Model> model = MustCreate("softmax", 3);
  std::mt19937_64 rng(9);
  std::vector<Example> rows;
  for (int i = 0; i < 200; ++i) {
    Example e{static_cast<float>(i % 3), {}};
    for (int j = 0; j < 5; ++j) e.features.push_back({rng() % 300, 1.0f + j});
    rows.push_back(e);
  }
  const Dataset data = MakeDataset(rows);
  const std::vector<uint32_t> examples = AllExamples(data);
  std::vector<uint64_t> keys = UniqueKeys(data, examples);
  ASSERT_GT(keys.size(), 100u);
  keys.erase(keys.begin() + 10, keys.begin() + 20);  // Missing rows: zero weight, no gradient.
  std::vector<float> weights(keys.size() * 3);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = std::cos(static_cast<float>(i)) / 4;
  const std::vector<float> bias = {0.1f, 0.0f, -0.1f};

  std::vector<float> batch_grads(weights.size()), batch_bias(3);
  const double batch_loss = model->LossAndGradient(
      data, examples, keys, weights, bias, absl::MakeSpan(batch_grads), absl::MakeSpan(batch_bias));
  std::vector<float> split_grads(weights.size()), split_bias(3);
  double split_loss = 0;
  for (const uint32_t example : examples) {
    split_loss +=
        model->LossAndGradient(data, absl::MakeConstSpan(&example, 1), keys, weights, bias,
                               absl::MakeSpan(split_grads), absl::MakeSpan(split_bias));
  }
  EXPECT_NEAR(batch_loss, split_loss, 1e-9 * batch_loss);
  for (size_t i = 0; i < weights.size(); ++i) EXPECT_NEAR(batch_grads[i], split_grads[i], 1e-4);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(batch_bias[k], split_bias[k], 1e-4);

  std::vector<float> batch_scores, one_score;
  model->Predict(data, examples, keys, weights, bias, &batch_scores);
  model->Predict(data, absl::MakeConstSpan(&examples[7], 1), keys, weights, bias, &one_score);
  ASSERT_EQ(one_score.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(one_score[k], batch_scores[7 * 3 + k]);
}

TEST(ModelTest, ExtremeLogitsGiveFiniteLossAndGradient) {
  for (const auto& [name, classes] : {std::make_pair("logreg", 2), std::make_pair("softmax", 3)}) {
    std::unique_ptr<Model> model = MustCreate(name, classes);
    // One confidently wrong example: the model puts a logit of 1e4 on a class other than 0.
    const Dataset data = MakeDataset({{0, {{0, 1}}}});
    const std::vector<uint32_t> examples = AllExamples(data);
    const std::vector<uint64_t> keys = {0};
    std::vector<float> rows(model->row_dim(), 0);
    rows.back() = 1e4f;
    const std::vector<float> bias(model->bias_dim(), 0);
    std::vector<float> row_grads(rows.size()), bias_grad(bias.size());
    const double loss = model->LossAndGradient(
        data, examples, keys, rows, bias, absl::MakeSpan(row_grads), absl::MakeSpan(bias_grad));
    EXPECT_TRUE(std::isfinite(loss)) << name;
    EXPECT_NEAR(loss, 1e4, 1) << name;
    for (float g : row_grads) EXPECT_TRUE(std::isfinite(g)) << name;
    std::vector<float> scores;
    model->Predict(data, examples, keys, rows, bias, &scores);
    for (float s : scores) EXPECT_TRUE(std::isfinite(s)) << name;
  }
}

}  // namespace
}  // namespace syncline
