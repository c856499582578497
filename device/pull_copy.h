// DevicePullCopy: the worker's side of compressed pulls (--compress-pull, DecodePull in
// compression/sparse_rows.h) where the rows are used, on a device_step executor E
// (device/device_step.h): the CUDA GPU of a GPU worker, or the host executor in tests. A reply
// is checked on the host by DecodePull's own checks (CheckPullReply), and then only its own bytes
// go up: the new rows whole, the delta block as it came (decoded there by E::BlockCodec, the CUDA
// codecs) and one 32-bit word a row (its slot in the copy, and whether it is new), two when the
// rows go to other places in the batch (a shard's reply); the copy is updated there and the rows of
// the pull are written where the step reads them. The host keeps the copy's index (key to slot)
// only.
//
// The floats are DecodePull's to the bit: a new row is copied, a held one gets the decoded
// delta added (without fusing: AddRn), as the CPU adds them.
//
// Thread-safety: thread-compatible; E's calls are the caller's to serialise.
#ifndef SYNCLINE_DEVICE_PULL_COPY_H_
#define SYNCLINE_DEVICE_PULL_COPY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/codec.h"
#include "compression/held_rows.h"
#include "compression/sparse_rows.h"
#include "device/kernels.h"
#include "device/row_feedback.h"

namespace syncline {
namespace device_step {

// A row's word: its slot, with kNewRow set for a row new to the copy.
inline constexpr uint32_t kNewRow = 0x80000000u;

// flags[i] = 1 for a new row, else 0 (their exclusive scan numbers the new rows).
struct NewRowFlags {
  const uint32_t* words;
  uint32_t* flags;
  SYNCLINE_HD void operator()(size_t i) const { flags[i] = words[i] >> 31; }
};

// Per entry i of a reply's rows (row r = i / dim, column i % dim: neighbouring threads touch
// neighbouring floats): a new row's entry (the new_before[r]-th new row) is copied into its
// slot; a held one's (the (r - new_before[r])-th held row) gets its delta added. Either way the
// slot's entry goes to row places[r] (places null: row r) of `out`.
struct ApplyPulledEntry {
  const uint32_t* words;
  const uint32_t* new_before;
  const uint32_t* places;
  const float* fresh;
  const float* delta;
  uint32_t dim;
  float* rows;
  float* out;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t r = i / dim, j = i % dim;
    const uint32_t word = words[r];
    float* row = rows + static_cast<size_t>(word & ~kNewRow) * dim;
    const size_t before = new_before[r];
    const float v = (word & kNewRow) != 0 ? fresh[before * dim + j]
                                          : AddRn(row[j], delta[(r - before) * dim + j]);
    row[j] = v;
    out[static_cast<size_t>(places != nullptr ? places[r] : r) * dim + j] = v;
  }
};

}  // namespace device_step

template <class E>
class DevicePullCopy {
 public:
  // `kind`: the pulls' codec (fp16, topk or sign1); rows of `dim` floats.
  static absl::StatusOr<std::unique_ptr<DevicePullCopy>> Create(E& e, CodecKind kind,
                                                                uint32_t dim) {
    if (kind == CodecKind::kNone || dim == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("a compressed pull's copy needs a codec and rows (codec %d, dim %d)",
                          static_cast<int>(kind), dim));
    }
    auto codec = E::BlockCodec::Create(e, CodecSpec{.kind = kind});
    if (!codec.ok()) return codec.status();
    return std::unique_ptr<DevicePullCopy>(new DevicePullCopy(e, dim, std::move(*codec)));
  }

  uint32_t dim() const { return dim_; }
  // Rows the copy holds.
  size_t size() const { return slot_of_.size(); }

  // One reply of a compressed pull of `keys` (fresh, block and evicted as DecodePull takes
  // them): checks it against the copy before anything changes (an error names the part that
  // does not fit, as DecodePull's), then updates the copy and writes the rows of keys[i] to row
  // places[i] of `out` (out_rows rows of dim floats, where the kernels run; places empty: row
  // i).
  absl::Status Apply(std::span<const uint64_t> keys, std::span<const uint32_t> places,
                     std::span<const std::byte> fresh, std::span<const std::byte> block,
                     std::span<const uint64_t> evicted, float* out, size_t out_rows) {
    const size_t n = keys.size();
    if (!places.empty() && places.size() != n) {
      return absl::InvalidArgumentError(
          absl::StrFormat("compressed pull: %d places for the rows of %d keys", places.size(), n));
    }
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::InvalidArgumentError("compressed pull: more than 2^31 rows in one reply");
    }
    for (size_t i = 0; i < n; ++i) {
      const size_t place = places.empty() ? i : places[i];
      if (place >= out_rows) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "compressed pull: row %d goes to row %d of a batch of %d rows", i, place, out_rows));
      }
    }
    // DecodePull's checks, against the index; the block is checked as it is decoded below.
    absl::StatusOr<size_t> held = CheckPullReply(
        dim_, keys, fresh, block, evicted, [this](uint64_t k) { return slot_of_.contains(k); });
    if (!held.ok()) return held.status();
    const size_t known = *held;
    const size_t fresh_rows = n - known;
    if (slots_used_ + fresh_rows >= device_step::kNewRow) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "compressed pull: the copy of the pulled rows would pass 2^31 rows (%d held, %d new); "
          "lower --pull-copy-rows",
          slot_of_.size(), fresh_rows));
    }
    if (n == 0) {
      Evict(evicted);
      return absl::OkStatus();
    }
    // The deltas decoded where the kernels run: the last step that may fail, so that an error
    // leaves the copy as it was.
    const float* delta = nullptr;
    if (known > 0) {
      absl::StatusOr<const float*> decoded = codec_->DecodeBlock(block, known * dim_);
      if (!decoded.ok()) {
        return absl::Status(decoded.status().code(),
                            absl::StrCat("compressed pull: ", decoded.status().message()));
      }
      delta = *decoded;
    }
    // Slots: a held row keeps its own, a new one takes a freed one or the next. What goes up a
    // row: its slot and whether it is new in one word, and its place among the batch's rows
    // unless that is its own index (one server's reply).
    const bool placed = !places.empty();
    const size_t words = placed ? 2 * n : n;
    host_meta_.Reserve(Room(words));
    uint32_t* word = host_meta_.data();
    for (size_t i = 0; i < n; ++i) {
      auto [it, inserted] = slot_of_.try_emplace(keys[i], 0u);
      if (inserted) {
        if (free_.empty()) {
          it->second = static_cast<uint32_t>(slots_used_++);
        } else {
          it->second = free_.back();
          free_.pop_back();
        }
      }
      word[i] = it->second | (inserted ? device_step::kNewRow : 0u);
      if (placed) word[n + i] = places[i];
    }
    GrowRows();
    meta_.Reserve(Room(words));
    flags_.Reserve(Room(n + 1));
    new_before_.Reserve(Room(n + 1));
    fresh_.Reserve(Room(fresh_rows * dim_ + 1));
    e_.Upload(meta_.data(), host_meta_.data(), words);
    e_.Upload(fresh_.data(), reinterpret_cast<const float*>(fresh.data()), fresh_rows * dim_);
    e_.Fence();
    e_.ForEach(n, device_step::NewRowFlags{meta_.data(), flags_.data()});
    e_.ExclusiveSum(flags_.data(), new_before_.data(), n);
    e_.ForEach(n * dim_, device_step::ApplyPulledEntry{
                             meta_.data(), new_before_.data(), placed ? meta_.data() + n : nullptr,
                             fresh_.data(), delta, dim_, rows_.data(), out});
    // The staging arrays are written again by the next reply's uploads, on the copy stream.
    e_.Finish();
    Evict(evicted);
    return absl::OkStatus();
  }

  // The copy's rows, as DecodePull's RowTable holds them (for tests: recency is not kept).
  absl::Status CopyRows(RowTable* table) const {
    if (table->dim() != dim_) {
      return absl::InvalidArgumentError("a copy of the pulled rows into rows of another width");
    }
    std::vector<float> rows(slots_used_ * dim_);
    e_.Download(rows.data(), rows_.data(), rows.size());
    e_.Finish();
    table->Clear();
    for (const auto& [key, slot] : slot_of_) {
      std::memcpy(table->Touch(key, 0), rows.data() + size_t{slot} * dim_, dim_ * sizeof(float));
    }
    return absl::OkStatus();
  }

 private:
  DevicePullCopy(E& e, uint32_t dim, std::unique_ptr<typename E::BlockCodec> codec)
      : e_(e), dim_(dim), codec_(std::move(codec)) {}

  // The rows a server dropped (checked to be held): their slots are free for later replies,
  // whose kernels run after this one's.
  void Evict(std::span<const uint64_t> evicted) {
    for (uint64_t k : evicted) {
      const auto it = slot_of_.find(k);
      free_.push_back(it->second);
      slot_of_.erase(it);
    }
  }

  // Room for every slot handed out, keeping the rows held (an array's growth drops them).
  void GrowRows() {
    if (slots_used_ <= capacity_) return;
    const size_t capacity = Room(slots_used_);
    typename E::template Array<float> bigger;
    bigger.Reserve(capacity * dim_);
    e_.Copy(bigger.data(), rows_.data(), capacity_ * dim_);
    std::swap(rows_, bigger);
    e_.Finish();  // before the old array goes
    capacity_ = capacity;
  }

  E& e_;
  const uint32_t dim_;
  std::unique_ptr<typename E::BlockCodec> codec_;
  absl::flat_hash_map<uint64_t, uint32_t> slot_of_;
  std::vector<uint32_t> free_;  // slots of evicted rows
  size_t slots_used_ = 0;       // slots handed out (the highest + 1)
  size_t capacity_ = 0;         // rows_ holds capacity_ rows
  typename E::template Array<float> rows_;
  typename E::template Array<uint32_t> meta_, flags_, new_before_;
  typename E::template Array<float> fresh_;
  typename E::template PinnedArray<uint32_t> host_meta_;
};

}  // namespace syncline

#endif  // SYNCLINE_DEVICE_PULL_COPY_H_
