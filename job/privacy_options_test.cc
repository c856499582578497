#include "job/privacy_options.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/federated.h"
#include "optim/optimizer.h"
#include "privacy/dp_random.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

TEST(PrivacyOptionsTest, DpLevelsHaveTextForms) {
  for (DpLevel level : {DpLevel::kOff, DpLevel::kExample, DpLevel::kClient}) {
    EXPECT_EQ(*ParseDpLevel(DpLevelName(level)), level);
  }
  EXPECT_THAT(ParseDpLevel("user").status().message(), HasSubstr("off, example or client"));
}

TEST(PrivacyOptionsTest, ServerOptimizersHaveTextForms) {
  for (const char* text : {"sgd", "momentum:0.9", "momentum:0", "adagrad", "adam", "yogi",
                           "adam:0.01", "yogi:1e-05", "adagrad:0.1"}) {
    auto spec = ParseServerOptimizer(text);
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(ServerOptimizerName(*spec), text);
  }
  EXPECT_EQ(ParseServerOptimizer("adam")->tau, 1e-3);
  EXPECT_EQ(ParseServerOptimizer("momentum:0.5")->momentum, 0.5);
  for (const auto& [text, why] :
       {std::pair{"momentum", "momentum needs B"}, std::pair{"momentum:1", "momentum needs B"},
        std::pair{"sgd:1", "sgd takes no parameter"},
        std::pair{"adam:0", "TAU must be a number > 0"},
        std::pair{"adam: 1", "TAU must be a number > 0"}, std::pair{"lamb", "unknown rule"}}) {
    EXPECT_THAT(ParseServerOptimizer(text).status().message(), HasSubstr(why)) << text;
  }
}

// Each server rule of Reddi et al. 2021 on a round's pseudo-gradient g_t (the mean of the
// clients' deltas), computed here directly in double from its formula and compared with what
// the servers' tables apply (optim/optimizer.h through ServerOptimizerConfig) over a few
// rounds: m_t = b1 m + (1 - b1) g, v_t per rule, w -= lr m_hat / (sqrt(v_hat) + tau), with
// Adam's bias correction for adam and yogi; adagrad v += g^2, w -= lr g / (sqrt(v) + tau);
// momentum m = B m + g, w -= lr m.
TEST(PrivacyOptionsTest, ServerRulesMatchTheirFormulas) {
  const std::vector<std::vector<double>> rounds = {
      {0.5, -1.0, 2.0}, {0.4, -0.2, -3.0}, {-0.1, 0.3, 1.0}, {0.0, 2.5, -0.5}, {1.5, -1.5, 0.2}};
  const double lr = 0.05;
  for (const char* rule : {"sgd", "momentum:0.8", "adagrad:0.01", "adam:0.01", "yogi:0.01"}) {
    SCOPED_TRACE(rule);
    const ServerOptimizerSpec spec = *ParseServerOptimizer(rule);
    const OptimizerConfig config = ServerOptimizerConfig(spec, lr);
    EXPECT_EQ(config.learning_rate, static_cast<float>(lr));
    const size_t n = 3;
    std::vector<float> w = {1.0f, -2.0f, 0.5f};
    std::vector<float> state(StateFloatsPerWeight(config.kind) * n, 0.0f);
    std::vector<double> want(w.begin(), w.end()), m(n, 0), v(n, 0);
    const double b1 = 0.9, b2 = 0.99, tau = spec.tau;
    for (size_t t = 1; t <= rounds.size(); ++t) {
      const std::vector<double>& g = rounds[t - 1];
      // The servers get the sum over clients and a scale of 1 / clients: here 4 clients.
      std::vector<float> sum(n);
      for (size_t i = 0; i < n; ++i) sum[i] = static_cast<float>(4 * g[i]);
      ApplyUpdate(config, w.data(), state.empty() ? nullptr : state.data(), sum.data(), 0.25f, n,
                  static_cast<int64_t>(t));
      for (size_t i = 0; i < n; ++i) {
        switch (spec.kind) {
          case ServerOptimizerKind::kSgd:
            want[i] -= lr * g[i];
            break;
          case ServerOptimizerKind::kMomentum:
            m[i] = 0.8 * m[i] + g[i];
            want[i] -= lr * m[i];
            break;
          case ServerOptimizerKind::kAdagrad:
            v[i] += g[i] * g[i];
            want[i] -= lr * g[i] / (std::sqrt(v[i]) + tau);
            break;
          case ServerOptimizerKind::kAdam:
          case ServerOptimizerKind::kYogi: {
            m[i] = b1 * m[i] + (1 - b1) * g[i];
            const double g2 = g[i] * g[i];
            if (spec.kind == ServerOptimizerKind::kAdam) {
              v[i] = b2 * v[i] + (1 - b2) * g2;
            } else {
              v[i] -= (1 - b2) * g2 * (v[i] > g2 ? 1 : (v[i] < g2 ? -1 : 0));
            }
            const double m_hat = m[i] / (1 - std::pow(b1, t));
            const double v_hat = v[i] / (1 - std::pow(b2, t));
            want[i] -= lr * m_hat / (std::sqrt(v_hat) + tau);
            break;
          }
        }
      }
      for (size_t i = 0; i < n; ++i) {
        EXPECT_NEAR(w[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << "round " << t << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// DP-FedAvg's rounds: each client independently with probability q, drawn from the privacy
// key, the same on every node; a job without --dp client keeps PickClients.
TEST(RoundPickerTest, DpClientRoundsArePoissonSamples) {
  JobSpec spec;
  spec.workers = 40;
  spec.federated.participation = 0.25;
  spec.seed = 3;
  EXPECT_EQ(RoundPickerFor(spec).Pick(5), PickClients(3, 5, 40, 0.25));
  spec.privacy.level = DpLevel::kClient;
  spec.privacy.key = DpKeyHex(DpKeyFromSeed(9));
  const RoundPicker picker = RoundPickerFor(spec);
  double total = 0;
  std::vector<int> times(40, 0);
  std::set<size_t> sizes;
  constexpr int kRounds = 4000;
  for (int64_t r = 0; r < kRounds; ++r) {
    const std::vector<int> picked = picker.Pick(r);
    ASSERT_TRUE(std::is_sorted(picked.begin(), picked.end()));
    EXPECT_EQ(picked, RoundPickerFor(spec).Pick(r));  // another node's
    total += picked.size();
    sizes.insert(picked.size());
    for (int c : picked) ++times[c];
  }
  // 10 a round on average (standard error 0.04); the count itself varies.
  EXPECT_NEAR(total / kRounds, 10, 0.2);
  EXPECT_GT(sizes.size(), 5u);
  for (int c = 0; c < 40; ++c) EXPECT_NEAR(times[c] / double{kRounds}, 0.25, 0.035) << c;
  spec.privacy.key = DpKeyHex(DpKeyFromSeed(10));
  EXPECT_NE(RoundPickerFor(spec).Pick(0), picker.Pick(0));
}

}  // namespace
}  // namespace syncline
