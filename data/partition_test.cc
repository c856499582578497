#include "data/partition.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/options.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Parts = std::vector<std::vector<uint32_t>>;

PartitionSpec Strided() { return {}; }
PartitionSpec Iid() { return {.kind = PartitionKind::kIid}; }
PartitionSpec Dirichlet(double alpha) {
  return {.kind = PartitionKind::kDirichlet, .alpha = alpha};
}
PartitionSpec Shards(int k) { return {.kind = PartitionKind::kShards, .shards = k}; }

// `per_class` examples of each of `classes` labels; sorted: 0,0,...,1,1,...; else 0,1,2,...,0,1,...
std::vector<float> BalancedLabels(int classes, int per_class, bool sorted) {
  std::vector<float> labels;
  for (int i = 0; i < classes * per_class; ++i) {
    labels.push_back(static_cast<float>(sorted ? i / per_class : i % classes));
  }
  return labels;
}

Parts MustPartition(std::span<const float> labels, int classes, int workers,
                    const PartitionSpec& spec, uint64_t seed) {
  absl::StatusOr<Parts> parts = PartitionByLabel(labels, classes, workers, spec, seed);
  EXPECT_TRUE(parts.ok()) << parts.status();
  return parts.ok() ? *std::move(parts) : Parts(workers);
}

// Every example in exactly one part, each part ascending.
void ExpectExactCover(const Parts& parts, size_t n, int workers) {
  ASSERT_EQ(parts.size(), static_cast<size_t>(workers));
  std::vector<int> seen(n, 0);
  for (const auto& part : parts) {
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    for (uint32_t i : part) {
      ASSERT_LT(i, n);
      ++seen[i];
    }
  }
  for (size_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "example " << i;
}

// The mean over workers with examples of their largest label's share of their examples.
double MeanLargestShare(const std::vector<std::vector<uint64_t>>& histograms) {
  double sum = 0;
  int counted = 0;
  for (const auto& row : histograms) {
    const uint64_t total = std::accumulate(row.begin(), row.end(), uint64_t{0});
    if (total == 0) continue;
    sum += static_cast<double>(*std::max_element(row.begin(), row.end())) / total;
    ++counted;
  }
  return counted == 0 ? 0 : sum / counted;
}

int LabelsPresent(const std::vector<uint64_t>& row) {
  return static_cast<int>(std::count_if(row.begin(), row.end(), [](uint64_t n) { return n > 0; }));
}

TEST(ParsePartitionTest, RoundTrips) {
  for (const char* text : {"strided", "iid", "dirichlet:0.1", "dirichlet:0.5", "dirichlet:100",
                           "dirichlet:1e-05", "shards:1", "shards:2", "shards:10"}) {
    absl::StatusOr<PartitionSpec> spec = ParsePartition(text);
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(PartitionName(*spec), text);
  }
  EXPECT_EQ(*ParsePartition("strided"), Strided());
  EXPECT_EQ(*ParsePartition("iid"), Iid());
  EXPECT_EQ(ParsePartition("dirichlet:0.1")->kind, PartitionKind::kDirichlet);
  EXPECT_EQ(ParsePartition("dirichlet:0.1")->alpha, 0.1);
  EXPECT_EQ(ParsePartition("shards:3")->kind, PartitionKind::kShards);
  EXPECT_EQ(ParsePartition("shards:3")->shards, 3);
  // Any alpha prints back to the same double.
  for (double alpha : {0.3, 1.0 / 3.0, 2.5e-7, 1e6}) {
    absl::StatusOr<PartitionSpec> spec = ParsePartition(PartitionName(Dirichlet(alpha)));
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->alpha, alpha);
  }
}

TEST(ParsePartitionTest, RefusesBadTexts) {
  for (const char* text : {"dirichlet:0",
                           "dirichlet:x",
                           "dirichlet:-1",
                           "dirichlet:",
                           "dirichlet",
                           "dirichlet:inf",
                           "dirichlet:nan",
                           "dirichlet: 0.5",
                           "dirichlet:0.5:1",
                           "shards:0",
                           "shards:-1",
                           "shards:x",
                           "shards:2.5",
                           "shards:+2",
                           "shards",
                           "shards:",
                           "shards:99999999999",
                           "bogus",
                           "",
                           "strided:1",
                           "iid:2",
                           "IID"}) {
    absl::StatusOr<PartitionSpec> spec = ParsePartition(text);
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(spec.status().message(), HasSubstr(absl::StrCat("'", text, "'")));
  }
}

TEST(PartitionByLabelTest, AssignsEveryExampleOnce) {
  const std::vector<float> labels = BalancedLabels(/*classes=*/5, /*per_class=*/37, false);
  for (const PartitionSpec& spec :
       {Strided(), Iid(), Dirichlet(0.1), Dirichlet(1), Dirichlet(100), Shards(1), Shards(2)}) {
    for (int workers : {1, 3, 7, 16}) {
      for (uint64_t seed : {0ull, 1ull, 42ull, 0xdeadbeefcafef00dull}) {
        SCOPED_TRACE(absl::StrCat(PartitionName(spec), " workers ", workers, " seed ", seed));
        ExpectExactCover(MustPartition(labels, 5, workers, spec, seed), labels.size(), workers);
      }
    }
  }
}

TEST(PartitionByLabelTest, EmptyDataGivesEmptyParts) {
  for (const PartitionSpec& spec : {Strided(), Iid(), Dirichlet(0.5)}) {
    absl::StatusOr<Parts> parts = PartitionByLabel({}, 3, 4, spec, 1);
    ASSERT_TRUE(parts.ok()) << parts.status();
    EXPECT_EQ(*parts, Parts(4));
  }
}

TEST(PartitionByLabelTest, StridedIsIndexModuloWorkers) {
  const std::vector<float> labels = BalancedLabels(3, 10, true);
  const Parts parts = MustPartition(labels, 3, 4, Strided(), 9);
  for (size_t w = 0; w < parts.size(); ++w) {
    for (uint32_t i : parts[w]) EXPECT_EQ(i % 4, w);
  }
  ExpectExactCover(parts, labels.size(), 4);
  // No draws: the seed does not matter.
  EXPECT_EQ(parts, MustPartition(labels, 3, 4, Strided(), 10));
}

TEST(PartitionByLabelTest, IidDealsEqualParts) {
  const std::vector<float> labels = BalancedLabels(4, 26, true);  // 104 examples
  for (int workers : {1, 4, 10, 13}) {
    const Parts parts = MustPartition(labels, 4, workers, Iid(), 3);
    const size_t base = labels.size() / workers;
    const size_t extra = labels.size() % workers;
    for (size_t w = 0; w < parts.size(); ++w) {
      EXPECT_EQ(parts[w].size(), base + (w < extra ? 1 : 0)) << "worker " << w;
    }
  }
  const Parts a = MustPartition(labels, 4, 4, Iid(), 3);
  EXPECT_EQ(a, MustPartition(labels, 4, 4, Iid(), 3));
  EXPECT_NE(a, MustPartition(labels, 4, 4, Iid(), 4));
  EXPECT_NE(a, MustPartition(labels, 4, 4, Strided(), 3));
}

TEST(PartitionByLabelTest, IidIsPinned) {
  // The exact deal for seed 1: a change here changes every iid experiment's data.
  const std::vector<float> labels(10, 0.0f);
  const Parts parts = MustPartition(labels, 1, 3, Iid(), 1);
  EXPECT_EQ(parts, (Parts{{2, 3, 6, 8}, {1, 5, 7}, {0, 4, 9}}));
}

TEST(PartitionByLabelTest, DirichletIsAFunctionOfTheSeed) {
  const std::vector<float> labels = BalancedLabels(10, 50, false);
  const Parts a = MustPartition(labels, 10, 8, Dirichlet(0.5), 17);
  const auto histograms = LabelHistograms(labels, 10, a);
  EXPECT_EQ(a, MustPartition(labels, 10, 8, Dirichlet(0.5), 17));
  EXPECT_EQ(histograms,
            LabelHistograms(labels, 10, MustPartition(labels, 10, 8, Dirichlet(0.5), 17)));
  EXPECT_NE(histograms,
            LabelHistograms(labels, 10, MustPartition(labels, 10, 8, Dirichlet(0.5), 18)));
  // Per label, the runs add up to the label's count.
  for (int c = 0; c < 10; ++c) {
    uint64_t total = 0;
    for (const auto& row : histograms) total += row[c];
    EXPECT_EQ(total, 50u) << "label " << c;
  }
}

TEST(PartitionByLabelTest, DirichletIsPinned) {
  // The exact histograms for seed 1: a change here changes every dirichlet experiment's data.
  const std::vector<float> labels = BalancedLabels(3, 10, false);
  const auto histograms =
      LabelHistograms(labels, 3, MustPartition(labels, 3, 3, Dirichlet(0.5), 1));
  EXPECT_EQ(histograms, (std::vector<std::vector<uint64_t>>{{2, 7, 5}, {5, 3, 4}, {3, 0, 1}}));
}

TEST(PartitionByLabelTest, SmallAlphaConcentratesLargeAlphaSpreads) {
  const std::vector<float> labels = BalancedLabels(10, 200, false);
  const auto skewed = LabelHistograms(labels, 10, MustPartition(labels, 10, 10, Dirichlet(0.1), 5));
  const auto uniform =
      LabelHistograms(labels, 10, MustPartition(labels, 10, 10, Dirichlet(100), 5));
  EXPECT_GT(MeanLargestShare(skewed), 0.5);
  EXPECT_LT(MeanLargestShare(uniform), 0.15);
  for (const auto& row : uniform) {
    EXPECT_EQ(LabelsPresent(row), 10);
    for (uint64_t n : row) {
      EXPECT_GT(n, 10u);  // about 20 of each label
      EXPECT_LT(n, 30u);
    }
  }
}

TEST(PartitionByLabelTest, DirichletTinyAlphaStillCovers) {
  // Gamma draws for alpha 1e-4 underflow a double; the proportions must still be sound.
  const std::vector<float> labels = BalancedLabels(4, 25, false);
  const Parts parts = MustPartition(labels, 4, 5, Dirichlet(1e-4), 2);
  ExpectExactCover(parts, labels.size(), 5);
  // Each label goes entirely to one worker (all but one proportion are below 1e-100 or so).
  const auto histograms = LabelHistograms(labels, 4, parts);
  for (int c = 0; c < 4; ++c) {
    int holders = 0;
    for (const auto& row : histograms) holders += row[c] > 0 ? 1 : 0;
    EXPECT_EQ(holders, 1) << "label " << c;
  }
}

TEST(PartitionByLabelTest, DirichletOnBinaryLabels) {
  const std::vector<float> labels = BalancedLabels(2, 100, false);  // 0/1, as Dataset stores them
  const Parts parts = MustPartition(labels, 2, 4, Dirichlet(0.3), 11);
  ExpectExactCover(parts, labels.size(), 4);
}

TEST(PartitionByLabelTest, ShardsGiveEachWorkerFewLabels) {
  for (bool sorted : {true, false}) {
    // 10 labels of 60: 20 shards of 30, each within one label.
    const std::vector<float> labels = BalancedLabels(10, 60, sorted);
    for (uint64_t seed : {1ull, 2ull, 3ull}) {
      const Parts parts = MustPartition(labels, 10, 10, Shards(2), seed);
      ExpectExactCover(parts, labels.size(), 10);
      const auto histograms = LabelHistograms(labels, 10, parts);
      for (size_t w = 0; w < parts.size(); ++w) {
        EXPECT_EQ(parts[w].size(), 60u);
        EXPECT_GE(LabelsPresent(histograms[w]), 1);
        EXPECT_LE(LabelsPresent(histograms[w]), 2);
      }
    }
  }
  // 10 labels of 61: shards of 30 or 31, some crossing a label boundary.
  const std::vector<float> labels = BalancedLabels(10, 61, false);
  const Parts parts = MustPartition(labels, 10, 10, Shards(2), 1);
  ExpectExactCover(parts, labels.size(), 10);
  const auto histograms = LabelHistograms(labels, 10, parts);
  for (size_t w = 0; w < parts.size(); ++w) {
    EXPECT_GE(parts[w].size(), 60u);
    EXPECT_LE(parts[w].size(), 62u);
    EXPECT_LE(LabelsPresent(histograms[w]), 4);
  }
  EXPECT_EQ(parts, MustPartition(labels, 10, 10, Shards(2), 1));
  EXPECT_NE(parts, MustPartition(labels, 10, 10, Shards(2), 2));
}

TEST(PartitionByLabelTest, ShardsOfOneExample) {
  // workers * K == examples: every shard is one example.
  const std::vector<float> labels = BalancedLabels(3, 4, false);
  const Parts parts = MustPartition(labels, 3, 4, Shards(3), 7);
  ExpectExactCover(parts, labels.size(), 4);
  for (const auto& part : parts) EXPECT_EQ(part.size(), 3u);
}

TEST(PartitionByLabelTest, RefusesBadInputs) {
  const std::vector<float> labels = {0, 1, 2, 1};
  auto expect_invalid = [](absl::StatusOr<Parts> parts, const std::string& what) {
    ASSERT_FALSE(parts.ok()) << what;
    EXPECT_EQ(parts.status().code(), absl::StatusCode::kInvalidArgument) << what;
  };
  expect_invalid(PartitionByLabel(labels, 3, 0, Strided(), 1), "0 workers");
  expect_invalid(PartitionByLabel(labels, 3, -2, Iid(), 1), "-2 workers");
  expect_invalid(PartitionByLabel(labels, 0, 2, Strided(), 1), "0 classes");
  expect_invalid(PartitionByLabel(labels, 2, 2, Strided(), 1), "label 2 of 2 classes");
  for (float bad : {-1.0f, 0.5f, 3.0f, std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    const std::vector<float> with_bad = {0, bad, 1};
    for (const PartitionSpec& spec : {Strided(), Iid(), Dirichlet(1), Shards(1)}) {
      absl::StatusOr<Parts> parts = PartitionByLabel(with_bad, 3, 2, spec, 1);
      expect_invalid(parts, absl::StrCat("label ", bad));
      if (!parts.ok()) {
        EXPECT_THAT(parts.status().message(), HasSubstr("example 1"));
      }
    }
  }
  expect_invalid(PartitionByLabel(labels, 3, 3, Shards(2), 1), "6 shards of 4 examples");
  expect_invalid(PartitionByLabel(labels, 3, 5, Shards(1), 1), "5 shards of 4 examples");
  expect_invalid(PartitionByLabel(labels, 3, 2, Shards(0), 1), "0 shards");
  expect_invalid(PartitionByLabel(labels, 3, 2, Shards(-1), 1), "-1 shards");
  expect_invalid(PartitionByLabel(labels, 3, 2, Dirichlet(0), 1), "alpha 0");
  expect_invalid(PartitionByLabel(labels, 3, 2, Dirichlet(-1), 1), "alpha -1");
  expect_invalid(
      PartitionByLabel(labels, 3, 2, Dirichlet(std::numeric_limits<double>::infinity()), 1),
      "alpha inf");
  // Exactly workers * K == examples is fine.
  EXPECT_TRUE(PartitionByLabel(labels, 3, 2, Shards(2), 1).ok());
}

TEST(LabelHistogramsTest, CountsPerWorkerAndLabel) {
  const std::vector<float> labels = {0, 1, 2, 1, 1, 0};
  const Parts parts = {{0, 1, 3}, {}, {2, 4, 5}};
  EXPECT_EQ(LabelHistograms(labels, 3, parts),
            (std::vector<std::vector<uint64_t>>{{1, 2, 0}, {0, 0, 0}, {1, 1, 1}}));
  // Out-of-range indices and labels are not counted.
  EXPECT_EQ(LabelHistograms(labels, 2, {{2, 9, 0}}), (std::vector<std::vector<uint64_t>>{{1, 0}}));
}

TEST(LabelHistogramsTest, TsvFormat) {
  EXPECT_EQ(LabelHistogramsTsv({{1, 2, 0}, {0, 0, 0}, {10, 1, 1}}),
            "worker\tlabel0\tlabel1\tlabel2\ttotal\n"
            "0\t1\t2\t0\t3\n"
            "1\t0\t0\t0\t0\n"
            "2\t10\t1\t1\t12\n");
  EXPECT_EQ(LabelHistogramsTsv({}), "worker\ttotal\n");
  // Shorter rows are padded with zeros.
  EXPECT_EQ(LabelHistogramsTsv({{1}, {2, 3}}),
            "worker\tlabel0\tlabel1\ttotal\n0\t1\t0\t1\n1\t2\t3\t5\n");
}

TEST(SelectExamplesTest, CopiesTheChosenRowsInOrder) {
  Dataset data;
  data.labels = {0, 1, 2, 1};
  data.row_offsets = {0, 2, 2, 5, 6};  // example 1 has no features
  data.ids = {0, 3, 1, 2, 4, 3};
  data.values = {0.5f, 1, 2, 3, 4, 5};
  data.num_features = 7;
  data.index_base = IndexBase::kOne;

  const std::vector<uint32_t> chosen = {2, 0, 1, 2};
  const Dataset out = SelectExamples(data, chosen);
  EXPECT_EQ(out.size(), 4u);
  EXPECT_THAT(out.labels, ElementsAre(2, 0, 1, 2));
  EXPECT_THAT(out.row_offsets, ElementsAre(0, 3, 5, 5, 8));
  EXPECT_THAT(out.ids, ElementsAre(1, 2, 4, 0, 3, 1, 2, 4));
  EXPECT_THAT(out.values, ElementsAre(2, 3, 4, 0.5f, 1, 2, 3, 4));
  EXPECT_EQ(out.num_features, 7u);
  EXPECT_EQ(out.index_base, IndexBase::kOne);

  const Dataset none = SelectExamples(data, {});
  EXPECT_EQ(none.size(), 0u);
  EXPECT_THAT(none.row_offsets, ElementsAre(0));
  EXPECT_TRUE(none.ids.empty());
  EXPECT_EQ(none.num_features, 7u);
}

TEST(SelectExamplesTest, PartsOfAPartitionCoverTheDataset) {
  Dataset data;
  data.row_offsets = {0};
  for (int i = 0; i < 30; ++i) {
    data.labels.push_back(static_cast<float>(i % 3));
    data.ids.push_back(static_cast<uint64_t>(i));
    data.values.push_back(static_cast<float>(i));
    data.row_offsets.push_back(data.ids.size());
  }
  data.num_features = 30;
  const Parts parts = MustPartition(data.labels, 3, 4, Dirichlet(0.5), 3);
  size_t total = 0;
  for (const auto& part : parts) {
    const Dataset piece = SelectExamples(data, part);
    ASSERT_EQ(piece.size(), part.size());
    for (size_t j = 0; j < part.size(); ++j) {
      EXPECT_EQ(piece.labels[j], data.labels[part[j]]);
      EXPECT_EQ(piece.ids[j], part[j]);
    }
    total += piece.size();
  }
  EXPECT_EQ(total, data.size());
}

}  // namespace
}  // namespace syncline
