// Evaluation on an executor E (device/device_step.h): the metrics of models/metrics.h over
// scores that stay on the device (loss, hits, and the AUC by a radix sort and Mann-Whitney U),
// and a deterministic sum. Only sums cross to the host.
//
// Thread-safety: a DeviceEvaluation uses its executor alone; the functors are immutable.
#ifndef SYNCLINE_DEVICE_EVALUATION_H_
#define SYNCLINE_DEVICE_EVALUATION_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "core/host_device.h"
#include "device/kernels.h"
#include "models/example_metrics.h"

namespace syncline::device_step {

// The sum of src[0, n), deterministically (chunk sums of chunk sums); tmp is scratch. Waits
// for the device.
template <class E, class T>
T Sum(E& e, const T* src, size_t n, typename E::template Array<T>& tmp) {
  if (n == 0) return T{0};
  size_t chunks = (n + kColumnChunk - 1) / kColumnChunk;
  tmp.Reserve(chunks + (chunks + kColumnChunk - 1) / kColumnChunk);
  // Ping-pong between the two ends of tmp: level sizes shrink by kColumnChunk.
  T* in_place[2] = {tmp.data(), tmp.data() + chunks};
  e.ForEach(chunks, ColumnPartials<T>{src, n, 1, 1, in_place[0]});
  int at = 0;
  while (chunks > 1) {
    const size_t next = (chunks + kColumnChunk - 1) / kColumnChunk;
    e.ForEach(next, ColumnPartials<T>{in_place[at], chunks, 1, 1, in_place[1 - at]});
    at = 1 - at;
    chunks = next;
  }
  T sum;
  e.Download(&sum, in_place[at], 1);
  e.Finish();
  return sum;
}

// Example e's loss and hit (example_metrics.h) from its scores: P(y=1) when binary, else k
// class probabilities; labels are 0/1 when binary, else class indices (k: no class).
struct ExampleMetrics {
  const float* scores;
  const int32_t* labels;
  int k;
  bool binary;
  double* loss;
  uint32_t* hit;
  SYNCLINE_HD void operator()(size_t e) const {
    if (binary) {
      const bool positive = labels[e] == 1;
      loss[e] = example_metrics::BinaryLoss(scores[e], positive);
      hit[e] = example_metrics::BinaryHit(scores[e], positive) ? 1 : 0;
      return;
    }
    const float* p = scores + e * k;
    const auto label = static_cast<uint32_t>(labels[e]);
    loss[e] = example_metrics::ClassLoss(p, k, label);
    hit[e] = example_metrics::ClassHit(p, k, label) ? 1 : 0;
  }
};

struct RankKeys {
  const float* scores;
  uint32_t* keys;
  SYNCLINE_HD void operator()(size_t i) const { keys[i] = example_metrics::RankKey(scores[i]); }
};

// negative[i] = 1 when the i-th example in score order is negative; negative[n] = 0, so that
// the exclusive sum's last entry counts them all.
struct NegativeFlags {
  const uint32_t* order;
  const int32_t* labels;
  size_t n;
  uint32_t* negative;
  SYNCLINE_HD void operator()(size_t i) const {
    negative[i] = i < n && labels[order[i]] == 0 ? 1 : 0;
  }
};

// Mann-Whitney U, one term per example in score order: a positive counts the negatives scored
// below it and half of those tied with it (the negatives before its tie group's first and last
// positions, by binary search); negatives count 0.
struct AucTerms {
  const uint32_t* sorted;  // rank keys, ascending
  const uint32_t* order;
  const int32_t* labels;
  const uint32_t* negatives_before;  // n + 1: exclusive sum of NegativeFlags
  size_t n;
  double* term;
  SYNCLINE_HD void operator()(size_t i) const {
    if (labels[order[i]] == 0) {
      term[i] = 0;
      return;
    }
    const uint32_t below = negatives_before[LowerBound(sorted, n, sorted[i])];
    const uint32_t through = negatives_before[UpperBound(sorted, n, sorted[i])];
    term[i] = below + 0.5 * (through - below);
  }
};

// A test set's metrics, a batch at a time: each batch's loss and hits are summed as it comes,
// its binary scores and labels kept on the device for the AUC, which Auc computes there (a
// radix sort by score, then U above). Only sums cross to the host.
template <class E>
class DeviceEvaluation {
 public:
  DeviceEvaluation(int k, bool binary) : k_(k), binary_(binary) {}

  // Scores of `n` examples on the device (as Probabilities writes them) and their labels in
  // `labels` (host: 0/1 when binary, else class indices, k for none).
  void Add(E& e, const float* scores, const int32_t* labels, size_t n) {
    if (n == 0) return;
    host_labels_.Reserve(n);
    std::copy(labels, labels + n, host_labels_.data());
    batch_labels_.Reserve(n);
    e.Upload(batch_labels_.data(), host_labels_.data(), n);
    e.Fence();
    loss_.Reserve(n);
    hit_.Reserve(n);
    e.ForEach(n,
              ExampleMetrics{scores, batch_labels_.data(), k_, binary_, loss_.data(), hit_.data()});
    loss_sum_ += Sum(e, loss_.data(), n, double_tmp_);
    hits_ += Sum(e, hit_.data(), n, count_tmp_);
    if (binary_) {
      Keep(e, scores_, count_, n);
      Keep(e, labels_, count_, n);
      e.Copy(scores_.a.data() + count_, scores, n);
      e.Copy(labels_.a.data() + count_, batch_labels_.data(), n);
    }
    count_ += n;
    e.Finish();
  }

  // What has been added: examples, the sum of their losses, of their hits.
  size_t count() const { return count_; }
  double loss_sum() const { return loss_sum_; }
  uint64_t hits() const { return hits_; }

  // The AUC of the binary scores added (0.5 when a class is absent, as BinaryAuc; -1 for a
  // multiclass evaluation).
  double Auc(E& e) {
    if (!binary_) return -1;  // no scores kept
    const size_t n = count_;
    keys_.Reserve(n);
    sorted_.Reserve(n);
    order_.Reserve(n);
    negative_.Reserve(n + 1);
    before_.Reserve(n + 1);
    term_.Reserve(n);
    e.ForEach(n, RankKeys{scores_.a.data(), keys_.data()});
    e.SortBySlot(keys_.data(), sorted_.data(), order_.data(), n, 32);
    e.ForEach(n + 1, NegativeFlags{order_.data(), labels_.a.data(), n, negative_.data()});
    e.ExclusiveSum(negative_.data(), before_.data(), n + 1);
    e.ForEach(n, AucTerms{sorted_.data(), order_.data(), labels_.a.data(), before_.data(), n,
                          term_.data()});
    const double u = Sum(e, term_.data(), n, double_tmp_);
    uint32_t negatives = 0;
    e.Download(&negatives, before_.data() + n, 1);
    e.Finish();
    const size_t positives = n - negatives;
    if (positives == 0 || negatives == 0) return 0.5;
    return u / (static_cast<double>(positives) * static_cast<double>(negatives));
  }

 private:
  // Storage that keeps its first elements when it grows.
  template <class T>
  struct Kept {
    typename E::template Array<T> a;
    size_t capacity = 0;
  };
  // Grows `k` to hold `more` after its first `kept` elements, keeping them.
  template <class T>
  static void Keep(E& e, Kept<T>& k, size_t kept, size_t more) {
    if (kept + more <= k.capacity) return;
    const size_t grown = 2 * (kept + more);
    typename E::template Array<T> bigger;
    bigger.Reserve(grown);
    e.Copy(bigger.data(), k.a.data(), kept);
    e.Finish();
    k.a = std::move(bigger);
    k.capacity = grown;
  }

  const int k_;
  const bool binary_;
  size_t count_ = 0;
  double loss_sum_ = 0;
  uint64_t hits_ = 0;
  typename E::template PinnedArray<int32_t> host_labels_;
  typename E::template Array<int32_t> batch_labels_;
  Kept<int32_t> labels_;
  Kept<float> scores_;
  typename E::template Array<double> loss_, term_, double_tmp_;
  typename E::template Array<uint32_t> hit_, count_tmp_, keys_, sorted_, order_, negative_, before_;
};

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_EVALUATION_H_
