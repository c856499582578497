// JobObservers: everything that watches a job besides its RunReport, made once by the launcher
// and handed to the coordinator as one observer (ObserverFanout, the report first):
// - with --metrics-port, the coordinator's /metrics page (core/node_metrics.h) with its series
//   (launch/coordinator_metrics.h) and OUT/prometheus/ (launch/prometheus_targets.h);
// - OUT/tensorboard/ (launch/tensorboard_report.h), always;
// - with --trace on, OUT/trace.json, merged from OUT/trace/ at the end (launch/trace_merge.h).
//
// Thread-safety: the observer's callbacks come from the coordinator's thread; the rest from
// the launcher's main thread.
#ifndef SYNCLINE_LAUNCH_JOB_OBSERVERS_H_
#define SYNCLINE_LAUNCH_JOB_OBSERVERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/coordinator.h"
#include "core/net.h"
#include "core/node_metrics.h"
#include "launch/checkpoint_tracker.h"
#include "launch/coordinator_metrics.h"
#include "launch/observer_fanout.h"
#include "launch/prometheus_targets.h"
#include "launch/run_report.h"
#include "launch/tensorboard_report.h"
#include "syncline/job_spec.h"

namespace syncline {

struct JobObserversOptions {
  std::string out;        // the run folder
  std::string run;        // the run's name in Prometheus's labels (--out as given)
  int metrics_port = -1;  // the coordinator's page (-1: no metrics)
  std::string ip;         // where the coordinator listens
  PortRange ports;        // --port-range
  absl::Duration scrape_interval = absl::Seconds(5);
};

class JobObservers {
 public:
  // Errors: the page's port is taken, a folder cannot be written.
  static absl::StatusOr<std::unique_ptr<JobObservers>> Start(const JobObserversOptions& options,
                                                             RunReport& report,
                                                             const CheckpointTracker* checkpoints);

  // The coordinator's observer: the report, then the others.
  CoordinatorObserver* observer() { return fanout_.get(); }
  // The coordinator exists: its traffic and heartbeat misses go on the page, until
  // DetachCoordinator (call it before the coordinator goes; Finish does).
  void SetCoordinator(const Coordinator& coordinator);
  void DetachCoordinator();
  // The job ended (call it while the coordinator still exists): the target list empties, and
  // the nodes' traces are merged (--trace on). Returns lines that say what it wrote (empty:
  // nothing to say).
  std::string Finish(const JobSpec& spec);

  // Where the page is (0: none).
  int metrics_port() const { return page_ ? page_->port() : 0; }

 private:
  JobObservers() = default;

  std::string out_;
  std::unique_ptr<NodeMetrics> page_;
  std::unique_ptr<PrometheusTargets> targets_;
  std::unique_ptr<CoordinatorMetrics> metrics_;
  std::unique_ptr<TensorBoardReport> tensorboard_;
  std::unique_ptr<ObserverFanout> fanout_;
  const TrafficCounters* coordinator_traffic_ = nullptr;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_JOB_OBSERVERS_H_
