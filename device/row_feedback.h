// DeviceRowFeedback: SparseErrorFeedback (compression/sparse_rows.h) where the row gradients
// are, on a device_step executor E (device/device_step.h): the CUDA GPU of a GPU worker, or the
// host executor in tests. It produces the same SparsePush bytes as the CPU class, push after
// push, flushes and the final drain included, so that a GPU worker compressing its embedding
// rows sends exactly what a CPU worker sends; only the encoded blocks, the sent rows' held
// counts and the flushed rows cross PCIe, not the gradients.
//
// The residual table lives on the device as arrays sorted by key: keys, the push that last
// touched each row (its stamp), the RowMeta fields and the rows. A push of rows `keys` (a
// shard's, ascending), whose gradients are rows `positions` of the step's row gradients on the
// device, runs:
//   1. p = gradient / examples + residual, and the rows' new metadata: one thread a row, each
//      finding its residual by binary search in the table (FormResidualSum);
//   2. the codec over p (E::BlockCodec: the CUDA codecs, which select and encode as the CPU's
//      do): top-K's selected entries, or sign1 over every row; the host turns the block into
//      SparsePush's form (the rows holding a selected entry, float32 rows where smaller) as
//      the CPU class does, and p - sent stays;
//   3. the table's new content: its rows the push did not touch and the push's rows left
//      non-zero, merged in key order (each row's place is its rank in its own list plus the
//      count of the other list's rows below its key: two scans and two binary searches, no
//      sort);
//   4. past the capacity, the rows least recently pushed go: a stable radix sort of the
//      table's stamps orders it by recency (rows of one push were touched in key order, so
//      ties keep key order, as RowTable's list does), and the oldest are compacted out in key
//      order, which is the order a push's flushed rows are sent in.
// Floating-point operations are written with the *Rn helpers, which the device does not fuse
// (nvcc contracts a * b + c into an FMA by default), so that the device's floats are the CPU's,
// but for the bits of a NaN: a gradient holding an infinity or a NaN gives NaNs, which the GPU
// writes in its one canonical form (x86 keeps a NaN's bits, and makes inf - inf negative), and
// sign1's block of a NaN scale, as compression/codec_cuda.h says.
//
// Thread-safety: thread-compatible; E's calls are the caller's to serialise.
#ifndef SYNCLINE_DEVICE_ROW_FEEDBACK_H_
#define SYNCLINE_DEVICE_ROW_FEEDBACK_H_

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "compression/codec.h"
#include "compression/held_rows.h"
#include "compression/sparse_rows.h"
#include "compression/wire.h"
#include "device/kernels.h"
#include "optim/optimizer.h"

namespace syncline {
namespace device_step {

// Per row i of a push: p = gradient / examples (as its product with `inv`) + the row's residual,
// and its metadata one push on (held + 1; squares + the sum of the scaled gradient's squares,
// at most FLT_MAX), as SparseErrorFeedback::Compress forms them.
struct FormResidualSum {
  const uint64_t* table_keys;
  size_t table_size;
  const float* table_rows;
  const uint32_t* table_held;
  const float* table_squares;
  const uint64_t* keys;
  const uint32_t* positions;  // of the push's rows among the step's row gradients
  const float* grads;
  uint32_t dim;
  float inv;
  float* p;
  uint32_t* held;
  float* squares;
  SYNCLINE_HD void operator()(size_t i) const {
    const uint64_t key = keys[i];
    const size_t at = LowerBound(table_keys, table_size, key);
    const bool found = at < table_size && table_keys[at] == key;
    const float* r = found ? table_rows + at * dim : nullptr;
    float sq = found ? table_squares[at] : 0.0f;
    const float* g_row = grads + static_cast<size_t>(positions[i]) * dim;
    float* p_row = p + i * dim;
    for (uint32_t j = 0; j < dim; ++j) {
      const float g = MulRn(g_row[j], inv);
      const float s = AddRn(sq, MulRn(g, g));
      sq = FLT_MAX < s ? FLT_MAX : s;
      p_row[j] = r != nullptr ? AddRn(g, r[j]) : g;
    }
    held[i] = (found ? table_held[at] : 0) + 1;
    squares[i] = sq;
  }
};

// Per row i: its held count and spread for p's row (what is sent for it whole).
struct RowsHeld {
  const float* p;
  uint32_t dim;
  const uint32_t* held;
  const float* squares;
  uint32_t* held_out;
  float* spread_out;
  SYNCLINE_HD void operator()(size_t i) const {
    HeldAndSpread(held[i], squares[i], p + i * dim, dim, held_out + i, spread_out + i);
  }
};

// out[i] = in[index[i]].
template <class T>
struct Gather {
  const uint32_t* index;
  const T* in;
  T* out;
  SYNCLINE_HD void operator()(size_t i) const { out[i] = in[index[i]]; }
};

// Rows sent (their residual now sums no push): metadata zero.
struct ClearMeta {
  const uint32_t* rows;
  uint32_t* held;
  float* squares;
  SYNCLINE_HD void operator()(size_t i) const {
    held[rows[i]] = 0;
    squares[rows[i]] = 0.0f;
  }
};

// p - sent at top-K's selected entries, where sent is p itself.
struct SubtractSelected {
  const uint32_t* indices;
  float* p;
  SYNCLINE_HD void operator()(size_t i) const {
    p[indices[i]] = SubRn(p[indices[i]], p[indices[i]]);
  }
};

// in[i] * scale into out (sign1 encodes p scaled by the push's examples).
struct Scale {
  const float* in;
  float scale;
  float* out;
  SYNCLINE_HD void operator()(size_t i) const { out[i] = MulRn(in[i], scale); }
};

// p - sent for sign1, sent being the decoded block (scaled back by `inv` when `scaled`).
struct SubtractDecoded {
  const float* decoded;
  bool scaled;
  float inv;
  float* p;
  SYNCLINE_HD void operator()(size_t i) const {
    const float sent = scaled ? MulRn(decoded[i], inv) : decoded[i];
    p[i] = SubRn(p[i], sent);
  }
};

// flag[i] = 1 where row i of p is not all zeros (a row left at zero leaves the table).
struct NonZeroRows {
  const float* p;
  uint32_t dim;
  uint32_t* flag;
  SYNCLINE_HD void operator()(size_t i) const {
    uint32_t nonzero = 0;
    for (uint32_t j = 0; j < dim; ++j) nonzero |= p[i * dim + j] == 0.0f ? 0u : 1u;
    flag[i] = nonzero;
  }
};

// flag[a] = 1 where keys[a] is not among the sorted among[0, among_size).
struct NotAmong {
  const uint64_t* keys;
  const uint64_t* among;
  size_t among_size;
  uint32_t* flag;
  SYNCLINE_HD void operator()(size_t a) const {
    const size_t at = LowerBound(among, among_size, keys[a]);
    flag[a] = at < among_size && among[at] == keys[a] ? 0u : 1u;
  }
};

// A table's arrays as kernels see them.
struct TableView {
  uint64_t* keys;
  uint64_t* stamps;
  uint32_t* held;
  float* squares;
  float* rows;
};

SYNCLINE_HD inline void CopyRow(const TableView& from, size_t a, const TableView& to, size_t b,
                                uint32_t dim) {
  to.keys[b] = from.keys[a];
  to.stamps[b] = from.stamps[a];
  to.held[b] = from.held[a];
  to.squares[b] = from.squares[a];
  for (uint32_t j = 0; j < dim; ++j) to.rows[b * dim + j] = from.rows[a * dim + j];
}

// The table's rows the push left alone, into their place in the merged table: their rank among
// those (old_rank, an exclusive scan of their flags) plus the push's kept rows below their key.
struct MergeOld {
  TableView table;
  const uint32_t* keep;
  const uint32_t* old_rank;
  const uint64_t* push_keys;
  size_t push_size;
  const uint32_t* new_rank;  // push_size + 1 entries
  uint32_t dim;
  TableView out;
  SYNCLINE_HD void operator()(size_t a) const {
    if (keep[a] == 0) return;
    const size_t below = new_rank[LowerBound(push_keys, push_size, table.keys[a])];
    CopyRow(table, a, out, old_rank[a] + below, dim);
  }
};

// The push's rows left non-zero, stamped with the push, into their place likewise.
struct MergeNew {
  const uint64_t* push_keys;
  const float* p;
  const uint32_t* held;
  const float* squares;
  const uint32_t* keep;
  const uint32_t* new_rank;
  const uint64_t* table_keys;
  size_t table_size;
  const uint32_t* old_rank;  // table_size + 1 entries
  uint64_t stamp;
  uint32_t dim;
  TableView out;
  SYNCLINE_HD void operator()(size_t i) const {
    if (keep[i] == 0) return;
    const size_t b = new_rank[i] + old_rank[LowerBound(table_keys, table_size, push_keys[i])];
    out.keys[b] = push_keys[i];
    out.stamps[b] = stamp;
    out.held[b] = held[i];
    out.squares[b] = squares[i];
    for (uint32_t j = 0; j < dim; ++j) out.rows[b * dim + j] = p[i * dim + j];
  }
};

// flag[i] = value.
struct Fill {
  uint32_t* flag;
  uint32_t value;
  SYNCLINE_HD void operator()(size_t i) const { flag[i] = value; }
};
// out[i] = i.
struct Iota {
  uint32_t* out;
  SYNCLINE_HD void operator()(size_t i) const { out[i] = static_cast<uint32_t>(i); }
};
// flag[order[q]] = 1: the first rows of the recency order go.
struct MarkOrdered {
  const uint32_t* order;
  uint32_t* flag;
  SYNCLINE_HD void operator()(size_t q) const { flag[order[q]] = 1; }
};

// Row a of the table, flushed (flag set) or kept: a flushed row's key, values (scaled by the
// push's examples), held count and spread go to the flushed arrays at its rank among the
// flushed; a kept one to the compacted table at its rank among the kept (a - its flushed rank).
struct SplitFlushed {
  TableView table;
  const uint32_t* flushed;
  const uint32_t* flushed_rank;
  uint32_t dim;
  float examples;
  uint64_t* keys_out;
  float* values_out;
  uint32_t* held_out;
  float* spread_out;
  TableView kept;
  SYNCLINE_HD void operator()(size_t a) const {
    const uint32_t f = flushed_rank[a];
    if (flushed[a] == 0) {
      CopyRow(table, a, kept, a - f, dim);
      return;
    }
    const float* row = table.rows + a * dim;
    keys_out[f] = table.keys[a];
    for (uint32_t j = 0; j < dim; ++j) values_out[size_t{f} * dim + j] = MulRn(row[j], examples);
    HeldAndSpread(table.held[a], table.squares[a], row, dim, held_out + f, spread_out + f);
  }
};

}  // namespace device_step

// The elements to reserve for n: n rounded up to the next of 8 steps per doubling (at most
// 25% more), so that a table filling up push by push grows its arrays (a device sync, a free
// and an allocation each) about 8 times per doubling, not at every push.
inline size_t Room(size_t n) {
  if (n <= 1024) return 1024;
  const size_t step = size_t{1} << (std::bit_width(n - 1) - 3);
  return (n + step - 1) / step * step;
}

template <class E>
class DeviceRowFeedback {
 public:
  // codec: topk or sign1; max_rows: residual rows kept (0: unbounded). `e` must outlive it.
  static absl::StatusOr<std::unique_ptr<DeviceRowFeedback>> Create(E& e, const CodecSpec& codec,
                                                                   uint32_t dim, size_t max_rows) {
    if (codec.kind != CodecKind::kTopK && codec.kind != CodecKind::kSign1) {
      return absl::InvalidArgumentError("sparse rows keep residuals under topk or sign1 only");
    }
    if (dim == 0) return absl::InvalidArgumentError("rows of no floats");
    auto block_codec = E::BlockCodec::Create(e, codec);
    if (!block_codec.ok()) return block_codec.status();
    return std::unique_ptr<DeviceRowFeedback>(
        new DeviceRowFeedback(e, codec, dim, max_rows, std::move(*block_codec)));
  }

  uint32_t dim() const { return dim_; }
  size_t size() const { return size_; }
  uint64_t pushes() const { return pushes_; }
  uint64_t rows_flushed() const { return rows_flushed_; }
  uint64_t rows_drained() const { return rows_drained_; }

  // SparseErrorFeedback::Compress of the rows `keys` (strictly ascending), whose gradient sums
  // are rows positions[i] of the grad_rows rows of `grads` (device memory, rows of dim floats).
  // InvalidArgument, with nothing changed, for keys out of order or positions out of range.
  absl::Status Compress(std::span<const uint64_t> keys, std::span<const uint32_t> positions,
                        const float* grads, size_t grad_rows, SparsePush* out,
                        float examples = 1.0f) {
    namespace ds = device_step;
    if (positions.size() != keys.size()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%d positions of gradient rows for a push of %d rows", positions.size(), keys.size()));
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      if (i > 0 && keys[i] <= keys[i - 1]) {
        return absl::InvalidArgumentError(
            absl::StrFormat("the keys of a push are not ascending at row %d", i));
      }
      if (positions[i] >= grad_rows) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "row %d of a push is gradient row %d of %d", i, positions[i], grad_rows));
      }
    }
    const size_t m = keys.size();
    const size_t n = m * dim_;
    if (n >= (size_t{1} << 31)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a push of %d rows of %d is too large for the device", m, dim_));
    }
    // The scans and sorts count in 32-bit ints: the table and the push stay below 2^31 rows.
    if (size_ + m >= (size_t{1} << 31) - 1) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "a push of %d rows onto %d residual rows exceeds the device table's 2^31 rows (lower "
          "--residual-rows)",
          m, size_));
    }
    const uint64_t stamp = pushes_ + 1;
    *out = SparsePush{};
    held_rows_ = 0;
    const float inv = examples == 1.0f ? 1.0f : 1.0f / examples;
    push_keys_.Reserve(Room(m + 1));
    positions_.Reserve(Room(m + 1));
    host_keys_.Reserve(Room(m + 1));
    host_positions_.Reserve(Room(m + 1));
    std::copy(keys.begin(), keys.end(), host_keys_.data());
    std::copy(positions.begin(), positions.end(), host_positions_.data());
    e_.Upload(push_keys_.data(), host_keys_.data(), m);
    e_.Upload(positions_.data(), host_positions_.data(), m);
    e_.Fence();
    p_.Reserve(Room(n + 1));
    p_held_.Reserve(Room(m + 1));
    p_squares_.Reserve(Room(m + 1));
    row_held_.Reserve(Room(m + 1));
    row_spread_.Reserve(Room(m + 1));
    const ds::TableView t = View(cur_);
    e_.ForEach(m, ds::FormResidualSum{t.keys, size_, t.rows, t.held, t.squares, push_keys_.data(),
                                      positions_.data(), grads, dim_, inv, p_.data(),
                                      p_held_.data(), p_squares_.data()});
    // Every row's held count and spread, should it be sent (before what is sent leaves p).
    e_.ForEach(m, ds::RowsHeld{p_.data(), dim_, p_held_.data(), p_squares_.data(), row_held_.data(),
                               row_spread_.data()});
    absl::Status encoded = n == 0                           ? EncodeNothing(out)
                           : spec_.kind == CodecKind::kTopK ? EncodeTopK(keys, n, examples, out)
                                                            : EncodeSign1(keys, n, examples, out);
    if (!encoded.ok()) return encoded;
    if (auto s = UpdateTable(m, stamp); !s.ok()) return s;
    pushes_ = stamp;
    if (held_rows_ > 0) CollectHeld(out);  // before Flush reuses the buffers
    if (auto s = Flush(examples, out); !s.ok()) return s;
    // The next push uploads into this one's buffers on the copy stream, which a fence does not
    // order after the kernels still reading them: they finish here.
    e_.Finish();
    return absl::OkStatus();
  }

  // SparseErrorFeedback::Drain: every residual row into out's flushed rows (kept ascending
  // with those already there), scaled by `examples`; the table is then empty.
  absl::Status Drain(SparsePush* out, float examples = 1.0f) {
    namespace ds = device_step;
    const size_t t = size_;
    if (t > 0) {
      flags_.Reserve(Room(t + 1));
      ranks_.Reserve(Room(t + 1));
      // Every row flushed: row a is the a-th.
      e_.ForEach(t, ds::Fill{flags_.data(), 1u});
      e_.ForEach(t, ds::Iota{ranks_.data()});
      ReserveTable(1 - cur_, 0);
      ReserveOut(t);
      e_.ForEach(t, ds::SplitFlushed{View(cur_), flags_.data(), ranks_.data(), dim_, examples,
                                     out_keys_.data(), out_values_.data(), out_held_.data(),
                                     out_spread_.data(), View(1 - cur_)});
      if (auto s = DownloadFlushed(t, out); !s.ok()) return s;
    }
    rows_drained_ += t;
    size_ = 0;
    // Beside the rows a push flushed, in key order, as the CPU class keeps them.
    SortFlushed(dim_, out);
    return absl::OkStatus();
  }

  // The residual rows into *table (cleared), least recently pushed first, with their stamps
  // and metadata, as the CPU class's table holds them (for checkpoints).
  absl::Status CopyResiduals(RowTable* table) const {
    table->Clear();
    const size_t t = size_;
    if (t == 0) return absl::OkStatus();
    std::vector<uint64_t> keys(t), stamps(t);
    std::vector<uint32_t> held(t);
    std::vector<float> squares(t), rows(t * dim_);
    const Table& cur = tables_[cur_];
    e_.Download(keys.data(), cur.keys.data(), t);
    e_.Download(stamps.data(), cur.stamps.data(), t);
    e_.Download(held.data(), cur.held.data(), t);
    e_.Download(squares.data(), cur.squares.data(), t);
    e_.Download(rows.data(), cur.rows.data(), t * dim_);
    e_.Finish();
    std::vector<uint32_t> order(t);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(),
                     [&](uint32_t a, uint32_t b) { return stamps[a] < stamps[b]; });
    for (const uint32_t a : order) {
      float* row =
          table->Touch(keys[a], stamps[a], RowMeta{.held = held[a], .squares = squares[a]});
      std::memcpy(row, rows.data() + size_t{a} * dim_, dim_ * sizeof(float));
    }
    return absl::OkStatus();
  }

  // Replaces the residual rows with `table`'s (of this dim) and the push count with `pushes`.
  absl::Status SetResiduals(const RowTable& table, uint64_t pushes) {
    if (table.dim() != dim_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("residual rows of %d floats for a table of %d", table.dim(), dim_));
    }
    std::vector<uint64_t> keys, stamps;
    std::vector<uint32_t> held;
    std::vector<float> squares, rows;
    table.ForEach([&](uint64_t key, uint64_t stamp, const RowMeta& meta, const float* row) {
      keys.push_back(key);
      stamps.push_back(stamp);
      held.push_back(meta.held);
      squares.push_back(meta.squares);
      rows.insert(rows.end(), row, row + dim_);
    });
    const size_t t = keys.size();
    std::vector<uint32_t> order(t);
    std::iota(order.begin(), order.end(), 0u);
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
    e_.Finish();  // nothing queued reads the table while the uploads replace it
    Table& cur = tables_[cur_];
    ReserveTable(cur_, t);
    host_table_.Reserve(2 * t + (t * (2 + size_t{dim_}) + 1) / 2 + 1);
    // Staged through pinned memory in key order: keys and stamps, then held counts, squares
    // and rows (as 32-bit words).
    uint64_t* words = host_table_.data();
    for (size_t i = 0; i < t; ++i) {
      words[i] = keys[order[i]];
      words[t + i] = stamps[order[i]];
    }
    auto* held_out = reinterpret_cast<uint32_t*>(words + 2 * t);
    auto* squares_out = reinterpret_cast<float*>(held_out + t);
    float* rows_out = squares_out + t;
    for (size_t i = 0; i < t; ++i) {
      held_out[i] = held[order[i]];
      squares_out[i] = squares[order[i]];
      std::memcpy(rows_out + i * dim_, rows.data() + size_t{order[i]} * dim_, dim_ * sizeof(float));
    }
    e_.Upload(cur.keys.data(), words, t);
    e_.Upload(cur.stamps.data(), words + t, t);
    e_.Upload(cur.held.data(), held_out, t);
    e_.Upload(cur.squares.data(), squares_out, t);
    e_.Upload(cur.rows.data(), rows_out, t * dim_);
    e_.Finish();
    size_ = t;
    pushes_ = pushes;
    return absl::OkStatus();
  }

 private:
  struct Table {
    typename E::template Array<uint64_t> keys, stamps;
    typename E::template Array<uint32_t> held;
    typename E::template Array<float> squares, rows;
  };

  DeviceRowFeedback(E& e, const CodecSpec& spec, uint32_t dim, size_t max_rows,
                    std::unique_ptr<typename E::BlockCodec> codec)
      : e_(e), spec_(spec), dim_(dim), capacity_(max_rows), codec_(std::move(codec)) {}

  device_step::TableView View(int which) {
    Table& t = tables_[which];
    return device_step::TableView{t.keys.data(), t.stamps.data(), t.held.data(), t.squares.data(),
                                  t.rows.data()};
  }
  // Room for n rows (and one more: no array is ever empty).
  void ReserveTable(int which, size_t n) {
    Table& t = tables_[which];
    t.keys.Reserve(Room(n + 1));
    t.stamps.Reserve(Room(n + 1));
    t.held.Reserve(Room(n + 1));
    t.squares.Reserve(Room(n + 1));
    t.rows.Reserve(Room((n + 1) * dim_));
  }
  void ReserveOut(size_t rows) {
    out_keys_.Reserve(Room(rows + 1));
    out_values_.Reserve(Room((rows + 1) * dim_));
    out_held_.Reserve(Room(rows + 1));
    out_spread_.Reserve(Room(rows + 1));
    host_out_keys_.Reserve(Room(rows + 1));
    host_out_values_.Reserve(Room((rows + 1) * dim_));
    host_out_held_.Reserve(Room(rows + 1));
    host_out_spread_.Reserve(Room(rows + 1));
  }
  // A push of no rows: the CPU codec's block of nothing (topk: no rows, so none).
  absl::Status EncodeNothing(SparsePush* out) {
    if (spec_.kind == CodecKind::kTopK) {
      out->kind = CodecKind::kNone;
      return absl::OkStatus();
    }
    out->kind = spec_.kind;
    std::unique_ptr<Codec> codec = Codec::Create(spec_);
    if (codec == nullptr) return absl::InvalidArgumentError("invalid codec for sparse rows");
    codec->Encode(std::span<const float>(), &out->block);
    return absl::OkStatus();
  }

  // Top-K over p: the block comes down, the host puts it in SparsePush's form, and the selected
  // entries and rows go back up, to leave p and to give the rows' held counts and spreads.
  absl::Status EncodeTopK(std::span<const uint64_t> keys, size_t n, float examples,
                          SparsePush* out) {
    namespace ci = compression_internal;
    out->kind = CodecKind::kTopK;
    absl::StatusOr<float*> input = codec_->Input(n);
    if (!input.ok()) return input.status();
    e_.Copy(*input, p_.data(), n);
    if (auto s = codec_->Encode(n, &block_); !s.ok()) return s;
    absl::StatusOr<ci::TopKView> view = ci::ParseTopK(block_, n);
    if (!view.ok()) return view.status();
    const size_t k = view->k;
    host_indices_.Reserve(Room(k + 1));
    host_rows_.Reserve(Room(k + 1));
    uint32_t* indices = host_indices_.data();
    uint32_t* rows = host_rows_.data();
    size_t sent_rows = 0;
    std::vector<uint32_t> local(k);
    for (size_t q = 0; q < k; ++q) {
      indices[q] = static_cast<uint32_t>(view->index(q));
      const uint32_t row = indices[q] / dim_;
      if (sent_rows == 0 || rows[sent_rows - 1] != row) {
        rows[sent_rows++] = row;
        out->keys.push_back(keys[row]);
      }
      local[q] = static_cast<uint32_t>((sent_rows - 1) * dim_ + indices[q] % dim_);
    }
    const size_t entries = sent_rows * dim_;
    if (entries * sizeof(float) <= 4 + k * 8) {
      out->kind = CodecKind::kNone;
      out->block.assign(entries * sizeof(float), std::byte{0});
      for (size_t q = 0; q < k; ++q) {
        ci::StoreF32(out->block.data() + size_t{local[q]} * 4, view->value(q) * examples);
      }
    } else {
      out->block.resize(4 + k * 8);
      ci::StoreU32(out->block.data(), static_cast<uint32_t>(k));
      for (size_t q = 0; q < k; ++q) {
        ci::StoreU32(out->block.data() + 4 + 4 * q, local[q]);
        ci::StoreF32(out->block.data() + 4 + 4 * k + 4 * q, view->value(q) * examples);
      }
    }
    if (k == 0) return absl::OkStatus();
    indices_.Reserve(Room(k + 1));
    rows_.Reserve(Room(k + 1));
    e_.Upload(indices_.data(), indices, k);
    e_.Upload(rows_.data(), rows, sent_rows);
    e_.Fence();
    ReserveOut(sent_rows);
    e_.ForEach(sent_rows,
               device_step::Gather<uint32_t>{rows_.data(), row_held_.data(), out_held_.data()});
    e_.ForEach(sent_rows,
               device_step::Gather<float>{rows_.data(), row_spread_.data(), out_spread_.data()});
    e_.ForEach(sent_rows, device_step::ClearMeta{rows_.data(), p_held_.data(), p_squares_.data()});
    e_.ForEach(k, device_step::SubtractSelected{indices_.data(), p_.data()});
    EnqueueHeld(sent_rows);
    return absl::OkStatus();
  }

  // sign1 over every row of p (scaled by the push's examples); p - decode(block) stays, unless
  // the block does not decode (a non-finite scale), when all of p stays.
  absl::Status EncodeSign1(std::span<const uint64_t> keys, size_t n, float examples,
                           SparsePush* out) {
    const size_t m = keys.size();
    out->kind = spec_.kind;
    out->keys.assign(keys.begin(), keys.end());
    absl::StatusOr<float*> input = codec_->Input(n);
    if (!input.ok()) return input.status();
    if (examples == 1.0f) {
      e_.Copy(*input, p_.data(), n);
    } else {
      e_.ForEach(n, device_step::Scale{p_.data(), examples, *input});
    }
    if (auto s = codec_->Encode(n, &out->block); !s.ok()) return s;
    if (!compression_internal::ValidateBlock(spec_.kind, out->block, n).ok()) {
      out->held.assign(m, 1);
      return absl::OkStatus();
    }
    absl::StatusOr<const float*> decoded = codec_->Decode(n);
    if (!decoded.ok()) return decoded.status();
    e_.ForEach(n,
               device_step::SubtractDecoded{*decoded, examples != 1.0f,
                                            examples == 1.0f ? 1.0f : 1.0f / examples, p_.data()});
    ReserveOut(m);
    e_.Copy(out_held_.data(), row_held_.data(), m);
    e_.Copy(out_spread_.data(), row_spread_.data(), m);
    e_.Zero(p_held_.data(), m);
    e_.Zero(p_squares_.data(), m);
    EnqueueHeld(m);
    return absl::OkStatus();
  }

  // The sent rows' held counts and spreads (out_held_, out_spread_) on their way down; they
  // arrive with the table's counts (UpdateTable's one wait), and CollectHeld takes them.
  void EnqueueHeld(size_t rows) {
    e_.Download(host_out_held_.data(), out_held_.data(), rows);
    e_.Download(host_out_spread_.data(), out_spread_.data(), rows);
    held_rows_ = rows;
  }
  void CollectHeld(SparsePush* out) {
    const size_t rows = std::exchange(held_rows_, 0);
    out->held.resize(rows);
    out->spread.resize(rows);
    for (size_t i = 0; i < rows; ++i) {
      out->held[i] = static_cast<uint16_t>(host_out_held_.data()[i]);
      out->spread[i] = host_out_spread_.data()[i];
    }
  }

  // The table's rows the push did not touch, merged with the push's rows left non-zero. One
  // wait, for the merged table's size (and the sent rows' held counts, enqueued before).
  absl::Status UpdateTable(size_t m, uint64_t stamp) {
    namespace ds = device_step;
    const size_t t = size_;
    flags_.Reserve(Room(t + 1));
    ranks_.Reserve(Room(t + 1));
    push_flags_.Reserve(Room(m + 1));
    push_ranks_.Reserve(Room(m + 1));
    e_.ForEach(t, ds::NotAmong{tables_[cur_].keys.data(), push_keys_.data(), m, flags_.data()});
    e_.Zero(flags_.data() + t, 1);
    e_.ForEach(m, ds::NonZeroRows{p_.data(), dim_, push_flags_.data()});
    e_.Zero(push_flags_.data() + m, 1);
    e_.ExclusiveSum(flags_.data(), ranks_.data(), t + 1);
    e_.ExclusiveSum(push_flags_.data(), push_ranks_.data(), m + 1);
    counts_.Reserve(2);
    e_.Download(counts_.data(), ranks_.data() + t, 1);
    e_.Download(counts_.data() + 1, push_ranks_.data() + m, 1);
    e_.Finish();
    const size_t old_kept = counts_.data()[0], new_kept = counts_.data()[1];
    const int next = 1 - cur_;
    ReserveTable(next, old_kept + new_kept);
    const ds::TableView out = View(next);
    e_.ForEach(t, ds::MergeOld{View(cur_), flags_.data(), ranks_.data(), push_keys_.data(), m,
                               push_ranks_.data(), dim_, out});
    e_.ForEach(m, ds::MergeNew{push_keys_.data(), p_.data(), p_held_.data(), p_squares_.data(),
                               push_flags_.data(), push_ranks_.data(), tables_[cur_].keys.data(), t,
                               ranks_.data(), stamp, dim_, out});
    cur_ = next;
    size_ = old_kept + new_kept;
    old_kept_ = old_kept;
    return absl::OkStatus();
  }

  // Past the capacity, the least recently pushed rows (never this push's) leave, sent whole.
  absl::Status Flush(float examples, SparsePush* out) {
    namespace ds = device_step;
    if (capacity_ == 0 || size_ <= capacity_) return absl::OkStatus();
    const size_t t = size_;
    const size_t f = std::min(t - capacity_, old_kept_);
    if (f == 0) return absl::OkStatus();
    order_.Reserve(Room(t + 1));
    // Stamps are at most pushes_: the radix sort looks at their low bits only.
    e_.SortByKey64(tables_[cur_].stamps.data(), order_.data(), t,
                   std::max(1, static_cast<int>(std::bit_width(pushes_))));
    flags_.Reserve(Room(t + 1));
    ranks_.Reserve(Room(t + 1));
    e_.ForEach(t + 1, ds::Fill{flags_.data(), 0u});
    e_.ForEach(f, ds::MarkOrdered{order_.data(), flags_.data()});
    e_.ExclusiveSum(flags_.data(), ranks_.data(), t + 1);
    const int next = 1 - cur_;
    ReserveTable(next, t - f);
    ReserveOut(f);
    e_.ForEach(t, ds::SplitFlushed{View(cur_), flags_.data(), ranks_.data(), dim_, examples,
                                   out_keys_.data(), out_values_.data(), out_held_.data(),
                                   out_spread_.data(), View(next)});
    cur_ = next;
    size_ = t - f;
    rows_flushed_ += f;
    return DownloadFlushed(f, out);
  }

  // The f flushed rows (out_*, in key order) appended to out's flushed arrays.
  absl::Status DownloadFlushed(size_t f, SparsePush* out) {
    e_.Download(host_out_keys_.data(), out_keys_.data(), f);
    e_.Download(host_out_values_.data(), out_values_.data(), f * dim_);
    e_.Download(host_out_held_.data(), out_held_.data(), f);
    e_.Download(host_out_spread_.data(), out_spread_.data(), f);
    e_.Finish();
    out->flushed_keys.insert(out->flushed_keys.end(), host_out_keys_.data(),
                             host_out_keys_.data() + f);
    out->flushed_values.insert(out->flushed_values.end(), host_out_values_.data(),
                               host_out_values_.data() + f * dim_);
    for (size_t i = 0; i < f; ++i) {
      out->flushed_held.push_back(static_cast<uint16_t>(host_out_held_.data()[i]));
    }
    out->flushed_spread.insert(out->flushed_spread.end(), host_out_spread_.data(),
                               host_out_spread_.data() + f);
    return absl::OkStatus();
  }

  E& e_;
  const CodecSpec spec_;
  const uint32_t dim_;
  const size_t capacity_;
  std::unique_ptr<typename E::BlockCodec> codec_;
  // The residual table: tables_[cur_] holds size_ rows; the other is where the next one is
  // built.
  Table tables_[2];
  int cur_ = 0;
  size_t size_ = 0;
  size_t old_kept_ = 0;   // rows of the last push's table that it did not touch
  size_t held_rows_ = 0;  // sent rows whose held counts are on their way down
  uint64_t pushes_ = 0;
  uint64_t rows_flushed_ = 0;
  uint64_t rows_drained_ = 0;
  std::vector<std::byte> block_;
  // A push's device buffers.
  typename E::template Array<uint64_t> push_keys_, out_keys_;
  typename E::template Array<uint32_t> positions_, p_held_, row_held_, out_held_, flags_, ranks_,
      push_flags_, push_ranks_, indices_, rows_, order_;
  typename E::template Array<float> p_, p_squares_, row_spread_, out_spread_, out_values_;
  // ... and its host buffers.
  typename E::template PinnedArray<uint64_t> host_keys_, host_out_keys_;
  typename E::template PinnedArray<uint32_t> host_positions_, host_indices_, host_rows_,
      host_out_held_, counts_;
  typename E::template PinnedArray<float> host_out_values_, host_out_spread_;
  typename E::template PinnedArray<uint64_t> host_table_;
};

}  // namespace syncline

#endif  // SYNCLINE_DEVICE_ROW_FEEDBACK_H_
