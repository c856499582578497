// The hot loops of the CPU codecs, in a portable version and, on x86-64, an AVX2 + F16C version
// chosen at run time (the build targets baseline x86-64, so nothing here depends on -march).
// Both versions produce the same encoded bits; compression_test holds them to that.
//
// Blocks may sit at any address (a received frame), so block pointers are std::byte and every
// access is unaligned.
#ifndef SYNCLINE_COMPRESSION_CPU_KERNELS_H_
#define SYNCLINE_COMPRESSION_CPU_KERNELS_H_

#include <cstddef>
#include <cstdint>

namespace syncline::compression_internal {

// Entries summed per lane-order step of a sign1 scale (see codec.h); the CUDA kernel uses a
// warp of this many threads.
inline constexpr size_t kSign1Lanes = 32;

// The fixed reduction of the 32 lane sums of a sign1 chunk: for h = 16, 8, 4, 2, 1, lane j < h
// adds lane j + h. Returns lane 0.
float ReduceSign1Lanes(float lanes[kSign1Lanes]);

struct CpuKernels {
  const char* name;
  // out[i] = binary16 of in[i], stored little-endian at out + 2 i.
  void (*float_to_half)(const float* in, size_t n, std::byte* out);
  // out[i] += scale * (binary16 at in + 2 i).
  void (*half_add)(const std::byte* in, size_t n, float scale, float* out);
  // out[i] += scale * (float32 at in + 4 i).
  void (*float_add)(const std::byte* in, size_t n, float scale, float* out);
  // sign1 scales (float32 per chunk of `chunk` entries) and sign bits (ceil(n / 8) bytes) of
  // v[0, n).
  void (*sign1_encode)(const float* v, size_t n, size_t chunk, std::byte* scales, std::byte* bits);
  // out[i] += scale * (+-scale of i's chunk, by bit i).
  void (*sign1_decode_add)(const std::byte* scales, size_t chunk, const std::byte* bits, size_t n,
                           float scale, float* out);
  // Writes the indices i (ascending) with MagnitudeKey(v[i]) >= threshold to indices, and
  // their keys to keys; returns how many there are, or kTooMany (having stopped early) when
  // there are more than cap.
  size_t (*select_at_least)(const float* v, size_t n, uint32_t threshold, uint64_t* indices,
                            uint32_t* keys, size_t cap);
};
inline constexpr size_t kTooMany = ~size_t{0};

const CpuKernels& PortableKernels();
// Null unless this is x86-64 and the CPU has AVX2 and F16C.
const CpuKernels* Avx2Kernels();
// Avx2Kernels() when available, else PortableKernels().
const CpuKernels& BestKernels();

}  // namespace syncline::compression_internal

#endif  // SYNCLINE_COMPRESSION_CPU_KERNELS_H_
