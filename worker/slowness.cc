#include "worker/slowness.h"

#include <cmath>
#include <vector>

#include "absl/time/clock.h"

namespace syncline {

SlownessOptions SlownessForWorker(const JobSpec::Slowness& slowness, int rank, uint64_t job_seed) {
  SlownessOptions o;
  o.min_step = absl::Microseconds(slowness.min_step_ms * 1000);
  o.seed = job_seed * 1000003 + static_cast<uint64_t>(rank);
  if (slowness.straggler_rank == rank) o.factor = slowness.straggler_factor;
  o.jitter_probability = slowness.jitter_probability;
  o.jitter_factor = slowness.jitter_factor;
  if (slowness.delay_rank == rank) o.delay = absl::Microseconds(slowness.delay_ms * 1000);
  return o;
}

SlownessInjector::SlownessInjector(SlownessOptions options)
    : options_(options), rng_(options.seed) {}

bool SlownessInjector::active() const {
  return options_.factor != 1.0 || options_.jitter_probability > 0 ||
         options_.min_step > absl::ZeroDuration() || options_.delay > absl::ZeroDuration();
}

absl::Duration SlownessInjector::StepTime(absl::Duration compute) {
  absl::Duration step = std::max(compute, options_.min_step) * options_.factor;
  if (options_.jitter_probability > 0 &&
      std::bernoulli_distribution(options_.jitter_probability)(rng_)) {
    step *= options_.jitter_factor;
  }
  return step;
}

void SlownessInjector::AfterCompute(absl::Duration compute) {
  const absl::Duration rest = StepTime(compute) - compute;
  if (rest > absl::ZeroDuration()) absl::SleepFor(rest);
}

void SlownessInjector::BeforeRequest() const {
  if (options_.delay > absl::ZeroDuration()) absl::SleepFor(options_.delay);
}

}  // namespace syncline
