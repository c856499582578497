#include "embeddings/row_index.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace syncline {
namespace {

// The caller's side of the index: which id each slot holds.
class Slots {
 public:
  uint32_t Add(uint64_t id) {
    if (!free_.empty()) {
      const uint32_t slot = free_.back();
      free_.pop_back();
      ids_[slot] = id;
      return slot;
    }
    ids_.push_back(id);
    return static_cast<uint32_t>(ids_.size() - 1);
  }
  void Free(uint32_t slot) { free_.push_back(slot); }  // the id stays, as in the store
  auto Holds(uint64_t id) const {
    return [this, id](uint32_t slot) { return ids_[slot] == id; };
  }

 private:
  std::vector<uint64_t> ids_;
  std::vector<uint32_t> free_;
};

// `pairs` pairs of ids, each pair sharing one tag: the index tells them apart only through
// `holds`. (About 80,000 ids give a pair of 32-bit tags.)
std::vector<uint64_t> IdsSharingTags(size_t pairs) {
  absl::flat_hash_map<uint32_t, uint64_t> first;
  std::vector<uint64_t> out;
  for (uint64_t id = 0; out.size() < 2 * pairs; ++id) {
    const auto [it, inserted] = first.try_emplace(RowIndex::Tag(id), id);
    if (!inserted) {
      out.push_back(it->second);
      out.push_back(id);
    }
  }
  return out;
}

TEST(RowIndexTest, FindsWhatWasInsertedAndNothingElse) {
  RowIndex index;
  Slots slots;
  for (uint64_t id = 0; id < 1000; ++id) index.Insert(id * 7, slots.Add(id * 7));
  EXPECT_EQ(index.size(), 1000u);
  for (uint64_t id = 0; id < 1000; ++id) {
    EXPECT_EQ(index.Find(id * 7, slots.Holds(id * 7)), id);
    EXPECT_EQ(index.Find(id * 7 + 1, slots.Holds(id * 7 + 1)), RowIndex::kNone);
  }
  // It grew by doubling to the capacity Reserve would have given it at once.
  EXPECT_EQ(index.bytes(), RowIndex::BytesFor(1000));
  RowIndex reserved;
  reserved.Reserve(1000);
  EXPECT_EQ(reserved.bytes(), RowIndex::BytesFor(1000));
  EXPECT_LE(3 * index.size(), 2 * index.capacity());
}

// Random inserts, erases and lookups against a hash map, on a small index so that probes wrap
// around its end and erases shift runs that cross it; among the ids, groups sharing one tag.
TEST(RowIndexTest, AgreesWithAMapThroughInsertsAndErases) {
  const uint32_t seed = 2026;  // replay: the failing case is this seed's
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> pool = IdsSharingTags(3);
  while (pool.size() < 300) pool.push_back(rng());
  for (int round = 0; round < 3; ++round) {
    RowIndex index;
    Slots slots;
    absl::flat_hash_map<uint64_t, uint32_t> want;
    const size_t most = round == 0 ? 10 : round == 1 ? 90 : 300;
    for (int op = 0; op < 20000; ++op) {
      const uint64_t id = pool[rng() % most];
      const auto it = want.find(id);
      const int what = static_cast<int>(rng() % 3);
      if (what == 0 && it == want.end()) {
        const uint32_t slot = slots.Add(id);
        index.Insert(id, slot);
        want[id] = slot;
      } else if (what == 1) {
        EXPECT_EQ(index.Erase(id, slots.Holds(id)), it != want.end()) << "seed " << seed;
        if (it != want.end()) {
          slots.Free(it->second);
          want.erase(it);
        }
      }
      ASSERT_EQ(index.size(), want.size()) << "seed " << seed << ", op " << op;
      if (op % 50 == 0) {
        // Every id, present or not, answers as the map does.
        for (size_t i = 0; i < most; ++i) {
          const auto w = want.find(pool[i]);
          ASSERT_EQ(index.Find(pool[i], slots.Holds(pool[i])),
                    w == want.end() ? RowIndex::kNone : w->second)
              << "seed " << seed << ", op " << op << ", id " << pool[i];
        }
        std::vector<uint32_t> seen;
        index.ForEachSlot([&](uint32_t slot) { seen.push_back(slot); });
        ASSERT_EQ(seen.size(), want.size());
      }
    }
  }
}

TEST(RowIndexTest, IdsOfOneTagAreToldApartByTheirSlots) {
  const std::vector<uint64_t> same = IdsSharingTags(1);
  RowIndex index;
  Slots slots;
  for (uint64_t id : same) index.Insert(id, slots.Add(id));
  for (size_t i = 0; i < same.size(); ++i) EXPECT_EQ(index.Find(same[i], slots.Holds(same[i])), i);
  EXPECT_TRUE(index.Erase(same[0], slots.Holds(same[0])));
  EXPECT_EQ(index.Find(same[0], slots.Holds(same[0])), RowIndex::kNone);
  EXPECT_EQ(index.Find(same[1], slots.Holds(same[1])), 1u);
  EXPECT_FALSE(index.Erase(same[0], slots.Holds(same[0])));
}

}  // namespace
}  // namespace syncline
