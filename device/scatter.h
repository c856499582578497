// The deterministic scatter of a sparse layer's gradient onto a batch's rows, without atomics:
// each row's features are summed in pieces, in the order they occur, and the pieces' partial sums
// in order (SparseBatch::ScatterTerms runs it; device/device_step.h says what a kernel is).
//
// Thread-safety: the functors are immutable.
#ifndef SYNCLINE_DEVICE_SCATTER_H_
#define SYNCLINE_DEVICE_SCATTER_H_

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"

namespace syncline::device_step {

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

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_SCATTER_H_
