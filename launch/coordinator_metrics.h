// CoordinatorMetrics: the coordinator's side of a job's metrics. It observes the coordinator
// (as RunReport does) and keeps
// - the coordinator's series on the launcher's /metrics page (--metrics-port): the job's
//   clock (the slowest training worker's, as reported), nodes by role and state, heartbeats
//   missed, restarts, checkpoint parts and checkpoints made, the last held-out evaluation;
// - the Prometheus target list (launch/prometheus_targets.h): every node that registers with
//   a metrics port is listed, and unlisted when it goes down.
//
// Series (the syncline_coordinator_ prefix): clock, nodes{role,state}, heartbeat_misses_total,
// restarts_total, checkpoint_parts_total{result}, checkpoints_total, workers_joined_total,
// test_loss.
//
// Thread-safety: the observer callbacks come from the coordinator's thread; the page is written
// from the metrics server's. State shared by both is guarded by mu_.
#ifndef SYNCLINE_LAUNCH_COORDINATOR_METRICS_H_
#define SYNCLINE_LAUNCH_COORDINATOR_METRICS_H_

#include <array>
#include <map>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/coordinator.h"
#include "core/metrics.h"
#include "launch/checkpoint_tracker.h"
#include "launch/prometheus_targets.h"

namespace syncline {

class CoordinatorMetrics : public CoordinatorObserver {
 public:
  // A node's state as the page counts it.
  enum class NodeState { kUp, kDone, kDown, kRestarting };

  // `registry` (the launcher's page), `targets` and `checkpoints` may be null; each must
  // outlive this.
  CoordinatorMetrics(MetricsRegistry* registry, PrometheusTargets* targets,
                     const CheckpointTracker* checkpoints);

  // The coordinator whose heartbeat misses the page shows (set once it exists; may stay null).
  void SetCoordinator(const Coordinator* coordinator);

  void OnNodeRegistered(wire::Role role, int rank, const std::string& host,
                        const std::string& data_address, int metrics_port) override;
  void OnProgress(int worker, wire::Progress::Reader progress) override;
  void OnWorkerDone(int worker, wire::WorkerStats::Reader stats) override;
  void OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) override;
  void OnNodeDown(wire::Role role, int rank, const std::string& reason) override;
  void OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                      const std::vector<int>& donors) override;
  void OnRollback(wire::Role role, int rank, int64_t clock, const std::string& reason) override;
  void OnCheckpointed(wire::Role role, int rank, int64_t clock,
                      const absl::Status& status) override;

 private:
  void SetState(wire::Role role, int rank, NodeState state);
  double CountNodes(wire::Role role, NodeState state) const;
  double SlowestClock() const;

  PrometheusTargets* const targets_;
  mutable absl::Mutex mu_;
  std::map<std::pair<wire::Role, int>, NodeState> nodes_ ABSL_GUARDED_BY(mu_);
  // Training workers' clocks as last reported (done or down ones are dropped).
  std::map<int, int64_t> clocks_ ABSL_GUARDED_BY(mu_);
  std::atomic<const Coordinator*> coordinator_{nullptr};
  Counter* restarts_ = nullptr;
  Counter* joined_ = nullptr;
  Counter* parts_written_ = nullptr;
  Counter* parts_failed_ = nullptr;
  Gauge* test_loss_ = nullptr;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_COORDINATOR_METRICS_H_
