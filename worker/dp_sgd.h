// DpSgdStep: a worker's part of a DP-SGD step (Abadi et al. 2016; --dp example, under --sync
// bsp or allreduce). Each step:
//   - its batch is a Poisson sample of the worker's partition at the job's rate q (every
//     example independently, so the W workers' batches together are a Poisson sample of all N
//     examples: job/privacy_plan.h);
//   - each example's gradient is computed alone and scaled to L2 norm at most C (its rows and
//     the dense table together), and the clipped gradients are summed;
//   - Gaussian noise is added to every coordinate of the model, not only the rows the batch
//     touched (so the update tells nothing of which rows those were). The noise of a step must
//     total z C, not z C per worker: each of the W workers adds its share, N(0, (z C)^2 / W),
//     before its push, and the sum the servers (or the all-reduce) make of the W pushes has
//     exactly N(0, (z C)^2). No one worker's push is then without noise, and no server needs
//     a secret;
//   - the worker reports q N / W examples, so that the servers (the all-reduce) divide the
//     step's sum by the expected batch q N, not by the drawn one (whose size would tell).
// The batch reads every row of the model (keys 0 .. features - 1).
//
// Sampling and noise come from the job's privacy key (privacy/dp_random.h), per worker and step.
//
// Thread-safety: thread-compatible; const methods may run concurrently.
#ifndef SYNCLINE_WORKER_DP_SGD_H_
#define SYNCLINE_WORKER_DP_SGD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/dataset.h"
#include "models/model.h"
#include "privacy/dp_random.h"
#include "syncline/job_spec.h"

namespace syncline {

struct DpSgdOptions {
  double clip = 1;           // C
  double noise_stddev = 0;   // this worker's share of the step's noise: z C / sqrt(W)
  double sampling_rate = 0;  // q
  int64_t steps_per_epoch = 1;
  float reported_examples = 0;  // q N / W
  uint64_t features = 0;        // the model's rows
  int rank = 0;
  DpKey key{};
};

// The options of worker `rank` of a resolved --dp example job over `features` rows.
// FailedPrecondition when the spec's privacy is not complete (no noise, no key, no count).
absl::StatusOr<DpSgdOptions> DpSgdOptionsFor(const JobSpec& spec, int rank, uint64_t features);

class DpSgdStep {
 public:
  explicit DpSgdStep(DpSgdOptions options);

  int64_t steps_per_epoch() const { return options_.steps_per_epoch; }
  float reported_examples() const { return options_.reported_examples; }
  // Every row of the model, 0 .. features - 1: what each step reads and pushes.
  const std::vector<uint64_t>& keys() const { return keys_; }

  // The examples of step `step`: a Poisson sample of [0, partition_size) at rate q.
  std::vector<uint32_t> SampleBatch(int64_t step, uint32_t partition_size) const;

  // Adds the clipped sum of the examples' gradients and this worker's noise into row_grads
  // (features * row_dim floats, row k of feature k) and bias_grad, at the weights `rows`
  // (aligned with keys()) and `bias`; returns the examples' summed loss. Each example's
  // gradient is computed on its own rows only (Model: a key's row gets gradient only from the
  // examples holding it), so its norm covers exactly what it changes.
  double ClippedNoisyGradient(int64_t step, const Model& model, const Dataset& data,
                              absl::Span<const uint32_t> examples, absl::Span<const float> rows,
                              absl::Span<const float> bias, absl::Span<float> row_grads,
                              absl::Span<float> bias_grad);

  // Examples whose gradient was scaled down, and all examples, since the start.
  uint64_t clipped() const { return clipped_; }
  uint64_t examples() const { return examples_; }

 private:
  const DpSgdOptions options_;
  std::vector<uint64_t> keys_;
  // One example's keys, rows and gradients (reused).
  std::vector<uint64_t> example_keys_;
  std::vector<float> example_rows_, example_grads_, example_bias_grad_;
  uint64_t clipped_ = 0, examples_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_DP_SGD_H_
