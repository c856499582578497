// Top-K selection by magnitude: the indices, ascending, of the k entries of largest
// MagnitudeKey (|x|; NaN above infinity); among equal magnitudes the lower index wins, so the
// result is a function of the values alone and both methods return the same set.
//
// kExact finds the k-th largest key with std::nth_element over a copy of all n keys.
// kSampled follows Deep Gradient Compression (Lin et al. 2018): it estimates a threshold from
// a stratified random sample (seeded from n, so it is deterministic), collects the candidates
// at or above it in one vectorized pass, re-tunes once with a wider margin if there were fewer
// than k, and takes exactly k by nth_element over the candidates (about 1.1 k). Degenerate
// inputs (small n, large k, a sample too thin, heavy ties at the threshold) fall back to
// kExact. Either way the answer is exact.
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
