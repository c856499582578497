#include "privacy/distributed_dp.h"

#include <cmath>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "privacy/dp_random.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

// The Poisson sampler behind the Skellam noise: its mean and variance are lambda, from the
// multiplication method's small lambdas to the transformed rejection's 1e12 (where a
// log-density through lgamma would have lost the digits the acceptance test needs).
TEST(DistributedDpTest, PoissonDrawsHaveTheirMeanAndVariance) {
  constexpr int kDraws = 200000;
  for (double lambda : {0.7, 3.5, 40.0, 1e6, 1e12}) {
    DpRandom random(DpKeyFromSeed(11), DpStream::kClientNoise, {0, 0});
    double sum = 0, squares = 0;
    for (int i = 0; i < kDraws; ++i) {
      const double k = static_cast<double>(random.Poisson(lambda)) - lambda;
      sum += k;
      squares += k * k;
    }
    const double mean = sum / kDraws;
    const double variance = squares / kDraws - mean * mean;
    // 5 standard errors of the mean; the variance's sampling error is ~0.3%.
    EXPECT_NEAR(mean, 0, 5 * std::sqrt(lambda / kDraws)) << lambda;
    EXPECT_NEAR(variance / lambda, 1, 0.02) << lambda;
  }
}

TEST(DistributedDpTest, StochasticRoundingIsUnbiased) {
  DpRandom random(DpKeyFromSeed(12), DpStream::kRounding, {0, 0});
  constexpr int kDraws = 400000;
  for (double x : {0.3, -2.85, 1e6 + 0.125}) {
    double sum = 0;
    for (int i = 0; i < kDraws; ++i) sum += static_cast<double>(random.StochasticRound(x)) - x;
    const double f = x - std::floor(x);
    EXPECT_NEAR(sum / kDraws, 0, 5 * std::sqrt(f * (1 - f) / kDraws)) << x;
  }
}

// Each client adds variance (z D)^2 / t: the sum of t clients' shares has the target variance
// (z D)^2 within 2% over 10^5 coordinates, and the sum of k > t clients' more, k / t times it.
TEST(DistributedDpTest, SummedSharesCarryTheTargetVariance) {
  const DistributedDpParams p{.clip = 1, .noise_multiplier = 1.3, .clients = 5, .threshold = 3};
  constexpr size_t kCoordinates = 100000;
  auto codec = DistributedDpCodec::Create(p, kCoordinates);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const double target = std::pow(p.noise_multiplier * codec->sensitivity(), 2);
  EXPECT_DOUBLE_EQ(codec->client_variance() * p.threshold, target);
  const std::vector<float> zero(kCoordinates, 0.0f);
  std::vector<uint32_t> sum(kCoordinates, 0);
  for (int client = 1; client <= 5; ++client) {
    DpRandom noise(DpKeyFromSeed(13), DpStream::kClientNoise, {static_cast<uint64_t>(client), 0});
    auto share = codec->Encode(zero, noise);
    ASSERT_TRUE(share.ok()) << share.status();
    for (size_t i = 0; i < kCoordinates; ++i) sum[i] += (*share)[i];
    if (client == 3 || client == 5) {
      double squares = 0;
      for (uint32_t v : sum) squares += std::pow(static_cast<double>(static_cast<int32_t>(v)), 2);
      EXPECT_NEAR(squares / kCoordinates / (target * client / 3), 1, 0.02) << client;
      // On the real scale: z D / s per t clients, at least z C.
      EXPECT_GE(codec->SumStddev(3), p.noise_multiplier * p.clip);
      EXPECT_LE(codec->SumStddev(3), p.noise_multiplier * p.clip * 1.01);
    }
  }
}

// Clients' values with the noise of none: D is a power of two in [2^16, 2^20], with W values
// and 12 standard deviations of the noise inside a signed 32-bit sum.
TEST(DistributedDpTest, TheScaleFitsTheModulusOrIsRefused) {
  auto d =
      DistributedDpSensitivity({.clip = 1, .noise_multiplier = 1, .clients = 10, .threshold = 6});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, std::ldexp(1.0, 20));
  d = DistributedDpSensitivity({.clip = 1, .noise_multiplier = 20, .clients = 200, .threshold = 2});
  ASSERT_TRUE(d.ok());
  EXPECT_LT(*d * (200 + 12 * 20 * 10), std::ldexp(1.0, 31));
  EXPECT_GE(*d, std::ldexp(1.0, 16));
  d = DistributedDpSensitivity(
      {.clip = 1, .noise_multiplier = 500, .clients = 255, .threshold = 2});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.status().message(), HasSubstr("255 clients and noise multiplier 500"));
  EXPECT_THAT(DistributedDpCodec::Create({}, kDdpMaxCoordinates + 1).status().message(),
              HasSubstr("1048577 coordinates"));
  auto codec = DistributedDpCodec::Create({.clip = 1, .noise_multiplier = 1}, 2);
  ASSERT_TRUE(codec.ok());
  DpRandom noise(DpKeyFromSeed(1), DpStream::kClientNoise, {0, 0});
  const std::vector<float> unclipped = {1.0f, 1.0f};
  EXPECT_THAT(codec->Encode(unclipped, noise).status().message(), HasSubstr("above the clip 1"));
}

}  // namespace
}  // namespace syncline
