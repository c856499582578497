// Slowness injection for experiments: make one worker a permanent straggler, make every step
// slow now and then (the intermittent stragglers SSP is made for), give a worker's messages a
// network-like delay, or pad each step to a minimum simulated compute time. All random choices
// come from a seeded generator, so an experiment can be replayed.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_SLOWNESS_H_
#define SYNCLINE_WORKER_SLOWNESS_H_

#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "syncline/job_spec.h"

namespace syncline {

struct SlownessOptions {
  // This worker's steps take `factor` times their compute time (a permanent straggler).
  double factor = 1.0;
  // With this probability a step takes `jitter_factor` times its compute time.
  double jitter_probability = 0.0;
  double jitter_factor = 1.0;
  // Steps take at least this long, as if the model's compute took that long.
  absl::Duration min_step = absl::ZeroDuration();
  // Added before every request this worker sends.
  absl::Duration delay = absl::ZeroDuration();
  uint64_t seed = 1;
};

// The text forms of --straggler, --jitter and --delay are job/options.h's.

// This worker's slowness from the job's (validated) settings: the straggler and the delay apply
// only when they name `rank`; the seed is derived from the job seed and the rank, so every
// worker draws its own jitter and a run can be replayed.
SlownessOptions SlownessForWorker(const JobSpec::Slowness& slowness, int rank, uint64_t job_seed);

class SlownessInjector {
 public:
  explicit SlownessInjector(SlownessOptions options);
  bool active() const;
  // How long a step whose real compute took `compute` should take in all.
  absl::Duration StepTime(absl::Duration compute);
  // Sleeps for the rest of StepTime(compute).
  void AfterCompute(absl::Duration compute);
  void BeforeRequest() const;

 private:
  SlownessOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_SLOWNESS_H_
