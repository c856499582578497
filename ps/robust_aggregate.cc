#include "ps/robust_aggregate.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace syncline {
namespace {

// Floats of each update per pass of the pairwise distances: n blocks of 4 KiB stay in cache
// while every pair of them is compared.
constexpr size_t kDistanceBlock = 1024;
// Coordinates the coordinate-wise rules sort at once: n rows of 256 bytes stay in L1 for the
// sorting network's passes over them.
constexpr size_t kSortBlock = 64;
// Coordinates the means accumulate in double at once.
constexpr size_t kMeanBlock = 4096;

// Values the coordinate-wise rules order: NaN sorts as +infinity.
inline float Orderable(float v) {
  return std::isnan(v) ? std::numeric_limits<float>::infinity() : v;
}

// sum_k (a_k - b_k)^2 in double; the lanes are independent so that the loop vectorises without
// reassociation, which keeps the result the same on every build.
double SquaredDistance(const float* a, const float* b, size_t len) {
  constexpr size_t kLanes = 8;
  double lanes[kLanes] = {};
  size_t c = 0;
  for (; c + kLanes <= len; c += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) {
      const double t = static_cast<double>(a[c + k]) - static_cast<double>(b[c + k]);
      lanes[k] += t * t;
    }
  }
  for (size_t k = 0; c < len; ++c, ++k) {
    const double t = static_cast<double>(a[c]) - static_cast<double>(b[c]);
    lanes[k] += t * t;
  }
  double sum = 0;
  for (double lane : lanes) sum += lane;
  return sum;
}

// The n x n matrix of squared Euclidean distances (row-major), NaN made +infinity.
std::vector<double> PairwiseDistances(std::span<const std::span<const float>> updates, size_t d) {
  const size_t n = updates.size();
  std::vector<double> dist(n * n, 0.0);
  for (size_t c0 = 0; c0 < d; c0 += kDistanceBlock) {
    const size_t len = std::min(kDistanceBlock, d - c0);
    for (size_t i = 0; i < n; ++i) {
      const float* a = updates[i].data() + c0;
      for (size_t j = i + 1; j < n; ++j) {
        dist[i * n + j] += SquaredDistance(a, updates[j].data() + c0, len);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      double& v = dist[i * n + j];
      if (std::isnan(v)) v = std::numeric_limits<double>::infinity();
      dist[j * n + i] = v;
    }
  }
  return dist;
}

// The Krum score of each of `candidates` among them: the sum of its `k` smallest distances to
// the other candidates, added smallest first (so that the bits do not depend on the library's
// partial ordering). scores[c] belongs to candidates[c].
void KrumScores(const std::vector<double>& dist, size_t n, std::span<const int> candidates,
                size_t k, std::vector<double>& scores, std::vector<double>& buffer) {
  scores.assign(candidates.size(), 0.0);
  for (size_t c = 0; c < candidates.size(); ++c) {
    const double* row = dist.data() + static_cast<size_t>(candidates[c]) * n;
    buffer.clear();
    for (size_t o = 0; o < candidates.size(); ++o) {
      if (o != c) buffer.push_back(row[candidates[o]]);
    }
    const size_t take = std::min(k, buffer.size());
    std::partial_sort(buffer.begin(), buffer.begin() + take, buffer.end());
    double score = 0;
    for (size_t t = 0; t < take; ++t) score += buffer[t];
    scores[c] = score;
  }
}

// The position in `candidates` (ascending indices) of the lowest score; ties go to the first.
size_t LowestScore(const std::vector<double>& scores) {
  size_t best = 0;
  for (size_t c = 1; c < scores.size(); ++c) {
    if (scores[c] < scores[best]) best = c;
  }
  return best;
}

// out = sum_i w_i x_i / sum_i w_i over the updates in `rows` (weights empty: all 1).
void WeightedMean(std::span<const std::span<const float>> updates, std::span<const int> rows,
                  std::span<const float> weights, std::span<float> out) {
  double total = 0;
  for (int r : rows) total += weights.empty() ? 1.0 : static_cast<double>(weights[r]);
  std::vector<double> acc(std::min(kMeanBlock, out.size()));
  for (size_t c0 = 0; c0 < out.size(); c0 += kMeanBlock) {
    const size_t len = std::min(kMeanBlock, out.size() - c0);
    std::fill_n(acc.begin(), len, 0.0);
    for (int r : rows) {
      const double w = weights.empty() ? 1.0 : static_cast<double>(weights[r]);
      const float* x = updates[r].data() + c0;
      for (size_t j = 0; j < len; ++j) acc[j] += w * static_cast<double>(x[j]);
    }
    for (size_t j = 0; j < len; ++j) out[c0 + j] = static_cast<float>(acc[j] / total);
  }
}

// Batcher's merge-exchange sort of m keys (Knuth, TAOCP vol. 3, 5.2.2, Algorithm M): the
// compare-exchanges (a, b), a < b, in order, after which key a <= key b for all a < b. Being
// the same for every coordinate, it sorts a whole block of coordinates with element-wise min
// and max, which vectorise, instead of one data-dependent branch per comparison.
std::vector<std::pair<size_t, size_t>> SortingNetwork(size_t m) {
  std::vector<std::pair<size_t, size_t>> network;
  if (m < 2) return network;
  size_t t = 0;
  while ((size_t{1} << t) < m) ++t;
  for (size_t p = size_t{1} << (t - 1); p > 0; p >>= 1) {
    size_t q = size_t{1} << (t - 1);
    size_t r = 0;
    size_t d = p;
    while (true) {
      for (size_t i = 0; i + d < m; ++i) {
        if ((i & p) == r) network.emplace_back(i, i + d);
      }
      if (q == p) break;
      d = q - p;
      q >>= 1;
      r = p;
    }
  }
  return network;
}

void CompareExchange(float* __restrict lo, float* __restrict hi) {
  for (size_t j = 0; j < kSortBlock; ++j) {
    const float a = lo[j];
    const float b = hi[j];
    lo[j] = std::min(a, b);
    hi[j] = std::max(a, b);
  }
}

// Calls emit(c0, len, sorted) for each block [c0, c0 + len) of the d coordinates, where
// sorted[k * kSortBlock + j] is the k-th smallest of the `rows` updates' coordinate c0 + j
// (Orderable values: a NaN sorts as +infinity).
template <typename Emit>
void ForEachSortedBlock(std::span<const std::span<const float>> updates, std::span<const int> rows,
                        size_t d, Emit emit) {
  const size_t m = rows.size();
  const std::vector<std::pair<size_t, size_t>> network = SortingNetwork(m);
  std::vector<float> block(m * kSortBlock);  // [rank][coordinate]; a tail block's rest is stale
  for (size_t c0 = 0; c0 < d; c0 += kSortBlock) {
    const size_t len = std::min(kSortBlock, d - c0);
    for (size_t r = 0; r < m; ++r) {
      const float* x = updates[rows[r]].data() + c0;
      float* row = block.data() + r * kSortBlock;
      for (size_t j = 0; j < len; ++j) row[j] = Orderable(x[j]);
    }
    for (const auto& [a, b] : network) {
      CompareExchange(block.data() + a * kSortBlock, block.data() + b * kSortBlock);
    }
    emit(c0, len, static_cast<const float*>(block.data()));
  }
}

void Median(std::span<const std::span<const float>> updates, std::span<const int> rows,
            std::span<float> out) {
  const size_t m = rows.size();
  const size_t h = m / 2;
  ForEachSortedBlock(updates, rows, out.size(), [&](size_t c0, size_t len, const float* sorted) {
    const float* upper = sorted + h * kSortBlock;
    if (m % 2 == 1) {
      std::copy_n(upper, len, out.begin() + static_cast<ptrdiff_t>(c0));
      return;
    }
    const float* lower = sorted + (h - 1) * kSortBlock;
    for (size_t j = 0; j < len; ++j) {
      out[c0 + j] =
          static_cast<float>((static_cast<double>(lower[j]) + static_cast<double>(upper[j])) / 2);
    }
  });
}

// Per coordinate, the mean without the t lowest and t highest values (2t < m).
void TrimmedMean(std::span<const std::span<const float>> updates, std::span<const int> rows,
                 size_t t, std::span<float> out) {
  const size_t m = rows.size();
  double sum[kSortBlock];
  ForEachSortedBlock(updates, rows, out.size(), [&](size_t c0, size_t len, const float* sorted) {
    std::fill_n(sum, kSortBlock, 0.0);
    for (size_t k = t; k < m - t; ++k) {
      const float* rank = sorted + k * kSortBlock;
      for (size_t j = 0; j < kSortBlock; ++j) sum[j] += static_cast<double>(rank[j]);
    }
    const double kept = static_cast<double>(m - 2 * t);
    for (size_t j = 0; j < len; ++j) out[c0 + j] = static_cast<float>(sum[j] / kept);
  });
}

// Per coordinate, the mean of the beta values closest to their median (beta <= m).
void MeanAroundMedian(std::span<const std::span<const float>> updates, std::span<const int> rows,
                      size_t beta, std::span<float> out) {
  const size_t m = rows.size();
  const size_t h = m / 2;
  ForEachSortedBlock(updates, rows, out.size(), [&](size_t c0, size_t len, const float* sorted) {
    for (size_t j = 0; j < len; ++j) {
      auto v = [&](size_t k) { return static_cast<double>(sorted[k * kSortBlock + j]); };
      const double median = m % 2 == 1 ? v(h) : (v(h - 1) + v(h)) / 2;
      // The closest values form a window of the sorted ones around the middle: grow it by the
      // nearer neighbour, the lower one on a tie.
      size_t lo = h;
      size_t hi = h;
      while (hi - lo < beta) {
        if (lo == 0) {
          ++hi;
        } else if (hi == m) {
          --lo;
        } else if (median - v(lo - 1) <= v(hi) - median) {
          --lo;
        } else {
          ++hi;
        }
      }
      double sum = 0;
      for (size_t k = lo; k < hi; ++k) sum += v(k);
      out[c0 + j] = static_cast<float>(sum / static_cast<double>(beta));
    }
  });
}

}  // namespace

absl::Status Aggregate(const AggregateRule& rule, std::span<const std::span<const float>> updates,
                       std::span<const float> weights, std::span<float> out,
                       AggregateChoice* choice) {
  const size_t n = updates.size();
  if (n > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat(n, " updates are too many"));
  }
  if (absl::Status status = CheckAggregateRule(rule, static_cast<int>(n)); !status.ok()) {
    return status;
  }
  const size_t d = out.size();
  for (size_t i = 0; i < n; ++i) {
    if (updates[i].size() != d) {
      return absl::InvalidArgumentError(
          absl::StrCat("update ", i, " has ", updates[i].size(), " values, the output ", d));
    }
  }
  if (!weights.empty() && weights.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(weights.size(), " weights for ", n, " updates"));
  }
  if (rule.kind == AggregateKind::kMean) {
    double total = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
      if (!(weights[i] > 0 && std::isfinite(weights[i]))) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight ", i, " is ", weights[i], ", not a finite number > 0"));
      }
      total += weights[i];
    }
    if (!std::isfinite(total)) {
      return absl::InvalidArgumentError("the weights' sum is not finite");
    }
  }
  if (choice != nullptr) choice->selected.clear();

  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  switch (rule.kind) {
    case AggregateKind::kMean:
      WeightedMean(updates, all, weights, out);
      return absl::OkStatus();
    case AggregateKind::kMedian:
      Median(updates, all, out);
      return absl::OkStatus();
    case AggregateKind::kTrimmedMean: {
      const size_t t = static_cast<size_t>(std::floor(rule.trim * static_cast<double>(n)));
      TrimmedMean(updates, all, t, out);
      return absl::OkStatus();
    }
    case AggregateKind::kKrum:
    case AggregateKind::kMultiKrum:
    case AggregateKind::kBulyan:
      break;
  }

  const std::vector<double> dist = PairwiseDistances(updates, d);
  const size_t f = static_cast<size_t>(rule.f);
  std::vector<double> scores;
  std::vector<double> buffer;
  buffer.reserve(n);
  std::vector<int> selected;
  if (rule.kind == AggregateKind::kBulyan) {
    const size_t theta = n - 2 * f;
    std::vector<int> remaining = all;
    while (selected.size() < theta) {
      const size_t r = remaining.size();
      const size_t k = std::min(std::max<size_t>(r >= f + 3 ? r - f - 2 : 0, 1), r - 1);
      KrumScores(dist, n, remaining, k, scores, buffer);
      const size_t best = LowestScore(scores);
      selected.push_back(remaining[best]);
      remaining.erase(remaining.begin() + static_cast<ptrdiff_t>(best));
    }
    const size_t beta = theta - 2 * f;
    MeanAroundMedian(updates, selected, beta, out);
  } else {
    KrumScores(dist, n, all, n - f - 2, scores, buffer);
    if (rule.kind == AggregateKind::kKrum) {
      const int best = static_cast<int>(LowestScore(scores));
      selected.push_back(best);
      std::copy(updates[best].begin(), updates[best].end(), out.begin());
    } else {
      selected = all;
      std::stable_sort(selected.begin(), selected.end(),
                       [&scores](int a, int b) { return scores[a] < scores[b]; });
      selected.resize(static_cast<size_t>(rule.m));
      WeightedMean(updates, selected, {}, out);
    }
  }
  if (choice != nullptr) choice->selected = std::move(selected);
  return absl::OkStatus();
}

}  // namespace syncline
