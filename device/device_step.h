// The models' training step and evaluation written once for a data-parallel executor: a CUDA
// GPU (device/cuda_model.cu) or, for tests, the host (device/host_executor.h).
//
// Every kernel is a functor over an index, `void operator()(size_t i) const`, marked
// SYNCLINE_HD so that nvcc compiles it for the device and g++ for the host. The steps
// (SparseStep, LinearStep, MlpStep, ...) call an executor E for what a GPU library does better
// than a hand-written kernel:
//
//   E::Array<T>          grow-only storage where the kernels run: data(), Reserve(n)
//   E::PinnedArray<T>    grow-only host storage that uploads and downloads read and write
//   e.ForEach(n, f)      f(i) for every i in [0, n), in any order and concurrently
//   e.Upload(dst, src, n)
//                        host to device, on a copy stream: kernels see it after e.Fence()
//   e.Fence()            work issued after it waits for the uploads issued before it
//   e.Download(dst, src, n), e.Zero(p, n)
//                        in order with the kernels
//   e.Gemm(...)          row-major C = alpha op(A) op(B) + beta C, as models/gemm.h (cuBLAS)
//   e.SortBySlot(slots, sorted, order, n, bits)
//                        stable sort of occurrence indices by slot (a radix sort: CUB)
//   e.ExclusiveSum(in, out, n)
//                        out[i] = in[0] + ... + in[i - 1] (uint32; a scan: CUB)
//   e.SortByKey64(keys, order, n, bits)
//                        order[0, n) = the indices of keys[0, n) in a stable sort by key
//                        (64-bit, each below 2^bits; a radix sort: CUB)
//   E::BlockCodec        a codec over floats where the kernels run (the CUDA codecs):
//                        Input(n) -> where it reads, Encode(n, &block) -> the block on the
//                        host, Decode(n) -> the last block decoded, where the kernels run
//   e.SortUnique(ids, n, out) -> count
//                        the sorted unique values of ids[0, n) into out (CUB)
//   e.Copy(dst, src, n)  device to device, in order with the kernels
//   e.Finish()           waits for the work and the uploads issued
//   e.Activate()         makes the executor's device the calling thread's (a model's entry
//                        points call it first)
//
// The host executor runs the same steps serially, so the index arithmetic of every kernel and
// the order of every step is checked against the CPU models (device_model_test.cc) on machines
// without a GPU; the same tests run the CUDA executor where there is one.
//
// Determinism: no kernel uses atomics. Row gradients are summed per row in the order the
// features occur in the batch (a stable sort groups them), in pieces of kPiece features whose
// partial sums are then added in order; dense gradients per column in fixed chunks; the loss
// per example (summed on the host in example order). So a step's result is a pure function of
// its inputs, as BSP's reproducibility needs.
//
// Thread-safety: the functors are immutable; a step uses its executor and buffers alone.
#ifndef SYNCLINE_DEVICE_DEVICE_STEP_H_
#define SYNCLINE_DEVICE_DEVICE_STEP_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/host_device.h"
#include "models/example_metrics.h"
#include "models/gemm.h"

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
// Kernels.

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

// The scatter of a gradient onto the batch's rows: grads[u][k] = the sum over row u's features
// j, in the order they occur, of a term (j, k). A row may have thousands of features (a field
// with a handful of values), so the sum is cut into pieces of kPiece features: each piece's
// partial sum is one thread's (SumPieces), then each row adds its pieces' partials in order
// (AddPieces, launched over the few rows with several pieces only: one with more than kPiece
// features). The order is fixed by the batch alone, so the result is deterministic, with no
// atomics, and no thread's chain of loads is longer than kPiece + the row's pieces. Most rows
// of a skewed batch have one feature, so the scatter is bound by the latency of its chain of
// dependent loads (piece, feature, example, gradient): each thread sums up to kScatterColumns
// columns, whose loads are independent, and finds its piece's span in one load. A batch of few
// pieces (hot rows: a field of 4 values gives 20k pieces for 65536 examples) would then leave
// most of a GPU idle: below kScatterFewThreads threads at kScatterColumns columns (about one
// wave of an H200's 132 x 2048), each thread sums one column instead (on an H200, at 64-byte
// rows, hot rows' scatter measured 0.45-0.49 of a copy with one column, 0.34 with four; the
// skewed rows', with millions of pieces, 0.30 with four and less with one).
inline constexpr uint32_t kPiece = 128;
inline constexpr int kScatterColumns = 4;
inline constexpr size_t kScatterFewThreads = size_t{1} << 18;
// Unrolls the loop over a thread's columns on the device (its sums stay in registers).
#ifdef __CUDA_ARCH__
#define SYNCLINE_UNROLL _Pragma("unroll")
#else
#define SYNCLINE_UNROLL
#endif

// Piece q of the scatter: features [from, to) of the sorted order, all of row `row`, which
// has `pieces` of them.
struct alignas(16) PieceSpan {
  uint32_t from, to, row, pieces;
};

// The term of a sparse layer: values[j] * dout[example_of[j]][k].
struct SparseTerm {
  const uint32_t* example_of;
  const float* values;
  const float* dout;
  int dim;
  SYNCLINE_HD float operator()(uint32_t j, size_t k) const {
    return values[j] * dout[static_cast<size_t>(example_of[j]) * dim + k];
  }
};

// pieces[u] = the pieces of row u's features, one at least (a row without features in the
// batch has one empty piece, whose sum is 0), and 0 for u = num_keys, so that an exclusive sum
// over num_keys + 1 entries ends with the total; several[u] = whether row u has more than one.
struct CountPieces {
  const uint32_t* begins;
  size_t num_keys;
  uint32_t* pieces;
  uint32_t* several;
  SYNCLINE_HD void operator()(size_t u) const {
    const uint32_t count =
        u < num_keys ? (begins[u + 1] - begins[u] + kPiece - 1) / kPiece : uint32_t{0};
    pieces[u] = u < num_keys && count == 0 ? 1 : count;
    several[u] = count > 1 ? 1 : 0;
  }
};

// spans[q] for row u's pieces [first[u], first[u + 1]) (i = u), and the rows with several
// pieces listed in order: multi[several_at[u]] = u.
struct PieceSpans {
  const uint32_t* begins;
  const uint32_t* first;
  const uint32_t* several_at;
  PieceSpan* spans;
  uint32_t* multi;
  SYNCLINE_HD void operator()(size_t u) const {
    const uint32_t pieces = first[u + 1] - first[u];
    for (uint32_t q = first[u]; q < first[u + 1]; ++q) {
      const uint32_t from = begins[u] + (q - first[u]) * kPiece;
      spans[q] = PieceSpan{from, from + kPiece < begins[u + 1] ? from + kPiece : begins[u + 1],
                           static_cast<uint32_t>(u), pieces};
    }
    if (pieces > 1) multi[several_at[u]] = static_cast<uint32_t>(u);
  }
};

// The sum of term(j, k) over piece q's features for the columns k = lane + c * lanes
// (c < kColumns, k < width; i = q * lanes + lane): a row's only piece goes straight to
// grads[u][k], the pieces of a row with several to partial[q][k], for AddPieces. Launched over
// a bound on the pieces: those past the total (first[num_keys]) do nothing.
template <class Term, int kColumns>
struct SumPieces {
  const PieceSpan* spans;
  const uint32_t* first;
  const uint32_t* order;
  size_t num_keys;
  int width, lanes;
  Term term;
  float* partial;
  float* grads;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t q = i / lanes;
    const int lane = static_cast<int>(i % lanes);
    if (q >= first[num_keys]) return;
    const PieceSpan span = spans[q];
    float sum[kColumns] = {};
    for (uint32_t p = span.from; p < span.to; ++p) {
      const uint32_t j = order[p];
      SYNCLINE_UNROLL
      for (int c = 0; c < kColumns; ++c) {
        const int k = lane + c * lanes;
        if (k < width) sum[c] += term(j, k);
      }
    }
    float* out =
        span.pieces == 1 ? grads + static_cast<size_t>(span.row) * width : partial + q * width;
    SYNCLINE_UNROLL
    for (int c = 0; c < kColumns; ++c) {
      const int k = lane + c * lanes;
      if (k < width) out[k] = sum[c];
    }
  }
};

// grads[u][k] = the sum of row u's pieces' partials, in order, for the r-th row with several
// pieces, u = multi[r] (SETS grads; i = r * width + k). Launched over a bound on such rows:
// those past the count (several_at[num_keys]) do nothing.
struct AddPieces {
  const uint32_t* first;
  const uint32_t* several_at;
  const uint32_t* multi;
  size_t num_keys;
  const float* partial;
  int width;
  float* grads;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t r = i / width;
    const size_t k = i % width;
    if (r >= several_at[num_keys]) return;
    const size_t u = multi[r];
    float sum = 0;
    for (uint32_t q = first[u]; q < first[u + 1]; ++q)
      sum += partial[static_cast<size_t>(q) * width + k];
    grads[u * width + k] = sum;
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
// The ctr model's kernels (models/ctr_model.h has the model). An example has 13 dense values and
// 26 categorical ids (kCtrFields), one feature each in the batch's CSR, so feature j is example
// j / 26's field j % 26. Its 27 vectors (the bottom layer's output, then the embeddings) are
// v [n][27][D].

inline constexpr int kCtrDense = 13;
inline constexpr int kCtrFields = 26;
inline constexpr int kCtrVectors = 1 + kCtrFields;
inline constexpr int kCtrPairs = kCtrVectors * (kCtrVectors - 1) / 2;

// v[e][1 + f][d] = the embedding of example e's field f (zeros for a missing id);
// i = (e * 26 + f) * D + d.
struct CtrEmbeddings {
  const uint32_t* slots;
  const float* rows;  // [keys][D + 1]: the embedding, then the first-order weight
  int dim;
  float* v;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t j = i / dim;
    const size_t d = i % dim;
    const size_t e = j / kCtrFields;
    const size_t f = j % kCtrFields;
    const uint32_t slot = slots[j];
    v[(e * kCtrVectors + 1 + f) * dim + d] =
        slot == kNoSlot ? 0.0f : rows[static_cast<size_t>(slot) * (dim + 1) + d];
  }
};

// fo[e] = the sum of example e's first-order weights, in field order.
struct CtrFirstOrder {
  const uint32_t* slots;
  const float* rows;
  int dim;
  float* fo;
  SYNCLINE_HD void operator()(size_t e) const {
    float sum = 0;
    for (int f = 0; f < kCtrFields; ++f) {
      const uint32_t slot = slots[e * kCtrFields + f];
      if (slot != kNoSlot) sum += rows[static_cast<size_t>(slot) * (dim + 1) + dim];
    }
    fo[e] = sum;
  }
};

// v[e][0] = x[e] (the bottom layer's output); i = e * D + d.
struct CtrPlaceBottom {
  const float* x;
  int dim;
  float* v;
  SYNCLINE_HD void operator()(size_t i) const { v[(i / dim) * kCtrVectors * dim + i % dim] = x[i]; }
};

// z [n][inputs]: x, then the dot product of every pair (a < c) of the 27 vectors, in the order
// pair_a / pair_c list them; i = e * inputs + j.
struct CtrInteract {
  const float* v;
  const uint8_t* pair_a;
  const uint8_t* pair_c;
  int dim;
  int inputs;
  float* z;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t e = i / inputs;
    const int j = static_cast<int>(i % inputs);
    const float* ve = v + e * kCtrVectors * dim;
    if (j < dim) {
      z[i] = ve[j];
      return;
    }
    const float* a = ve + pair_a[j - dim] * dim;
    const float* c = ve + pair_c[j - dim] * dim;
    float sum = a[0] * c[0];
    for (int d = 1; d < dim; ++d) sum += a[d] * c[d];
    z[i] = sum;
  }
};

// logit[e] = out_b + out_w . h[e] + fo[e].
struct CtrLogit {
  const float* h;  // [n][hidden]
  const float* out_w;
  const float* out_b;
  const float* fo;
  int hidden;
  float* logit;
  SYNCLINE_HD void operator()(size_t e) const {
    float dot = 0;
    for (int k = 0; k < hidden; ++k) dot += out_w[k] * h[e * hidden + k];
    logit[e] = out_b[0] + dot + fo[e];
  }
};

// dh[e][k] = g[e] * out_w[k] where pre > 0, else 0; i = e * hidden + k.
struct CtrHiddenDelta {
  const float* pre;
  const float* g;
  const float* out_w;
  int hidden;
  float* dh;
  SYNCLINE_HD void operator()(size_t i) const {
    dh[i] = pre[i] > 0 ? g[i / hidden] * out_w[i % hidden] : 0.0f;
  }
};

// dv [n][27][D] through the interaction: dv[e][u] = (u == 0: dz's x part) + the sum over the
// other vectors w of dz[e][pair(u, w)] * v[e][w]; i = (e * 27 + u) * D + d.
struct CtrInteractBackward {
  const float* dz;  // [n][inputs]
  const float* v;
  const int16_t* pair_of;  // [27][27]: the pair index of (a, c), a != c
  int dim;
  int inputs;
  float* dv;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t d = i % dim;
    const size_t eu = i / dim;
    const size_t e = eu / kCtrVectors;
    const int u = static_cast<int>(eu % kCtrVectors);
    const float* dze = dz + e * inputs;
    const float* ve = v + e * kCtrVectors * dim;
    float sum = u == 0 ? dze[d] : 0.0f;
    for (int w = 0; w < kCtrVectors; ++w) {
      if (w == u) continue;
      sum += dze[dim + pair_of[u * kCtrVectors + w]] * ve[w * dim + d];
    }
    dv[i] = sum;
  }
};

// The ctr model's term for a row's gradient [D + 1]: feature j's embedding gradient (dv of its
// field) for k < D, and its example's g for the first-order weight.
struct CtrTerm {
  const float* dv;
  const float* g;
  int dim;
  SYNCLINE_HD float operator()(uint32_t j, size_t k) const {
    const size_t e = j / kCtrFields;
    return k < static_cast<size_t>(dim) ? dv[(e * kCtrVectors + 1 + j % kCtrFields) * dim + k]
                                        : g[e];
  }
};

// ---------------------------------------------------------------------------------------------
// Steps.

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

// A batch as the host packs it for the device, in pinned memory: examples' features (CSR,
// offsets relative to the batch) and labels as class indices (0/1 when binary). A batch of a
// dataset kept on the device (resident) has its offsets, labels and example indices only: its
// features are gathered there.
template <class E>
struct HostBatch {
  typename E::template PinnedArray<uint32_t> offsets;   // n + 1
  typename E::template PinnedArray<uint64_t> ids;       // nnz
  typename E::template PinnedArray<float> values;       // nnz
  typename E::template PinnedArray<int32_t> labels;     // n
  typename E::template PinnedArray<float> dense;        // ctr: [n][13]
  typename E::template PinnedArray<uint32_t> examples;  // resident: n
  size_t n = 0, nnz = 0;
  bool resident = false;

  void Reserve(size_t examples_, size_t features, bool ctr) {
    n = examples_;
    nnz = features;
    resident = false;
    offsets.Reserve(n + 1);
    ids.Reserve(nnz);
    values.Reserve(nnz);
    labels.Reserve(n);
    if (ctr) dense.Reserve(n * kCtrDense);
  }
  void ReserveResident(size_t examples_, size_t features) {
    n = examples_;
    nnz = features;
    resident = true;
    offsets.Reserve(n + 1);
    labels.Reserve(n);
    examples.Reserve(n + 1);
  }
};

// A dataset's examples on the device (DeviceModel's kept partition): its row offsets, ids and
// values as the Dataset holds them.
template <class E>
struct ResidentData {
  size_t examples = 0, nnz = 0;
  typename E::template Array<uint64_t> row_offsets, ids;
  typename E::template Array<float> values;

  // Uploads `data`'s features (on the copy stream: a Fence() before they are read).
  template <class Data>
  void Upload(E& e, const Data& data) {
    examples = data.size();
    nnz = data.ids.size();
    row_offsets.Reserve(examples + 1);
    ids.Reserve(nnz + 1);
    values.Reserve(nnz + 1);
    e.Upload(row_offsets.data(), data.row_offsets.data(), examples + 1);
    e.Upload(ids.data(), data.ids.data(), nnz);
    e.Upload(values.data(), data.values.data(), nnz);
  }
  // The ids (and values) of a batch's features, from its offsets and examples on the device.
  void Gather(E& e, const uint32_t* offsets, size_t n, const uint32_t* batch_examples,
              size_t batch_nnz, uint64_t* out_ids, float* out_values) const {
    e.ForEach(batch_nnz, GatherResident{offsets, n, batch_examples, row_offsets.data(), ids.data(),
                                        values.data(), out_ids, out_values});
  }
  // Bytes it takes for `data`.
  template <class Data>
  static size_t BytesFor(const Data& data) {
    return (data.size() + 1) * sizeof(uint64_t) +
           data.ids.size() * (sizeof(uint64_t) + sizeof(float));
  }
};

// A batch's features on the device, indexed by the rows of its keys.
template <class E>
class SparseBatch {
 public:
  // Uploads `batch` and `keys` (sorted unique: the rows the model reads, in this order); Index
  // needs a Fence() after it.
  void Upload(E& e, const HostBatch<E>& batch, const uint64_t* keys, size_t num_keys) {
    UploadCommon(e, batch, keys, num_keys);
    gather_from_ = nullptr;
    e.Upload(ids_.data(), batch.ids.data(), nnz_);
    e.Upload(values_.data(), batch.values.data(), nnz_);
  }

  // The same for a batch of a dataset kept on the device: its offsets, labels and example
  // indices go up, and Index gathers its features from `data` (which must stay until then).
  void UploadResident(E& e, const HostBatch<E>& batch, const ResidentData<E>& data,
                      const uint64_t* keys, size_t num_keys) {
    UploadCommon(e, batch, keys, num_keys);
    gather_from_ = &data;
    examples_.Reserve(n_ + 1);
    e.Upload(examples_.data(), batch.examples.data(), n_);
  }

  // Finds each feature's row, and the features of each row in order (gathering them first
  // for a batch of resident data).
  void Index(E& e) {
    if (gather_from_ != nullptr) {
      gather_from_->Gather(e, offsets_.data(), n_, examples_.data(), nnz_, ids_.data(),
                           values_.data());
      gather_from_ = nullptr;
    }
    slots_.Reserve(nnz_);
    sorted_slots_.Reserve(nnz_);
    order_.Reserve(nnz_);
    example_of_.Reserve(nnz_);
    begins_.Reserve(num_keys_ + 1);
    e.ForEach(nnz_, FindSlots{keys_.data(), num_keys_, ids_.data(), slots_.data()});
    e.ForEach(n_, ExampleOfFeature{offsets_.data(), example_of_.data()});
    // The sort looks at the low BitsFor(num_keys) bits only: kNoSlot's are all ones, at least
    // num_keys, so missing features still sort after every row's.
    e.SortBySlot(slots_.data(), sorted_slots_.data(), order_.data(), nnz_, BitsFor(num_keys_));
    e.ForEach(num_keys_ + 1, SegmentBegins{sorted_slots_.data(), nnz_, begins_.data()});
    pieces_.Reserve(num_keys_ + 1);
    first_.Reserve(num_keys_ + 1);
    several_.Reserve(num_keys_ + 1);
    several_at_.Reserve(num_keys_ + 1);
    e.ForEach(num_keys_ + 1,
              CountPieces{begins_.data(), num_keys_, pieces_.data(), several_.data()});
    e.ExclusiveSum(pieces_.data(), first_.data(), num_keys_ + 1);
    e.ExclusiveSum(several_.data(), several_at_.data(), num_keys_ + 1);
    spans_.Reserve(PiecesBound());
    multi_.Reserve(MultiBound());
    e.ForEach(num_keys_, PieceSpans{begins_.data(), first_.data(), several_at_.data(),
                                    spans_.data(), multi_.data()});
  }

  // out [n][dim] = bias + the gather-sum of rows [num_keys][dim].
  void Gather(E& e, const float* rows, const float* bias, int dim, float* out) const {
    e.ForEach(n_ * dim,
              SparseForward{offsets_.data(), slots_.data(), values_.data(), rows, bias, dim, out});
  }
  // grads [num_keys][dim] = the scatter of dout [n][dim].
  void Scatter(E& e, const float* dout, int dim, float* grads) const {
    ScatterTerms(e, SparseTerm{example_of_.data(), values_.data(), dout, dim}, dim, grads);
  }
  // grads [num_keys][width] = each row's sum of term(j, k) over its features (see SumPieces).
  template <class Term>
  void ScatterTerms(E& e, const Term& term, int width, float* grads) const {
    partial_.Reserve(PiecesBound() * width);
    if (ScatterColumns(width) == 1) {
      e.ForEach(PiecesBound() * width,
                SumPieces<Term, 1>{spans_.data(), first_.data(), order_.data(), num_keys_, width,
                                   width, term, partial_.data(), grads});
    } else {
      const int lanes = (width + kScatterColumns - 1) / kScatterColumns;
      e.ForEach(PiecesBound() * lanes, SumPieces<Term, kScatterColumns>{
                                           spans_.data(), first_.data(), order_.data(), num_keys_,
                                           width, lanes, term, partial_.data(), grads});
    }
    e.ForEach(MultiBound() * width, AddPieces{first_.data(), several_at_.data(), multi_.data(),
                                              num_keys_, partial_.data(), width, grads});
  }

  // The columns a scatter's thread sums at this width: kScatterColumns, or 1 where that would
  // leave fewer than kScatterFewThreads threads. set_scatter_columns(1 or kScatterColumns)
  // forces one (tests and benchmarks; 0: choose).
  int ScatterColumns(int width) const {
    if (scatter_columns_ != 0) return scatter_columns_;
    const size_t lanes = (static_cast<size_t>(width) + kScatterColumns - 1) / kScatterColumns;
    return PiecesBound() * lanes < kScatterFewThreads ? 1 : kScatterColumns;
  }
  void set_scatter_columns(int columns) { scatter_columns_ = columns; }

  size_t n() const { return n_; }
  size_t num_keys() const { return num_keys_; }
  // Bounds on the pieces (each row's features / kPiece, rounded up, and one for a row without
  // any) and on the rows with several (more than kPiece features each).
  size_t PiecesBound() const { return nnz_ / kPiece + num_keys_ + 1; }
  size_t MultiBound() const { return nnz_ / (kPiece + 1) + 1; }
  const uint64_t* keys() const { return keys_.data(); }
  const int32_t* labels() const { return labels_.data(); }
  const uint32_t* slots() const { return slots_.data(); }
  const uint32_t* order() const { return order_.data(); }
  const uint32_t* begins() const { return begins_.data(); }

 private:
  // What both uploads do: the sizes, room for the features, and the offsets, labels and keys.
  void UploadCommon(E& e, const HostBatch<E>& batch, const uint64_t* keys, size_t num_keys) {
    n_ = batch.n;
    nnz_ = batch.nnz;
    num_keys_ = num_keys;
    offsets_.Reserve(n_ + 1);
    ids_.Reserve(nnz_);
    values_.Reserve(nnz_);
    labels_.Reserve(n_);
    keys_.Reserve(num_keys_);
    e.Upload(offsets_.data(), batch.offsets.data(), n_ + 1);
    e.Upload(labels_.data(), batch.labels.data(), n_);
    e.Upload(keys_.data(), keys, num_keys_);
  }

  size_t n_ = 0, nnz_ = 0, num_keys_ = 0;
  int scatter_columns_ = 0;
  typename E::template Array<uint32_t> offsets_, slots_, sorted_slots_, order_, example_of_,
      begins_, pieces_, first_, several_, several_at_, multi_, examples_;
  const ResidentData<E>* gather_from_ = nullptr;  // UploadResident's, until Index
  typename E::template Array<PieceSpan> spans_;
  mutable typename E::template Array<float> partial_;  // SumPieces' partial sums
  typename E::template Array<uint64_t> ids_, keys_;
  typename E::template Array<float> values_;
  typename E::template Array<int32_t> labels_;
};

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

// The layout of a model's parameters as the steps use it: row_dim floats per key; the dense
// ("bias") table holds the first layer's bias at b[0] and, for the layers i >= 1 of an mlp,
// input-major weights at w[i] and the bias at b[i]. widths: every layer's outputs, the logits'
// last (one layer: a linear model).
struct Shape {
  std::vector<int> widths;
  std::vector<size_t> w, b;
  size_t dense = 0;  // floats in the dense table
  bool binary = false;
  int row_dim() const { return widths[0]; }
  int outputs() const { return widths.back(); }

  // The ctr model (models/ctr_model.h's CtrLayout): D, H, the top layer's inputs and where each
  // dense parameter sits. ctr_dim 0: not a ctr model.
  int ctr_dim = 0, ctr_hidden = 0, ctr_inputs = 0;
  size_t bottom_w = 0, bottom_b = 0, top_w = 0, top_b = 0, out_w = 0, out_b = 0;
};

// Activations of a forward pass, kept for the backward pass.
template <class E>
struct Activations {
  std::vector<typename E::template Array<float>> pre, h;  // per layer, [n][width]
  typename E::template Array<float> dh, dpre, column_tmp;
  typename E::template Array<double> loss;  // per example
};

// Forward pass over a loaded batch: act->pre.back() holds the logits.
template <class E>
void Forward(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
             const float* dense, Activations<E>* act) {
  const size_t n = batch.n();
  const int layers = static_cast<int>(s.widths.size());
  act->pre.resize(layers);
  act->h.resize(layers);
  for (int i = 0; i < layers; ++i) act->pre[i].Reserve(n * s.widths[i]);
  batch.Gather(e, rows, dense + s.b[0], s.widths[0], act->pre[0].data());
  for (int i = 1; i < layers; ++i) {
    const int in = s.widths[i - 1], out = s.widths[i];
    act->h[i - 1].Reserve(n * in);
    e.ForEach(n * in, Relu{act->pre[i - 1].data(), act->h[i - 1].data()});
    e.ForEach(n * out, BroadcastRows{dense + s.b[i], out, act->pre[i].data()});
    e.Gemm(Transpose::kNo, Transpose::kNo, static_cast<int>(n), out, in, 1.0f, act->h[i - 1].data(),
           in, dense + s.w[i], out, 1.0f, act->pre[i].data(), out);
  }
}

// One training step's loss and gradients over a loaded batch: per-example losses in
// act->loss, and SETS row_grads [num_keys][row_dim] and dense_grads [dense].
template <class E>
void LossAndGradient(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                     const float* dense, Activations<E>* act, float* row_grads,
                     float* dense_grads) {
  const size_t n = batch.n();
  Forward(e, s, batch, rows, dense, act);
  const int layers = static_cast<int>(s.widths.size());
  act->loss.Reserve(n);
  float* dy = act->pre.back().data();  // the logits, then their gradient
  e.ForEach(n, LossAndDelta{batch.labels(), s.outputs(), s.binary, dy, act->loss.data()});
  e.Zero(dense_grads, s.dense);
  int widest = 0;
  for (const int w : s.widths) widest = w > widest ? w : widest;
  act->dh.Reserve(n * widest);
  act->dpre.Reserve(n * widest);
  for (int i = layers - 1; i >= 1; --i) {
    const int in = s.widths[i - 1], out = s.widths[i];
    ColumnSums(e, dy, n, out, act->column_tmp, dense_grads + s.b[i]);
    e.Gemm(Transpose::kYes, Transpose::kNo, in, out, static_cast<int>(n), 1.0f,
           act->h[i - 1].data(), in, dy, out, 0.0f, dense_grads + s.w[i], out);
    e.Gemm(Transpose::kNo, Transpose::kYes, static_cast<int>(n), in, out, 1.0f, dy, out,
           dense + s.w[i], out, 0.0f, act->dh.data(), in);
    e.ForEach(n * in, ReluBackward{act->pre[i - 1].data(), act->dh.data(), act->dpre.data()});
    dy = act->dpre.data();
  }
  ColumnSums(e, dy, n, s.widths[0], act->column_tmp, dense_grads + s.b[0]);
  batch.Scatter(e, dy, s.widths[0], row_grads);
}

// The ctr model's buffers: its pair tables (uploaded once), the batch's dense values, and the
// activations a forward pass keeps for the backward pass.
template <class E>
struct CtrActivations {
  bool tables = false;
  typename E::template Array<uint8_t> pair_a, pair_c;
  typename E::template Array<int16_t> pair_of;
  typename E::template Array<float> dense;  // [n][13]
  typename E::template Array<float> x, v, fo, z, pre, h, logit, dh, dz, dv, column_tmp;
  typename E::template Array<double> loss;

  void Tables(E& e) {
    if (tables) return;
    std::vector<uint8_t> a, c;
    std::vector<int16_t> of(kCtrVectors * kCtrVectors, 0);
    for (int i = 0; i < kCtrVectors; ++i) {
      for (int j = i + 1; j < kCtrVectors; ++j) {
        of[i * kCtrVectors + j] = of[j * kCtrVectors + i] = static_cast<int16_t>(a.size());
        a.push_back(static_cast<uint8_t>(i));
        c.push_back(static_cast<uint8_t>(j));
      }
    }
    pair_a.Reserve(a.size());
    pair_c.Reserve(c.size());
    pair_of.Reserve(of.size());
    e.Upload(pair_a.data(), a.data(), a.size());
    e.Upload(pair_c.data(), c.data(), c.size());
    e.Upload(pair_of.data(), of.data(), of.size());
    e.Finish();  // the host vectors go now
    tables = true;
  }
};

// The ctr model's forward pass over a loaded batch (26 features per example) whose dense values
// are in act->dense: act->logit holds the logits.
template <class E>
void CtrForward(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                const float* w, CtrActivations<E>* act) {
  const size_t n = batch.n();
  const int dim = s.ctr_dim, hidden = s.ctr_hidden, inputs = s.ctr_inputs;
  act->Tables(e);
  act->x.Reserve(n * dim);
  act->v.Reserve(n * kCtrVectors * dim);
  act->fo.Reserve(n);
  act->z.Reserve(n * inputs);
  act->pre.Reserve(n * hidden);
  act->h.Reserve(n * hidden);
  act->logit.Reserve(n);
  e.ForEach(n * kCtrFields * dim, CtrEmbeddings{batch.slots(), rows, dim, act->v.data()});
  e.ForEach(n, CtrFirstOrder{batch.slots(), rows, dim, act->fo.data()});
  // x [n][D] = bottom_b + dense [n][13] bottom_w^T ([D][13]).
  e.ForEach(n * dim, BroadcastRows{w + s.bottom_b, dim, act->x.data()});
  e.Gemm(Transpose::kNo, Transpose::kYes, static_cast<int>(n), dim, kCtrDense, 1.0f,
         act->dense.data(), kCtrDense, w + s.bottom_w, kCtrDense, 1.0f, act->x.data(), dim);
  e.ForEach(n * dim, CtrPlaceBottom{act->x.data(), dim, act->v.data()});
  e.ForEach(n * inputs, CtrInteract{act->v.data(), act->pair_a.data(), act->pair_c.data(), dim,
                                    inputs, act->z.data()});
  // pre [n][H] = top_b + z [n][inputs] top_w [inputs][H].
  e.ForEach(n * hidden, BroadcastRows{w + s.top_b, hidden, act->pre.data()});
  e.Gemm(Transpose::kNo, Transpose::kNo, static_cast<int>(n), hidden, inputs, 1.0f, act->z.data(),
         inputs, w + s.top_w, hidden, 1.0f, act->pre.data(), hidden);
  e.ForEach(n * hidden, Relu{act->pre.data(), act->h.data()});
  e.ForEach(n, CtrLogit{act->h.data(), w + s.out_w, w + s.out_b, act->fo.data(), hidden,
                        act->logit.data()});
}

// The ctr model's step: per-example losses in act->loss; SETS row_grads [keys][D + 1] and
// dense_grads [dense].
template <class E>
void CtrLossAndGradient(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                        const float* w, CtrActivations<E>* act, float* row_grads,
                        float* dense_grads) {
  const size_t n = batch.n();
  const int dim = s.ctr_dim, hidden = s.ctr_hidden, inputs = s.ctr_inputs;
  const int rows_n = static_cast<int>(n);
  CtrForward(e, s, batch, rows, w, act);
  act->loss.Reserve(n);
  float* g = act->logit.data();  // the logits, then the loss's derivatives by them
  e.ForEach(n, LossAndDelta{batch.labels(), 1, true, g, act->loss.data()});
  e.Zero(dense_grads, s.dense);
  // The output layer: out_b's and out_w's gradients (g^T h), then dh.
  ColumnSums(e, g, n, 1, act->column_tmp, dense_grads + s.out_b);
  e.Gemm(Transpose::kYes, Transpose::kNo, 1, hidden, rows_n, 1.0f, g, 1, act->h.data(), hidden,
         0.0f, dense_grads + s.out_w, hidden);
  act->dh.Reserve(n * hidden);
  e.ForEach(n * hidden, CtrHiddenDelta{act->pre.data(), g, w + s.out_w, hidden, act->dh.data()});
  // The top layer: top_w's (z^T dh) and top_b's gradients, and dz = dh top_w^T.
  ColumnSums(e, act->dh.data(), n, hidden, act->column_tmp, dense_grads + s.top_b);
  e.Gemm(Transpose::kYes, Transpose::kNo, inputs, hidden, rows_n, 1.0f, act->z.data(), inputs,
         act->dh.data(), hidden, 0.0f, dense_grads + s.top_w, hidden);
  act->dz.Reserve(n * inputs);
  e.Gemm(Transpose::kNo, Transpose::kYes, rows_n, inputs, hidden, 1.0f, act->dh.data(), hidden,
         w + s.top_w, hidden, 0.0f, act->dz.data(), inputs);
  // Through the interaction to every vector.
  act->dv.Reserve(n * kCtrVectors * dim);
  e.ForEach(n * kCtrVectors * dim,
            CtrInteractBackward{act->dz.data(), act->v.data(), act->pair_of.data(), dim, inputs,
                                act->dv.data()});
  // The bottom layer: bottom_w's gradient dx^T [D][n] dense [n][13] (dx is dv[.][0], rows
  // 27 * D apart) and bottom_b's.
  const int ld = kCtrVectors * dim;
  e.Gemm(Transpose::kYes, Transpose::kNo, dim, kCtrDense, rows_n, 1.0f, act->dv.data(), ld,
         act->dense.data(), kCtrDense, 0.0f, dense_grads + s.bottom_w, kCtrDense);
  ColumnSums(e, act->dv.data(), n, dim, act->column_tmp, dense_grads + s.bottom_b, ld);
  // The rows: embeddings and first-order weights.
  batch.ScatterTerms(e, CtrTerm{act->dv.data(), g, dim}, dim + 1, row_grads);
}

// ---------------------------------------------------------------------------------------------
// Evaluation: the metrics of models/metrics.h over scores that stay on the device.

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

#endif  // SYNCLINE_DEVICE_DEVICE_STEP_H_
