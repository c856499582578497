#include "ps/optimizer.h"

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
  c.kind = wire::OptimizerKind::ADAGRAD;
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
  c.kind = wire::OptimizerKind::ADAM;
  c.learning_rate = 0.01f;
  std::vector<float> w = {1, 1}, state(4, 0.0f), g = {3, -0.5f};
  ApplyUpdate(c, w.data(), state.data(), g.data(), 1.0f, 2, 1);
  EXPECT_NEAR(w[0], 0.99f, 1e-6);
  EXPECT_NEAR(w[1], 1.01f, 1e-6);
}

TEST(OptimizerTest, ParsesNames) {
  EXPECT_EQ(*ParseOptimizer("adam"), wire::OptimizerKind::ADAM);
  EXPECT_FALSE(ParseOptimizer("rmsprop").ok());
}

}  // namespace
}  // namespace syncline
