// What the CPU's SparseErrorFeedback (compression/sparse_rows.cc) and the device's
// (device/row_feedback.h) compute alike, written once for both: g++ compiles it for the
// host, nvcc for the device too (SYNCLINE_HD), so that a GPU worker's pushes are the CPU's.
//
// Thread-safety: pure functions.
#ifndef SYNCLINE_COMPRESSION_HELD_ROWS_H_
#define SYNCLINE_COMPRESSION_HELD_ROWS_H_

#include <cstdint>

#include "core/host_device.h"
#include "optim/optimizer.h"

namespace syncline::device_step {

// Rounded IEEE operations that the device compiler does not contract into FMAs.
SYNCLINE_HD inline float MulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SYNCLINE_HD inline float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SYNCLINE_HD inline float SubRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SYNCLINE_HD inline double DMulRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SYNCLINE_HD inline double DAddRn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}

// A sent row's held count and spread (compression/sparse_rows.h): `held` and `squares` sum the
// row's pushes since it was last sent, `row` is what is sent for it whole. A residual left by
// an earlier partial send (held 0) counts as one push; the spread is held times the squares
// over the sent row's squares, in [1, kMaxHeldSpread] (1 for a row of zeros).
SYNCLINE_HD inline void HeldAndSpread(uint32_t held, float squares, const float* row, uint32_t dim,
                                      uint32_t* held_out, float* spread_out) {
  const uint32_t k = held < 1 ? 1 : (held > kMaxHeldSteps ? kMaxHeldSteps : held);
  double sent_squares = 0;
  for (uint32_t j = 0; j < dim; ++j) {
    sent_squares = DAddRn(sent_squares, DMulRn(static_cast<double>(row[j]), row[j]));
  }
  const double r = sent_squares > 0 ? DMulRn(k, static_cast<double>(squares)) / sent_squares : 1.0;
  const double max_spread = kMaxHeldSpread;
  *held_out = k;
  *spread_out = static_cast<float>(r < 1.0 ? 1.0 : (max_spread < r ? max_spread : r));
}

}  // namespace syncline::device_step

#endif  // SYNCLINE_COMPRESSION_HELD_ROWS_H_
