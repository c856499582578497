// Server-side update rules. The server owns each parameter's optimizer state (as in ps-lite's
// KVServer handles), so workers push plain gradients and a job can switch rules per table.
//
// Each rule updates a row of `n` weights from a gradient *sum* and a scale (1 / examples), so
// that BSP can aggregate gradient sums from all workers of a clock and apply them once, exactly
// like synchronous SGD on the union of their batches. The loops are plain element-wise code
// that the compiler vectorises.
#ifndef SYNCLINE_OPTIM_OPTIMIZER_H_
#define SYNCLINE_OPTIM_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>

#include "syncline/options.h"

namespace syncline {

// OptimizerConfig, a rule and its hyperparameters, is an option type (syncline/options.h).

// Floats of optimizer state per weight.
int StateFloatsPerWeight(OptimizerKind kind);

// Applies one update: g = grad_sum * scale + l2 * w, then the rule. `state` holds
// StateFloatsPerWeight(kind) * n floats laid out rule by rule ([m..., v...] for Adam);
// `step` is the 1-based update count of this row (Adam's bias correction).
void ApplyUpdate(const OptimizerConfig& config, float* weights, float* state, const float* grad_sum,
                 float scale, size_t n, int64_t step);
// The same with the state's components apart: `state0` holds the first n floats of the rule
// (Adagrad's h, Adam's m, FTRL's z), `state1` the second (Adam's v, FTRL's n; unused by rules
// with fewer components). Lets a caller update part of a block whose state is laid out over
// a larger range.
void ApplyUpdate(const OptimizerConfig& config, float* weights, float* state0, float* state1,
                 const float* grad_sum, float scale, size_t n, int64_t step);

// Compressed sparse pushes (compression/sparse_rows.h) hold a row's gradients back in a
// residual until the row is sent: what arrives is the sum G of `held` pushes' gradients g_1..g_k.
// Applied as one step, an adaptive rule would add G^2 to its accumulator where the
// uncompressed run adds g_1^2 + ... + g_k^2, and would move the row one step of the learning
// rate where it would have moved k. So G is applied as k equal steps of its mean G / k, each
// adding `spread` times the mean's square to the accumulated squares, where
//   spread = k (g_1^2 + ... + g_k^2) / G^2   (>= 1; the sender computes it per row)
// so that the accumulators grow by what the k pushes would have added (Adagrad's and FTRL's
// sums exactly, Adam's moving average approximately; l2's part of the gradient is not
// scaled; a row's entries share one spread). SGD without l2 takes one step, the same update,
// and advances *step by 1; every other rule advances it by k (a row's Adam bias correction).
// held 0 is taken as 1; held is capped at kMaxHeldSteps, spread clamped to [1,
// kMaxHeldSpread] (1 where not finite).
inline constexpr uint32_t kMaxHeldSteps = 1024;
inline constexpr float kMaxHeldSpread = 65536.0f;
void ApplyHeldUpdate(const OptimizerConfig& config, float* weights, float* state0, float* state1,
                     const float* grad_sum, float scale, size_t n, uint32_t held, float spread,
                     int64_t* step);

}  // namespace syncline

#endif  // SYNCLINE_OPTIM_OPTIMIZER_H_
