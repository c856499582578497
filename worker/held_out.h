// HeldOutEvaluation: --eval-every. The job's first worker evaluates the current model on the
// test set every N of its steps (or every N seconds) while it trains, and reports the result
// to the coordinator (metrics.csv, TensorBoard) and on its /metrics page. Experiments compare
// sync modes on these held-out curves instead of the noisy per-batch training loss.
//
// Which model: under BSP the one after exactly `clock` iterations of every worker (the
// evaluation first waits, as a read of iteration `clock` does, for every worker to have
// finished them; no update of a later clock can be applied before this worker finishes its
// next iteration), so a BSP run's curve is the same run after run. Otherwise the servers'
// current rows (ASP, SSP), or this worker's replica (gossip, all-reduce).
//
// The evaluation runs between two iterations and is left out of their times; its own time is
// reported with it.
//
// Thread-safety: thread-compatible (the trainer's thread).
#ifndef SYNCLINE_WORKER_HELD_OUT_H_
#define SYNCLINE_WORKER_HELD_OUT_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/worker_metrics.h"
#include "core/control_client.h"
#include "models/model.h"
#include "syncline/job_spec.h"
#include "worker/sync_backend.h"
#include "worker/worker_data.h"

namespace syncline {

class HeldOutEvaluation {
 public:
  // `metrics` may be null.
  HeldOutEvaluation(const JobSpec& spec, int rank, ControlClient& control, WorkerMetrics* metrics);

  // Whether this worker evaluates at all (it is rank 0 and --eval-every is set).
  bool active() const { return active_; }

  // After `clock` iterations: evaluates when one is due. Errors: the backend's or the test
  // data's (training stops with them, as the final evaluation would).
  absl::Status AfterStep(int64_t clock, const Model& model, const ParameterLayout& layout,
                         SyncBackend& backend, WorkerData& data);

 private:
  bool Due(int64_t clock, absl::Time now) const;

  const JobSpec& spec_;
  ControlClient& control_;
  WorkerMetrics* const metrics_;
  const bool active_;
  absl::Time last_ = absl::Now();
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_HELD_OUT_H_
