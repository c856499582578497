// The codec kernels. Each must agree with its CPU reference bit for bit: cpu_kernels.cc
// (half conversions, sign1 scales and bits, decoding) and topk_select.cc (the selected set).
// Arithmetic that must round like the CPU uses the _rn intrinsics, which nvcc never fuses.
#include <algorithm>

#include "compression/cuda_kernels.h"
#include "compression/half.h"

namespace syncline::cuda_internal {
namespace {

using compression_internal::FloatToHalf;
using compression_internal::HalfToFloat;
using compression_internal::MagnitudeKey;

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

unsigned BlocksFor(size_t n, size_t per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

__device__ size_t GlobalThread() {
  return static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__global__ void FloatToHalfKernel(const float* in, size_t n, uint16_t* out) {
  const size_t i = GlobalThread();
  if (i < n) out[i] = FloatToHalf(in[i]);
}

__global__ void HalfAddKernel(const uint16_t* in, size_t n, float scale, float* out) {
  const size_t i = GlobalThread();
  if (i < n) out[i] = __fadd_rn(out[i], __fmul_rn(scale, HalfToFloat(in[i])));
}

__global__ void FloatAddKernel(const float* in, size_t n, float scale, float* out) {
  const size_t i = GlobalThread();
  if (i < n) out[i] = __fadd_rn(out[i], __fmul_rn(scale, in[i]));
}

// One warp per chunk: lane j sums |v| of entries j, j + 32, ... in order, then the lanes
// combine as codec.h says (lane j < h adds lane j + h for h = 16 .. 1).
__global__ void Sign1ScalesKernel(const float* v, size_t n, size_t chunk, size_t chunks,
                                  float* scales) {
  const size_t c = GlobalThread() / 32;
  const unsigned lane = threadIdx.x % 32;
  if (c >= chunks) return;  // the whole warp leaves together
  const size_t begin = c * chunk;
  const size_t len = min(chunk, n - begin);
  float sum = 0.0f;
  for (size_t i = lane; i < len; i += 32) sum = __fadd_rn(sum, fabsf(v[begin + i]));
  for (int h = 16; h > 0; h /= 2) sum = __fadd_rn(sum, __shfl_down_sync(kFullMask, sum, h));
  if (lane == 0) scales[c] = __fdiv_rn(sum, __ull2float_rn(len));
}

// Each warp packs the sign bits of 32 consecutive entries into one word.
__global__ void Sign1BitsKernel(const float* v, size_t n, uint8_t* bits) {
  const size_t base = GlobalThread() / 32 * 32;
  const unsigned lane = threadIdx.x % 32;
  if (base >= n) return;  // the whole warp leaves together
  const size_t i = base + lane;
  const bool negative = i < n && (__float_as_uint(v[i]) >> 31) != 0;
  const unsigned word = __ballot_sync(kFullMask, negative);
  if (lane != 0) return;
  if (base + 32 <= n) {
    reinterpret_cast<uint32_t*>(bits)[base / 32] = word;
  } else {
    for (size_t b = 0; b * 8 < n - base; ++b) bits[base / 8 + b] = (word >> (8 * b)) & 0xffu;
  }
}

__global__ void Sign1DecodeAddKernel(const float* scales, size_t chunk, const uint8_t* bits,
                                     size_t n, float scale, float* out) {
  const size_t i = GlobalThread();
  if (i >= n) return;
  const unsigned positive = __float_as_uint(__fmul_rn(scale, scales[i / chunk]));
  const unsigned bit = (bits[i / 8] >> (i % 8)) & 1u;
  out[i] = __fadd_rn(out[i], __uint_as_float(positive ^ (bit << 31)));
}

__global__ void TopKStartKernel(TopKSelect* select, unsigned long long k) {
  *select = TopKSelect{0, 0, k, 0};
}

__global__ void KeyHistogramKernel(const float* v, size_t n, const TopKSelect* select, int shift,
                                   uint32_t digit_mask, uint32_t* hist) {
  __shared__ uint32_t local[kMaxRadixBins];
  if (select->error != 0) return;  // the whole grid leaves
  const uint32_t prefix = select->prefix;
  const uint32_t prefix_mask = select->prefix_mask;
  for (uint32_t d = threadIdx.x; d <= digit_mask; d += blockDim.x) local[d] = 0;
  __syncthreads();
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = GlobalThread(); i < n; i += stride) {
    const uint32_t key = MagnitudeKey(v[i]);
    if ((key & prefix_mask) == prefix) atomicAdd(&local[(key >> shift) & digit_mask], 1u);
  }
  __syncthreads();
  for (uint32_t d = threadIdx.x; d <= digit_mask; d += blockDim.x) {
    if (local[d] != 0) atomicAdd(&hist[d], local[d]);
  }
}

constexpr int kScanThreads = 1024;

// One block of kScanThreads: the suffix sums of the histogram (keys in this digit and above)
// find the one digit d with above(d) < remaining <= above(d) + hist[d].
__global__ void SelectDigitKernel(const uint32_t* hist, int shift, int bits, TopKSelect* select) {
  constexpr int kPer = kMaxRadixBins / kScanThreads;
  __shared__ unsigned long long suffix[kMaxRadixBins];
  const uint32_t bins = 1u << bits;
  const unsigned long long remaining = select->remaining;
  const uint32_t error = select->error;
  for (int j = 0; j < kPer; ++j) {
    const uint32_t d = threadIdx.x + j * kScanThreads;
    if (d < bins) suffix[d] = hist[d];
  }
  __syncthreads();
  for (uint32_t offset = 1; offset < bins; offset *= 2) {
    unsigned long long add[kPer];
    for (int j = 0; j < kPer; ++j) {
      const uint32_t d = threadIdx.x + j * kScanThreads;
      add[j] = d + offset < bins ? suffix[d + offset] : 0;
    }
    __syncthreads();
    for (int j = 0; j < kPer; ++j) {
      const uint32_t d = threadIdx.x + j * kScanThreads;
      if (d < bins) suffix[d] += add[j];
    }
    __syncthreads();
  }
  if (error != 0) return;
  if (suffix[0] < remaining) {
    if (threadIdx.x == 0) select->error = kTopKLostCount;
    return;
  }
  for (int j = 0; j < kPer; ++j) {
    const uint32_t d = threadIdx.x + j * kScanThreads;
    if (d >= bins) continue;
    const unsigned long long above = suffix[d] - hist[d];
    if (above < remaining && remaining <= suffix[d]) {  // exactly one d
      select->prefix |= d << shift;
      select->prefix_mask |= (bins - 1u) << shift;
      select->remaining = remaining - above;
    }
  }
}

// One block of kScanThreads: an exclusive scan of the tiles' (above, equal) counts, a chunk of
// kScanThreads tiles at a time with the totals so far carried over.
__global__ void TileOffsetsKernel(const uint32_t* counts, size_t tiles, unsigned long long k,
                                  TopKSelect* select, unsigned long long* offsets) {
  __shared__ unsigned long long above_sum[kScanThreads], equal_sum[kScanThreads];
  __shared__ unsigned long long carry_above, carry_equal;
  if (select->error != 0) return;
  if (threadIdx.x == 0) carry_above = carry_equal = 0;
  __syncthreads();
  for (size_t base = 0; base < tiles; base += kScanThreads) {
    const size_t t = base + threadIdx.x;
    const unsigned long long above = t < tiles ? counts[2 * t] : 0;
    const unsigned long long equal = t < tiles ? counts[2 * t + 1] : 0;
    above_sum[threadIdx.x] = above;
    equal_sum[threadIdx.x] = equal;
    __syncthreads();
    for (unsigned offset = 1; offset < kScanThreads; offset *= 2) {
      const unsigned long long a = threadIdx.x >= offset ? above_sum[threadIdx.x - offset] : 0;
      const unsigned long long e = threadIdx.x >= offset ? equal_sum[threadIdx.x - offset] : 0;
      __syncthreads();
      above_sum[threadIdx.x] += a;
      equal_sum[threadIdx.x] += e;
      __syncthreads();
    }
    if (t < tiles) {
      offsets[2 * t] = carry_above + above_sum[threadIdx.x] - above;
      offsets[2 * t + 1] = carry_equal + equal_sum[threadIdx.x] - equal;
    }
    __syncthreads();
    if (threadIdx.x == kScanThreads - 1) {
      carry_above += above_sum[threadIdx.x];
      carry_equal += equal_sum[threadIdx.x];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const unsigned long long ties = select->remaining;
    if (carry_above + ties != k || carry_equal < ties) select->error = kTopKInconsistent;
  }
}

__device__ uint32_t BlockSum(uint32_t x, uint32_t* scratch) {
  for (int h = 16; h > 0; h /= 2) x += __shfl_down_sync(kFullMask, x, h);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = x;
  __syncthreads();
  uint32_t total = 0;
  for (int w = 0; w < kThreads / 32; ++w) total += scratch[w];
  return total;
}

__global__ void CountAroundCutKernel(const float* v, size_t n, const TopKSelect* select,
                                     uint32_t* counts) {
  __shared__ uint32_t scratch_above[kThreads / 32], scratch_equal[kThreads / 32];
  if (select->error != 0) return;  // the whole grid leaves
  const uint32_t cut = select->prefix;
  const size_t base = static_cast<size_t>(blockIdx.x) * kTopKTile;
  uint32_t above = 0, equal = 0;
  for (size_t r = 0; r < kTopKTile; r += kThreads) {
    const size_t i = base + r + threadIdx.x;
    if (i < n) {
      const uint32_t key = MagnitudeKey(v[i]);
      above += key > cut;
      equal += key == cut;
    }
  }
  above = BlockSum(above, scratch_above);
  equal = BlockSum(equal, scratch_equal);
  if (threadIdx.x == 0) {
    counts[2 * blockIdx.x] = above;
    counts[2 * blockIdx.x + 1] = equal;
  }
}

__global__ void CompactAroundCutKernel(const float* v, size_t n, const TopKSelect* select,
                                       const unsigned long long* offsets, unsigned long long k,
                                       uint32_t* indices, float* values) {
  __shared__ uint32_t warp_above[kThreads / 32], warp_equal[kThreads / 32];
  if (select->error != 0) return;  // the whole grid leaves
  const uint32_t cut = select->prefix;
  const unsigned long long ties = select->remaining;
  const size_t base = static_cast<size_t>(blockIdx.x) * kTopKTile;
  const unsigned lane = threadIdx.x % 32;
  const unsigned warp = threadIdx.x / 32;
  const unsigned lanes_below = (1u << lane) - 1u;
  unsigned long long above_before = offsets[2 * blockIdx.x];
  unsigned long long equal_before = offsets[2 * blockIdx.x + 1];
  for (size_t r = 0; r < kTopKTile; r += kThreads) {
    const size_t i = base + r + threadIdx.x;
    float value = 0.0f;
    uint32_t key = 0;
    if (i < n) {
      value = v[i];
      key = MagnitudeKey(value);
    }
    const bool is_above = i < n && key > cut;
    const bool is_equal = i < n && key == cut;
    const unsigned above_mask = __ballot_sync(kFullMask, is_above);
    const unsigned equal_mask = __ballot_sync(kFullMask, is_equal);
    if (lane == 0) {
      warp_above[warp] = __popc(above_mask);
      warp_equal[warp] = __popc(equal_mask);
    }
    __syncthreads();
    unsigned long long above_rank = above_before + __popc(above_mask & lanes_below);
    unsigned long long equal_rank = equal_before + __popc(equal_mask & lanes_below);
    for (unsigned w = 0; w < kThreads / 32; ++w) {
      if (w < warp) {
        above_rank += warp_above[w];
        equal_rank += warp_equal[w];
      }
      above_before += warp_above[w];
      equal_before += warp_equal[w];
    }
    if (is_above || (is_equal && equal_rank < ties)) {
      const unsigned long long position = above_rank + min(equal_rank, ties);
      if (position < k) {  // always, once TileOffsets checked the counts
        indices[position] = static_cast<uint32_t>(i);
        values[position] = value;
      }
    }
    __syncthreads();  // warp_above and warp_equal are rewritten in the next round
  }
}

__global__ void ScatterAddKernel(const uint32_t* indices, const float* values, size_t k,
                                 float scale, float* out) {
  const size_t j = GlobalThread();
  if (j < k) out[indices[j]] = __fadd_rn(out[indices[j]], __fmul_rn(scale, values[j]));
}

}  // namespace

cudaError_t LaunchFloatToHalf(const float* in, size_t n, uint16_t* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FloatToHalfKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(in, n, out);
  return cudaGetLastError();
}

cudaError_t LaunchHalfAdd(const uint16_t* in, size_t n, float scale, float* out,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  HalfAddKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(in, n, scale, out);
  return cudaGetLastError();
}

cudaError_t LaunchFloatAdd(const float* in, size_t n, float scale, float* out,
                           cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FloatAddKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(in, n, scale, out);
  return cudaGetLastError();
}

cudaError_t LaunchSign1Encode(const float* v, size_t n, size_t chunk, float* scales, uint8_t* bits,
                              cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const size_t chunks = (n + chunk - 1) / chunk;
  Sign1ScalesKernel<<<BlocksFor(chunks * 32, kThreads), kThreads, 0, stream>>>(v, n, chunk, chunks,
                                                                               scales);
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess) return error;
  Sign1BitsKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(v, n, bits);
  return cudaGetLastError();
}

cudaError_t LaunchSign1DecodeAdd(const float* scales, size_t chunk, const uint8_t* bits, size_t n,
                                 float scale, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Sign1DecodeAddKernel<<<BlocksFor(n, kThreads), kThreads, 0, stream>>>(scales, chunk, bits, n,
                                                                        scale, out);
  return cudaGetLastError();
}

cudaError_t LaunchTopKStart(TopKSelect* select, unsigned long long k, cudaStream_t stream) {
  TopKStartKernel<<<1, 1, 0, stream>>>(select, k);
  return cudaGetLastError();
}

cudaError_t LaunchKeyHistogram(const float* v, size_t n, const TopKSelect* select, int shift,
                               int bits, uint32_t* hist, int blocks, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned grid =
      static_cast<unsigned>(std::min<size_t>(static_cast<size_t>(blocks), BlocksFor(n, kThreads)));
  KeyHistogramKernel<<<grid, kThreads, 0, stream>>>(v, n, select, shift, (1u << bits) - 1u, hist);
  return cudaGetLastError();
}

cudaError_t LaunchSelectDigit(const uint32_t* hist, int shift, int bits, TopKSelect* select,
                              cudaStream_t stream) {
  SelectDigitKernel<<<1, kScanThreads, 0, stream>>>(hist, shift, bits, select);
  return cudaGetLastError();
}

cudaError_t LaunchCountAroundCut(const float* v, size_t n, const TopKSelect* select,
                                 uint32_t* counts, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CountAroundCutKernel<<<BlocksFor(n, kTopKTile), kThreads, 0, stream>>>(v, n, select, counts);
  return cudaGetLastError();
}

cudaError_t LaunchTileOffsets(const uint32_t* counts, size_t tiles, unsigned long long k,
                              TopKSelect* select, unsigned long long* offsets,
                              cudaStream_t stream) {
  if (tiles == 0) return cudaSuccess;
  TileOffsetsKernel<<<1, kScanThreads, 0, stream>>>(counts, tiles, k, select, offsets);
  return cudaGetLastError();
}

cudaError_t LaunchCompactAroundCut(const float* v, size_t n, const TopKSelect* select,
                                   const unsigned long long* offsets, unsigned long long k,
                                   uint32_t* indices, float* values, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  CompactAroundCutKernel<<<BlocksFor(n, kTopKTile), kThreads, 0, stream>>>(v, n, select, offsets, k,
                                                                           indices, values);
  return cudaGetLastError();
}

cudaError_t LaunchScatterAdd(const uint32_t* indices, const float* values, size_t k, float scale,
                             float* out, cudaStream_t stream) {
  if (k == 0) return cudaSuccess;
  ScatterAddKernel<<<BlocksFor(k, kThreads), kThreads, 0, stream>>>(indices, values, k, scale, out);
  return cudaGetLastError();
}

}  // namespace syncline::cuda_internal
