// Launchers of the codec kernels (cuda_kernels.cu) for codec_cuda.cc. Each enqueues work on
// `stream` and returns the launch's error; none waits. Device pointers only. Internal: this
// header includes the CUDA runtime API and is not part of the public interface.
#ifndef SYNCLINE_COMPRESSION_CUDA_KERNELS_H_
#define SYNCLINE_COMPRESSION_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace syncline::cuda_internal {

cudaError_t LaunchFloatToHalf(const float* in, size_t n, uint16_t* out, cudaStream_t stream);
cudaError_t LaunchHalfAdd(const uint16_t* in, size_t n, float scale, float* out,
                          cudaStream_t stream);
cudaError_t LaunchFloatAdd(const float* in, size_t n, float scale, float* out, cudaStream_t stream);

// sign1: one warp per chunk sums |v| in the order of codec.h; bits by warp ballots.
// `bits` must be 4-byte aligned.
cudaError_t LaunchSign1Encode(const float* v, size_t n, size_t chunk, float* scales, uint8_t* bits,
                              cudaStream_t stream);
cudaError_t LaunchSign1DecodeAdd(const float* scales, size_t chunk, const uint8_t* bits, size_t n,
                                 float scale, float* out, cudaStream_t stream);

// topk, by radix select on MagnitudeKey, without the host: kRadixPasses histogram passes over
// digits of kRadixBits[p] bits at kRadixShift[p], each followed by a one-block kernel that
// picks the digit of the k-th largest key, find that key (the cut); then per tile of
// kTopKTile entries the count of keys above and equal to the cut; a one-block scan turns
// those into each tile's exclusive prefix; a compaction writes the selected entries in index
// order. The kernels pass what they found through a TopKSelect in device memory, so the host
// waits once, at the end, to read its `error`.
inline constexpr int kRadixPasses = 3;
inline constexpr int kRadixBits[kRadixPasses] = {11, 10, 10};
inline constexpr int kRadixShift[kRadixPasses] = {20, 10, 0};
inline constexpr uint32_t kMaxRadixBins = 1u << 11;
inline constexpr size_t kTopKTile = 4096;

struct TopKSelect {
  uint32_t prefix;               // the digits of the cut found so far
  uint32_t prefix_mask;          // which bits of `prefix` are found
  unsigned long long remaining;  // how many keys equal to the prefix are still to take
  uint32_t error;                // 0; kTopKLostCount or kTopKInconsistent: later kernels skip
};
inline constexpr uint32_t kTopKLostCount = 1;     // a histogram held fewer keys than remain
inline constexpr uint32_t kTopKInconsistent = 2;  // the tile counts do not add up to k

// *select = {0, 0, k, 0}.
cudaError_t LaunchTopKStart(TopKSelect* select, unsigned long long k, cudaStream_t stream);
// hist[d] += number of i with (key & prefix_mask) == prefix and digit d at `shift`.
// hist must hold 2^bits zeroed counters.
cudaError_t LaunchKeyHistogram(const float* v, size_t n, const TopKSelect* select, int shift,
                               int bits, uint32_t* hist, int blocks, cudaStream_t stream);
// Adds to *select the digit at `shift` of the remaining-th largest key matching the prefix.
cudaError_t LaunchSelectDigit(const uint32_t* hist, int shift, int bits, TopKSelect* select,
                              cudaStream_t stream);
// counts[2 t] / counts[2 t + 1]: keys above / equal to the cut in tile t.
cudaError_t LaunchCountAroundCut(const float* v, size_t n, const TopKSelect* select,
                                 uint32_t* counts, cudaStream_t stream);
// offsets[2 t] / offsets[2 t + 1]: keys above / equal to the cut before tile t; sets
// kTopKInconsistent unless the keys above plus the remaining ties make k.
cudaError_t LaunchTileOffsets(const uint32_t* counts, size_t tiles, unsigned long long k,
                              TopKSelect* select, unsigned long long* offsets, cudaStream_t stream);
// Writes each entry above the cut and the first `remaining` equal to it, in index order, at
// positions below k.
cudaError_t LaunchCompactAroundCut(const float* v, size_t n, const TopKSelect* select,
                                   const unsigned long long* offsets, unsigned long long k,
                                   uint32_t* indices, float* values, cudaStream_t stream);
cudaError_t LaunchScatterAdd(const uint32_t* indices, const float* values, size_t k, float scale,
                             float* out, cudaStream_t stream);

}  // namespace syncline::cuda_internal

#endif  // SYNCLINE_COMPRESSION_CUDA_KERNELS_H_
