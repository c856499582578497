// Which server shard holds which key. Shared by clients and servers so that both agree:
// dense tables are split into contiguous key ranges (a dense push of a whole tensor becomes one
// zero-copy slice per shard), sparse keys are spread by a hash (hashed feature ids are skewed,
// and a range split would put the hot ids on one shard).
#ifndef SYNCLINE_CORE_SHARDING_H_
#define SYNCLINE_CORE_SHARDING_H_

#include <cstdint>

namespace syncline {

struct KeyRange {
  uint64_t begin = 0;
  uint64_t end = 0;  // one past the last key
  uint64_t size() const { return end - begin; }
  bool Contains(uint64_t key) const { return key >= begin && key < end; }
};

// The splitmix64 finaliser: a cheap, well-mixed 64-bit hash.
inline uint64_t MixKey(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

inline int SparseShardOf(uint64_t key, int num_shards) {
  return static_cast<int>(MixKey(key) % static_cast<uint64_t>(num_shards));
}

// Shard `shard` of `num_shards` holds [num_keys*shard/num_shards, num_keys*(shard+1)/num_shards).
inline KeyRange DenseShardRange(uint64_t num_keys, int shard, int num_shards) {
  const unsigned __int128 n = num_keys;
  return KeyRange{static_cast<uint64_t>(n * shard / num_shards),
                  static_cast<uint64_t>(n * (shard + 1) / num_shards)};
}

}  // namespace syncline

#endif  // SYNCLINE_CORE_SHARDING_H_
