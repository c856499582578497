#include "models/mlp_model.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "models/metrics.h"

namespace syncline {
namespace {

using model_internal::Precision;

std::vector<uint32_t> All(const Dataset& d) {
  std::vector<uint32_t> all(d.size());
  std::iota(all.begin(), all.end(), 0u);
  return all;
}

TEST(MlpModelTest, ShapesFollowTheOptions) {
  auto model = Model::Create("mlp", ModelOptions{.num_classes = 10, .hidden = {32, 16}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->name(), "mlp");
  EXPECT_EQ((*model)->row_dim(), 32);
  // b_0 32; 32x16 + 16; 16x10 + 10.
  EXPECT_EQ((*model)->bias_dim(), 32 + 32 * 16 + 16 + 16 * 10 + 10);
  EXPECT_EQ((*model)->num_classes(), 10);
  EXPECT_FALSE((*model)->binary());
  EXPECT_GT((*model)->row_init_scale(), 0);
  EXPECT_GT((*model)->bias_init_scale(), 0);

  auto defaults = Model::Create("mlp", ModelOptions{});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ((*defaults)->row_dim(), 256);
  EXPECT_EQ((*defaults)->bias_dim(), 256 + 256 * 128 + 128 + 128 * 2 + 2);
}

TEST(MlpModelTest, BadOptionsAreInvalidArguments) {
  for (const ModelOptions& options : {
           ModelOptions{.num_classes = 1, .hidden = {4}},
           ModelOptions{.hidden = {0}},
           ModelOptions{.hidden = {8, -1}},
           ModelOptions{.hidden = {kMaxHiddenWidth + 1}},
           ModelOptions{.hidden = std::vector<int>(kMaxHiddenLayers + 1, 4)},
           // 4096 x 4096 x 4 > 2^26 dense parameters.
           ModelOptions{.hidden = {4096, 4096, 4096, 4096, 4096}},
       }) {
    auto model = Model::Create("mlp", options);
    EXPECT_TRUE(absl::IsInvalidArgument(model.status()))
        << "classes " << options.num_classes << " hidden " << absl::StrJoin(options.hidden, ",");
  }
}

// A random sparse problem: `examples` examples of 1 to 6 of 12 features with values in
// [-1.5, 1.5], labels cycling through the classes, and every parameter uniform in
// [-0.5, 0.5]. One key is left out, as a server leaves out a feature it has never seen.
struct Problem {
  Dataset data;
  std::vector<uint64_t> keys;
  std::vector<float> rows, bias;
};

Problem MakeProblem(const Model& model, uint64_t seed, int examples) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::uniform_int_distribution<int> count(1, 6), feature(0, 11);
  Problem p;
  p.data.num_features = 12;
  p.data.row_offsets.push_back(0);
  for (int i = 0; i < examples; ++i) {
    std::vector<uint64_t> ids;
    for (int j = count(rng); j > 0; --j) ids.push_back(feature(rng));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (const uint64_t id : ids) {
      p.data.ids.push_back(id);
      p.data.values.push_back(3 * uniform(rng));
    }
    p.data.labels.push_back(static_cast<float>(i % model.num_classes()));
    p.data.row_offsets.push_back(p.data.ids.size());
  }
  p.keys = model.BatchKeys(p.data, All(p.data));
  p.keys.erase(p.keys.begin() + 1);
  p.rows.resize(p.keys.size() * model.row_dim());
  for (float& x : p.rows) x = uniform(rng);
  p.bias.resize(model.bias_dim());
  for (float& x : p.bias) x = uniform(rng);
  return p;
}

double Loss(const Model& model, const Problem& p) {
  std::vector<float> gr(p.rows.size()), gb(p.bias.size());
  return model.LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias, absl::MakeSpan(gr),
                               absl::MakeSpan(gb));
}

struct Shape {
  std::vector<int> hidden;
  int classes;
};

class MlpGradientTest : public ::testing::TestWithParam<Shape> {};

// Compares every analytic partial derivative with a central finite difference, in double.
TEST_P(MlpGradientTest, GradientsMatchFiniteDifferences) {
  const ModelOptions options{.num_classes = GetParam().classes, .hidden = GetParam().hidden};
  auto model = *CreateMlpModel(options, Precision::kDouble);
  Problem p = MakeProblem(*model, 7 + GetParam().hidden.size(), 9);
  // Hidden biases in [0, 1]: most units open, so that a narrow deep net is not dead.
  const MlpLayout layout(GetParam().hidden, GetParam().classes);
  for (size_t i = 0; i + 1 < layout.widths.size(); ++i) {
    for (int k = 0; k < layout.widths[i]; ++k) p.bias[layout.b[i] + k] += 0.5f;
  }
  std::vector<float> gr(p.rows.size()), gb(p.bias.size());
  model->LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias, absl::MakeSpan(gr),
                         absl::MakeSpan(gb));
  const double loss = Loss(*model, p);
  int checked = 0, nonzero = 0, kinks = 0;
  auto check = [&](std::vector<float>* params, const std::vector<float>& analytic,
                   const char* what) {
    for (size_t i = 0; i < params->size(); ++i) {
      const float saved = (*params)[i];
      // A small step: the loss is double arithmetic on the float parameters, and the step's true
      // size is in the denominator, so only ReLU kinks within it can spoil the difference.
      const float up = saved + 1e-5f, down = saved - 1e-5f;
      (*params)[i] = up;
      const double loss_up = Loss(*model, p);
      (*params)[i] = down;
      const double loss_down = Loss(*model, p);
      (*params)[i] = saved;
      // A ReLU that changes sides within the step has no derivative to compare with: there the
      // forward and backward differences disagree far more than the curvature explains.
      const double forward = (loss_up - loss) / (static_cast<double>(up) - saved);
      const double backward = (loss - loss_down) / (static_cast<double>(saved) - down);
      if (std::fabs(forward - backward) >
          0.05 * std::max(std::fabs(forward), std::fabs(backward)) + 1e-7) {
        ++kinks;
        continue;
      }
      const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - down);
      const double a = analytic[i];
      EXPECT_LE(std::fabs(a - numeric), 1e-3 * std::max(std::fabs(a), std::fabs(numeric)) + 1e-6)
          << what << " " << i << ": analytic " << a << " numeric " << numeric;
      ++checked;
      nonzero += a != 0;
    }
  };
  check(&p.bias, gb, "dense parameter");
  check(&p.rows, gr, "row parameter");
  EXPECT_EQ(checked + kinks, static_cast<int>(p.bias.size() + p.rows.size()));
  EXPECT_LE(kinks, checked / 20);
  // Closed ReLUs zero some gradients; most parameters must still matter.
  EXPECT_GT(nonzero, checked / 2);

  // The float model used for training agrees with the double one.
  auto fast = *CreateMlpModel(options, Precision::kFloat);
  std::vector<float> fgr(p.rows.size()), fgb(p.bias.size());
  const double fast_loss = fast->LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias,
                                                 absl::MakeSpan(fgr), absl::MakeSpan(fgb));
  EXPECT_NEAR(fast_loss, Loss(*model, p), 1e-4);
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(fgb[i], gb[i], 1e-4 + 1e-4 * std::fabs(gb[i]));
  for (size_t i = 0; i < gr.size(); ++i) EXPECT_NEAR(fgr[i], gr[i], 1e-4 + 1e-4 * std::fabs(gr[i]));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MlpGradientTest,
                         ::testing::Values(Shape{{3}, 2}, Shape{{5}, 10}, Shape{{4, 3}, 2},
                                           Shape{{6, 4}, 10}, Shape{{5, 4, 3}, 2},
                                           Shape{{3, 5, 4}, 10}),
                         [](const ::testing::TestParamInfo<Shape>& info) {
                           return absl::StrCat("h", absl::StrJoin(info.param.hidden, "_"), "_k",
                                               info.param.classes);
                         });

// A call over several blocks (of 128 examples), the last one short, equals the sum of calls over
// its parts, and Predict gives each example the softmax of the logits the loss used.
TEST(MlpModelTest, ACallOverSeveralBlocksIsTheSumOfItsParts) {
  auto model =
      *CreateMlpModel(ModelOptions{.num_classes = 3, .hidden = {6, 5}}, Precision::kDouble);
  Problem p = MakeProblem(*model, 3, 300);
  const std::vector<uint32_t> all = All(p.data);
  std::vector<float> gr(p.rows.size()), gb(p.bias.size());
  const double loss = model->LossAndGradient(p.data, all, p.keys, p.rows, p.bias,
                                             absl::MakeSpan(gr), absl::MakeSpan(gb));
  std::vector<float> pgr(p.rows.size()), pgb(p.bias.size());
  const absl::Span<const uint32_t> span(all);
  double parts = 0;
  for (const auto& part : {span.subspan(0, 200), span.subspan(200, 1), span.subspan(201)}) {
    parts += model->LossAndGradient(p.data, part, p.keys, p.rows, p.bias, absl::MakeSpan(pgr),
                                    absl::MakeSpan(pgb));
  }
  EXPECT_NEAR(loss, parts, 1e-9 * std::fabs(loss));
  for (size_t i = 0; i < gb.size(); ++i) ASSERT_NEAR(gb[i], pgb[i], 1e-5) << "dense " << i;
  for (size_t i = 0; i < gr.size(); ++i) ASSERT_NEAR(gr[i], pgr[i], 1e-5) << "row " << i;

  std::vector<float> scores, one;
  model->Predict(p.data, all, p.keys, p.rows, p.bias, &scores);
  ASSERT_EQ(scores.size(), all.size() * 3);
  double predicted_loss = 0;
  for (size_t e = 0; e < all.size(); ++e) {
    predicted_loss -= std::log(scores[e * 3 + static_cast<size_t>(p.data.labels[e])]);
  }
  EXPECT_NEAR(predicted_loss, loss, 1e-4 * loss);
  model->Predict(p.data, span.subspan(257, 1), p.keys, p.rows, p.bias, &one);
  ASSERT_EQ(one.size(), 3u);
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(one[c], scores[257 * 3 + c]);
}

// XOR of two binary variables, each one-hot over two feature ids: no linear model does better
// than 3 in 4, a hidden layer learns it. Plain SGD on the model's own gradients, from the
// model's initial ranges.
TEST(MlpModelTest, LearnsXorThatSoftmaxCannot) {
  Dataset data;
  data.num_features = 4;
  data.row_offsets.push_back(0);
  for (int i = 0; i < 64; ++i) {
    const int a = i % 2, b = (i / 2) % 2;
    for (const uint64_t id : {static_cast<uint64_t>(a), static_cast<uint64_t>(2 + b)}) {
      data.ids.push_back(id);
      data.values.push_back(1.0f);
    }
    data.labels.push_back(static_cast<float>(a ^ b));
    data.row_offsets.push_back(data.ids.size());
  }
  const std::vector<uint32_t> all = All(data);
  auto train = [&](const Model& model) {
    std::mt19937_64 rng(1);
    const std::vector<uint64_t> keys = UniqueKeys(data, all);
    std::vector<float> rows(keys.size() * model.row_dim()), bias(model.bias_dim());
    std::uniform_real_distribution<float> row_init(-model.row_init_scale(), model.row_init_scale());
    std::uniform_real_distribution<float> bias_init(-model.bias_init_scale(),
                                                    model.bias_init_scale());
    for (float& x : rows) x = row_init(rng);
    for (float& x : bias) x = bias_init(rng);
    std::vector<double> losses;  // Mean loss before each step.
    for (int step = 0; step < 300; ++step) {
      std::vector<float> gr(rows.size()), gb(bias.size());
      losses.push_back(model.LossAndGradient(data, all, keys, rows, bias, absl::MakeSpan(gr),
                                             absl::MakeSpan(gb)) /
                       all.size());
      for (size_t i = 0; i < rows.size(); ++i) rows[i] -= 0.5f * gr[i] / all.size();
      for (size_t i = 0; i < bias.size(); ++i) bias[i] -= 0.5f * gb[i] / all.size();
    }
    return std::pair(Evaluate(model, data, keys, rows, bias), losses.front() - losses.back());
  };
  const auto [mlp, mlp_fall] = train(**Model::Create("mlp", ModelOptions{.hidden = {8}}));
  // The data is symmetric: softmax stays where it starts, at log 2.
  const auto [softmax, softmax_fall] = train(**Model::Create("softmax", 2));
  EXPECT_GT(mlp_fall, 0.5);
  EXPECT_EQ(mlp.accuracy, 1.0);
  EXPECT_LT(mlp.loss, 0.1);
  EXPECT_LE(softmax.accuracy, 0.75);
  EXPECT_GT(softmax.loss, 0.5);
}

}  // namespace
}  // namespace syncline
