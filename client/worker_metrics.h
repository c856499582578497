// WorkerMetrics: what a worker shows of its training while it runs: its series on the node's
// /metrics page (core/node_metrics.h) and, with --trace on, its steps in the trace
// (core/trace.h), both fed from StepObserver calls (the trainer's, or a WorkerSession's at
// each Clock), and its held-out evaluations (--eval-every).
//
// Series (every name has the syncline_worker_ prefix):
//   steps_total, examples_total             iterations and examples trained
//   step_duration_seconds                   histogram of an iteration's time
//   step_phase_seconds_total{phase}         its split: batch, upload, compute, compress,
//                                           download, network, wait (worker/trainer.h's parts,
//                                           with the step's read of its parameters as wait:
//                                           that is where BSP's barrier and SSP's bound hold a
//                                           worker back for slower ones)
//   clock, loss                             the iterations finished; the last batch's mean loss
//   test_loss, test_auc, test_accuracy      the last held-out evaluation
//   evaluations_total, evaluation_seconds_total
//
// Thread-safety: OnStep and OnEvaluation come from the trainer's thread; the page is written
// from the metrics server's (the series are atomics).
#ifndef SYNCLINE_CLIENT_WORKER_METRICS_H_
#define SYNCLINE_CLIENT_WORKER_METRICS_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "client/step_observer.h"
#include "core/control_client.h"
#include "core/metrics.h"
#include "core/trace.h"
#include "syncline/options.h"

namespace syncline {

class WorkerMetrics : public StepObserver {
 public:
  // The parts of step_phase_seconds_total, in order.
  static constexpr std::array<const char*, 7> kPhases = {
      "batch", "upload", "compute", "compress", "download", "network", "wait"};

  // `registry` (may be null: no page) and `trace` (may be null: no trace; else steps
  // [trace_first, trace_end) go into it) must outlive this. `collective` names the collective
  // each iteration ends with ("all-reduce", "gossip exchange"): its time (the step's "end
  // iteration" phase) goes on a track of its own, "collectives"; empty (the parameter-server
  // modes, whose iterations end with a clock message): no such track.
  WorkerMetrics(MetricsRegistry* registry, TraceRecorder* trace, int64_t trace_first,
                int64_t trace_end, std::string collective = "");

  void OnStep(const StepRecord& step) override;
  // A held-out evaluation after `clock` iterations, which ran from `begin` to `end`.
  void OnEvaluation(int64_t clock, const EvaluationReport& report, absl::Time begin,
                    absl::Time end);

 private:
  struct Series {
    Counter* steps = nullptr;
    Counter* examples = nullptr;
    Histogram* step_seconds = nullptr;
    std::array<Counter*, kPhases.size()> phase_seconds{};
    Gauge* clock = nullptr;
    Gauge* loss = nullptr;
    Gauge* test_loss = nullptr;
    Gauge* test_auc = nullptr;
    Gauge* test_accuracy = nullptr;
    Counter* evaluations = nullptr;
    Counter* evaluation_seconds = nullptr;
  };
  void Count(const StepRecord& step);
  void Trace(const StepRecord& step);

  std::unique_ptr<Series> series_;  // null without a registry
  TraceRecorder* const trace_;
  const int64_t trace_first_;
  const int64_t trace_end_;
  const std::string collective_;
  int steps_track_ = 0;
  int collectives_track_ = 0;
  int evaluation_track_ = 0;
};

// The collective an iteration of `sync` ends with, as WorkerMetrics names it: "all-reduce"
// (--sync allreduce, and hybrid's dense parameters), "gossip exchange"; empty for the
// parameter-server modes.
std::string CollectiveName(const SyncMode& sync);

}  // namespace syncline

#endif  // SYNCLINE_CLIENT_WORKER_METRICS_H_
