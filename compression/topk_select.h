// Top-K selection by magnitude: the indices, ascending, of the k entries of largest
// MagnitudeKey (|x|; NaN above infinity); among equal magnitudes the lower index wins, so the
// result is a function of the values alone and both methods return the same set.
//
// kExact finds the k-th largest key (the cut) by one radix step: a histogram of the keys' top
// 11 bits names the bucket holding it, and std::nth_element runs on that bucket alone; a
// third read takes the entries above the cut and the lowest-indexed ties. No copy of the n
// keys is made.
// kSampled follows Deep Gradient Compression (Lin et al. 2018): it estimates a threshold from
// a stratified sample of whole cache lines (seeded from n, so it is deterministic), collects
// the candidates at or above it in one vectorized pass, re-tunes once with a wider margin if
// there were fewer than k, and cuts the candidates (about 1.15 k) to exactly k as above.
// Degenerate inputs (small n, k > n / 8, a sample too thin, heavy ties at the threshold)
// fall back to kExact. Either way the answer is exact.
#ifndef SYNCLINE_COMPRESSION_TOPK_SELECT_H_
#define SYNCLINE_COMPRESSION_TOPK_SELECT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace syncline::compression_internal {

enum class TopKMethod { kExact, kSampled };

// What a selection did, for tests and the benchmark.
struct TopKTrace {
  int passes = 0;           // full passes over the values after sampling
  bool used_exact = false;  // ran (or fell back to) the exact method
};

// Replaces *indices with the selection; k is clamped to n.
void SelectTopK(std::span<const float> values, size_t k, TopKMethod method,
                std::vector<uint64_t>* indices, TopKTrace* trace = nullptr);

}  // namespace syncline::compression_internal

#endif  // SYNCLINE_COMPRESSION_TOPK_SELECT_H_
