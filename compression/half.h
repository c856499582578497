// IEEE 754 binary16 ("half") conversions and the magnitude key shared by the CPU codecs and
// the CUDA kernels, so that both sides produce the same bits from one definition.
//
// FloatToHalf rounds to nearest, ties to even; overflow gives infinity, values below half the
// smallest subnormal give a signed zero, and a NaN keeps its sign and the top ten payload bits
// with the quiet bit set. HalfToFloat is exact, and also quiets a signalling NaN. These are the
// results of x86's F16C instructions (VCVTPS2PH / VCVTPH2PS), which cpu_kernels.cc uses when
// present; compression_test holds the two to the same bits.
#ifndef SYNCLINE_COMPRESSION_HALF_H_
#define SYNCLINE_COMPRESSION_HALF_H_

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define SYNCLINE_HOST_DEVICE __host__ __device__
#else
#define SYNCLINE_HOST_DEVICE
#endif

namespace syncline::compression_internal {

SYNCLINE_HOST_DEVICE inline uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

SYNCLINE_HOST_DEVICE inline float BitsToFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// The order of magnitudes used by top-K: the bits of |x|. For finite values and infinities it
// is the order of |x|; NaNs rank above infinity. Unlike comparing floats it is a total order.
SYNCLINE_HOST_DEVICE inline uint32_t MagnitudeKey(float x) { return FloatBits(x) & 0x7fffffffu; }

SYNCLINE_HOST_DEVICE inline uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // infinity or NaN
    if (ax == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  // 65520 is halfway between the largest half (65504) and 65536; ties go to even, i.e. up.
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // below 2^-14: a subnormal half or zero, in units of 2^-24
    if (ax <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25 (a tie goes to 0)
    const uint32_t mantissa = (ax & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - (ax >> 23);  // 14 .. 24
    uint32_t r = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rest > half || (rest == half && (r & 1u))) ++r;  // may carry into the smallest normal
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (ax >> 13) - (112u << 10);  // rebias the exponent from 127 to 15
  const uint32_t rest = ax & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;  // a carry moves the exponent up
  return static_cast<uint16_t>(sign | r);
}

SYNCLINE_HOST_DEVICE inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) {
    return BitsToFloat(mantissa == 0 ? (sign | 0x7f800000u)
                                     : (sign | 0x7fc00000u | (mantissa << 13)));
  }
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24, exact in float
    return BitsToFloat(sign | FloatBits(static_cast<float>(mantissa) * 5.9604644775390625e-8f));
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace syncline::compression_internal

#endif  // SYNCLINE_COMPRESSION_HALF_H_
