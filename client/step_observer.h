// StepObserver: what sees each of a worker's training iterations as it ends, with the time of
// each of its phases: a worker's metrics and trace (client/worker_metrics.h). The trainer
// (worker/trainer.h) and a WorkerSession call it on their own thread, between iterations; it
// must be quick (an iteration of a GPU model takes a millisecond).
//
// Thread-safety: called from the trainer's thread only.
#ifndef SYNCLINE_CLIENT_STEP_OBSERVER_H_
#define SYNCLINE_CLIENT_STEP_OBSERVER_H_

#include <cstdint>

#include "absl/time/time.h"
#include "absl/types/span.h"

namespace syncline {

// One phase of an iteration, as the trainer runs them: "batch" (the next batch and its keys),
// "read" (the parameters, from the servers or peers; BSP's wait is here), "next batch" and
// "read ahead" (the next iteration's, prepared early), "compute", "push" (the gradients and
// the end of the iteration), "checkpoint"; a WorkerSession's: "wait" (its waits for tickets).
// "end iteration" (kEndIterationPhase) is the tail of "push" and marked after it: the end of the
// iteration, where the all-reduce, hybrid and gossip backends run their collective.
inline constexpr char kEndIterationPhase[] = "end iteration";

struct StepPhase {
  const char* name = "";
  absl::Time begin;
  absl::Time end;
};

struct StepRecord {
  int64_t step = 0;  // the iteration, from 0; the clock after it is step + 1
  absl::Time begin;
  absl::Time end;
  // Its split, as worker/trainer.h's StepTimes: disjoint parts whose sum is its time.
  absl::Duration batch, upload, compute, compress, download, network;
  double loss = 0;  // summed over its examples
  uint64_t examples = 0;
  absl::Span<const StepPhase> phases;  // in the order they were marked
};

class StepObserver {
 public:
  virtual ~StepObserver() = default;
  virtual void OnStep(const StepRecord& step) = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CLIENT_STEP_OBSERVER_H_
