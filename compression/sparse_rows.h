// Compression of sparse rows: what a push or a pull of a sparse (embedding) table carries when
// it is compressed.
//
// Compact keys. A shard's keys in a request are strictly ascending 64-bit ids; they travel as
// LEB128 varints (7 bits a byte, low group first, high bit set on every byte but the last) of
// the first key and then of each gap minus one (key[i] - key[i-1] - 1). The block holds no
// count (the message header does) and no padding: a batch of 2,500 keys drawn from 25,000
// takes about 2.6 KB instead of 20 KB.
//
// RowTable: rows of `dim` floats keyed by id, with a recency order (least recently touched
// first), a little metadata per row (RowMeta: its owner's to use) and an optional capacity. It
// holds the error-feedback residuals of sparse pushes on the worker, the servers' copies of what
// each worker holds (compressed pulls), and the worker's side of those copies.
//
// SparseErrorFeedback: error feedback per row, in a bounded RowTable. For a push of rows
// `keys` with gradient sums g it encodes p = g + residual (rows without a residual add 0) with
// the codec and keeps residual = p - decode(sent) for those rows; a row whose residual becomes
// exactly zero leaves the table. When the table would hold more than its capacity, the rows
// least recently pushed (never those of the current push) are flushed: their residuals are
// sent in full, as float32 rows, and leave the table, so nothing is lost. Over any run
//   sum of everything sent for a row = sum of its gradients - its residual still held.
// Every row sent also carries `held`, how many pushes added a gradient to it since it was last
// sent (1..kMaxHeldSteps), and `spread`, held times the sum of those gradients' squares over
// the square of what is sent (>= 1; the row's entries together): the server applies the row
// as `held` steps whose squares add up to what the pushes' would have (optim/optimizer.h
// ApplyHeldUpdate), so that Adagrad, Adam and FTRL see the pushes, not one lump.
//
// What a push sends (SparsePush): the rows `keys` (ascending) and one block of keys.size() *
// dim entries in `kind`:
//   topk   K = TopKCount(ratio, rows * dim) entries of largest |p| over all the push's rows.
//          Only rows with a selected entry are sent, as a topk block over those rows (u32
//          indices into their rows * dim entries) or, where that is smaller (dim 1: always),
//          as their float32 values with zeros at the entries not selected: both decode to the
//          same values.
//   sign1  every row of the push, as one sign1 block over rows * dim entries.
// plus the flushed rows (ascending, float32).
//
// Thread-compatible.
#ifndef SYNCLINE_COMPRESSION_SPARSE_ROWS_H_
#define SYNCLINE_COMPRESSION_SPARSE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compression/codec.h"
#include "optim/optimizer.h"

namespace syncline {

// Appends the compact form of `keys` (strictly ascending) to *out.
void EncodeKeys(std::span<const uint64_t> keys, std::vector<std::byte>* out);
// Bytes EncodeKeys appends for `keys`.
size_t EncodedKeysSize(std::span<const uint64_t> keys);
// Replaces *out with the `count` keys of `block`. InvalidArgument naming the problem for a
// block that holds fewer or more keys, a varint longer than 10 bytes, or keys past 2^64 - 1;
// *out is then unspecified. Never allocates more than block.size() keys.
absl::Status DecodeKeys(std::span<const std::byte> block, size_t count, std::vector<uint64_t>* out);

// What error feedback keeps beside a residual row: the pushes whose gradients it sums since the
// row was last sent, and the sum of those gradients' squares (all of the row's entries).
struct RowMeta {
  uint32_t held = 0;
  float squares = 0;
};

class RowTable {
 public:
  // capacity 0: unbounded.
  RowTable(uint32_t dim, size_t capacity);

  uint32_t dim() const { return dim_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return index_.size(); }
  bool over_capacity() const { return capacity_ != 0 && size() > capacity_; }

  // The row of `key`, or null; its recency is unchanged. With `meta`, also the row's metadata
  // (zeros when there is no row).
  float* Find(uint64_t key, RowMeta* meta = nullptr);
  const float* Find(uint64_t key) const;
  bool Contains(uint64_t key) const { return index_.contains(key); }
  // The row of `key`, made the most recently touched and stamped with `stamp`; a new row is
  // zeros (and *inserted says so, when given).
  float* Touch(uint64_t key, uint64_t stamp, bool* inserted = nullptr);
  // Touch, and sets the row's metadata (a new row's is zeros otherwise).
  float* Touch(uint64_t key, uint64_t stamp, const RowMeta& meta);
  // Removes the row; false when there was none.
  bool Erase(uint64_t key);
  // The least recently touched row: false when the table is empty. The first call builds the
  // recency list, which every later touch then keeps (see recency_linked_).
  bool Oldest(uint64_t* key, uint64_t* stamp);
  // Every row, least recently touched first (the order Touch would rebuild).
  void ForEach(const std::function<void(uint64_t key, uint64_t stamp, const RowMeta& meta,
                                        const float* row)>& f) const;
  void Clear();

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  struct Slot {
    uint64_t key = 0;
    uint64_t stamp = 0;
    uint64_t touched = 0;               // touches_ at the row's last touch: its recency
    uint32_t prev = kNil, next = kNil;  // recency list, once linked: head_ is the oldest
    RowMeta meta;
  };
  void Unlink(uint32_t slot);
  void LinkNewest(uint32_t slot);
  // The rows' slots, least recently touched first (from the list, or sorted by `touched`).
  std::vector<uint32_t> SlotsByRecency() const;

  const uint32_t dim_;
  const size_t capacity_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<Slot> slots_;
  std::vector<float> values_;  // slots_.size() * dim
  std::vector<uint32_t> free_;
  // A touch only stamps its row with the touch count until something needs the oldest row (a
  // bounded table over capacity); then the list is built from the counts, in the same order
  // relinking every touch would have kept, and kept from then on. A table within its bound
  // never pays the relinking: two writes into other rows at random places, per touch.
  uint64_t touches_ = 0;
  bool recency_linked_ = false;
  uint32_t head_ = kNil, tail_ = kNil;
};

struct SparsePush {
  std::vector<uint64_t> keys;  // rows the block covers, ascending
  CodecKind kind = CodecKind::kNone;
  std::vector<std::byte> block;        // keys.size() * dim entries
  std::vector<uint16_t> held;          // per row of keys: pushes it sums, 1..kMaxHeldSteps
  std::vector<float> spread;           // per row of keys (see above)
  std::vector<uint64_t> flushed_keys;  // ascending
  std::vector<float> flushed_values;   // flushed_keys.size() * dim
  std::vector<uint16_t> flushed_held;  // per flushed row
  std::vector<float> flushed_spread;
};

// Held counts on the wire: per row one LEB128 varint of (held - 1), then, where held > 1, one
// byte q with spread = 2^(q / 16) (1 to 2^15.9, steps of 4.4%; rounded to the nearest). No
// frame at all when every row holds one push: EncodeHeld then appends nothing and returns
// false. `spread` may be empty (all 1).
bool EncodeHeld(std::span<const uint16_t> held, std::span<const float> spread,
                std::vector<std::byte>* out);
// Replaces *held and *spread with the `count` rows' of `block`; InvalidArgument for a block
// with fewer or more, or a count above kMaxHeldSteps.
absl::Status DecodeHeld(std::span<const std::byte> block, size_t count, std::vector<uint16_t>* held,
                        std::vector<float>* spread);

// Puts the flushed rows of *out (flushed_keys and the arrays beside them) in ascending key
// order, as every push's keys are.
void SortFlushed(uint32_t dim, SparsePush* out);

class SparseErrorFeedback {
 public:
  // max_rows: residual rows kept (0: unbounded).
  SparseErrorFeedback(uint32_t dim, size_t max_rows) : residuals_(dim, max_rows) {}

  // `codec` is topk or sign1; `keys` strictly ascending, `gradient` keys.size() * dim floats,
  // the sums over `examples` examples. Residuals are kept per example (gradient / examples)
  // and what is sent is scaled by this push's examples, so that a row held over pushes of
  // different sizes (an epoch's short last batch) is weighted as its pushes were wherever the
  // receiver divides by the push's examples. The residual identity below then holds per
  // example; with examples 1 (the default) values are exactly as given.
  void Compress(const Codec& codec, std::span<const uint64_t> keys, std::span<const float> gradient,
                SparsePush* out, float examples = 1.0f);

  // Moves every residual row into out's flushed rows (kept ascending with those already
  // there), scaled by `examples` as Compress's: the end of training sends what is left, so
  // that no gradient is lost.
  void Drain(SparsePush* out, float examples = 1.0f);

  const RowTable& residuals() const { return residuals_; }
  RowTable& mutable_residuals() { return residuals_; }
  // Pushes so far (the stamp of the rows the last one touched).
  uint64_t pushes() const { return pushes_; }
  void set_pushes(uint64_t pushes) { pushes_ = pushes; }
  // Rows flushed so far to stay within the capacity, and rows sent by Drain.
  uint64_t rows_flushed() const { return rows_flushed_; }
  uint64_t rows_drained() const { return rows_drained_; }

 private:
  RowTable residuals_;
  uint64_t pushes_ = 0;
  uint64_t rows_flushed_ = 0;
  uint64_t rows_drained_ = 0;
  std::vector<float> p_;
  std::vector<float> sent_;
  std::vector<float> scaled_;
  std::vector<RowMeta> meta_;  // per row of the push: what its p sums
  std::vector<uint64_t> selected_;
};

// Compressed pulls (--compress-pull). A server keeps, per worker and table, a RowTable `copy`
// of the rows that worker holds; the worker keeps the same rows. A pull of rows `keys` is
// answered with
//   fresh    the float32 rows of the keys the copy does not hold (in request order), which
//            both sides then insert as they are;
//   block    one `codec` block (fp16, topk or sign1) of the deltas current - copy of the rows
//            the copy holds (in request order); both sides add its decoded values to their
//            copies, so what was not sent stays in current - copy: the server's error
//            feedback;
//   evicted  the rows the server's copy dropped to stay within its capacity (least recently
//            pulled, never those of this pull), ascending; the worker drops them too.
// Both sides split, add and evict in the order the replies are sent and received (one
// connection, in order), so that their copies stay equal to the bit.
struct PulledRows {
  std::vector<float> fresh;
  std::vector<std::byte> block;
  std::vector<uint64_t> evicted;
};
// Server side: `values` holds the current rows of `keys`.
void EncodePull(const Codec& codec, std::span<const uint64_t> keys, std::span<const float> values,
                uint64_t stamp, RowTable* copy, PulledRows* out);
// The checks of a reply that need only which keys the worker's copy holds (`holds`): the size
// of the new rows, a block only when some rows are held, and the dropped rows (held, and not
// pulled). Returns how many of `keys` the copy holds: the rows the block encodes, which the
// caller checks as it decodes them. An error names the part that does not fit. DecodePull's,
// and a copy kept elsewhere (a GPU's: device/pull_copy.h), so that both refuse alike.
absl::StatusOr<size_t> CheckPullReply(uint32_t dim, std::span<const uint64_t> keys,
                                      std::span<const std::byte> fresh,
                                      std::span<const std::byte> block,
                                      std::span<const uint64_t> evicted,
                                      absl::FunctionRef<bool(uint64_t)> holds);
// Worker side: checks the reply's parts against `keys` and `copy` (the sizes of fresh and of
// the block, the block itself, evicted rows the copy holds) before it changes anything, then
// updates `copy` and writes the rows of `keys` into `out` (keys.size() * dim). An error names
// the part that does not fit.
absl::Status DecodePull(CodecKind kind, std::span<const uint64_t> keys,
                        std::span<const std::byte> fresh, std::span<const std::byte> block,
                        std::span<const uint64_t> evicted, RowTable* copy, std::span<float> out);

// Decodes a SparsePush-style block of `rows` * dim entries of kind `kind` (kNone: float32
// values) into *out (replaced). InvalidArgument for a malformed block; the size is checked
// before anything is allocated.
absl::Status DecodeRows(CodecKind kind, std::span<const std::byte> block, size_t rows, uint32_t dim,
                        std::vector<float>* out);

}  // namespace syncline

#endif  // SYNCLINE_COMPRESSION_SPARSE_ROWS_H_
