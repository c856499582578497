#include "launch/observer_fanout.h"

#include <algorithm>

namespace syncline {

ObserverFanout::ObserverFanout(std::vector<CoordinatorObserver*> observers)
    : observers_(std::move(observers)) {
  std::erase(observers_, nullptr);
}

// Each callback, to every observer in turn.
#define SYNCLINE_FAN_OUT(call) \
  for (CoordinatorObserver * o : observers_) o->call

void ObserverFanout::OnStarted(const NodeTable& table) { SYNCLINE_FAN_OUT(OnStarted(table)); }
void ObserverFanout::OnNodeRegistered(wire::Role role, int rank, const std::string& host,
                                      const std::string& data_address, int metrics_port) {
  SYNCLINE_FAN_OUT(OnNodeRegistered(role, rank, host, data_address, metrics_port));
}
void ObserverFanout::OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) {
  SYNCLINE_FAN_OUT(OnHeldOut(worker, clock, evaluation));
}
void ObserverFanout::OnProgress(int worker, wire::Progress::Reader progress) {
  SYNCLINE_FAN_OUT(OnProgress(worker, progress));
}
void ObserverFanout::OnWorkerDone(int worker, wire::WorkerStats::Reader stats) {
  SYNCLINE_FAN_OUT(OnWorkerDone(worker, stats));
}
void ObserverFanout::OnEvaluation(int worker, wire::Evaluation::Reader evaluation) {
  SYNCLINE_FAN_OUT(OnEvaluation(worker, evaluation));
}
void ObserverFanout::OnServerStats(int server, wire::ServerStats::Reader stats) {
  SYNCLINE_FAN_OUT(OnServerStats(server, stats));
}
void ObserverFanout::OnServerProgress(int server, wire::ServerStats::Reader stats) {
  SYNCLINE_FAN_OUT(OnServerProgress(server, stats));
}
void ObserverFanout::OnNodeDown(wire::Role role, int rank, const std::string& reason) {
  SYNCLINE_FAN_OUT(OnNodeDown(role, rank, reason));
}
void ObserverFanout::OnWorkerLeft(int worker, int64_t clock, const std::vector<int>& takers) {
  SYNCLINE_FAN_OUT(OnWorkerLeft(worker, clock, takers));
}
void ObserverFanout::OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                                    const std::vector<int>& donors) {
  SYNCLINE_FAN_OUT(OnWorkerJoined(worker, name, first_clock, donors));
}
void ObserverFanout::OnRollback(wire::Role role, int rank, int64_t clock,
                                const std::string& reason) {
  SYNCLINE_FAN_OUT(OnRollback(role, rank, clock, reason));
}
void ObserverFanout::OnRecovered(int64_t clock, absl::Duration took, int64_t undone) {
  SYNCLINE_FAN_OUT(OnRecovered(clock, took, undone));
}
void ObserverFanout::OnCheckpointed(wire::Role role, int rank, int64_t clock,
                                    const absl::Status& status) {
  SYNCLINE_FAN_OUT(OnCheckpointed(role, rank, clock, status));
}

#undef SYNCLINE_FAN_OUT

}  // namespace syncline
