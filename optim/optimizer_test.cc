#include "optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace syncline {
namespace {

TEST(OptimizerTest, SgdScalesTheGradientSum) {
  OptimizerConfig c;
  c.learning_rate = 0.5f;
  std::vector<float> w = {1, 2}, g = {4, 8};
  ApplyUpdate(c, w.data(), nullptr, g.data(), 0.25f, 2, 1);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  EXPECT_FLOAT_EQ(w[1], 1.0f);
}

TEST(OptimizerTest, AdagradShrinksRepeatedSteps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdagrad;
  c.learning_rate = 1.0f;
  c.epsilon = 0;
  std::vector<float> w = {0}, h = {0}, g = {2};
  ApplyUpdate(c, w.data(), h.data(), g.data(), 1.0f, 1, 1);
  EXPECT_FLOAT_EQ(w[0], -1.0f);  // 2 / sqrt(4)
  ApplyUpdate(c, w.data(), h.data(), g.data(), 1.0f, 1, 2);
  EXPECT_NEAR(w[0], -1.0f - 2.0f / std::sqrt(8.0f), 1e-6);
}

TEST(OptimizerTest, AHeldSumIsAppliedAsEqualStepsOfItsMean) {
  // Adagrad: a sum of three pushes' equal gradients, held back and sent once, moves the
  // weight and grows the accumulator as the three pushes would have.
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdagrad;
  c.learning_rate = 0.5f;
  std::vector<float> w = {1, -1}, h = {0, 0}, g = {2, -4};
  std::vector<float> w3 = w, h3 = h, g3 = {6, -12};
  for (int i = 1; i <= 3; ++i) ApplyUpdate(c, w.data(), h.data(), g.data(), 0.5f, 2, i);
  int64_t step = 0;
  ApplyHeldUpdate(c, w3.data(), h3.data(), nullptr, g3.data(), 0.5f, 2, 3, 1.0f, &step);
  EXPECT_EQ(step, 3);
  for (int j = 0; j < 2; ++j) {
    EXPECT_NEAR(w3[j], w[j], 1e-6);
    EXPECT_NEAR(h3[j], h[j], 1e-5);
  }
  // Applied as one step instead, the accumulator would hold 9 squares, not 3.
  std::vector<float> w1 = {1, -1}, h1 = {0, 0};
  ApplyUpdate(c, w1.data(), h1.data(), g3.data(), 0.5f, 2, 1);
  EXPECT_NEAR(h1[0], 3 * h[0], 1e-5);
  EXPECT_GT(std::abs(w1[0] - w[0]), 0.1f);

  // SGD without l2: one step, the same update; held 0 counts as 1; Adam counts every step.
  OptimizerConfig sgd;
  sgd.learning_rate = 0.25f;
  std::vector<float> a = {1}, b = {1}, ga = {8};
  ApplyUpdate(sgd, a.data(), nullptr, ga.data(), 0.5f, 1, 1);
  step = 0;
  ApplyHeldUpdate(sgd, b.data(), nullptr, nullptr, ga.data(), 0.5f, 1, 7, 3.0f, &step);
  EXPECT_EQ(a[0], b[0]);
  ApplyHeldUpdate(sgd, b.data(), nullptr, nullptr, ga.data(), 0.5f, 1, 0, 1.0f, &step);
  EXPECT_EQ(b[0], 1.0f - 2 * 0.25f * 4.0f);
  OptimizerConfig adam;
  adam.kind = OptimizerKind::kAdam;
  std::vector<float> m = {0}, v = {0}, wa = {0};
  step = 10;
  ApplyHeldUpdate(adam, wa.data(), m.data(), v.data(), ga.data(), 1.0f, 1, 4, 1.0f, &step);
  EXPECT_EQ(step, 14);
  // A count beyond the bound is applied as kMaxHeldSteps steps.
  step = 0;
  ApplyHeldUpdate(c, w3.data(), h3.data(), nullptr, g3.data(), 0.5f, 2, 1u << 30, 1.0f, &step);
  EXPECT_EQ(step, kMaxHeldSteps);
}

TEST(OptimizerTest, AHeldSumOfNoisyGradientsGrowsTheAccumulatorByTheirSquares) {
  // Two pushes of 3 and -1 arrive as one sum 2: their squares sum to 10, the sum's square is 4,
  // and spread = 2 * 10 / 4 = 5 makes the accumulator grow by the 10 the pushes would have
  // added (times scale^2), where the mean alone would add 2.
  OptimizerConfig c;
  for (OptimizerKind kind : {OptimizerKind::kAdagrad, OptimizerKind::kFtrl}) {
    c.kind = kind;
    std::vector<float> w = {0}, state = {0, 0}, g = {2};
    int64_t step = 0;
    ApplyHeldUpdate(c, w.data(), state.data(), state.data() + 1, g.data(), 0.5f, 1, 2, 5.0f, &step);
    const float squares = kind == OptimizerKind::kAdagrad ? state[0] : state[1];
    EXPECT_NEAR(squares, 10 * 0.25f, 1e-6);
    std::vector<float> w_mean = {0}, state_mean = {0, 0};
    ApplyHeldUpdate(c, w_mean.data(), state_mean.data(), state_mean.data() + 1, g.data(), 0.5f, 1,
                    2, 1.0f, &step);
    EXPECT_NEAR(kind == OptimizerKind::kAdagrad ? state_mean[0] : state_mean[1], 2 * 0.25f, 1e-6);
    // A larger accumulator: a shorter move.
    EXPECT_LT(std::abs(w[0]), std::abs(w_mean[0]));
  }
}

TEST(OptimizerTest, AdamFirstStepMovesByTheLearningRate) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = 0.01f;
  std::vector<float> w = {1, 1}, state(4, 0.0f), g = {3, -0.5f};
  ApplyUpdate(c, w.data(), state.data(), g.data(), 1.0f, 2, 1);
  EXPECT_NEAR(w[0], 0.99f, 1e-6);
  EXPECT_NEAR(w[1], 1.01f, 1e-6);
}

// FTRL-Proximal in double precision, straight from its definition.
struct FtrlReference {
  double alpha, beta, l1, l2, z = 0, n = 0, w = 0;
  void Step(double g) {
    const double sigma = (std::sqrt(n + g * g) - std::sqrt(n)) / alpha;
    z += g - sigma * w;
    n += g * g;
    w = std::abs(z) <= l1 ? 0.0
                          : -(z - std::copysign(l1, z)) / ((beta + std::sqrt(n)) / alpha + l2);
  }
};

TEST(OptimizerTest, FtrlMatchesItsDefinitionOnAQuadratic) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kFtrl;
  c.learning_rate = 0.5f;
  c.ftrl_beta = 1.0f;
  c.l1 = 0.01f;
  c.l2 = 0.1f;
  ASSERT_EQ(StateFloatsPerWeight(c.kind), 2);
  FtrlReference ref{0.5, 1.0, 0.01, 0.1};
  std::vector<float> w = {0}, state = {0, 0};
  for (int step = 1; step <= 200; ++step) {
    // f(w) = (w - 3)^2 / 2, gradient w - 3, given as a sum over 4 examples.
    const float g_sum = 4 * (w[0] - 3);
    ref.Step(ref.w - 3);
    ApplyUpdate(c, w.data(), state.data(), &g_sum, 0.25f, 1, step);
    ASSERT_NEAR(w[0], ref.w, 1e-4) << "step " << step;
  }
  // The minimiser of the regularised objective is a little below 3.
  EXPECT_GT(w[0], 2.5f);
  EXPECT_LT(w[0], 3.0f);
}

TEST(OptimizerTest, FtrlL1KeepsWeakWeightsExactlyZero) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kFtrl;
  c.learning_rate = 0.1f;
  c.l1 = 1.0f;
  std::vector<float> w = {0, 0}, state(4, 0.0f), g = {0.2f, 5.0f};
  for (int step = 1; step <= 3; ++step) {
    ApplyUpdate(c, w.data(), state.data(), g.data(), 1.0f, 2, step);
  }
  EXPECT_EQ(w[0], 0.0f);  // |z| = 0.6 stays inside the L1 ball
  EXPECT_LT(w[1], 0.0f);
}

}  // namespace
}  // namespace syncline
