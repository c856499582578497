#include "privacy/dp_random.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "privacy/dp_mechanism.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

TEST(DpRandomTest, AStreamIsItsKeyAndLabels) {
  const DpKey key = DpKeyFromSeed(7);
  DpRandom a(key, DpStream::kExampleNoise, {1, 2});
  DpRandom b(key, DpStream::kExampleNoise, {1, 2});
  DpRandom other_step(key, DpStream::kExampleNoise, {1, 3});
  DpRandom other_use(key, DpStream::kExampleSampling, {1, 2});
  DpRandom other_key(DpKeyFromSeed(8), DpStream::kExampleNoise, {1, 2});
  int same_step = 0, same_use = 0, same_key = 0;
  for (int i = 0; i < 1000; ++i) {  // across several 4 KiB blocks
    const uint64_t x = a.NextU64();
    EXPECT_EQ(x, b.NextU64());
    same_step += x == other_step.NextU64();
    same_use += x == other_use.NextU64();
    same_key += x == other_key.NextU64();
  }
  EXPECT_EQ(same_step + same_use + same_key, 0);
  EXPECT_NE(FreshDpKey(), FreshDpKey());
}

TEST(DpRandomTest, KeysHaveAHexForm) {
  const DpKey key = DpKeyFromSeed(1);
  const std::string hex = DpKeyHex(key);
  EXPECT_EQ(hex.size(), 64u);
  auto back = ParseDpKeyHex(hex);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, key);
  EXPECT_THAT(ParseDpKeyHex("abc").status().message(), HasSubstr("64 hex digits, not 3"));
  EXPECT_THAT(ParseDpKeyHex(std::string(64, 'G')).status().message(), HasSubstr("hex digits"));
}

// The noise the Gaussian mechanism adds: mean 0 and the standard deviation asked for, within
// 2% over 10^6 draws (the sampling error of the standard deviation is 0.07%).
TEST(DpRandomTest, GaussianNoiseHasItsStandardDeviation) {
  DpRandom random(DpKeyFromSeed(3), DpStream::kRoundNoise, {0, 0, 0});
  constexpr double kStddev = 3.5;
  std::vector<float> noise(1000000, 0.0f);
  random.AddGaussian(noise, kStddev);
  double sum = 0, squares = 0, fourth = 0;
  for (float v : noise) {
    sum += v;
    squares += static_cast<double>(v) * v;
    fourth += std::pow(static_cast<double>(v) / kStddev, 4);
  }
  const double n = noise.size();
  const double mean = sum / n;
  const double stddev = std::sqrt(squares / n - mean * mean);
  EXPECT_NEAR(mean, 0, 5 * kStddev / std::sqrt(n));
  EXPECT_NEAR(stddev, kStddev, 0.02 * kStddev);
  EXPECT_NEAR(stddev, kStddev, 0.003 * kStddev);
  EXPECT_NEAR(fourth / n, 3, 0.05);  // a normal's kurtosis
}

// Poisson sampling at rate q: sorted distinct indices below n, qn of them on average.
TEST(DpRandomTest, PoissonSampleMeanIsQN) {
  DpRandom random(DpKeyFromSeed(4), DpStream::kExampleSampling, {0, 0});
  constexpr uint32_t kN = 60000;
  constexpr double kQ = 256.0 / kN;
  constexpr int kDraws = 2000;
  double total = 0;
  std::vector<int> hits(kN, 0);
  for (int d = 0; d < kDraws; ++d) {
    const std::vector<uint32_t> s = random.PoissonSample(kN, kQ);
    ASSERT_TRUE(std::is_sorted(s.begin(), s.end()));
    ASSERT_EQ(std::adjacent_find(s.begin(), s.end()), s.end());
    ASSERT_TRUE(s.empty() || s.back() < kN);
    total += s.size();
    for (uint32_t i : s) ++hits[i];
  }
  // The mean of kDraws binomial(n, q) counts: standard error sqrt(nq(1-q)/draws) = 0.36.
  EXPECT_NEAR(total / kDraws, kN * kQ, 2.0);
  // No part of the range is favoured: the first and last tenths get their share.
  const double first = std::accumulate(hits.begin(), hits.begin() + kN / 10, 0.0);
  const double last = std::accumulate(hits.end() - kN / 10, hits.end(), 0.0);
  EXPECT_NEAR(first / total, 0.1, 0.005);
  EXPECT_NEAR(last / total, 0.1, 0.005);
  EXPECT_EQ(random.PoissonSample(10, 1).size(), 10u);
  EXPECT_TRUE(random.PoissonSample(10, 0).empty());
  EXPECT_TRUE(random.PoissonSample(0, 0.5).empty());
}

TEST(DpMechanismTest, ClippingBoundsTheNorm) {
  DpRandom random(DpKeyFromSeed(5), DpStream::kExampleNoise, {9});
  for (double clip : {0.1, 1.0, 4.0}) {
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<float> a(50, 0.0f), b(3, 0.0f);
      random.AddGaussian(a, trial % 7);
      random.AddGaussian(b, 2);
      const std::vector<float> before_a = a;
      const double norm = ClipToNorm({std::span<float>(a), std::span<float>(b)}, clip);
      const double after = L2Norm({std::span<const float>(a), std::span<const float>(b)});
      EXPECT_LE(after, clip * (1 + 1e-6));
      if (norm <= clip) {
        EXPECT_EQ(a, before_a);  // within the norm: untouched
      } else {
        EXPECT_NEAR(after, clip, 1e-5 * clip);  // scaled, not truncated further
      }
    }
  }
  EXPECT_EQ(ClipFactor(std::nan(""), 1), 0);
  EXPECT_EQ(ClipFactor(INFINITY, 1), 0);
}

}  // namespace
}  // namespace syncline
