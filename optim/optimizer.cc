#include "optim/optimizer.h"

#include <algorithm>
#include <cmath>

namespace syncline {

int StateFloatsPerWeight(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return 0;
    case OptimizerKind::kAdagrad:
      return 1;
    case OptimizerKind::kAdam:
      return 2;
    case OptimizerKind::kFtrl:
      return 2;
    case OptimizerKind::kMomentum:
      return 1;
    case OptimizerKind::kYogi:
      return 2;
  }
  return 0;
}

void ApplyUpdate(const OptimizerConfig& config, float* weights, float* state, const float* grad_sum,
                 float scale, size_t n, int64_t step) {
  // SGD keeps no state (`state` may be null).
  ApplyUpdate(config, weights, state, state == nullptr ? nullptr : state + n, grad_sum, scale, n,
              step);
}

// The loops run at memory speed on large blocks only with wide vectors: GCC also builds an
// AVX2 version and picks one when the program loads. AVX2 without FMA computes the same
// operations in the same order, so both versions give the same bits.
namespace optim_internal {

// `sq` scales the square of the gradient (without l2's term) that the rules accumulate; 1 for a
// plain step, which then computes what it always did, bit for bit.
void Update(const OptimizerConfig& c, float* __restrict w, float* __restrict state0,
            float* __restrict state1, const float* __restrict g, float scale, size_t n,
            int64_t step, float sq);
// Not under ThreadSanitizer: the clones' resolver runs while the program loads, before the
// sanitizer's runtime is up, and its instrumented entry crashed there.
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SYNCLINE_NO_TARGET_CLONES 1
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(SYNCLINE_NO_TARGET_CLONES)
__attribute__((target_clones("avx2", "default")))
#endif
void Update(const OptimizerConfig& c, float* __restrict w, float* __restrict state0,
            float* __restrict state1, const float* __restrict g, float scale, size_t n,
            int64_t step, float sq) {
  const float lr = c.learning_rate;
  const float l2 = c.l2;
  // What the spread adds to the gradient's own square (not to l2's part of it); 0 for a
  // plain step, whose sums then keep their bits (x + 0 is x).
  const float extra = sq - 1.0f;
  switch (c.kind) {
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] * scale + l2 * w[i]);
      return;
    case OptimizerKind::kAdagrad: {
      float* __restrict h = state0;
      for (size_t i = 0; i < n; ++i) {
        const float gs = g[i] * scale;
        const float gi = gs + l2 * w[i];
        h[i] += gi * gi + extra * (gs * gs);
        w[i] -= lr * gi / (std::sqrt(h[i]) + c.epsilon);
      }
      return;
    }
    case OptimizerKind::kAdam:
    case OptimizerKind::kYogi: {
      // Yogi keeps Adam's moments and bias correction; its second moment moves towards g^2 by
      // at most (1 - beta2) g^2 a step, additively, so that a burst of large gradients does
      // not wipe out what it had (Zaheer et al. 2018). The branch is the same for the whole
      // loop (GCC unswitches it).
      const bool yogi = c.kind == OptimizerKind::kYogi;
      float* __restrict m = state0;
      float* __restrict v = state1;
      const double t = static_cast<double>(step < 1 ? 1 : step);
      const float correction1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
      const float correction2 = static_cast<float>(1.0 - std::pow(c.beta2, t));
      const float step_size = lr / correction1;
      const float inv_sqrt_c2 = 1.0f / std::sqrt(correction2);
      for (size_t i = 0; i < n; ++i) {
        const float gs = g[i] * scale;
        const float gi = gs + l2 * w[i];
        m[i] = c.beta1 * m[i] + (1 - c.beta1) * gi;
        if (yogi) {
          const float g2 = gi * gi + extra * (gs * gs);
          const float sign = v[i] > g2 ? 1.0f : (v[i] < g2 ? -1.0f : 0.0f);
          v[i] -= (1 - c.beta2) * g2 * sign;
        } else {
          v[i] = c.beta2 * v[i] + ((1 - c.beta2) * gi * gi + (1 - c.beta2) * extra * (gs * gs));
        }
        w[i] -= step_size * m[i] / (std::sqrt(v[i]) * inv_sqrt_c2 + c.epsilon);
      }
      return;
    }
    case OptimizerKind::kMomentum: {
      float* __restrict m = state0;
      for (size_t i = 0; i < n; ++i) {
        m[i] = c.beta1 * m[i] + (g[i] * scale + l2 * w[i]);
        w[i] -= lr * m[i];
      }
      return;
    }
    case OptimizerKind::kFtrl: {
      // FTRL-Proximal with per-coordinate rates: z accumulates gradients minus the proximal
      // correction, n the squared gradients; the weight is the closed-form minimiser, exactly
      // zero while |z| <= l1. The state alone defines the weight, so rows that start
      // non-zero (init_scale > 0) fold their start into z at the first update.
      float* __restrict z = state0;
      float* __restrict nsq = state1;
      const float inv_lr = 1.0f / lr;
      const float l1 = c.l1;
      for (size_t i = 0; i < n; ++i) {
        const float gi = g[i] * scale;
        const float n_old = nsq[i];
        const float n_new = n_old + sq * (gi * gi);
        const float sigma = (std::sqrt(n_new) - std::sqrt(n_old)) * inv_lr;
        z[i] += gi - sigma * w[i];
        nsq[i] = n_new;
        const float zi = z[i];
        const float shrunk = zi > l1 ? zi - l1 : (zi < -l1 ? zi + l1 : 0.0f);
        w[i] = -shrunk / ((c.ftrl_beta + std::sqrt(n_new)) * inv_lr + l2);
      }
      return;
    }
  }
}

}  // namespace optim_internal

using optim_internal::Update;

void ApplyUpdate(const OptimizerConfig& config, float* weights, float* state0, float* state1,
                 const float* grad_sum, float scale, size_t n, int64_t step) {
  Update(config, weights, state0, state1, grad_sum, scale, n, step, 1.0f);
}

void ApplyHeldUpdate(const OptimizerConfig& config, float* weights, float* state0, float* state1,
                     const float* grad_sum, float scale, size_t n, uint32_t held, float spread,
                     int64_t* step) {
  if (held <= 1 || (config.kind == OptimizerKind::kSgd && config.l2 == 0.0f)) {
    Update(config, weights, state0, state1, grad_sum, scale, n, ++*step, 1.0f);
    return;
  }
  held = std::min(held, kMaxHeldSteps);
  spread = std::isfinite(spread) ? std::clamp(spread, 1.0f, kMaxHeldSpread) : 1.0f;
  const float part = scale / static_cast<float>(held);
  for (uint32_t i = 0; i < held; ++i) {
    Update(config, weights, state0, state1, grad_sum, part, n, ++*step, spread);
  }
}

}  // namespace syncline
