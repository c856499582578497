// The kernels the device steps share (device/device_step.h says what a kernel and an executor
// are): finding a batch's rows, the sparse layer's forward gather, losses and their deltas,
// probabilities, deterministic column sums, the dense layers' pieces, and small helpers. The
// sparse layer's backward scatter is in device/scatter.h, the ctr model's kernels in
// device/ctr_kernels.h.
//
// Thread-safety: the functors are immutable.
#ifndef SYNCLINE_DEVICE_KERNELS_H_
#define SYNCLINE_DEVICE_KERNELS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace syncline::device_step {

// A feature whose id is not among the batch's keys (a zero row, no gradient).
inline constexpr uint32_t kNoSlot = 0xFFFFFFFFu;
// Examples per partial sum of a column sum: the chunks' partials are then summed in order.
inline constexpr size_t kColumnChunk = 256;

// ---------------------------------------------------------------------------------------------
// What the kernels share.

// The first position in the sorted a[0, n) whose value is not below `value` (n if none).
template <class T, class V>
SYNCLINE_HD size_t LowerBound(const T* a, size_t n, V value) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (a[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}
// ... and whose value is above it.
template <class T, class V>
SYNCLINE_HD size_t UpperBound(const T* a, size_t n, V value) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (!(value < a[mid])) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// 1 / (1 + e^-x), without overflow either way.
SYNCLINE_HD inline double Sigmoid(double x) {
  return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
}

// out[0, dim) = the softmax of z[0, dim) (out may be z); returns log(sum of e^z), computed
// from the largest logit so that it never overflows.
SYNCLINE_HD inline double Softmax(const float* z, int dim, float* out) {
  double max_z = z[0];
  for (int c = 1; c < dim; ++c) max_z = z[c] > max_z ? z[c] : max_z;
  double sum = 0;
  for (int c = 0; c < dim; ++c) sum += exp(static_cast<double>(z[c]) - max_z);
  for (int c = 0; c < dim; ++c) {
    out[c] = static_cast<float>(exp(static_cast<double>(z[c]) - max_z) / sum);
  }
  return max_z + log(sum);
}

// ---------------------------------------------------------------------------------------------
// The sparse layer, losses and dense layers.

// slots[j]: the position of ids[j] in the sorted keys[0, num_keys), or kNoSlot.
struct FindSlots {
  const uint64_t* keys;
  size_t num_keys;
  const uint64_t* ids;
  uint32_t* slots;
  SYNCLINE_HD void operator()(size_t j) const {
    const uint64_t id = ids[j];
    const size_t at = LowerBound(keys, num_keys, id);
    slots[j] = at < num_keys && keys[at] == id ? static_cast<uint32_t>(at) : kNoSlot;
  }
};

// example_of[j] = e for every feature j of example e.
struct ExampleOfFeature {
  const uint32_t* offsets;  // n + 1
  uint32_t* example_of;
  SYNCLINE_HD void operator()(size_t e) const {
    for (uint32_t j = offsets[e]; j < offsets[e + 1]; ++j) example_of[j] = static_cast<uint32_t>(e);
  }
};

// Feature j of a batch gathered from a dataset kept on the device (ResidentData): its example
// is the last one whose batch offset is at most j (one binary search; empty examples share their
// offset with the next), and the feature is that example's (j - offset)-th in the dataset.
// values may be null (the ids alone: BatchKeys).
struct GatherResident {
  const uint32_t* offsets;  // n + 1, relative to the batch
  size_t n;
  const uint32_t* examples;     // n, indices into the dataset
  const uint64_t* row_offsets;  // the dataset's
  const uint64_t* data_ids;     // the dataset's
  const float* data_values;     // the dataset's
  uint64_t* ids;
  float* values;
  SYNCLINE_HD void operator()(size_t j) const {
    const size_t e = UpperBound(offsets, n + 1, static_cast<uint32_t>(j)) - 1;
    const uint64_t src = row_offsets[examples[e]] + (j - offsets[e]);
    ids[j] = data_ids[src];
    if (values != nullptr) values[j] = data_values[src];
  }
};

// begins[u] = the first position in the slot-sorted features whose slot is >= u, for u in
// [0, num_keys]: row u's features are sorted[begins[u], begins[u + 1]) (missing ones, kNoSlot,
// sort last and belong to no row).
struct SegmentBegins {
  const uint32_t* sorted_slots;
  size_t nnz;
  uint32_t* begins;
  SYNCLINE_HD void operator()(size_t u) const {
    begins[u] = static_cast<uint32_t>(LowerBound(sorted_slots, nnz, u));
  }
};

// The gather-sum of a sparse layer: out[e][k] = bias[k] + sum over e's features j of
// values[j] * rows[slots[j]][k], for i = e * dim + k (consecutive threads read consecutive
// floats of a row). Summed in double, in feature order.
struct SparseForward {
  const uint32_t* offsets;
  const uint32_t* slots;
  const float* values;
  const float* rows;
  const float* bias;
  int dim;
  float* out;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t e = i / dim;
    const size_t k = i % dim;
    double z = bias[k];
    for (uint32_t j = offsets[e]; j < offsets[e + 1]; ++j) {
      const uint32_t slot = slots[j];
      if (slot == kNoSlot) continue;
      z += static_cast<double>(values[j]) * rows[static_cast<size_t>(slot) * dim + k];
    }
    out[i] = static_cast<float>(z);
  }
};

// Log loss (binary: one logit per example) or softmax cross-entropy (dim logits) of example e
// against labels[e] (the class index; 0/1 when binary), in log space so it never overflows.
// Writes the loss to loss[e] and dLoss/dz over the logits, in place.
struct LossAndDelta {
  const int32_t* labels;
  int dim;
  bool binary;
  float* z;  // [n][dim] logits in, their gradients out
  double* loss;
  SYNCLINE_HD void operator()(size_t e) const {
    float* ze = z + e * dim;
    const int label = labels[e];
    if (binary) {
      const double x = ze[0];
      const double softplus = (x > 0 ? x : 0.0) + log1p(exp(-fabs(x)));
      loss[e] = softplus - (label == 1 ? x : 0.0);
      ze[0] = static_cast<float>(Sigmoid(x) - label);
      return;
    }
    const double label_logit = ze[label];
    loss[e] = Softmax(ze, dim, ze) - label_logit;
    ze[label] -= 1.0f;
  }
};

// Scores of example e: P(y=1) (binary) or the softmax of its dim logits.
struct Probabilities {
  const float* z;
  int dim;
  bool binary;
  float* out;  // [n] (binary) or [n][dim]
  SYNCLINE_HD void operator()(size_t e) const {
    const float* ze = z + e * dim;
    if (binary) {
      out[e] = static_cast<float>(Sigmoid(ze[0]));
      return;
    }
    Softmax(ze, dim, out + e * dim);
  }
};

// Column sums of src [n][cols] (rows ld values apart), in two passes that fix the order of the
// additions: partial[c][k] sums rows [c * kColumnChunk, (c + 1) * kColumnChunk) (i = c * cols +
// k) ... (One column, ld 1: the chunk sums of a vector, which Sum adds up.)
template <class T>
struct ColumnPartials {
  const T* src;
  size_t n;
  int cols;
  size_t ld;
  T* partial;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t c = i / cols;
    const size_t k = i % cols;
    const size_t end = (c + 1) * kColumnChunk < n ? (c + 1) * kColumnChunk : n;
    T sum = 0;
    for (size_t r = c * kColumnChunk; r < end; ++r) sum += src[r * ld + k];
    partial[i] = sum;
  }
};
// ... then out[k] = the chunks' partials in order (SETS out).
struct ColumnTotals {
  const float* partial;
  size_t chunks;
  int cols;
  float* out;
  SYNCLINE_HD void operator()(size_t k) const {
    float sum = 0;
    for (size_t c = 0; c < chunks; ++c) sum += partial[c * cols + k];
    out[k] = sum;
  }
};

// y[i] = b[i % width]: an affine layer's output before the product is added.
struct BroadcastRows {
  const float* b;
  int width;
  float* y;
  SYNCLINE_HD void operator()(size_t i) const { y[i] = b[i % width]; }
};

struct Relu {
  const float* pre;
  float* h;
  SYNCLINE_HD void operator()(size_t i) const { h[i] = pre[i] > 0 ? pre[i] : 0.0f; }
};

// dpre = dh where pre > 0, else 0 (dpre may be dh).
struct ReluBackward {
  const float* pre;
  const float* dh;
  float* dpre;
  SYNCLINE_HD void operator()(size_t i) const { dpre[i] = pre[i] > 0 ? dh[i] : 0.0f; }
};

// ---------------------------------------------------------------------------------------------
// Kept rows and radix sorts.

// Row gradients (aligned with the sorted unique keys) added into a dense gradient where key k's
// row starts at k * dim, for the keys below `rows` (i = slot * dim + j; unique keys, so no two
// threads share a target).
struct ScatterByKey {
  const uint64_t* keys;
  int dim;
  uint64_t rows;
  const float* grads;
  float* dense;
  SYNCLINE_HD void operator()(size_t i) const {
    const uint64_t key = keys[i / dim];
    if (key < rows) dense[key * dim + i % dim] += grads[i];
  }
};

// dst[i] += src[i].
struct AddInto {
  const float* src;
  float* dst;
  SYNCLINE_HD void operator()(size_t i) const { dst[i] += src[i]; }
};

// Bits a radix sort needs for values in [0, limit].
inline int BitsFor(uint64_t limit) {
  int bits = 1;
  while (bits < 32 && (uint64_t{1} << bits) <= limit) ++bits;
  return bits;
}

// out [cols] = the column sums of src [n][cols] (rows ld floats apart; 0: cols),
// deterministically.
template <class E>
void ColumnSums(E& e, const float* src, size_t n, int cols, typename E::template Array<float>& tmp,
                float* out, size_t ld = 0) {
  const size_t chunks = (n + kColumnChunk - 1) / kColumnChunk;
  if (chunks == 0) {
    e.Zero(out, cols);
    return;
  }
  tmp.Reserve(chunks * cols);
  e.ForEach(chunks * cols, ColumnPartials<float>{src, n, cols, ld == 0 ? cols : ld, tmp.data()});
  e.ForEach(cols, ColumnTotals{tmp.data(), chunks, cols, out});
}

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_KERNELS_H_
