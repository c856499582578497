#include "launch/coordinator_metrics.h"

#include "core/net.h"
#include "core/node_table.h"

namespace syncline {
namespace {

constexpr std::array<std::pair<CoordinatorMetrics::NodeState, const char*>, 4> kStates = {{
    {CoordinatorMetrics::NodeState::kUp, "up"},
    {CoordinatorMetrics::NodeState::kDone, "done"},
    {CoordinatorMetrics::NodeState::kDown, "down"},
    {CoordinatorMetrics::NodeState::kRestarting, "restarting"},
}};

}  // namespace

CoordinatorMetrics::CoordinatorMetrics(MetricsRegistry* registry, PrometheusTargets* targets,
                                       const CheckpointTracker* checkpoints)
    : targets_(targets) {
  if (registry == nullptr) return;
  MetricsRegistry& r = *registry;
  r.AddGaugeFunction("syncline_coordinator_clock",
                     "The job's clock: iterations the slowest training worker has reported.", {},
                     [this] { return SlowestClock(); });
  for (wire::Role role : {wire::Role::SERVER, wire::Role::WORKER}) {
    for (const auto& [state, name] : kStates) {
      r.AddGaugeFunction("syncline_coordinator_nodes", "The job's nodes, by role and state.",
                         {{"role", RoleName(role)}, {"state", name}},
                         [this, role, state = state] { return CountNodes(role, state); });
    }
  }
  r.AddCounterFunction("syncline_coordinator_heartbeat_misses_total",
                       "Heartbeats the nodes missed while the job trained.", {}, [this] {
                         const Coordinator* c = coordinator_.load();
                         return c == nullptr ? 0.0 : static_cast<double>(c->HeartbeatMisses());
                       });
  restarts_ = r.AddCounter("syncline_coordinator_restarts_total",
                           "Failed nodes restarted in place (--max-restarts).");
  joined_ = r.AddCounter("syncline_coordinator_workers_joined_total",
                         "Workers that joined the running job (--max-workers).");
  parts_written_ = r.AddCounter("syncline_coordinator_checkpoint_parts_total",
                                "Nodes' parts of checkpoints, by result.", {{"result", "written"}});
  parts_failed_ = r.AddCounter("syncline_coordinator_checkpoint_parts_total",
                               "Nodes' parts of checkpoints, by result.", {{"result", "failed"}});
  if (checkpoints != nullptr) {
    r.AddCounterFunction("syncline_coordinator_checkpoints_total",
                         "Checkpoints made complete (their MANIFEST written).", {},
                         [checkpoints] { return checkpoints->checkpoints_written(); });
  }
  test_loss_ = r.AddGauge("syncline_coordinator_test_loss",
                          "Loss of the last held-out evaluation (--eval-every; NaN before one).");
  test_loss_->Set(std::nan(""));
}

void CoordinatorMetrics::SetCoordinator(const Coordinator* coordinator) {
  coordinator_.store(coordinator);
}

void CoordinatorMetrics::SetState(wire::Role role, int rank, NodeState state) {
  absl::MutexLock lock(&mu_);
  nodes_[{role, rank}] = state;
  if (role == wire::Role::WORKER && state != NodeState::kUp) clocks_.erase(rank);
}

double CoordinatorMetrics::CountNodes(wire::Role role, NodeState state) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [node, s] : nodes_) n += node.first == role && s == state;
  return n;
}

double CoordinatorMetrics::SlowestClock() const {
  absl::MutexLock lock(&mu_);
  if (clocks_.empty()) return 0;
  int64_t slowest = clocks_.begin()->second;
  for (const auto& [worker, clock] : clocks_) slowest = std::min(slowest, clock);
  return static_cast<double>(slowest);
}

void CoordinatorMetrics::OnNodeRegistered(wire::Role role, int rank, const std::string& host,
                                          const std::string& data_address, int metrics_port) {
  SetState(role, rank, NodeState::kUp);
  if (role == wire::Role::WORKER) {
    absl::MutexLock lock(&mu_);
    clocks_.emplace(rank, 0);
  }
  if (targets_ == nullptr || metrics_port <= 0) return;
  // The page listens on the data address's host (job/node_join.h).
  absl::StatusOr<HostPort> where = ParseTcpAddress(data_address);
  targets_->Add(DataEndpointId(role, rank), RoleName(role), rank, where.ok() ? where->host : host,
                metrics_port);
}

void CoordinatorMetrics::OnProgress(int worker, wire::Progress::Reader progress) {
  absl::MutexLock lock(&mu_);
  if (auto it = clocks_.find(worker); it != clocks_.end()) it->second = progress.getClock();
}

void CoordinatorMetrics::OnWorkerDone(int worker, wire::WorkerStats::Reader stats) {
  SetState(wire::Role::WORKER, worker, NodeState::kDone);
}

void CoordinatorMetrics::OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) {
  if (test_loss_ != nullptr) test_loss_->Set(evaluation.getLoss());
}

void CoordinatorMetrics::OnNodeDown(wire::Role role, int rank, const std::string& reason) {
  SetState(role, rank, NodeState::kDown);
  if (targets_ != nullptr) targets_->Remove(DataEndpointId(role, rank));
}

void CoordinatorMetrics::OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                                        const std::vector<int>& donors) {
  if (joined_ != nullptr) joined_->Increment();
}

void CoordinatorMetrics::OnRollback(wire::Role role, int rank, int64_t clock,
                                    const std::string& reason) {
  SetState(role, rank, NodeState::kRestarting);
  if (restarts_ != nullptr) restarts_->Increment();
  // Its replacement registers again, at a port of its own.
  if (targets_ != nullptr) targets_->Remove(DataEndpointId(role, rank));
}

void CoordinatorMetrics::OnCheckpointed(wire::Role role, int rank, int64_t clock,
                                        const absl::Status& status) {
  Counter* c = status.ok() ? parts_written_ : parts_failed_;
  if (c != nullptr) c->Increment();
}

}  // namespace syncline
