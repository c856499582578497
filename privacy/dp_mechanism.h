// The clipping of differentially private training: each example's gradient (DP-SGD) or each
// client's round update (DP-FedAvg) is scaled down to L2 norm at most C before it is summed, so
// that one example (client) moves the sum by at most C, the sensitivity the Gaussian noise
// z C is calibrated to.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_PRIVACY_DP_MECHANISM_H_
#define SYNCLINE_PRIVACY_DP_MECHANISM_H_

#include <cmath>
#include <initializer_list>
#include <span>

namespace syncline {

// The L2 norm of the parts laid end to end, summed in double.
inline double L2Norm(std::initializer_list<std::span<const float>> parts) {
  double squares = 0;
  for (std::span<const float> part : parts) {
    for (float v : part) squares += static_cast<double>(v) * v;
  }
  return std::sqrt(squares);
}

// The factor that brings a vector of L2 norm `norm` to at most `clip`: min(1, clip / norm), 0
// for a norm that is not finite (such a contribution is dropped, not let through).
inline double ClipFactor(double norm, double clip) {
  if (!std::isfinite(norm)) return 0;
  return norm > clip ? clip / norm : 1.0;
}

// Scales the parts, laid end to end, to L2 norm at most `clip`; returns the norm they had.
inline double ClipToNorm(std::initializer_list<std::span<float>> parts, double clip) {
  double squares = 0;
  for (std::span<float> part : parts) {
    for (float v : part) squares += static_cast<double>(v) * v;
  }
  const double norm = std::sqrt(squares);
  const float factor = static_cast<float>(ClipFactor(norm, clip));
  if (factor != 1.0f) {
    for (std::span<float> part : parts) {
      for (float& v : part) v *= factor;
    }
  }
  return norm;
}

}  // namespace syncline

#endif  // SYNCLINE_PRIVACY_DP_MECHANISM_H_
