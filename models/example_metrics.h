// The per-example parts of the quality metrics (models/metrics.h), written once for the host and
// the device: a GPU model's evaluation (device/device_model.h) and the CPU's score every example
// with these same functions, so the two agree to the rounding of their sums.
//
// Thread-safety: pure functions.
#ifndef SYNCLINE_MODELS_EXAMPLE_METRICS_H_
#define SYNCLINE_MODELS_EXAMPLE_METRICS_H_

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/host_device.h"

namespace syncline::example_metrics {

// Probabilities are clamped to [kMinProbability, 1 - kMinProbability] before the log, which
// bounds -log(p) at about 16.1, so one confidently wrong example cannot dominate the mean.
inline constexpr double kMinProbability = 1e-7;

SYNCLINE_HD inline double LogLoss(double p_true) {
  const double p = p_true < kMinProbability         ? kMinProbability
                   : p_true > 1.0 - kMinProbability ? 1.0 - kMinProbability
                                                    : p_true;
  return -log(p);
}

// A binary example with score P(y=1): its log loss, and whether the 0.5 threshold gets it right.
SYNCLINE_HD inline double BinaryLoss(float score, bool positive) {
  return LogLoss(positive ? score : 1.0 - score);
}
SYNCLINE_HD inline bool BinaryHit(float score, bool positive) {
  return (score >= 0.5f) == positive;
}

// The class index a label scores as, of k classes: k (no class, so always wrong, with
// probability 0) for a negative, NaN or too large label.
inline uint32_t ClassOf(float label, int k) {
  if (!(label >= 0) || label >= static_cast<float>(k)) return static_cast<uint32_t>(k);
  return static_cast<uint32_t>(label);
}

// A multiclass example with class probabilities p[0, k) and class `label` (ClassOf): its
// cross-entropy, and whether the most probable class (the first, among equals) is the label.
SYNCLINE_HD inline double ClassLoss(const float* p, int k, uint32_t label) {
  return LogLoss(label < static_cast<uint32_t>(k) ? p[label] : 0.0);
}
SYNCLINE_HD inline bool ClassHit(const float* p, int k, uint32_t label) {
  int best = 0;
  for (int c = 1; c < k; ++c) {
    if (p[best] < p[c]) best = c;
  }
  return static_cast<uint32_t>(best) == label;
}

// A key whose unsigned order is the scores' order for ranking (AUC): NaN ranks with -infinity,
// below every number, and -0 equals +0.
SYNCLINE_HD inline uint32_t RankKey(float score) {
  if (score != score) score = -INFINITY;
  if (score == 0.0f) score = 0.0f;
  uint32_t bits;
  memcpy(&bits, &score, sizeof bits);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}

}  // namespace syncline::example_metrics

#endif  // SYNCLINE_MODELS_EXAMPLE_METRICS_H_
