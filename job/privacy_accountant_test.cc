#include "job/privacy_accountant.h"

#include <cmath>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

double Epsilon(double q, double z, int64_t steps, double delta, RdpConversion c) {
  auto e = ComputeEpsilon(
      DpSgdParameters{.sampling_rate = q, .noise_multiplier = z, .steps = steps, .delta = delta},
      c);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? e->epsilon : -1;
}

TEST(PrivacyAccountantTest, OrderGridIsDpAccountingsDefault) {
  const std::vector<double>& orders = DefaultRdpOrders();
  ASSERT_EQ(orders.size(), 99u + 53u + 4u);
  EXPECT_DOUBLE_EQ(orders.front(), 1.1);
  EXPECT_DOUBLE_EQ(orders[98], 10.9);
  EXPECT_DOUBLE_EQ(orders[99], 11);
  EXPECT_DOUBLE_EQ(orders[151], 63);
  EXPECT_DOUBLE_EQ(orders.back(), 1024);
}

// Abadi et al. 2016, Sec. 3.1: q = 0.01, sigma = 4, 10,000 steps, delta = 1e-5 gives
// epsilon 1.26 with the moments accountant, which the classic RDP conversion reproduces.
TEST(PrivacyAccountantTest, AbadiEtAlSection31) {
  EXPECT_NEAR(Epsilon(0.01, 4, 10000, 1e-5, RdpConversion::kClassic), 1.26, 0.005);
  // The tighter conversion spends less for the same steps.
  EXPECT_NEAR(Epsilon(0.01, 4, 10000, 1e-5, RdpConversion::kTight), 1.0355, 0.005);
}

// TF-Privacy's MNIST tutorial: noise 1.1, batches of 256 of 60,000 examples, 60 epochs
// (14,062 steps), delta 1e-5: epsilon 3.01 as the tutorial printed it (classic conversion),
// 2.597 with dp-accounting's current one.
TEST(PrivacyAccountantTest, TfPrivacyTutorial) {
  const double q = 256.0 / 60000;
  const int64_t steps = 60 * 60000 / 256;
  EXPECT_NEAR(Epsilon(q, 1.1, steps, 1e-5, RdpConversion::kClassic), 3.008, 0.01);
  EXPECT_NEAR(Epsilon(q, 1.1, steps, 1e-5, RdpConversion::kTight), 2.597, 0.01);
}

// Figures from Google's dp-accounting 0.6.0 (RdpAccountant with PoissonSampledDpEvent, and
// its classic bound over the same orders), delta 1e-5: ours within 0.1%.
TEST(PrivacyAccountantTest, MatchesDpAccountingOverAGrid) {
  struct Row {
    double q, z;
    int64_t steps;
    double tight, classic;
  };
  const Row rows[] = {
      {0.001, 0.6, 1, 1.8895090697487273, 2.4392287403878457},
      {0.001, 0.6, 10000, 3.321954943128561, 4.015550093878959},
      {0.001, 1.0, 100, 0.6360525446218313, 0.9131649267459577},
      {0.001, 5.0, 10000, 0.07086066620056532, 0.09794269388165724},
      {0.01, 0.6, 100, 4.831306715068717, 5.689519839179481},
      {0.01, 1.0, 10000, 6.712756664482653, 7.428785864732357},
      {0.01, 2.0, 1, 0.19357815314381346, 0.3212804026831564},
      {0.01, 5.0, 10000, 0.806510326887949, 0.9947034861695627},
      {0.1, 0.6, 10000, 933.6000672927834, 935.2454108464444},
      {0.1, 1.0, 100, 7.903850223578231, 8.800377770298908},
      {0.1, 2.0, 10000, 38.488913766486974, 39.87520812760686},
      {0.1, 5.0, 1, 0.11996038105753491, 0.20278547605545236},
      {0.5, 1.0, 1, 3.8935758858888048, 4.470353509778883},
      {0.5, 2.0, 100, 15.725339864622036, 16.73942554963609},
      // At q = 0.5 and sigma 5 the fractional series of the orders below 2 do not converge
      // (both libraries give those orders up).
      {0.5, 5.0, 100, 4.866435609334787, 5.460644758614196},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(testing::Message() << "q " << r.q << " z " << r.z << " steps " << r.steps);
    EXPECT_NEAR(Epsilon(r.q, r.z, r.steps, 1e-5, RdpConversion::kTight), r.tight, 1e-3 * r.tight);
    EXPECT_NEAR(Epsilon(r.q, r.z, r.steps, 1e-5, RdpConversion::kClassic), r.classic,
                1e-3 * r.classic);
  }
}

// One step at q = 1 is the Gaussian mechanism: its RDP is alpha / (2 z^2) at every order, and
// the epsilon RDP gives can only be above the mechanism's exact one (Balle and Wang 2018), and
// not by much.
TEST(PrivacyAccountantTest, OneFullStepIsTheGaussianMechanism) {
  for (double z : {0.8, 1.0, 2.0, 5.0}) {
    SCOPED_TRACE(testing::Message() << "z " << z);
    for (double order : {1.5, 2.0, 7.0, 32.0}) {
      EXPECT_DOUBLE_EQ(SampledGaussianRdp(1, z, order), order / (2 * z * z));
    }
    const double exact = GaussianMechanismEpsilon(z, 1e-5);
    EXPECT_NEAR(GaussianMechanismDelta(z, exact), 1e-5, 1e-9);
    const double tight = Epsilon(1, z, 1, 1e-5, RdpConversion::kTight);
    const double classic = Epsilon(1, z, 1, 1e-5, RdpConversion::kClassic);
    EXPECT_GE(tight, exact);
    EXPECT_LE(tight, 1.25 * exact);
    EXPECT_GT(classic, tight);
  }
  // dp-accounting: z = 1, one step at q = 1, delta 1e-5.
  EXPECT_NEAR(Epsilon(1, 1, 1, 1e-5, RdpConversion::kTight), 4.728507067217623, 1e-6);
}

// A sampled step costs less than a full one, and the cost grows with the steps.
TEST(PrivacyAccountantTest, EpsilonGrowsWithStepsAndSampling) {
  auto a = RdpAccountant::Create(0.01, 1.1, 1e-5, RdpConversion::kTight);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->Spent(0).epsilon, 0);
  double last = 0;
  for (int64_t t : {1, 10, 100, 1000, 10000}) {
    const double e = a->Spent(t).epsilon;
    EXPECT_GT(e, last);
    last = e;
  }
  EXPECT_LT(Epsilon(0.01, 1.1, 100, 1e-5, RdpConversion::kTight),
            Epsilon(0.02, 1.1, 100, 1e-5, RdpConversion::kTight));
}

TEST(PrivacyAccountantTest, CalibrationRoundTrips) {
  for (const auto& [q, steps, target] :
       {std::tuple{0.01, int64_t{10000}, 1.26}, std::tuple{256.0 / 60000, int64_t{14062}, 3.0},
        std::tuple{0.5, int64_t{30}, 8.0}, std::tuple{0.004, int64_t{2000}, 1.0}}) {
    for (RdpConversion c : {RdpConversion::kTight, RdpConversion::kClassic}) {
      SCOPED_TRACE(testing::Message() << "q " << q << " steps " << steps << " eps " << target);
      DpSgdParameters p{.sampling_rate = q, .steps = steps, .delta = 1e-5};
      auto z = CalibrateNoiseMultiplier(p, target, c);
      ASSERT_TRUE(z.ok()) << z.status();
      const double at = Epsilon(q, *z, steps, 1e-5, c);
      EXPECT_LE(at, target);
      EXPECT_GT(at, target * 0.999);
      EXPECT_GT(Epsilon(q, *z * (1 - 1e-5), steps, 1e-5, c), at);
    }
  }
  // Abadi et al.'s sigma back from their epsilon.
  auto z = CalibrateNoiseMultiplier({.sampling_rate = 0.01, .steps = 10000, .delta = 1e-5},
                                    1.2585747412527737, RdpConversion::kClassic);
  ASSERT_TRUE(z.ok());
  EXPECT_NEAR(*z, 4.0, 1e-4);
}

// The Skellam mechanism of distributed DP (Agarwal, Kairouz and Liu 2021, Theorem 3.5): its RDP
// is the Gaussian's alpha / (2 z^2) plus a term that vanishes at large integer sensitivity
// (here D >= 2^16): at most 1e-6 of it over the integer orders, none at fractional ones; a
// sampling rate below 1 is refused (no amplification against a server that sees the picks);
// calibration round-trips through it.
TEST(PrivacyAccountantTest, SkellamIsTheGaussianPlusAVanishingTerm) {
  for (double z : {0.5, 1.0, 4.0}) {
    for (double order : {2.0, 7.0, 32.0, 1024.0}) {
      const double gaussian = order / (2 * z * z);
      const double skellam = SkellamRdp(z, order);
      EXPECT_GT(skellam, gaussian) << z << " " << order;
      EXPECT_LT(skellam, gaussian * (1 + 1e-6)) << z << " " << order;
      EXPECT_DOUBLE_EQ(SampledGaussianRdp(1, z, order), gaussian);
    }
    EXPECT_TRUE(std::isinf(SkellamRdp(z, 2.5)));
  }
  EXPECT_THAT(RdpAccountant::Create(0.5, 1, 1e-5, RdpConversion::kTight, DpNoiseMechanism::kSkellam)
                  .status()
                  .message(),
              HasSubstr("without amplification"));
  for (double target : {1.0, 3.0, 8.0}) {
    DpSgdParameters p{
        .sampling_rate = 1, .steps = 30, .delta = 1e-5, .mechanism = DpNoiseMechanism::kSkellam};
    auto z = CalibrateNoiseMultiplier(p, target, RdpConversion::kTight);
    ASSERT_TRUE(z.ok()) << z.status();
    p.noise_multiplier = *z;
    const double at = ComputeEpsilon(p, RdpConversion::kTight)->epsilon;
    EXPECT_LE(at, target);
    EXPECT_GT(at, target * 0.999);
    // Integer orders only, so never below the Gaussian mechanism's epsilon at the same z.
    p.mechanism = DpNoiseMechanism::kSampledGaussian;
    EXPECT_GE(at, ComputeEpsilon(p, RdpConversion::kTight)->epsilon);
  }
}

TEST(PrivacyAccountantTest, RefusesParametersOutOfRange) {
  auto bad = [](DpSgdParameters p) { return ComputeEpsilon(p, RdpConversion::kTight).status(); };
  EXPECT_THAT(bad({.sampling_rate = 0, .noise_multiplier = 1, .steps = 1}).message(),
              HasSubstr("sampling rate must be in (0, 1]"));
  EXPECT_THAT(bad({.sampling_rate = 1.5, .noise_multiplier = 1, .steps = 1}).message(),
              HasSubstr("sampling rate"));
  EXPECT_THAT(bad({.sampling_rate = 0.1, .noise_multiplier = 0, .steps = 1}).message(),
              HasSubstr("noise multiplier must be a positive number"));
  EXPECT_THAT(bad({.sampling_rate = 0.1, .noise_multiplier = 1, .steps = 1, .delta = 0}).message(),
              HasSubstr("delta must be in (0, 1)"));
  EXPECT_THAT(bad({.sampling_rate = 0.1, .noise_multiplier = 1, .steps = -1}).message(),
              HasSubstr("steps must be >= 0"));
  // The classic conversion never goes below log(1 / delta) / 1023 over the grid.
  auto hopeless = CalibrateNoiseMultiplier({.sampling_rate = 1, .steps = 1, .delta = 1e-5}, 1e-3,
                                           RdpConversion::kClassic);
  EXPECT_THAT(hopeless.status().message(), HasSubstr("no noise multiplier up to"));
  EXPECT_EQ(*ParseRdpConversion("rdp"), RdpConversion::kTight);
  EXPECT_EQ(*ParseRdpConversion("rdp-classic"), RdpConversion::kClassic);
  EXPECT_THAT(ParseRdpConversion("pld").status().message(), HasSubstr("rdp or rdp-classic"));
}

}  // namespace
}  // namespace syncline
