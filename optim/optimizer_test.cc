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
