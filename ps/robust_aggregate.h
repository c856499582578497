// Byzantine-robust aggregation: how the servers combine the n updates of one BSP clock or one
// federated round into one (syncline/options.h's AggregateRule), when some of the workers may
// send anything at all. The rules, for n updates of which at most f are Byzantine:
//
//   mean          sum_i w_i x_i / sum_i w_i: plain synchronous SGD / FedAvg; one bad update
//                 moves it arbitrarily far.
//   median        coordinate-wise median (Yin et al., "Byzantine-Robust Distributed Learning:
//                 Towards Optimal Statistical Rates", ICML 2018).
//   trimmed-mean  per coordinate, the mean without the floor(B n) lowest and the floor(B n)
//                 highest values (Yin et al. 2018); tolerates f <= floor(B n).
//   krum          the one update whose squared Euclidean distances to its n - f - 2 nearest
//                 others sum to the least (Blanchard et al., "Machine Learning with Adversaries:
//                 Byzantine Tolerant Gradient Descent", NeurIPS 2017); needs n >= 2f + 3.
//   multi-krum    the mean of the m updates with the lowest Krum scores (same paper).
//   bulyan        theta = n - 2f updates chosen by repeated Krum, then per coordinate the mean of
//                 the beta = theta - 2f chosen values closest to their median (El Mhamdi et al.,
//                 "The Hidden Vulnerability of Distributed Learning in Byzantium", ICML 2018);
//                 needs n >= 4f + 3.
//
// The robust rules ignore the weights: they act on the updates as given, so callers pass
// per-example-normalised updates. Everything is deterministic: the same inputs give the same
// bits. A NaN coordinate counts as +infinity (so that it sorts, and is trimmed as an extreme
// value), and a NaN distance as an infinite one: a Byzantine update of NaNs is an outlier, not
// undefined behaviour.
//
// Cost for n updates of d floats: the mean is O(n d). Median, trimmed-mean and bulyan's second
// phase sort each coordinate's values with a sorting network (Batcher's merge exchange,
// O(n log^2 n) compare-exchanges) run over a block of coordinates at once, so that it
// vectorises: no branch per comparison and no allocation per coordinate. The Krum family computes
// the n (n - 1) / 2 pairwise distances once, O(n^2 d), in double, and then works on them alone. For
// n = 50, d = 10^6 on one core: median and trimmed-mean ~0.13 s, krum ~0.5 s.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_PS_ROBUST_AGGREGATE_H_
#define SYNCLINE_PS_ROBUST_AGGREGATE_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "job/aggregate_rule.h"
#include "syncline/options.h"

namespace syncline {

// What the Krum family chose.
struct AggregateChoice {
  // krum: the winner; multi-krum: the m lowest-scored, by score (ties: lower index first);
  // bulyan: the theta updates of the Krum phase, in the order they were selected. Empty for
  // mean, median and trimmed-mean.
  std::vector<int> selected;
};

// Combines the n = updates.size() updates, each of d = out.size() floats, into `out`, which must
// not overlap them. `weights` is empty (all equal) or has n values; mean needs them > 0 and
// finite, the robust rules ignore them. InvalidArgument when an update's length is not d, the
// weights are the wrong size or not positive (mean), or CheckAggregateRule(rule, n) fails; `out`
// is left untouched then. `choice`, when given, is filled as described above.
//
//   median: even n gives the mean of the two middle values.
//   krum: ties of the score go to the lower index.
//   bulyan: each round of the Krum phase runs over the r updates not yet selected, scoring
//     each by its max(r - f - 2, 1) nearest others (all r - 1 when fewer): the paper's n - f - 2
//     over the remaining set, which in the last rounds (r < f + 3) would leave no neighbour.
//     The median of an even theta is the mean of the two middle values; of two values equally
//     close to the median, the smaller is taken first.
absl::Status Aggregate(const AggregateRule& rule, std::span<const std::span<const float>> updates,
                       std::span<const float> weights, std::span<float> out,
                       AggregateChoice* choice = nullptr);

}  // namespace syncline

#endif  // SYNCLINE_PS_ROBUST_AGGREGATE_H_
