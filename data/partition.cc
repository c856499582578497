#include "data/partition.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/random.h"

namespace syncline {
namespace {

bool ValidAlpha(double alpha) { return std::isfinite(alpha) && alpha > 0; }

// Whether `label` is an integer in [0, classes) (false for NaN).
bool ValidLabel(float label, int classes) {
  return label >= 0 && static_cast<double>(label) < classes && label == std::floor(label);
}

// Fisher-Yates: a uniformly random permutation of `v` that depends only on rng's output.
template <typename T>
void Shuffle(std::vector<T>& v, Random& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    std::swap(v[i - 1], v[rng.UniformInt(i)]);
  }
}

// log(X) for X ~ Gamma(shape, 1), shape > 0, by Marsaglia and Tsang (2000); for shape < 1 by
// their boost Gamma(a) = Gamma(a + 1) * U^(1/a), kept in logs so that tiny shapes (whose draws
// underflow a double) still give usable Dirichlet proportions.
double LogGamma(double shape, Random& rng) {
  if (shape < 1) {
    const double boost = LogGamma(shape + 1, rng);
    return boost + std::log(1.0 - rng.Uniform()) / shape;  // 1 - U in (0, 1]: log is finite.
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    const double x = rng.Normal();
    double v = 1.0 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = 1.0 - rng.Uniform();
    const double x2 = x * x;
    if (u < 1.0 - 0.0331 * x2 * x2 || std::log(u) < 0.5 * x2 + d * (1.0 - v + std::log(v))) {
      return std::log(d) + std::log(v);
    }
  }
}

// The examples grouped by label, each group in ascending index order: group c is
// order[offsets[c] .. offsets[c + 1]). A stable counting sort.
struct ByLabel {
  std::vector<uint64_t> offsets;
  std::vector<uint32_t> order;
};

ByLabel GroupByLabel(std::span<const float> labels, int classes) {
  ByLabel g;
  g.offsets.assign(static_cast<size_t>(classes) + 1, 0);
  for (float label : labels) ++g.offsets[static_cast<size_t>(label) + 1];
  std::partial_sum(g.offsets.begin(), g.offsets.end(), g.offsets.begin());
  g.order.resize(labels.size());
  std::vector<uint64_t> next(g.offsets.begin(), g.offsets.end() - 1);
  for (size_t i = 0; i < labels.size(); ++i) {
    g.order[next[static_cast<size_t>(labels[i])]++] = static_cast<uint32_t>(i);
  }
  return g;
}

std::vector<std::vector<uint32_t>> Strided(size_t n, int workers) {
  std::vector<std::vector<uint32_t>> parts(workers);
  for (auto& part : parts) part.reserve(n / workers + 1);
  for (size_t i = 0; i < n; ++i) parts[i % workers].push_back(static_cast<uint32_t>(i));
  return parts;
}

std::vector<std::vector<uint32_t>> Iid(size_t n, int workers, Random& rng) {
  std::vector<uint32_t> permutation(n);
  std::iota(permutation.begin(), permutation.end(), 0u);
  Shuffle(permutation, rng);
  std::vector<std::vector<uint32_t>> parts(workers);
  const size_t base = n / workers;
  const size_t extra = n % workers;
  auto begin = permutation.begin();
  for (size_t w = 0; w < parts.size(); ++w) {
    const auto end = begin + static_cast<ptrdiff_t>(base + (w < extra ? 1 : 0));
    parts[w].assign(begin, end);
    begin = end;
  }
  return parts;
}

std::vector<std::vector<uint32_t>> Dirichlet(std::span<const float> labels, int classes,
                                             int workers, double alpha, Random& rng) {
  const ByLabel groups = GroupByLabel(labels, classes);
  std::vector<std::vector<uint32_t>> parts(workers);
  std::vector<double> weights(workers);
  std::vector<uint32_t> group;
  for (int c = 0; c < classes; ++c) {
    group.assign(groups.order.begin() + static_cast<ptrdiff_t>(groups.offsets[c]),
                 groups.order.begin() + static_cast<ptrdiff_t>(groups.offsets[c + 1]));
    Shuffle(group, rng);
    // p_w = G_w / sum(G) for G_w ~ Gamma(alpha), computed from log G_w relative to the largest.
    double largest = -HUGE_VAL;
    for (double& weight : weights) {
      weight = LogGamma(alpha, rng);
      largest = std::max(largest, weight);
    }
    double total = 0;
    for (double& weight : weights) {
      weight = std::exp(weight - largest);
      total += weight;
    }
    // Run w ends at round(count * (p_0 + ... + p_w)); the last run ends at the count.
    const uint64_t count = group.size();
    double cumulative = 0;
    uint64_t begin = 0;
    for (int w = 0; w < workers; ++w) {
      cumulative += weights[w];
      uint64_t end = count;
      if (w + 1 < workers) {
        const double position = static_cast<double>(count) * (cumulative / total);
        end = std::clamp<uint64_t>(static_cast<uint64_t>(std::llround(position)), begin, count);
      }
      parts[w].insert(parts[w].end(), group.begin() + static_cast<ptrdiff_t>(begin),
                      group.begin() + static_cast<ptrdiff_t>(end));
      begin = end;
    }
  }
  return parts;
}

std::vector<std::vector<uint32_t>> Shards(std::span<const float> labels, int classes, int workers,
                                          int shards_per_worker, Random& rng) {
  const ByLabel sorted = GroupByLabel(labels, classes);
  const uint64_t n = labels.size();
  const uint64_t shards = static_cast<uint64_t>(workers) * static_cast<uint64_t>(shards_per_worker);
  std::vector<uint64_t> deal(shards);
  std::iota(deal.begin(), deal.end(), uint64_t{0});
  Shuffle(deal, rng);
  std::vector<std::vector<uint32_t>> parts(workers);
  for (uint64_t k = 0; k < shards; ++k) {
    // Shard s is sorted.order[s * n / shards .. (s + 1) * n / shards): s * n < 2^64 as both are
    // at most 2^32.
    const uint64_t s = deal[k];
    auto& part = parts[k / static_cast<uint64_t>(shards_per_worker)];
    part.insert(part.end(), sorted.order.begin() + static_cast<ptrdiff_t>(s * n / shards),
                sorted.order.begin() + static_cast<ptrdiff_t>((s + 1) * n / shards));
  }
  return parts;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<uint32_t>>> PartitionByLabel(std::span<const float> labels,
                                                                    int classes, int workers,
                                                                    const PartitionSpec& spec,
                                                                    uint64_t seed) {
  if (classes < 1) {
    return absl::InvalidArgumentError(absl::StrCat("partition: classes = ", classes, " < 1"));
  }
  if (workers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("partition: workers = ", workers, " < 1"));
  }
  if (labels.size() > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition: ", labels.size(), " examples, more than 2^32"));
  }
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!ValidLabel(labels[i], classes)) {
      return absl::InvalidArgumentError(absl::StrCat("partition: label ", labels[i], " of example ",
                                                     i, " is not an integer in [0, ", classes,
                                                     ")"));
    }
  }
  // One stream per kind, so that kinds do not share draws.
  Random rng(seed, static_cast<uint32_t>(spec.kind));
  std::vector<std::vector<uint32_t>> parts;
  switch (spec.kind) {
    case PartitionKind::kStrided:
      return Strided(labels.size(), workers);
    case PartitionKind::kIid:
      parts = Iid(labels.size(), workers, rng);
      break;
    case PartitionKind::kDirichlet:
      if (!ValidAlpha(spec.alpha)) {
        return absl::InvalidArgumentError(
            absl::StrCat("partition: dirichlet alpha ", spec.alpha, " is not a number > 0"));
      }
      parts = Dirichlet(labels, classes, workers, spec.alpha, rng);
      break;
    case PartitionKind::kShards:
      if (spec.shards < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("partition: shards per worker = ", spec.shards, " < 1"));
      }
      if (static_cast<uint64_t>(workers) * static_cast<uint64_t>(spec.shards) > labels.size()) {
        return absl::InvalidArgumentError(absl::StrCat("partition: ", workers, " workers * ",
                                                       spec.shards, " shards > ", labels.size(),
                                                       " examples"));
      }
      parts = Shards(labels, classes, workers, spec.shards, rng);
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("partition: unknown kind ", static_cast<int>(spec.kind)));
  }
  for (auto& part : parts) std::sort(part.begin(), part.end());
  return parts;
}

std::vector<std::vector<uint64_t>> LabelHistograms(
    std::span<const float> labels, int classes, const std::vector<std::vector<uint32_t>>& parts) {
  const size_t columns = static_cast<size_t>(std::max(classes, 0));
  std::vector<std::vector<uint64_t>> histograms(parts.size(), std::vector<uint64_t>(columns, 0));
  for (size_t w = 0; w < parts.size(); ++w) {
    for (uint32_t i : parts[w]) {
      if (i < labels.size() && ValidLabel(labels[i], classes)) {
        ++histograms[w][static_cast<size_t>(labels[i])];
      }
    }
  }
  return histograms;
}

std::string LabelHistogramsTsv(const std::vector<std::vector<uint64_t>>& histograms) {
  size_t columns = 0;
  for (const auto& row : histograms) columns = std::max(columns, row.size());
  std::string out = "worker";
  for (size_t c = 0; c < columns; ++c) absl::StrAppend(&out, "\tlabel", c);
  absl::StrAppend(&out, "\ttotal\n");
  for (size_t w = 0; w < histograms.size(); ++w) {
    absl::StrAppend(&out, w);
    uint64_t total = 0;
    for (size_t c = 0; c < columns; ++c) {
      const uint64_t count = c < histograms[w].size() ? histograms[w][c] : 0;
      total += count;
      absl::StrAppend(&out, "\t", count);
    }
    absl::StrAppend(&out, "\t", total, "\n");
  }
  return out;
}

Dataset SelectExamples(const Dataset& data, std::span<const uint32_t> examples) {
  Dataset out;
  out.num_features = data.num_features;
  out.largest_id_line = data.largest_id_line;
  out.index_base = data.index_base;
  uint64_t entries = 0;
  for (uint32_t i : examples) entries += data.row_offsets[i + 1] - data.row_offsets[i];
  out.labels.reserve(examples.size());
  out.row_offsets.reserve(examples.size() + 1);
  out.ids.reserve(entries);
  out.values.reserve(entries);
  out.row_offsets.push_back(0);
  for (uint32_t i : examples) {
    const auto begin = static_cast<ptrdiff_t>(data.row_offsets[i]);
    const auto end = static_cast<ptrdiff_t>(data.row_offsets[i + 1]);
    out.labels.push_back(data.labels[i]);
    out.ids.insert(out.ids.end(), data.ids.begin() + begin, data.ids.begin() + end);
    out.values.insert(out.values.end(), data.values.begin() + begin, data.values.begin() + end);
    out.row_offsets.push_back(out.ids.size());
  }
  return out;
}

}  // namespace syncline
