#include "compression/sparse_rows.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/held_rows.h"
#include "compression/topk_select.h"
#include "compression/wire.h"

namespace syncline {

using compression_internal::SelectTopK;
using compression_internal::StoreF32;
using compression_internal::StoreU32;
using compression_internal::TopKMethod;

namespace {

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

void PutVarint(uint64_t v, std::vector<std::byte>* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<std::byte>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<std::byte>(v));
}

// A sent row's held count and spread (device_step::HeldAndSpread, which the device uses too):
// `meta` sums the row's pushes, `row` is what is sent for it whole (before what is not sent is
// subtracted).
void AppendHeld(const RowMeta& meta, std::span<const float> row, std::vector<uint16_t>* held,
                std::vector<float>* spread) {
  uint32_t k = 0;
  float r = 0;
  device_step::HeldAndSpread(meta.held, meta.squares, row.data(), static_cast<uint32_t>(row.size()),
                             &k, &r);
  held->push_back(static_cast<uint16_t>(k));
  spread->push_back(r);
}

}  // namespace

void SortFlushed(uint32_t dim, SparsePush* out) {
  if (out->flushed_keys.size() <= 1) return;
  std::vector<size_t> order(out->flushed_keys.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return out->flushed_keys[a] < out->flushed_keys[b]; });
  std::vector<uint64_t> keys_sorted(order.size());
  std::vector<float> values_sorted(order.size() * dim);
  std::vector<uint16_t> held_sorted(order.size());
  std::vector<float> spread_sorted(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    keys_sorted[i] = out->flushed_keys[order[i]];
    held_sorted[i] = out->flushed_held[order[i]];
    spread_sorted[i] = out->flushed_spread[order[i]];
    std::memcpy(&values_sorted[i * dim], &out->flushed_values[order[i] * dim], dim * sizeof(float));
  }
  out->flushed_keys = std::move(keys_sorted);
  out->flushed_values = std::move(values_sorted);
  out->flushed_held = std::move(held_sorted);
  out->flushed_spread = std::move(spread_sorted);
}

void EncodeKeys(std::span<const uint64_t> keys, std::vector<std::byte>* out) {
  out->reserve(out->size() + EncodedKeysSize(keys));
  for (size_t i = 0; i < keys.size(); ++i)
    PutVarint(i == 0 ? keys[0] : keys[i] - keys[i - 1] - 1, out);
}

size_t EncodedKeysSize(std::span<const uint64_t> keys) {
  size_t n = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    n += VarintSize(i == 0 ? keys[0] : keys[i] - keys[i - 1] - 1);
  }
  return n;
}

absl::Status DecodeKeys(std::span<const std::byte> block, size_t count,
                        std::vector<uint64_t>* out) {
  out->clear();
  // Every key takes at least one byte.
  if (count > block.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compact keys: %d bytes cannot hold %d keys", block.size(), count));
  }
  out->reserve(count);
  size_t at = 0;
  uint64_t previous = 0;
  for (size_t i = 0; i < count; ++i) {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at == block.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("compact keys: the block ends inside key %d of %d", i, count));
      }
      const auto byte = static_cast<uint8_t>(block[at++]);
      // The tenth byte may hold only the top bit of a 64-bit value.
      if (shift == 63 && byte > 1) {
        return absl::InvalidArgumentError(
            absl::StrFormat("compact keys: key %d does not fit 64 bits", i));
      }
      v |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) break;
    }
    uint64_t key = v;
    if (i > 0) {
      // key = previous + 1 + v, which must not pass 2^64 - 1.
      if (v >= UINT64_MAX - previous) {
        return absl::InvalidArgumentError(
            absl::StrFormat("compact keys: key %d passes 2^64 - 1", i));
      }
      key = previous + 1 + v;
    }
    out->push_back(key);
    previous = key;
  }
  if (at != block.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("compact keys: %d bytes follow the %d keys", block.size() - at, count));
  }
  return absl::OkStatus();
}

RowTable::RowTable(uint32_t dim, size_t capacity) : dim_(dim == 0 ? 1 : dim), capacity_(capacity) {}

float* RowTable::Find(uint64_t key, RowMeta* meta) {
  auto it = index_.find(key);
  if (it == index_.end()) {
    if (meta != nullptr) *meta = RowMeta{};
    return nullptr;
  }
  if (meta != nullptr) *meta = slots_[it->second].meta;
  return values_.data() + size_t{it->second} * dim_;
}

const float* RowTable::Find(uint64_t key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : values_.data() + size_t{it->second} * dim_;
}

void RowTable::Unlink(uint32_t s) {
  Slot& slot = slots_[s];
  (slot.prev == kNil ? head_ : slots_[slot.prev].next) = slot.next;
  (slot.next == kNil ? tail_ : slots_[slot.next].prev) = slot.prev;
  slot.prev = slot.next = kNil;
}

void RowTable::LinkNewest(uint32_t s) {
  Slot& slot = slots_[s];
  slot.prev = tail_;
  slot.next = kNil;
  (tail_ == kNil ? head_ : slots_[tail_].next) = s;
  tail_ = s;
}

float* RowTable::Touch(uint64_t key, uint64_t stamp, bool* inserted) {
  auto [it, fresh] = index_.try_emplace(key, kNil);
  if (inserted != nullptr) *inserted = fresh;
  if (fresh) {
    uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      s = static_cast<uint32_t>(slots_.size());
      slots_.emplace_back();
      values_.resize(values_.size() + dim_);
    }
    it->second = s;
    slots_[s].key = key;
    slots_[s].meta = RowMeta{};
    std::fill_n(values_.data() + size_t{s} * dim_, dim_, 0.0f);
  } else if (recency_linked_) {
    Unlink(it->second);
  }
  Slot& slot = slots_[it->second];
  slot.stamp = stamp;
  slot.touched = ++touches_;
  if (recency_linked_) LinkNewest(it->second);
  return values_.data() + size_t{it->second} * dim_;
}

float* RowTable::Touch(uint64_t key, uint64_t stamp, const RowMeta& meta) {
  float* row = Touch(key, stamp);
  slots_[static_cast<size_t>(row - values_.data()) / dim_].meta = meta;
  return row;
}

bool RowTable::Erase(uint64_t key) {
  auto it = index_.find(key);
  if (it == index_.end()) return false;
  if (recency_linked_) Unlink(it->second);
  free_.push_back(it->second);
  index_.erase(it);
  return true;
}

std::vector<uint32_t> RowTable::SlotsByRecency() const {
  std::vector<uint32_t> order;
  order.reserve(index_.size());
  if (recency_linked_) {
    for (uint32_t s = head_; s != kNil; s = slots_[s].next) order.push_back(s);
    return order;
  }
  for (const auto& [key, s] : index_) order.push_back(s);
  // Touch counts are unique: the order is total, the list's own.
  std::sort(order.begin(), order.end(),
            [this](uint32_t a, uint32_t b) { return slots_[a].touched < slots_[b].touched; });
  return order;
}

bool RowTable::Oldest(uint64_t* key, uint64_t* stamp) {
  if (!recency_linked_) {
    head_ = tail_ = kNil;
    for (const uint32_t s : SlotsByRecency()) LinkNewest(s);
    recency_linked_ = true;
  }
  if (head_ == kNil) return false;
  *key = slots_[head_].key;
  *stamp = slots_[head_].stamp;
  return true;
}

void RowTable::ForEach(const std::function<void(uint64_t key, uint64_t stamp, const RowMeta& meta,
                                                const float* row)>& f) const {
  for (const uint32_t s : SlotsByRecency()) {
    f(slots_[s].key, slots_[s].stamp, slots_[s].meta, values_.data() + size_t{s} * dim_);
  }
}

bool EncodeHeld(std::span<const uint16_t> held, std::span<const float> spread,
                std::vector<std::byte>* out) {
  if (std::all_of(held.begin(), held.end(), [](uint16_t h) { return h <= 1; })) return false;
  for (size_t i = 0; i < held.size(); ++i) {
    PutVarint(held[i] == 0 ? 0 : held[i] - 1, out);
    if (held[i] > 1) {
      const float r = spread.empty() ? 1.0f : spread[i];
      const float q = std::isfinite(r) && r > 1.0f ? std::round(16.0f * std::log2(r)) : 0.0f;
      out->push_back(static_cast<std::byte>(std::min(q, 255.0f)));
    }
  }
  return true;
}

absl::Status DecodeHeld(std::span<const std::byte> block, size_t count, std::vector<uint16_t>* held,
                        std::vector<float>* spread) {
  held->clear();
  spread->clear();
  if (count > block.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("held counts: %d bytes cannot hold %d counts", block.size(), count));
  }
  held->reserve(count);
  spread->reserve(count);
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t v = 0;
    for (int shift = 0;; shift += 7) {
      if (at == block.size() || shift > 14) {
        return absl::InvalidArgumentError(
            absl::StrFormat("held counts: count %d of %d is cut off or too long", i, count));
      }
      const auto byte = static_cast<uint8_t>(block[at++]);
      v |= uint32_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) break;
    }
    if (v + 1 > kMaxHeldSteps) {
      return absl::InvalidArgumentError(
          absl::StrFormat("held counts: row %d claims %d pushes, more than the %d allowed", i,
                          v + 1, kMaxHeldSteps));
    }
    held->push_back(static_cast<uint16_t>(v + 1));
    float r = 1.0f;
    if (v > 0) {
      if (at == block.size()) {
        return absl::InvalidArgumentError(
            absl::StrFormat("held counts: row %d's spread is cut off", i));
      }
      r = std::exp2(static_cast<float>(static_cast<uint8_t>(block[at++])) / 16.0f);
    }
    spread->push_back(r);
  }
  if (at != block.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("held counts: %d bytes follow the %d counts", block.size() - at, count));
  }
  return absl::OkStatus();
}

void RowTable::Clear() {
  index_.clear();
  slots_.clear();
  values_.clear();
  free_.clear();
  touches_ = 0;
  recency_linked_ = false;
  head_ = tail_ = kNil;
}

void SparseErrorFeedback::Compress(const Codec& codec, std::span<const uint64_t> keys,
                                   std::span<const float> gradient, SparsePush* out,
                                   float examples) {
  // Residuals are kept per example (gradient / examples): a row held over pushes of different
  // sizes, sent with the examples of the push it leaves with, is then weighted as its pushes
  // were. Examples 1 leaves every value as it is.
  const uint32_t dim = residuals_.dim();
  const size_t n = keys.size() * dim;
  const uint64_t stamp = ++pushes_;
  out->keys.clear();
  out->block.clear();
  out->held.clear();
  out->spread.clear();
  out->flushed_keys.clear();
  out->flushed_values.clear();
  out->flushed_held.clear();
  out->flushed_spread.clear();
  // p = gradient + residual; the rows of this push become the newest, and each now sums one
  // push more than its residual did.
  const float inv = examples == 1.0f ? 1.0f : 1.0f / examples;
  p_.resize(n);
  meta_.assign(keys.size(), RowMeta{});
  for (size_t i = 0; i < keys.size(); ++i) {
    RowMeta& m = meta_[i];
    const float* r = residuals_.Find(keys[i], &m);
    for (uint32_t j = 0; j < dim; ++j) {
      const float g = gradient[i * dim + j] * inv;
      // Bounded, so that a checkpoint of it (which refuses infinities) can be restored.
      m.squares = std::min(m.squares + g * g, std::numeric_limits<float>::max());
      p_[i * dim + j] = r != nullptr ? g + r[j] : g;
    }
    ++m.held;
  }
  // sent: what the receiver will decode, entry by entry of p.
  sent_.assign(n, 0.0f);
  std::vector<float>& sent = sent_;
  if (codec.spec().kind == CodecKind::kTopK) {
    out->kind = CodecKind::kTopK;
    SelectTopK(p_, TopKCount(codec.spec().ratio, n), TopKMethod::kExact, &selected_);
    // The rows holding a selected entry, and the entries' indices within those rows.
    std::vector<uint32_t> local;
    local.reserve(selected_.size());
    size_t last_row = SIZE_MAX;
    for (uint64_t index : selected_) {
      const size_t row = index / dim;
      if (row != last_row) {
        out->keys.push_back(keys[row]);
        AppendHeld(meta_[row], std::span<const float>(p_).subspan(row * dim, dim), &out->held,
                   &out->spread);
        meta_[row] = RowMeta{};  // sent: what stays of it sums no push
        last_row = row;
      }
      local.push_back(static_cast<uint32_t>((out->keys.size() - 1) * dim + index % dim));
      sent[index] = p_[index];
    }
    const size_t entries = out->keys.size() * dim;
    const size_t k = selected_.size();
    if (entries * sizeof(float) <= 4 + k * 8) {
      // The rows' values as float32, zeros where nothing was selected.
      out->kind = CodecKind::kNone;
      out->block.assign(entries * sizeof(float), std::byte{0});
      for (size_t i = 0; i < k; ++i) {
        StoreF32(out->block.data() + size_t{local[i]} * 4, p_[selected_[i]] * examples);
      }
    } else {
      out->block.resize(4 + k * 8);
      StoreU32(out->block.data(), static_cast<uint32_t>(k));
      for (size_t i = 0; i < k; ++i) {
        StoreU32(out->block.data() + 4 + 4 * i, local[i]);
        StoreF32(out->block.data() + 4 + 4 * k + 4 * i, p_[selected_[i]] * examples);
      }
    }
  } else {
    out->kind = codec.spec().kind;
    out->keys.assign(keys.begin(), keys.end());
    if (examples == 1.0f) {
      codec.Encode(p_, &out->block);
    } else {
      scaled_.resize(n);
      for (size_t k = 0; k < n; ++k) scaled_[k] = p_[k] * examples;
      codec.Encode(scaled_, &out->block);
    }
    // A block that does not decode (a non-finite scale) sends nothing: p stays whole.
    if (!codec.DecodeAdd(out->block, std::span<float>(sent)).ok()) {
      std::fill(sent.begin(), sent.end(), 0.0f);
      out->held.assign(keys.size(), 1);
    } else {
      if (examples != 1.0f) {
        for (float& v : sent) v *= inv;
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        AppendHeld(meta_[i], std::span<const float>(p_).subspan(i * dim, dim), &out->held,
                   &out->spread);
        meta_[i] = RowMeta{};
      }
    }
  }
  // residual = p - sent; rows left at exactly zero leave the table.
  for (size_t i = 0; i < keys.size(); ++i) {
    bool zero = true;
    for (uint32_t j = 0; j < dim; ++j) {
      p_[i * dim + j] -= sent[i * dim + j];
      zero = zero && p_[i * dim + j] == 0.0f;
    }
    if (zero) {
      residuals_.Erase(keys[i]);
    } else {
      std::memcpy(residuals_.Touch(keys[i], stamp, meta_[i]), &p_[i * dim], dim * sizeof(float));
    }
  }
  // Over capacity: flush the oldest rows, never this push's own.
  uint64_t key = 0, row_stamp = 0;
  while (residuals_.over_capacity() && residuals_.Oldest(&key, &row_stamp) && row_stamp < stamp) {
    RowMeta m;
    const float* r = residuals_.Find(key, &m);
    out->flushed_keys.push_back(key);
    for (uint32_t j = 0; j < dim; ++j) out->flushed_values.push_back(r[j] * examples);
    AppendHeld(m, std::span<const float>(r, dim), &out->flushed_held, &out->flushed_spread);
    residuals_.Erase(key);
  }
  rows_flushed_ += out->flushed_keys.size();
  SortFlushed(dim, out);
}

void SparseErrorFeedback::Drain(SparsePush* out, float examples) {
  const uint32_t dim = residuals_.dim();
  residuals_.ForEach([&](uint64_t key, uint64_t, const RowMeta& meta, const float* row) {
    out->flushed_keys.push_back(key);
    for (uint32_t j = 0; j < dim; ++j) out->flushed_values.push_back(row[j] * examples);
    AppendHeld(meta, std::span<const float>(row, dim), &out->flushed_held, &out->flushed_spread);
  });
  rows_drained_ += residuals_.size();
  residuals_.Clear();
  SortFlushed(dim, out);
}

absl::Status DecodeRows(CodecKind kind, std::span<const std::byte> block, size_t rows, uint32_t dim,
                        std::vector<float>* out) {
  const size_t n = rows * dim;
  if (kind == CodecKind::kNone) {
    if (block.size() != n * sizeof(float)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("float32 rows: %d bytes for %d rows of %d (expected %d)", block.size(),
                          rows, dim, n * sizeof(float)));
    }
    out->resize(n);
    if (n > 0) std::memcpy(out->data(), block.data(), block.size());
    return absl::OkStatus();
  }
  if (auto s = compression_internal::ValidateBlock(kind, block, n); !s.ok()) return s;
  out->assign(n, 0.0f);
  auto codec = Codec::Create(CodecSpec{.kind = kind});
  if (codec == nullptr) return absl::InvalidArgumentError("unknown codec");
  return codec->DecodeAdd(block, std::span<float>(*out));
}

void EncodePull(const Codec& codec, std::span<const uint64_t> keys, std::span<const float> values,
                uint64_t stamp, RowTable* copy, PulledRows* out) {
  const uint32_t dim = copy->dim();
  out->fresh.clear();
  out->block.clear();
  out->evicted.clear();
  std::vector<size_t> known;  // positions in the request of the rows the copy holds
  std::vector<float> delta;
  for (size_t i = 0; i < keys.size(); ++i) {
    const float* v = values.data() + i * dim;
    bool inserted = false;
    float* c = copy->Touch(keys[i], stamp, &inserted);
    if (inserted) {
      out->fresh.insert(out->fresh.end(), v, v + dim);
      std::memcpy(c, v, dim * sizeof(float));
    } else {
      known.push_back(i);
      for (uint32_t j = 0; j < dim; ++j) delta.push_back(v[j] - c[j]);
    }
  }
  if (!known.empty()) {
    codec.Encode(delta, &out->block);
    std::vector<float> sent(delta.size(), 0.0f);
    // Our own block decodes, except sign1 of a non-finite delta: then nothing is sent.
    if (!codec.DecodeAdd(out->block, std::span<float>(sent)).ok()) {
      out->block.clear();
      codec.Encode(std::vector<float>(delta.size(), 0.0f), &out->block);
      std::fill(sent.begin(), sent.end(), 0.0f);
    }
    for (size_t j = 0; j < known.size(); ++j) {
      float* c = copy->Find(keys[known[j]]);
      for (uint32_t d = 0; d < dim; ++d) c[d] += sent[j * dim + d];
    }
  }
  uint64_t key = 0, row_stamp = 0;
  while (copy->over_capacity() && copy->Oldest(&key, &row_stamp) && row_stamp < stamp) {
    out->evicted.push_back(key);
    copy->Erase(key);
  }
  std::sort(out->evicted.begin(), out->evicted.end());
}

absl::StatusOr<size_t> CheckPullReply(uint32_t dim, std::span<const uint64_t> keys,
                                      std::span<const std::byte> fresh,
                                      std::span<const std::byte> block,
                                      std::span<const uint64_t> evicted,
                                      absl::FunctionRef<bool(uint64_t)> holds) {
  size_t known = 0;
  for (uint64_t k : keys) known += holds(k) ? 1 : 0;
  const size_t fresh_rows = keys.size() - known;
  if (fresh.size() != fresh_rows * dim * sizeof(float)) {
    return absl::DataLossError(absl::StrFormat(
        "compressed pull: %d bytes of new rows, expected %d rows of %d floats (the copies of "
        "the rows held disagree)",
        fresh.size(), fresh_rows, dim));
  }
  if (known == 0 && !block.empty()) {
    return absl::InvalidArgumentError("compressed pull: a delta block for no known rows");
  }
  if (!evicted.empty()) {
    const absl::flat_hash_set<uint64_t> pulled(keys.begin(), keys.end());
    for (uint64_t k : evicted) {
      if (!holds(k) || pulled.contains(k)) {
        return absl::DataLossError(
            absl::StrFormat("compressed pull: the server dropped row %d, which this worker %s", k,
                            pulled.contains(k) ? "is pulling" : "does not hold"));
      }
    }
  }
  return known;
}

absl::Status DecodePull(CodecKind kind, std::span<const uint64_t> keys,
                        std::span<const std::byte> fresh, std::span<const std::byte> block,
                        std::span<const uint64_t> evicted, RowTable* copy, std::span<float> out) {
  const uint32_t dim = copy->dim();
  if (out.size() != keys.size() * dim) {
    return absl::InvalidArgumentError("compressed pull: output of the wrong size");
  }
  absl::StatusOr<size_t> known = CheckPullReply(dim, keys, fresh, block, evicted,
                                                [copy](uint64_t k) { return copy->Contains(k); });
  if (!known.ok()) return known.status();
  std::vector<float> sent;
  if (*known > 0) {
    if (auto s = DecodeRows(kind, block, *known, dim, &sent); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("compressed pull: ", s.message()));
    }
  }
  size_t f = 0, d = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool inserted = false;
    float* c = copy->Touch(keys[i], 0, &inserted);
    if (inserted) {
      std::memcpy(c, fresh.data() + f * dim * sizeof(float), dim * sizeof(float));
      ++f;
    } else {
      for (uint32_t j = 0; j < dim; ++j) c[j] += sent[d * dim + j];
      ++d;
    }
    std::memcpy(out.data() + i * dim, c, dim * sizeof(float));
  }
  for (uint64_t k : evicted) copy->Erase(k);
  return absl::OkStatus();
}

}  // namespace syncline
