// Pieces shared by the models' implementations (model.cc, ctr_model.cc); not part of the Model
// API.
//
// Thread-safety: KeyIndex is immutable after construction; the functions are pure.
#ifndef SYNCLINE_WORKER_MODEL_INTERNAL_H_
#define SYNCLINE_WORKER_MODEL_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

namespace syncline::model_internal {

inline constexpr size_t kMissing = static_cast<size_t>(-1);

// Mismatched spans are a caller's bug, not bad input: stop loudly rather than read or write out
// of bounds.
inline void CheckOrDie(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "syncline Model: %s\n", what);
    std::abort();
  }
}

// Maps feature ids to their rows (positions in the sorted `keys`): the training hot loop. A hash
// map makes a lookup O(1) but costs O(keys) to build, which pays when the call makes at least
// about as many lookups as there are keys (a whole batch); a call that looks up few of many keys
// (e.g. one thread's slice of a batch), or has few keys, binary-searches instead.
class KeyIndex {
 public:
  KeyIndex(absl::Span<const uint64_t> keys, size_t lookups) : keys_(keys) {
    if (keys.size() >= kMinHashedKeys && lookups >= keys.size()) {
      slots_.reserve(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) slots_.emplace(keys[i], static_cast<uint32_t>(i));
      hashed_ = true;
    }
  }

  // The row of `id`, or kMissing.
  size_t Find(uint64_t id) const {
    if (hashed_) {
      const auto it = slots_.find(id);
      return it == slots_.end() ? kMissing : it->second;
    }
    const auto it = std::lower_bound(keys_.begin(), keys_.end(), id);
    return it != keys_.end() && *it == id ? static_cast<size_t>(it - keys_.begin()) : kMissing;
  }

 private:
  static constexpr size_t kMinHashedKeys = 64;

  absl::Span<const uint64_t> keys_;
  bool hashed_ = false;
  absl::flat_hash_map<uint64_t, uint32_t> slots_;
};

// log(1 + exp(x)) without overflow for large x or loss of precision for very negative x.
inline double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

inline double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

}  // namespace syncline::model_internal

#endif  // SYNCLINE_WORKER_MODEL_INTERNAL_H_
