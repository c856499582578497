#include "compression/topk_select.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "compression/half.h"

namespace syncline::compression_internal {
namespace {

// The definition, by sorting: largest key first, lower index first among equal keys.
std::vector<uint64_t> Reference(const std::vector<float>& v, size_t k) {
  std::vector<uint64_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint64_t a, uint64_t b) { return MagnitudeKey(v[a]) > MagnitudeKey(v[b]); });
  order.resize(std::min(k, v.size()));
  std::sort(order.begin(), order.end());
  return order;
}

struct Case {
  const char* name;
  std::vector<float> values;
};

std::vector<Case> Cases(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::cauchy_distribution<float> cauchy;
  std::uniform_int_distribution<int> small(-2, 2);
  std::vector<Case> cases;
  auto add = [&](const char* name, auto draw) {
    std::vector<float> v(n);
    for (float& x : v) x = draw();
    cases.push_back({name, std::move(v)});
  };
  add("normal", [&] { return normal(rng); });
  add("cauchy", [&] { return cauchy(rng); });
  add("five values", [&] { return static_cast<float>(small(rng)); });
  add("all equal", [] { return -3.0f; });
  add("mostly zero", [&] { return rng() % 200 == 0 ? normal(rng) : 0.0f; });
  add("specials", [&] {
    switch (rng() % 50) {
      case 0:
        return NAN;
      case 1:
        return -INFINITY;
      case 2:
        return -0.0f;
      default:
        return normal(rng);
    }
  });
  return cases;
}

TEST(SelectTopKTest, BothMethodsMatchTheDefinition) {
  for (const size_t n : {size_t{1}, size_t{10}, size_t{1000}, size_t{1} << 17}) {
    for (const Case& c : Cases(n, n)) {
      for (const double ratio : {0.0, 0.001, 0.01, 0.1, 0.5, 1.0}) {
        const size_t k = static_cast<size_t>(std::ceil(ratio * static_cast<double>(n)));
        const std::vector<uint64_t> expected = Reference(c.values, k);
        for (const TopKMethod method : {TopKMethod::kExact, TopKMethod::kSampled}) {
          std::vector<uint64_t> got;
          SelectTopK(c.values, k, method, &got);
          ASSERT_EQ(got, expected)
              << c.name << " n=" << n << " k=" << k << " method=" << static_cast<int>(method);
        }
      }
    }
  }
}

TEST(SelectTopKTest, SampledThresholdNeedsOnePassOnOrdinaryGradients) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> v(size_t{1} << 20);
  for (float& x : v) x = normal(rng);
  for (const double ratio : {0.001, 0.01, 0.1}) {
    const size_t k = static_cast<size_t>(ratio * static_cast<double>(v.size()));
    std::vector<uint64_t> sampled, exact;
    TopKTrace trace;
    SelectTopK(v, k, TopKMethod::kSampled, &sampled, &trace);
    SelectTopK(v, k, TopKMethod::kExact, &exact);
    EXPECT_EQ(sampled, exact);
    EXPECT_FALSE(trace.used_exact) << ratio;
    EXPECT_EQ(trace.passes, 1) << ratio;
  }
}

TEST(SelectTopKTest, SampledFallsBackToExactOnTiesAtTheThreshold) {
  std::vector<float> v(size_t{1} << 17, 0.0f);
  for (size_t i = 0; i < v.size(); i += 500) v[i] = 1.0f;  // 0.2% nonzero; k is 1%
  const size_t k = v.size() / 100;
  std::vector<uint64_t> sampled;
  TopKTrace trace;
  SelectTopK(v, k, TopKMethod::kSampled, &sampled, &trace);
  EXPECT_TRUE(trace.used_exact);
  EXPECT_EQ(sampled, Reference(v, k));
}

}  // namespace
}  // namespace syncline::compression_internal
