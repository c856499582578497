// Server-side update rules. The server owns each parameter's optimizer state (as in ps-lite's
// KVServer handles), so workers push plain gradients and a job can switch rules per table.
//
// Each rule updates a row of `n` weights from a gradient *sum* and a scale (1 / examples), so
// that BSP can aggregate gradient sums from all workers of a clock and apply them once, exactly
// like synchronous SGD on the union of their batches. The loops are plain element-wise code
// that the compiler vectorises.
#ifndef SYNCLINE_PS_OPTIMIZER_H_
#define SYNCLINE_PS_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "core/syncline.capnp.h"
#include "core/table_config.h"

namespace syncline {

// Floats of optimizer state per weight.
int StateFloatsPerWeight(wire::OptimizerKind kind);

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

absl::StatusOr<wire::OptimizerKind> ParseOptimizer(const std::string& name);

}  // namespace syncline

#endif  // SYNCLINE_PS_OPTIMIZER_H_
