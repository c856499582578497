#ifndef SYNCLINE_EMBEDDINGS_ROW_INDEX_H_
#define SYNCLINE_EMBEDDINGS_ROW_INDEX_H_

// The embedding store's index: row id -> memory slot.
//
// A lookup of a large table misses the caches, so the store fetches each id's index entry a
// few ids before it looks the id up (see EmbeddingStore::Read). That only pays if the lookup
// then touches nothing else: abseil's flat_hash_map prefetches one line of a 16-entry group
// whose entries span four, and the key compare of most lookups missed anyway (measured: 67% of
// the store's prefetch stage stalled there). This index is one array of 8-byte entries, linear
// probing, at most 2/3 full: an entry holds the slot and the high 32 bits of the id's hash (its
// tag; the low bits of the tag are its home), and the ids themselves live in the slots' own
// bookkeeping, which the caller checks through `holds`. So a lookup reads the home's line (and
// rarely the next), which Prefetch fetches; the slot's bookkeeping, which the store reads next
// anyway, confirms it. Removal shifts the entries after it back (no tombstones), so the
// index never degrades under evictions.

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/prefetch.h"
#include "core/sharding.h"

namespace syncline {

class RowIndex {
 public:
  static constexpr uint32_t kNone = ~uint32_t{0};
  // The most rows an index holds well: at 2/3 full that is 2^32 entries, all of which a 32-bit
  // tag can name as homes.
  static constexpr uint64_t kMostRows = (uint64_t{1} << 33) / 3;

  RowIndex() { Rehash(kMinCapacity); }

  size_t size() const { return size_; }
  size_t capacity() const { return mask_ + 1; }
  // Bytes the entries take.
  uint64_t bytes() const { return capacity() * sizeof(Entry); }
  // bytes() once Reserve(rows) has run, or once `rows` rows were inserted into an index that
  // grew to hold them (the same capacity: the smallest power of two it may fill to rows).
  static uint64_t BytesFor(uint64_t rows) { return CapacityFor(rows) * sizeof(Entry); }

  // Makes room for `rows` rows, so that inserting up to that many never rehashes.
  void Reserve(uint64_t rows) {
    const uint64_t capacity = CapacityFor(rows);
    if (capacity > this->capacity()) Rehash(capacity);
  }

  // Fetches the lines a lookup of `id` starts with into the caches.
  void Prefetch(uint64_t id) const {
    const size_t home = Tag(id) & mask_;
    PrefetchLine(&entries_[home]);
    // A probe runs past the home's line when the home is among its last entries.
    PrefetchLine(&entries_[(home + kShortProbe) & mask_]);
  }

  // The slot of `id`, or kNone. `holds(slot)` says whether a slot holds `id`: it is asked only
  // of slots whose entries carry the id's tag.
  template <class Holds>
  uint32_t Find(uint64_t id, Holds&& holds) const {
    const uint32_t tag = Tag(id);
    for (size_t i = tag & mask_;; i = (i + 1) & mask_) {
      const Entry e = entries_[i];
      if (e.slot == kNone) return kNone;  // the index is never full: the probe ends
      if (e.tag == tag && holds(e.slot)) return e.slot;
    }
  }

  // Adds `id` at `slot`; `id` must not be in the index.
  void Insert(uint64_t id, uint32_t slot) {
    if (3 * (size_ + 1) > 2 * capacity()) Rehash(2 * capacity());
    Place(Entry{Tag(id), slot});
    ++size_;
  }

  // Removes `id` (which `holds` recognises as in Find); false when it is not in the index.
  template <class Holds>
  bool Erase(uint64_t id, Holds&& holds) {
    const uint32_t tag = Tag(id);
    size_t hole = tag & mask_;
    for (;; hole = (hole + 1) & mask_) {
      const Entry e = entries_[hole];
      if (e.slot == kNone) return false;
      if (e.tag == tag && holds(e.slot)) break;
    }
    // Each later entry of the run moves into the hole unless its home lies cyclically in
    // (hole, at]: there it would be unreachable from its home.
    for (size_t at = (hole + 1) & mask_; entries_[at].slot != kNone; at = (at + 1) & mask_) {
      const size_t home = entries_[at].tag & mask_;
      const bool stays = hole <= at ? (hole < home && home <= at) : (hole < home || home <= at);
      if (stays) continue;
      entries_[hole] = entries_[at];
      hole = at;
    }
    entries_[hole] = Entry{};
    --size_;
    return true;
  }

  // The tag of `id`: the high half of MixKey's hash of it (a shard's ids share that hash
  // modulo the shard count, which leaves the high half spread).
  static uint32_t Tag(uint64_t id) { return static_cast<uint32_t>(MixKey(id) >> 32); }

  // Calls f(slot) for every slot in the index, in no particular order.
  template <class F>
  void ForEachSlot(F&& f) const {
    for (size_t i = 0; i < capacity(); ++i) {
      if (entries_[i].slot != kNone) f(entries_[i].slot);
    }
  }

 private:
  struct Entry {
    uint32_t tag = 0;
    uint32_t slot = kNone;
  };
  static constexpr size_t kMinCapacity = 16;
  // Probes of a present id are about two entries long at 2/3 full.
  static constexpr size_t kShortProbe = 3;

  static uint64_t CapacityFor(uint64_t rows) {
    return std::max<uint64_t>(kMinCapacity, std::bit_ceil((3 * rows + 1) / 2));
  }

  void Place(Entry e) {
    size_t i = e.tag & mask_;
    while (entries_[i].slot != kNone) i = (i + 1) & mask_;
    entries_[i] = e;
  }

  void Rehash(uint64_t capacity) {
    // The new array first: if its allocation throws, the index is as it was.
    std::unique_ptr<Entry[]> fresh = std::make_unique<Entry[]>(capacity);
    const size_t old_capacity = entries_ == nullptr ? 0 : this->capacity();
    std::unique_ptr<Entry[]> old = std::exchange(entries_, std::move(fresh));
    mask_ = capacity - 1;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].slot != kNone) Place(old[i]);
    }
  }

  std::unique_ptr<Entry[]> entries_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_EMBEDDINGS_ROW_INDEX_H_
