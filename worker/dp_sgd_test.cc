#include "worker/dp_sgd.h"

#include <cmath>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "privacy/dp_mechanism.h"

namespace syncline {
namespace {

constexpr uint64_t kFeatures = 30;

// Random examples over kFeatures features, some with large values (their gradients get
// clipped), labels in [0, classes).
Dataset RandomData(int classes, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  Dataset d;
  d.row_offsets.push_back(0);
  for (int i = 0; i < n; ++i) {
    d.labels.push_back(static_cast<float>(i % classes));
    const float scale = i % 3 == 0 ? 20.0f : 0.1f;
    for (uint64_t f = 0; f < kFeatures; ++f) {
      if (rng() % 3 != 0) continue;
      d.ids.push_back(f);
      d.values.push_back(scale * value(rng));
    }
    d.row_offsets.push_back(d.ids.size());
  }
  d.num_features = kFeatures;
  d.file_examples = n;
  return d;
}

DpSgdOptions Options(double clip, double noise) {
  return DpSgdOptions{.clip = clip,
                      .noise_stddev = noise,
                      .sampling_rate = 0.1,
                      .steps_per_epoch = 10,
                      .reported_examples = 5,
                      .features = kFeatures,
                      .rank = 0,
                      .key = DpKeyFromSeed(11)};
}

std::unique_ptr<Model> MakeModel(const char* name, int classes) {
  ModelOptions o{.num_classes = classes, .hidden = {8}};
  auto model = Model::Create(name, o);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

std::vector<float> RandomWeights(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> w(-0.5f, 0.5f);
  std::vector<float> out(n);
  for (float& x : out) x = w(rng);
  return out;
}

// Every example's contribution, alone, is at most C in L2 norm (rows and dense table
// together); one already within C is its plain gradient; and the step's sum (without noise)
// is the sum of the clipped contributions. For each model DP-SGD takes.
TEST(DpSgdTest, EveryExampleIsClippedToC) {
  for (const auto& [name, classes] :
       {std::pair{"logreg", 2}, std::pair{"softmax", 4}, std::pair{"mlp", 3}}) {
    SCOPED_TRACE(name);
    const std::unique_ptr<Model> model = MakeModel(name, classes);
    const Dataset data = RandomData(classes, 12, 5);
    const double clip = 2;
    DpSgdStep step(Options(clip, 0));
    const size_t row_floats = kFeatures * model->row_dim();
    const std::vector<float> rows = RandomWeights(row_floats, 1);
    const std::vector<float> bias = RandomWeights(model->bias_dim(), 2);
    std::vector<float> sum_rows(row_floats, 0.0f), sum_bias(bias.size(), 0.0f);
    int clipped = 0;
    for (uint32_t e = 0; e < data.size(); ++e) {
      std::vector<float> g_rows(row_floats, 0.0f), g_bias(bias.size(), 0.0f);
      const uint32_t one[] = {e};
      step.ClippedNoisyGradient(0, *model, data, one, rows, bias, absl::MakeSpan(g_rows),
                                absl::MakeSpan(g_bias));
      const double norm = L2Norm({std::span<const float>(g_rows), std::span<const float>(g_bias)});
      EXPECT_LE(norm, clip * (1 + 1e-5)) << "example " << e;
      // The plain gradient, over every row.
      std::vector<float> p_rows(row_floats, 0.0f), p_bias(bias.size(), 0.0f);
      model->LossAndGradient(data, one, step.keys(), rows, bias, absl::MakeSpan(p_rows),
                             absl::MakeSpan(p_bias));
      const double plain = L2Norm({std::span<const float>(p_rows), std::span<const float>(p_bias)});
      const double factor = std::min(1.0, clip / plain);
      clipped += factor < 1;
      for (size_t i = 0; i < row_floats; ++i) {
        ASSERT_NEAR(g_rows[i], factor * p_rows[i], 1e-5) << "row float " << i;
        sum_rows[i] += g_rows[i];
      }
      for (size_t j = 0; j < bias.size(); ++j) {
        ASSERT_NEAR(g_bias[j], factor * p_bias[j], 1e-5);
        sum_bias[j] += g_bias[j];
      }
    }
    EXPECT_GT(clipped, 0);
    EXPECT_LT(clipped, static_cast<int>(data.size()));
    std::vector<uint32_t> all(data.size());
    std::iota(all.begin(), all.end(), 0u);
    std::vector<float> b_rows(row_floats, 0.0f), b_bias(bias.size(), 0.0f);
    step.ClippedNoisyGradient(0, *model, data, all, rows, bias, absl::MakeSpan(b_rows),
                              absl::MakeSpan(b_bias));
    for (size_t i = 0; i < row_floats; ++i) EXPECT_NEAR(b_rows[i], sum_rows[i], 1e-4);
    for (size_t j = 0; j < bias.size(); ++j) EXPECT_NEAR(b_bias[j], sum_bias[j], 1e-4);
  }
}

// The noise covers every coordinate, untouched rows too, with the worker's share of the
// standard deviation (within 2% over 10^6 coordinates); each step draws its own.
TEST(DpSgdTest, NoiseCoversEveryCoordinateWithItsStddev) {
  DpSgdOptions o = Options(1, 0.75);
  o.features = 100000;
  DpSgdStep step(o);
  const std::unique_ptr<Model> model = MakeModel("softmax", 10);
  const Dataset data = RandomData(10, 4, 3);
  std::vector<float> rows(o.features * 10, 0.0f), bias(10, 0.0f);
  std::vector<float> g(rows.size(), 0.0f), gb(10, 0.0f), g2(rows.size(), 0.0f), gb2(10, 0.0f);
  step.ClippedNoisyGradient(7, *model, data, {}, rows, bias, absl::MakeSpan(g), absl::MakeSpan(gb));
  step.ClippedNoisyGradient(8, *model, data, {}, rows, bias, absl::MakeSpan(g2),
                            absl::MakeSpan(gb2));
  double squares = 0, sum = 0;
  int zeros = 0, same = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    sum += g[i];
    squares += static_cast<double>(g[i]) * g[i];
    zeros += g[i] == 0.0f;
    same += g[i] == g2[i];
  }
  const double n = g.size();
  EXPECT_NEAR(std::sqrt(squares / n - (sum / n) * (sum / n)), 0.75, 0.02 * 0.75);
  EXPECT_NEAR(sum / n, 0, 0.005);
  EXPECT_LT(zeros, 10);
  EXPECT_LT(same, 10);
}

// A step's batch is a Poisson sample: q n examples on average, a different one each step, and
// the same one again for the same step (a replayed run).
TEST(DpSgdTest, PoissonBatchMeanIsQN) {
  DpSgdOptions o = Options(1, 1);
  o.sampling_rate = 0.02;
  DpSgdStep step(o);
  const uint32_t n = 30000;
  double total = 0;
  constexpr int kSteps = 500;
  for (int64_t s = 0; s < kSteps; ++s) total += step.SampleBatch(s, n).size();
  // Standard error of the mean of 500 binomial(30000, 0.02) counts: 1.08.
  EXPECT_NEAR(total / kSteps, 0.02 * n, 5.0);
  EXPECT_EQ(step.SampleBatch(3, n), step.SampleBatch(3, n));
  EXPECT_NE(step.SampleBatch(3, n), step.SampleBatch(4, n));
}

TEST(DpSgdTest, OptionsSplitTheNoiseAmongWorkers) {
  JobSpec spec;
  spec.workers = 4;
  spec.training.batch_size = 50;
  spec.training.epochs = 3;
  spec.privacy.level = DpLevel::kExample;
  spec.privacy.clip = 2;
  spec.privacy.noise_multiplier = 1.5;
  spec.privacy.examples = 10000;
  EXPECT_EQ(DpSgdOptionsFor(spec, 1, 784).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no key yet
  spec.privacy.key = DpKeyHex(DpKeyFromSeed(1));
  auto o = DpSgdOptionsFor(spec, 1, 784);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_DOUBLE_EQ(o->noise_stddev, 1.5 * 2 / 2);  // z C / sqrt(4)
  EXPECT_DOUBLE_EQ(o->sampling_rate, 200.0 / 10000);
  EXPECT_EQ(o->steps_per_epoch, 50);
  EXPECT_FLOAT_EQ(o->reported_examples, 50);  // q N / W
  EXPECT_EQ(o->rank, 1);
}

}  // namespace
}  // namespace syncline
