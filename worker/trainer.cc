#include "worker/trainer.h"

#include <algorithm>
#include <array>
#include <numeric>

namespace syncline {

int64_t StepsPerEpoch(size_t examples, int batch_size) {
  return static_cast<int64_t>((examples + batch_size - 1) / batch_size);
}

absl::StatusOr<TrainResult> Trainer::Run(
    const Dataset& data, const std::function<void(const TrainProgress&)>& on_progress) {
  const int64_t per_epoch = StepsPerEpoch(data.size(), options_.batch_size);
  const int64_t total = per_epoch * options_.epochs;
  // Two sets of buffers, alternating by iteration: what was pushed in iteration t may still be
  // on the wire while iteration t+1 fills the other set (see SyncBackend::Update).
  struct Buffers {
    std::vector<uint32_t> examples;
    std::vector<uint64_t> keys;
    std::vector<float> rows, grads, bias, bias_grad;
  };
  std::array<Buffers, 2> buffers;
  SlownessInjector slowness(options_.slowness);
  TrainResult result;
  TrainProgress progress;
  progress.total_steps = total;
  double loss_since_report = 0;
  uint64_t examples_since_report = 0;

  for (int64_t step = 0; step < total; ++step) {
    Buffers& b = buffers[step % 2];
    const size_t begin = static_cast<size_t>(step % per_epoch) * options_.batch_size;
    const size_t end = std::min(data.size(), begin + options_.batch_size);
    b.examples.resize(end - begin);
    std::iota(b.examples.begin(), b.examples.end(), static_cast<uint32_t>(begin));
    b.keys = UniqueKeys(data, b.examples);
    b.rows.assign(b.keys.size() * model_.row_dim(), 0.0f);
    b.bias.assign(model_.bias_dim(), 0.0f);
    slowness.BeforeRequest();
    if (auto s = backend_.Read(step, b.keys, b.rows, b.bias); !s.ok()) return s;
    const absl::Time compute_start = absl::Now();

    b.grads.assign(b.rows.size(), 0.0f);
    b.bias_grad.assign(b.bias.size(), 0.0f);
    const double loss =
        model_.LossAndGradient(data, b.examples, b.keys, b.rows, b.bias, absl::MakeSpan(b.grads),
                               absl::MakeSpan(b.bias_grad));
    if (slowness.active()) slowness.AfterCompute(absl::Now() - compute_start);
    const float n = static_cast<float>(b.examples.size());
    slowness.BeforeRequest();
    if (auto s = backend_.Update(step, b.keys, b.grads, b.bias_grad, n); !s.ok()) return s;
    if (auto s = backend_.EndIteration(step, n); !s.ok()) return s;

    result.steps = step + 1;
    result.examples += b.examples.size();
    loss_since_report += loss;
    examples_since_report += b.examples.size();
    if ((step + 1) % options_.log_every == 0 || step + 1 == total) {
      progress.clock = step + 1;
      progress.epoch = static_cast<int>(step / per_epoch) + 1;
      progress.train_loss = loss_since_report / std::max<uint64_t>(1, examples_since_report);
      progress.examples = examples_since_report;
      progress.staleness = backend_.TakeMeanStaleness();
      progress.consensus = backend_.TakeConsensusProxy();
      result.last_loss = progress.train_loss;
      if (on_progress) on_progress(progress);
      loss_since_report = 0;
      examples_since_report = 0;
    }
  }
  if (auto s = backend_.Finish(); !s.ok()) return s;
  return result;
}

}  // namespace syncline
