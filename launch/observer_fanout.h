// ObserverFanout: one CoordinatorObserver that hands every callback to several, in order (the
// run's report, its metrics, its TensorBoard events), so that each stays a class of its own.
//
// Thread-safety: as the observers it calls (the coordinator's thread calls it).
#ifndef SYNCLINE_LAUNCH_OBSERVER_FANOUT_H_
#define SYNCLINE_LAUNCH_OBSERVER_FANOUT_H_

#include <string>
#include <vector>

#include "core/coordinator.h"

namespace syncline {

class ObserverFanout : public CoordinatorObserver {
 public:
  // Null entries are skipped; the observers must outlive this.
  explicit ObserverFanout(std::vector<CoordinatorObserver*> observers);

  void OnStarted(const NodeTable& table) override;
  void OnNodeRegistered(wire::Role role, int rank, const std::string& host,
                        const std::string& data_address, int metrics_port) override;
  void OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) override;
  void OnProgress(int worker, wire::Progress::Reader progress) override;
  void OnWorkerDone(int worker, wire::WorkerStats::Reader stats) override;
  void OnEvaluation(int worker, wire::Evaluation::Reader evaluation) override;
  void OnServerStats(int server, wire::ServerStats::Reader stats) override;
  void OnServerProgress(int server, wire::ServerStats::Reader stats) override;
  void OnNodeDown(wire::Role role, int rank, const std::string& reason) override;
  void OnWorkerLeft(int worker, int64_t clock, const std::vector<int>& takers) override;
  void OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                      const std::vector<int>& donors) override;
  void OnRollback(wire::Role role, int rank, int64_t clock, const std::string& reason) override;
  void OnRecovered(int64_t clock, absl::Duration took, int64_t undone) override;
  void OnCheckpointed(wire::Role role, int rank, int64_t clock,
                      const absl::Status& status) override;

 private:
  std::vector<CoordinatorObserver*> observers_;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_OBSERVER_FANOUT_H_
