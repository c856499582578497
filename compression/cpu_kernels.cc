#include "compression/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "compression/half.h"
#include "compression/wire.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
// No "fma": a fused multiply-add would round differently from the portable code.
#define SYNCLINE_AVX2 __attribute__((target("avx2,f16c")))
#endif

namespace syncline::compression_internal {

float ReduceSign1Lanes(float lanes[kSign1Lanes]) {
  for (size_t h = kSign1Lanes / 2; h > 0; h /= 2) {
    for (size_t j = 0; j < h; ++j) lanes[j] += lanes[j + h];
  }
  return lanes[0];
}

namespace {

// Sign bits are packed per tile of whole chunks right after the tile's scales, while the tile
// is still in cache, so that a large gradient is read from memory once.
constexpr size_t kSign1TileEntries = 16384;

template <float (*ChunkAbsSum)(const float*, size_t),
          void (*PackSigns)(const float*, size_t, size_t, std::byte*)>
void Sign1Encode(const float* v, size_t n, size_t chunk, std::byte* scales, std::byte* bits) {
  const size_t chunks = n / chunk + (n % chunk != 0);
  const size_t tile_chunks = std::max<size_t>(1, kSign1TileEntries / chunk);
  size_t packed = 0;
  for (size_t c0 = 0; c0 < chunks; c0 += tile_chunks) {
    const size_t c1 = std::min(chunks, c0 + tile_chunks);
    for (size_t c = c0; c < c1; ++c) {
      const size_t begin = c * chunk;
      const size_t len = std::min(chunk, n - begin);
      StoreF32(scales + 4 * c, ChunkAbsSum(v + begin, len) / static_cast<float>(len));
    }
    const size_t end = std::min(n, c1 * chunk);
    const size_t to = end == n ? n : end & ~size_t{7};
    PackSigns(v, packed, to, bits);
    packed = to;
  }
}

inline float Sign1Decoded(uint32_t positive_bits, const std::byte* bits, size_t i) {
  const uint32_t bit = (static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u;
  return BitsToFloat(positive_bits ^ (bit << 31));
}

// ---- portable ------------------------------------------------------------------------------

void FloatToHalfPortable(const float* in, size_t n, std::byte* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(out + 2 * i, &h, sizeof h);
  }
}

void HalfAddPortable(const std::byte* in, size_t n, float scale, float* out) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, sizeof h);
    out[i] += scale * HalfToFloat(h);
  }
}

void FloatAddPortable(const std::byte* in, size_t n, float scale, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] += scale * LoadF32(in + 4 * i);
}

float ChunkAbsSumPortable(const float* v, size_t len) {
  float lanes[kSign1Lanes] = {};
  size_t i = 0;
  for (; i + kSign1Lanes <= len; i += kSign1Lanes) {
    for (size_t j = 0; j < kSign1Lanes; ++j) lanes[j] += std::fabs(v[i + j]);
  }
  for (; i < len; ++i) lanes[i % kSign1Lanes] += std::fabs(v[i]);
  return ReduceSign1Lanes(lanes);
}

// Bits of entries [from, to); from is a multiple of 8.
void PackSignsPortable(const float* v, size_t from, size_t to, std::byte* bits) {
  for (size_t i = from; i < to; i += 8) {
    const size_t count = std::min<size_t>(8, to - i);
    uint32_t byte = 0;
    for (size_t l = 0; l < count; ++l) byte |= (FloatBits(v[i + l]) >> 31) << l;
    bits[i / 8] = static_cast<std::byte>(byte);
  }
}

void Sign1DecodeAddPortable(const std::byte* scales, size_t chunk, const std::byte* bits, size_t n,
                            float scale, float* out) {
  for (size_t begin = 0, c = 0; begin < n; begin += chunk, ++c) {
    const uint32_t positive = FloatBits(scale * LoadF32(scales + 4 * c));
    const size_t end = std::min(n, begin + chunk);
    for (size_t i = begin; i < end; ++i) out[i] += Sign1Decoded(positive, bits, i);
  }
}

size_t SelectAtLeastPortable(const float* v, size_t n, uint32_t threshold, uint64_t* indices,
                             uint32_t* keys, size_t cap) {
  size_t count = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = MagnitudeKey(v[i]);
    if (key >= threshold) {
      if (count == cap) return kTooMany;
      indices[count] = i;
      keys[count++] = key;
    }
  }
  return count;
}

constexpr CpuKernels kPortable = {
    "portable",
    FloatToHalfPortable,
    HalfAddPortable,
    FloatAddPortable,
    Sign1Encode<ChunkAbsSumPortable, PackSignsPortable>,
    Sign1DecodeAddPortable,
    SelectAtLeastPortable,
};

// ---- AVX2 + F16C ---------------------------------------------------------------------------
#if defined(__x86_64__)

SYNCLINE_AVX2 void FloatToHalfAvx2(const float* in, size_t n, std::byte* out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
  FloatToHalfPortable(in + i, n - i, out + 2 * i);
}

SYNCLINE_AVX2 void HalfAddAvx2(const std::byte* in, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(s, x)));
  }
  HalfAddPortable(in + 2 * i, n - i, scale, out + i);
}

SYNCLINE_AVX2 void FloatAddAvx2(const std::byte* in, size_t n, float scale, float* out) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float*>(in + 4 * i));
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), _mm256_mul_ps(s, x)));
  }
  FloatAddPortable(in + 4 * i, n - i, scale, out + i);
}

// Four accumulators of eight lanes are the 32 lanes of the canonical order.
SYNCLINE_AVX2 float ChunkAbsSumAvx2(const float* v, size_t len) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  size_t i = 0;
  for (; i + kSign1Lanes <= len; i += kSign1Lanes) {
    a0 = _mm256_add_ps(a0, _mm256_and_ps(abs_mask, _mm256_loadu_ps(v + i)));
    a1 = _mm256_add_ps(a1, _mm256_and_ps(abs_mask, _mm256_loadu_ps(v + i + 8)));
    a2 = _mm256_add_ps(a2, _mm256_and_ps(abs_mask, _mm256_loadu_ps(v + i + 16)));
    a3 = _mm256_add_ps(a3, _mm256_and_ps(abs_mask, _mm256_loadu_ps(v + i + 24)));
  }
  if (i == len) {
    // ReduceSign1Lanes in registers: h = 16 and 8 are whole vectors, then 4, 2, 1 in one.
    const __m256 s = _mm256_add_ps(_mm256_add_ps(a0, a2), _mm256_add_ps(a1, a3));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    const __m128 r = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(r, _mm_shuffle_ps(r, r, 1)));
  }
  alignas(32) float lanes[kSign1Lanes];
  _mm256_store_ps(lanes, a0);
  _mm256_store_ps(lanes + 8, a1);
  _mm256_store_ps(lanes + 16, a2);
  _mm256_store_ps(lanes + 24, a3);
  for (; i < len; ++i) lanes[i % kSign1Lanes] += std::fabs(v[i]);
  return ReduceSign1Lanes(lanes);
}

SYNCLINE_AVX2 inline uint32_t SignMask8(const float* v) {
  return static_cast<uint32_t>(_mm256_movemask_ps(_mm256_loadu_ps(v)));
}

SYNCLINE_AVX2 void PackSignsAvx2(const float* v, size_t from, size_t to, std::byte* bits) {
  size_t i = from;
  for (; i + 32 <= to; i += 32) {
    StoreU32(bits + i / 8, SignMask8(v + i) | SignMask8(v + i + 8) << 8 |
                               SignMask8(v + i + 16) << 16 | SignMask8(v + i + 24) << 24);
  }
  for (; i + 8 <= to; i += 8) bits[i / 8] = static_cast<std::byte>(SignMask8(v + i));
  PackSignsPortable(v, i, to, bits);
}

SYNCLINE_AVX2 void Sign1DecodeAddAvx2(const std::byte* scales, size_t chunk, const std::byte* bits,
                                      size_t n, float scale, float* out) {
  const __m256i bit_of_lane = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i sign = _mm256_set1_epi32(static_cast<int32_t>(0x80000000u));
  for (size_t begin = 0, c = 0; begin < n; begin += chunk, ++c) {
    const uint32_t positive = FloatBits(scale * LoadF32(scales + 4 * c));
    const __m256 p = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int32_t>(positive)));
    const size_t end = std::min(n, begin + chunk);
    size_t i = begin;
    for (; i < end && i % 8 != 0; ++i) out[i] += Sign1Decoded(positive, bits, i);
    for (; i + 8 <= end; i += 8) {
      const __m256i b = _mm256_set1_epi32(static_cast<int32_t>(bits[i / 8]));
      const __m256i set = _mm256_cmpeq_epi32(_mm256_and_si256(b, bit_of_lane), bit_of_lane);
      const __m256 d = _mm256_xor_ps(p, _mm256_castsi256_ps(_mm256_and_si256(set, sign)));
      _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(out + i), d));
    }
    for (; i < end; ++i) out[i] += Sign1Decoded(positive, bits, i);
  }
}

SYNCLINE_AVX2 uint32_t AtLeastMask8(const float* v, __m256i abs_mask, __m256i below) {
  const __m256i key =
      _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v)), abs_mask);
  return static_cast<uint32_t>(
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(key, below))));
}

SYNCLINE_AVX2 size_t SelectAtLeastAvx2(const float* v, size_t n, uint32_t threshold,
                                       uint64_t* indices, uint32_t* keys, size_t cap) {
  if (threshold > 0x7fffffffu) return 0;  // no key reaches it
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i below = _mm256_set1_epi32(static_cast<int32_t>(threshold) - 1);
  size_t count = 0;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    // Most blocks hold no candidate: test all 32 entries with one branch.
    const __m256i k0 =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i)), abs_mask);
    const __m256i k1 =
        _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 8)), abs_mask);
    const __m256i k2 = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 16)), abs_mask);
    const __m256i k3 = _mm256_and_si256(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + i + 24)), abs_mask);
    const __m256i any = _mm256_max_epi32(_mm256_max_epi32(k0, k1), _mm256_max_epi32(k2, k3));
    if (_mm256_testz_si256(_mm256_cmpgt_epi32(any, below), _mm256_cmpgt_epi32(any, below))) {
      continue;
    }
    uint32_t mask = AtLeastMask8(v + i, abs_mask, below) |
                    AtLeastMask8(v + i + 8, abs_mask, below) << 8 |
                    AtLeastMask8(v + i + 16, abs_mask, below) << 16 |
                    AtLeastMask8(v + i + 24, abs_mask, below) << 24;
    while (mask != 0) {
      if (count == cap) return kTooMany;
      const size_t j = i + static_cast<size_t>(__builtin_ctz(mask));
      indices[count] = j;
      keys[count++] = MagnitudeKey(v[j]);
      mask &= mask - 1;
    }
  }
  const size_t rest =
      SelectAtLeastPortable(v + i, n - i, threshold, indices + count, keys + count, cap - count);
  if (rest == kTooMany) return kTooMany;
  for (size_t j = count; j < count + rest; ++j) indices[j] += i;
  return count + rest;
}

constexpr CpuKernels kAvx2 = {
    "avx2",
    FloatToHalfAvx2,
    HalfAddAvx2,
    FloatAddAvx2,
    Sign1Encode<ChunkAbsSumAvx2, PackSignsAvx2>,
    Sign1DecodeAddAvx2,
    SelectAtLeastAvx2,
};

#endif  // defined(__x86_64__)

}  // namespace

const CpuKernels& PortableKernels() { return kPortable; }

const CpuKernels* Avx2Kernels() {
#if defined(__x86_64__)
  // F16C is CPUID leaf 1, ECX bit 29 (not every compiler's __builtin_cpu_supports knows it);
  // "avx2" also checks that the OS saves the YMM registers.
  static const bool supported = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
    return f16c && __builtin_cpu_supports("avx2");
  }();
  return supported ? &kAvx2 : nullptr;
#else
  return nullptr;
#endif
}

const CpuKernels& BestKernels() {
  const CpuKernels* avx2 = Avx2Kernels();
  return avx2 != nullptr ? *avx2 : kPortable;
}

}  // namespace syncline::compression_internal
