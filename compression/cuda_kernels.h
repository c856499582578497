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

// topk, by radix select on MagnitudeKey: kRadixPasses histogram passes over digits of
// kRadixBits[p] bits at kRadixShift[p] find the k-th largest key (the cut); then per tile of
// kTopKTile entries the count of keys above and equal to the cut; then, given each tile's
// exclusive prefix of those counts, a compaction writes the selected entries in index order.
inline constexpr int kRadixPasses = 3;
inline constexpr int kRadixBits[kRadixPasses] = {11, 10, 10};
inline constexpr int kRadixShift[kRadixPasses] = {20, 10, 0};
inline constexpr uint32_t kMaxRadixBins = 1u << 11;
inline constexpr size_t kTopKTile = 4096;

// hist[d] += number of i with (key & prefix_mask) == prefix and digit d at `shift`.
// hist must hold 2^bits zeroed counters.
cudaError_t LaunchKeyHistogram(const float* v, size_t n, uint32_t prefix, uint32_t prefix_mask,
                               int shift, int bits, uint32_t* hist, int blocks,
                               cudaStream_t stream);
// counts[2 t] / counts[2 t + 1]: keys above / equal to the cut in tile t.
cudaError_t LaunchCountAroundCut(const float* v, size_t n, uint32_t cut, uint32_t* counts,
                                 cudaStream_t stream);
// offsets[2 t] / offsets[2 t + 1]: keys above / equal to the cut before tile t. Writes each
// entry above the cut and the first `ties` equal to it, in index order.
cudaError_t LaunchCompactAroundCut(const float* v, size_t n, uint32_t cut,
                                   const unsigned long long* offsets, unsigned long long ties,
                                   uint32_t* indices, float* values, cudaStream_t stream);
cudaError_t LaunchScatterAdd(const uint32_t* indices, const float* values, size_t k, float scale,
                             float* out, cudaStream_t stream);

}  // namespace syncline::cuda_internal

#endif  // SYNCLINE_COMPRESSION_CUDA_KERNELS_H_
