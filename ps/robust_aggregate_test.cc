#include "ps/robust_aggregate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::HasSubstr;

AggregateRule Rule(const std::string& text) {
  absl::StatusOr<AggregateRule> rule = ParseAggregateRule(text);
  EXPECT_TRUE(rule.ok()) << text << ": " << rule.status();
  return rule.ok() ? *rule : AggregateRule{};
}

// The updates as Aggregate takes them.
std::vector<std::span<const float>> Spans(const std::vector<std::vector<float>>& updates) {
  return {updates.begin(), updates.end()};
}

struct Result {
  absl::Status status;
  std::vector<float> out;
  std::vector<int> selected;
};

Result Combine(const AggregateRule& rule, const std::vector<std::vector<float>>& updates,
               std::vector<float> weights = {}) {
  Result result;
  result.out.assign(updates.empty() ? 0 : updates[0].size(), -12345.0f);
  AggregateChoice choice;
  choice.selected = {99, 98};  // Aggregate replaces whatever was there.
  const std::vector<std::span<const float>> spans = Spans(updates);
  result.status = Aggregate(rule, spans, weights, result.out, &choice);
  result.selected = choice.selected;
  return result;
}

std::vector<std::vector<float>> RandomUpdates(int n, size_t d, std::mt19937& rng, float lo = -1,
                                              float hi = 1) {
  std::uniform_real_distribution<float> value(lo, hi);
  std::vector<std::vector<float>> updates(n, std::vector<float>(d));
  for (auto& u : updates) {
    for (float& v : u) v = value(rng);
  }
  return updates;
}

// ---- Direct computations, in double, with nothing shared with the library. ----

std::vector<float> Column(const std::vector<std::vector<float>>& updates,
                          const std::vector<int>& rows, size_t j) {
  std::vector<float> column;
  for (int r : rows) column.push_back(updates[r][j]);
  std::sort(column.begin(), column.end());
  return column;
}

std::vector<int> AllRows(int n) {
  std::vector<int> rows(n);
  std::iota(rows.begin(), rows.end(), 0);
  return rows;
}

std::vector<float> DirectMean(const std::vector<std::vector<float>>& updates,
                              const std::vector<int>& rows) {
  std::vector<float> out(updates[0].size());
  for (size_t j = 0; j < out.size(); ++j) {
    double sum = 0;
    for (int r : rows) sum += updates[r][j];
    out[j] = static_cast<float>(sum / rows.size());
  }
  return out;
}

std::vector<float> DirectMedian(const std::vector<std::vector<float>>& updates) {
  const size_t n = updates.size();
  std::vector<float> out(updates[0].size());
  for (size_t j = 0; j < out.size(); ++j) {
    const std::vector<float> c = Column(updates, AllRows(n), j);
    out[j] =
        n % 2 == 1 ? c[n / 2] : static_cast<float>((double{c[n / 2 - 1]} + double{c[n / 2]}) / 2);
  }
  return out;
}

std::vector<float> DirectTrimmedMean(const std::vector<std::vector<float>>& updates, size_t t) {
  const size_t n = updates.size();
  std::vector<float> out(updates[0].size());
  for (size_t j = 0; j < out.size(); ++j) {
    const std::vector<float> c = Column(updates, AllRows(n), j);
    double sum = 0;
    for (size_t i = t; i < n - t; ++i) sum += c[i];
    out[j] = static_cast<float>(sum / static_cast<double>(n - 2 * t));
  }
  return out;
}

double Distance2(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t j = 0; j < a.size(); ++j) sum += (double{a[j]} - b[j]) * (double{a[j]} - b[j]);
  return sum;
}

// Krum scores of `rows` among themselves, each the sum of its k smallest distances.
std::vector<double> DirectScores(const std::vector<std::vector<float>>& updates,
                                 const std::vector<int>& rows, size_t k) {
  std::vector<double> scores;
  for (int i : rows) {
    std::vector<double> d;
    for (int j : rows) {
      if (j != i) d.push_back(Distance2(updates[i], updates[j]));
    }
    std::sort(d.begin(), d.end());
    scores.push_back(std::accumulate(d.begin(), d.begin() + std::min(k, d.size()), 0.0));
  }
  return scores;
}

// `rows` ordered by score, ties by position.
std::vector<int> ByScore(const std::vector<int>& rows, const std::vector<double>& scores) {
  std::vector<int> order(rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] < scores[b]; });
  std::vector<int> sorted;
  for (int o : order) sorted.push_back(rows[o]);
  return sorted;
}

struct DirectBulyanResult {
  std::vector<int> selected;
  std::vector<float> out;
};

DirectBulyanResult DirectBulyan(const std::vector<std::vector<float>>& updates, int f) {
  const int n = static_cast<int>(updates.size());
  DirectBulyanResult result;
  std::vector<int> remaining = AllRows(n);
  while (static_cast<int>(result.selected.size()) < n - 2 * f) {
    const int r = static_cast<int>(remaining.size());
    const int k = std::min(std::max(r - f - 2, 1), r - 1);
    const int best = ByScore(remaining, DirectScores(updates, remaining, k))[0];
    result.selected.push_back(best);
    remaining.erase(std::find(remaining.begin(), remaining.end(), best));
  }
  const size_t beta = result.selected.size() - 2 * f;
  for (size_t j = 0; j < updates[0].size(); ++j) {
    std::vector<float> c = Column(updates, result.selected, j);
    const size_t m = c.size();
    const double median = m % 2 == 1 ? c[m / 2] : (double{c[m / 2 - 1]} + c[m / 2]) / 2;
    // c is ascending, so a stable sort by distance puts the smaller of two equally close first.
    std::stable_sort(c.begin(), c.end(), [median](float a, float b) {
      return std::abs(a - median) < std::abs(b - median);
    });
    double sum = 0;
    for (size_t i = 0; i < beta; ++i) sum += c[i];
    result.out.push_back(static_cast<float>(sum / static_cast<double>(beta)));
  }
  return result;
}

void ExpectNear(const std::vector<float>& actual, const std::vector<float>& expected,
                const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t j = 0; j < actual.size(); ++j) {
    ASSERT_NEAR(actual[j], expected[j], 1e-6 * (1 + std::abs(expected[j])))
        << what << ", coordinate " << j;
  }
}

// ---- Text forms and bounds. ----

TEST(ParseAggregateRuleTest, RoundTripsEveryRule) {
  for (const std::string text : {"mean", "median", "trimmed-mean:0", "trimmed-mean:0.2",
                                 "trimmed-mean:0.125", "trimmed-mean:0.4999", "krum:0", "krum:2",
                                 "multi-krum:0:1", "multi-krum:2:5", "bulyan:0", "bulyan:3"}) {
    absl::StatusOr<AggregateRule> rule = ParseAggregateRule(text);
    ASSERT_TRUE(rule.ok()) << text << ": " << rule.status();
    EXPECT_EQ(AggregateRuleName(*rule), text);
    EXPECT_EQ(*ParseAggregateRule(AggregateRuleName(*rule)), *rule) << text;
  }
  EXPECT_EQ(Rule("mean"), AggregateRule{});
  EXPECT_EQ(Rule("trimmed-mean:0.2"), (AggregateRule{AggregateKind::kTrimmedMean, 0.2, 0, 1}));
  EXPECT_EQ(Rule("krum:2"), (AggregateRule{AggregateKind::kKrum, 0, 2, 1}));
  EXPECT_EQ(Rule("multi-krum:2:5"), (AggregateRule{AggregateKind::kMultiKrum, 0, 2, 5}));
  EXPECT_EQ(Rule("bulyan:1"), (AggregateRule{AggregateKind::kBulyan, 0, 1, 1}));
  // Other spellings of the same number print in the shortest form.
  EXPECT_EQ(AggregateRuleName(Rule("trimmed-mean:2e-1")), "trimmed-mean:0.2");
  const AggregateRule third{AggregateKind::kTrimmedMean, 1.0 / 3, 0, 1};
  EXPECT_EQ(Rule(AggregateRuleName(third)), third);
}

TEST(ParseAggregateRuleTest, RefusesBadTexts) {
  for (const std::string text : {"krum",
                                 "krum:-1",
                                 "trimmed-mean:0.5",
                                 "multi-krum:1",
                                 "bogus",
                                 "",
                                 "mean:1",
                                 "median:",
                                 "krum:",
                                 "krum:1:2",
                                 "krum:+1",
                                 "krum: 1",
                                 "krum:1.5",
                                 "krum:99999999999",
                                 "Krum:1",
                                 "trimmed-mean",
                                 "trimmed-mean:",
                                 "trimmed-mean:-0.1",
                                 "trimmed-mean:nan",
                                 "trimmed-mean:inf",
                                 "trimmed-mean: 0.2",
                                 "trimmed-mean:0.2:1",
                                 "multi-krum:1:0",
                                 "multi-krum:1:-2",
                                 "multi-krum:-1:2",
                                 "multi-krum:1:2:3",
                                 "bulyan",
                                 "bulyan:x"}) {
    absl::StatusOr<AggregateRule> rule = ParseAggregateRule(text);
    ASSERT_FALSE(rule.ok()) << "'" << text << "' parsed as " << AggregateRuleName(*rule);
    EXPECT_EQ(rule.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(rule.status().message(), HasSubstr("\"" + text + "\"")) << text;
    EXPECT_THAT(rule.status().message(), HasSubstr("expected mean, median, trimmed-mean:B"));
  }
}

TEST(CheckAggregateRuleTest, RefusesTooFewUpdatesNamingTheBound) {
  struct Case {
    std::string rule;
    int refused;  // the largest n refused
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {"mean", 0, "mean needs at least 1 update, has 0"},
           {"median", 0, "median needs at least 1 update, has 0"},
           {"trimmed-mean:0.4", 0, "trimmed-mean:0.4 needs at least 1 update, has 0"},
           {"krum:0", 2, "krum:0 needs at least 2f+3 = 3 updates, has 2"},
           {"krum:2", 6, "krum:2 needs at least 2f+3 = 7 updates, has 6"},
           {"multi-krum:2:1", 6, "multi-krum:2:1 needs at least 2f+3 = 7 updates, has 6"},
           {"multi-krum:1:5", 5, "multi-krum:1:5 needs at least m+f = 6 updates, has 5"},
           {"bulyan:0", 2, "bulyan:0 needs at least 4f+3 = 3 updates, has 2"},
           {"bulyan:2", 10, "bulyan:2 needs at least 4f+3 = 11 updates, has 10"},
       }) {
    const AggregateRule rule = Rule(c.rule);
    const absl::Status refused = CheckAggregateRule(rule, c.refused);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << c.rule;
    EXPECT_EQ(refused.message(), c.message);
    EXPECT_FALSE(CheckAggregateRule(rule, -1).ok()) << c.rule;
    EXPECT_TRUE(CheckAggregateRule(rule, c.refused + 1).ok()) << c.rule;
    EXPECT_TRUE(CheckAggregateRule(rule, c.refused + 40).ok()) << c.rule;
    EXPECT_EQ(MinUpdatesFor(rule), c.refused + 1) << c.rule;
  }
  EXPECT_EQ(CheckAggregateRule(Rule("krum:2"), 5).message(),
            "krum:2 needs at least 2f+3 = 7 updates, has 5");
  // multi-krum: m <= n - f, so more updates than 2f+3 may be needed, and then enough are.
  EXPECT_FALSE(CheckAggregateRule(Rule("multi-krum:1:9"), 9).ok());
  EXPECT_TRUE(CheckAggregateRule(Rule("multi-krum:1:9"), 10).ok());
}

TEST(CheckAggregateRuleTest, RefusesBadParametersForEveryN) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const AggregateRule& rule : {
           AggregateRule{AggregateKind::kTrimmedMean, 0.5, 0, 1},
           AggregateRule{AggregateKind::kTrimmedMean, -0.1, 0, 1},
           AggregateRule{AggregateKind::kTrimmedMean, nan, 0, 1},
           AggregateRule{AggregateKind::kKrum, 0, -1, 1},
           AggregateRule{AggregateKind::kBulyan, 0, -1, 1},
           AggregateRule{AggregateKind::kMultiKrum, 0, 1, 0},
           AggregateRule{AggregateKind::kMultiKrum, 0, -1, 1},
           AggregateRule{static_cast<AggregateKind>(77), 0, 0, 1},
       }) {
    for (int n : {0, 1, 5, 1000}) {
      EXPECT_EQ(CheckAggregateRule(rule, n).code(), absl::StatusCode::kInvalidArgument)
          << AggregateRuleName(rule) << " n=" << n;
    }
    EXPECT_EQ(MinUpdatesFor(rule), std::numeric_limits<int>::max()) << AggregateRuleName(rule);
  }
  // The fields a rule does not use are not looked at.
  EXPECT_TRUE(CheckAggregateRule(AggregateRule{AggregateKind::kMedian, 7, -3, -3}, 1).ok());
  // A bound past INT_MAX saturates instead of overflowing.
  const AggregateRule huge{AggregateKind::kBulyan, 0, std::numeric_limits<int>::max(), 1};
  EXPECT_EQ(MinUpdatesFor(huge), std::numeric_limits<int>::max());
  EXPECT_FALSE(CheckAggregateRule(huge, std::numeric_limits<int>::max()).ok());
}

// ---- The rules. ----

TEST(AggregateTest, MeanIsWeightedByTheWeights) {
  const std::vector<std::vector<float>> updates = {{1, 10, -2}, {2, 20, 0}, {4, 40, 7}};
  Result r = Combine(Rule("mean"), updates, {1, 2, 1});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(9.0f / 4, 90.0f / 4, 5.0f / 4));
  EXPECT_TRUE(r.selected.empty());
  // No weights: all equal.
  r = Combine(Rule("mean"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(FloatEq(7.0f / 3), FloatEq(70.0f / 3), FloatEq(5.0f / 3)));
}

TEST(AggregateTest, MeanRefusesNonPositiveWeights) {
  const std::vector<std::vector<float>> updates = {{1}, {2}};
  for (const float bad : {0.0f, -1.0f, std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::infinity()}) {
    const Result r = Combine(Rule("mean"), updates, {1, bad});
    EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(r.status.message(), HasSubstr("weight 1")) << bad;
    EXPECT_THAT(r.out, ElementsAre(-12345.0f)) << "out is left untouched";
  }
  // The robust rules ignore the weights.
  EXPECT_TRUE(Combine(Rule("median"), updates, {1, 0}).status.ok());
}

TEST(AggregateTest, RefusesMismatchedSizesAndTooFewUpdates) {
  std::vector<float> out(3);
  const std::vector<float> a = {1, 2, 3};
  const std::vector<float> b = {1, 2};
  const std::vector<std::span<const float>> mixed = {a, b};
  absl::Status status = Aggregate(Rule("median"), mixed, {}, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("update 1 has 2 values"));

  const std::vector<std::span<const float>> two = {a, a};
  std::vector<float> short_out(2);
  EXPECT_EQ(Aggregate(Rule("mean"), two, {}, short_out).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<float> three_weights = {1, 1, 1};
  status = Aggregate(Rule("mean"), two, three_weights, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("3 weights for 2 updates"));

  std::vector<std::vector<float>> four(4, std::vector<float>{1, 2, 3});
  const Result r = Combine(Rule("krum:1"), four);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status.message(), HasSubstr("2f+3 = 5 updates, has 4"));
  EXPECT_THAT(r.out, ElementsAre(-12345.0f, -12345.0f, -12345.0f));
  EXPECT_EQ(Aggregate(Rule("mean"), {}, {}, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(AggregateTest, MedianOfOddAndEvenCounts) {
  Result r = Combine(Rule("median"), {{5, -1}, {1, 7}, {3, 2}});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(3, 2));
  EXPECT_TRUE(r.selected.empty());
  // Even: the mean of the two middle values.
  r = Combine(Rule("median"), {{5, -1}, {1, 7}, {3, 2}, {100, 4}});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(4, 3));
  r = Combine(Rule("median"), {{5, -1}});
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(5, -1));
}

TEST(AggregateTest, TrimmedMeanDropsFloorBNFromEachEnd) {
  // One coordinate of 7 updates: sorted -50 1 2 3 4 20 100.
  const std::vector<std::vector<float>> updates = {{100}, {1}, {2}, {3}, {4}, {20}, {-50}};
  // B = 0.2: floor(1.4) = 1 from each end, the mean of 1 2 3 4 20.
  Result r = Combine(Rule("trimmed-mean:0.2"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(6));
  // B = 0.14: floor(0.98) = 0, the plain mean.
  r = Combine(Rule("trimmed-mean:0.14"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(FloatEq(80.0f / 7)));
  // B = 0.29: floor(2.03) = 2, the mean of 2 3 4.
  r = Combine(Rule("trimmed-mean:0.29"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(3));
  // B = 0.45: floor(3.15) = 3, only the median is left.
  r = Combine(Rule("trimmed-mean:0.45"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(3));
  EXPECT_TRUE(r.selected.empty());
}

// Five honest updates around (0, 0), the centre one at index 3, and two outliers.
const std::vector<std::vector<float>> kKrumCase = {{1, 0}, {100, 100}, {-1, 0},   {0, 0},
                                                   {0, 1}, {-100, 50}, {0, -1.5f}};

TEST(AggregateTest, KrumPicksTheUpdateClosestToItsNeighbours) {
  // f = 2, n = 7: each scored by its n - f - 2 = 3 nearest others. The centre's are 1, 1, 1
  // (score 3); (1, 0)'s are 1, 2, 3.25 (6.25); the outliers' are in the thousands.
  const Result r = Combine(Rule("krum:2"), kKrumCase);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.selected, ElementsAre(3));
  EXPECT_THAT(r.out, ElementsAre(0, 0));
  const std::vector<double> scores = DirectScores(kKrumCase, AllRows(7), 3);
  EXPECT_EQ(scores[3], 3);
  EXPECT_EQ(scores[0], 6.25);
  EXPECT_EQ(ByScore(AllRows(7), scores)[0], 3);
}

TEST(AggregateTest, KrumTiesGoToTheLowerIndex) {
  const std::vector<std::vector<float>> same(5, std::vector<float>{2, -3});
  const Result r = Combine(Rule("krum:1"), same);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.selected, ElementsAre(0));
  EXPECT_THAT(r.out, ElementsAre(2, -3));
}

TEST(AggregateTest, MultiKrumAveragesTheLowestScored) {
  // Scores with k = 3: index 3 (the centre) 3; 2 (-1, 0) 1 + 2 + 3.25 = 6.25; 0 (1, 0) 6.25;
  // 4 (0, 1) 1 + 2 + 2 = 5; 6 (0, -1.5) 2.25 + 3.25 + 3.25 = 8.75. Ties go to the lower index.
  const Result r = Combine(Rule("multi-krum:2:4"), kKrumCase);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.selected, ElementsAre(3, 4, 0, 2));
  EXPECT_THAT(r.out, ElementsAre(0, 0.25f));
  const std::vector<int> by_score = ByScore(AllRows(7), DirectScores(kKrumCase, AllRows(7), 3));
  EXPECT_THAT(r.selected, ElementsAreArray(by_score.begin(), by_score.begin() + 4));
  // m = 1 is Krum.
  const Result one = Combine(Rule("multi-krum:2:1"), kKrumCase);
  ASSERT_TRUE(one.status.ok()) << one.status;
  EXPECT_THAT(one.selected, ElementsAre(3));
  EXPECT_THAT(one.out, ElementsAre(0, 0));
}

TEST(AggregateTest, BulyanOnAHandComputedCase) {
  // n = 7, f = 1: theta = 5 selected, then per coordinate beta = 3 around the median.
  const std::vector<std::vector<float>> updates = {{6, 2}, {100, 100}, {1, 0}, {9, 1},
                                                   {2, 4}, {0, 9},     {3, -1}};
  // The Krum phase, scores by the max(r - f - 2, 1) nearest of the r remaining:
  //   r = 7, k = 4: 0: 10+18+20+29 = 77, 2: 116, 3: 173, 4: 92, 5: 305, 6: 89 -> 0
  //   r = 6, k = 3: 2: 5+17+65 = 87, 3: 163, 4: 17+26+29 = 72, 5: 220, 6: 5+26+40 = 71 -> 6
  //   r = 5, k = 2: 2: 17+65 = 82, 3: 123, 4: 17+29 = 46, 5: 111 -> 4
  //   r = 4, k = 1: 2: 65, 3: 65, 5: 82 -> 2 (the lower of a tie)
  //   r = 3, k = 1: 3: 145, 5: 145 -> 3
  // The outlier (index 1) never comes close.
  // Coordinate 0 of 0, 6, 4, 2, 3: 1 2 3 6 9, median 3, closest three 1 2 3 -> 2.
  // Coordinate 1: -1 0 1 2 4, median 1, closest three 0 1 2 -> 1.
  const Result r = Combine(Rule("bulyan:1"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.selected, ElementsAre(0, 6, 4, 2, 3));
  EXPECT_THAT(r.out, ElementsAre(2, 1));
  const DirectBulyanResult direct = DirectBulyan(updates, 1);
  EXPECT_EQ(direct.selected, r.selected);
  EXPECT_EQ(direct.out, r.out);
  // f = 0 selects everything and averages it all.
  const Result all = Combine(Rule("bulyan:0"), {{1, 2}, {3, 4}, {8, 0}});
  ASSERT_TRUE(all.status.ok()) << all.status;
  EXPECT_EQ(all.selected.size(), 3u);
  EXPECT_THAT(all.out, ElementsAre(4, 2));
}

TEST(AggregateTest, RulesMatchADirectComputation) {
  std::mt19937 rng(20180712);
  // Sizes around the library's blocks (256 coordinates, 1024 per distance pass, 4096 per mean).
  for (const size_t d :
       {size_t{1}, size_t{7}, size_t{255}, size_t{256}, size_t{257}, size_t{1025}, size_t{4097}}) {
    for (const int n : {1, 2, 3, 4, 7, 8, 11, 16}) {
      const std::vector<std::vector<float>> updates = RandomUpdates(n, d, rng);
      const std::string where = "d=" + std::to_string(d) + " n=" + std::to_string(n);
      Result r = Combine(Rule("mean"), updates);
      ASSERT_TRUE(r.status.ok()) << r.status;
      ExpectNear(r.out, DirectMean(updates, AllRows(n)), "mean " + where);
      r = Combine(Rule("median"), updates);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.out, DirectMedian(updates)) << "median " + where;
      for (const double trim : {0.0, 0.15, 0.25, 0.4}) {
        r = Combine(AggregateRule{AggregateKind::kTrimmedMean, trim, 0, 1}, updates);
        ASSERT_TRUE(r.status.ok()) << r.status;
        ExpectNear(r.out, DirectTrimmedMean(updates, static_cast<size_t>(std::floor(trim * n))),
                   "trimmed-mean " + std::to_string(trim) + " " + where);
      }
      for (int f = 0; 2 * f + 3 <= n; ++f) {
        const std::vector<int> by_score =
            ByScore(AllRows(n), DirectScores(updates, AllRows(n), n - f - 2));
        r = Combine(AggregateRule{AggregateKind::kKrum, 0, f, 1}, updates);
        ASSERT_TRUE(r.status.ok()) << r.status;
        EXPECT_THAT(r.selected, ElementsAre(by_score[0])) << "krum " << f << " " << where;
        EXPECT_EQ(r.out, updates[by_score[0]]) << "krum " << f << " " << where;
        for (int m = 1; m <= n - f; m += 2) {
          r = Combine(AggregateRule{AggregateKind::kMultiKrum, 0, f, m}, updates);
          ASSERT_TRUE(r.status.ok()) << r.status;
          const std::vector<int> chosen(by_score.begin(), by_score.begin() + m);
          EXPECT_EQ(r.selected, chosen) << "multi-krum " << f << ":" << m << " " << where;
          ExpectNear(r.out, DirectMean(updates, chosen), "multi-krum " + where);
        }
      }
      for (int f = 0; 4 * f + 3 <= n; ++f) {
        r = Combine(AggregateRule{AggregateKind::kBulyan, 0, f, 1}, updates);
        ASSERT_TRUE(r.status.ok()) << r.status;
        const DirectBulyanResult direct = DirectBulyan(updates, f);
        EXPECT_EQ(r.selected, direct.selected) << "bulyan " << f << " " << where;
        ExpectNear(r.out, direct.out, "bulyan " + std::to_string(f) + " " + where);
      }
    }
  }
}

TEST(AggregateTest, CoordinateRulesMatchADirectComputationForEveryN) {
  std::mt19937 rng(5222);
  std::uniform_int_distribution<int> few(-2, 2);
  constexpr size_t kD = 70;  // more than one block of coordinates
  std::vector<int> sizes(33);
  std::iota(sizes.begin(), sizes.end(), 1);
  sizes.insert(sizes.end(), {47, 50, 64});
  for (const int n : sizes) {
    for (const bool ties : {false, true}) {
      std::vector<std::vector<float>> updates = RandomUpdates(n, kD, rng);
      if (ties) {  // values from a small set, many equal
        for (auto& u : updates) {
          for (float& v : u) v = static_cast<float>(few(rng));
        }
      }
      const std::string where = "n=" + std::to_string(n) + (ties ? " with ties" : "");
      Result r = Combine(Rule("median"), updates);
      ASSERT_TRUE(r.status.ok()) << r.status;
      EXPECT_EQ(r.out, DirectMedian(updates)) << where;
      for (const double trim : {0.1, 0.3, 0.49}) {
        r = Combine(AggregateRule{AggregateKind::kTrimmedMean, trim, 0, 1}, updates);
        ASSERT_TRUE(r.status.ok()) << r.status;
        ExpectNear(r.out, DirectTrimmedMean(updates, static_cast<size_t>(std::floor(trim * n))),
                   "trimmed-mean " + std::to_string(trim) + " " + where);
      }
      for (int f : {0, (n - 3) / 4}) {
        if (4 * f + 3 > n) continue;
        r = Combine(AggregateRule{AggregateKind::kBulyan, 0, f, 1}, updates);
        ASSERT_TRUE(r.status.ok()) << r.status;
        const DirectBulyanResult direct = DirectBulyan(updates, f);
        EXPECT_EQ(r.selected, direct.selected) << "bulyan " << f << " " << where;
        ExpectNear(r.out, direct.out, "bulyan " + std::to_string(f) + " " + where);
      }
    }
  }
}

TEST(AggregateTest, NaNSortsAsInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> updates = {{1, nan}, {nan, 5}, {3, 4}};
  Result r = Combine(Rule("median"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(3, 5));
  // floor(0.34 * 3) = 1 from each end: the NaN goes as the highest.
  r = Combine(Rule("trimmed-mean:0.34"), updates);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.out, ElementsAre(3, 5));
  // Krum: a NaN distance counts as infinite. With k = n - f - 2 = 1 the finite pair score 1
  // each, the NaN update infinity; the tie goes to the lower index.
  const std::vector<std::vector<float>> krum = {{nan, 0}, {1, 1}, {1, 2}};
  r = Combine(Rule("krum:0"), krum);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.selected, ElementsAre(1));
}

// ---- Robustness: f attackers within each rule's bound. ----

enum class Attack { kHuge, kOpposite, kSignFlipScaled, kOneCoordinate, kInfinite, kNaN };

std::vector<float> Attacker(Attack attack, int which, const std::vector<float>& honest_mean) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v(honest_mean.size());
  for (size_t j = 0; j < v.size(); ++j) {
    switch (attack) {
      case Attack::kHuge:
        v[j] = 1e6f;
        break;
      case Attack::kOpposite:
        v[j] = which % 2 == 0 ? 1e6f : -1e6f;
        break;
      case Attack::kSignFlipScaled:
        v[j] = -100 * honest_mean[j];
        break;
      case Attack::kOneCoordinate:
        v[j] = j == 3 ? 1e6f : honest_mean[j];
        break;
      case Attack::kInfinite:
        v[j] = which % 2 == 0 ? inf : -inf;
        break;
      case Attack::kNaN:
        v[j] = std::numeric_limits<float>::quiet_NaN();
        break;
    }
  }
  return v;
}

TEST(AggregateTest, RobustRulesStayWithinTheHonestRange) {
  constexpr int kN = 11;
  constexpr int kF = 2;
  constexpr size_t kD = 40;
  static_assert(4 * kF + 3 <= kN, "every rule's bound holds");
  const std::vector<int> attackers = {1, 7};
  std::mt19937 rng(2017);
  for (const Attack attack : {Attack::kHuge, Attack::kOpposite, Attack::kSignFlipScaled,
                              Attack::kOneCoordinate, Attack::kInfinite, Attack::kNaN}) {
    std::vector<std::vector<float>> updates = RandomUpdates(kN, kD, rng, 0.5f, 1.5f);
    std::vector<int> honest;
    for (int i = 0; i < kN; ++i) {
      if (std::find(attackers.begin(), attackers.end(), i) == attackers.end()) honest.push_back(i);
    }
    const std::vector<float> honest_mean = DirectMean(updates, honest);
    for (size_t a = 0; a < attackers.size(); ++a) {
      updates[attackers[a]] = Attacker(attack, static_cast<int>(a), honest_mean);
    }
    // trimmed-mean:0.2 drops floor(2.2) = 2 >= f from each end; krum needs 2f+3 = 7 <= 11,
    // bulyan 4f+3 = 11; multi-krum averages n - f.
    for (const std::string text :
         {"median", "trimmed-mean:0.2", "krum:2", "multi-krum:2:9", "bulyan:2"}) {
      const AggregateRule rule = Rule(text);
      ASSERT_TRUE(CheckAggregateRule(rule, kN).ok());
      const Result r = Combine(rule, updates);
      ASSERT_TRUE(r.status.ok()) << r.status;
      for (size_t j = 0; j < kD; ++j) {
        const std::vector<float> c = Column(updates, honest, j);
        EXPECT_GE(r.out[j], c.front())
            << text << ", attack " << static_cast<int>(attack) << ", coordinate " << j;
        EXPECT_LE(r.out[j], c.back())
            << text << ", attack " << static_cast<int>(attack) << ", coordinate " << j;
      }
      // Krum and multi-krum choose only honest updates. Bulyan may choose colluding ones: two
      // identical attackers are each other's nearest neighbour, and the last rounds of its Krum
      // phase score by one neighbour. Its second phase is what keeps them out (El Mhamdi et al.
      // bound the selection's Byzantine members by f, not by 0).
      int chosen_attackers = 0;
      for (int s : r.selected) {
        chosen_attackers += std::count(attackers.begin(), attackers.end(), s);
      }
      EXPECT_LE(chosen_attackers, rule.kind == AggregateKind::kBulyan ? kF : 0)
          << text << ", attack " << static_cast<int>(attack);
    }
    // The mean is not robust: the attack moves it out of the honest range (or to inf/NaN).
    const Result mean = Combine(Rule("mean"), updates);
    ASSERT_TRUE(mean.status.ok());
    if (attack != Attack::kOpposite) {
      const std::vector<float> c = Column(updates, honest, 3);
      EXPECT_FALSE(mean.out[3] >= c.front() && mean.out[3] <= c.back())
          << "attack " << static_cast<int>(attack);
    }
  }
}

}  // namespace
}  // namespace syncline
