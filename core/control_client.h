// ControlClient: a node's side of the control plane. It registers the node with the
// coordinator (rendezvous), receives the NodeTable, sends heartbeats from its own thread (so a
// worker busy computing still looks alive), forwards reports (progress, statistics) and
// delivers the coordinator's commands (start, evaluate, shutdown, abort, node down).
//
// If the coordinator stops answering for the heartbeat timeout, health() turns into an error:
// a node never waits forever on a job that is gone.
//
// Thread-safety: thread-safe. The control endpoint is used only by the client's own thread.
#ifndef SYNCLINE_CORE_CONTROL_CLIENT_H_
#define SYNCLINE_CORE_CONTROL_CLIENT_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/message.h"
#include "core/node_table.h"
#include "core/transport.h"

namespace syncline {

struct ControlOptions {
  // Where the coordinator listens, e.g. "tcp://127.0.0.1:7000".
  std::string coordinator_address;
  wire::Role role = wire::Role::WORKER;
  int rank = 0;
  // Where this node's data endpoint listens (servers); empty for workers.
  std::string data_address;
  // How long to wait for every node of the job to register.
  absl::Duration startup_timeout = absl::Seconds(120);
};

enum class Command { kEvaluate, kShutdown };

class ControlClient {
 public:
  // Registers and blocks until the coordinator hands out the node table (or the startup
  // timeout passes, or the coordinator rejects the registration).
  static absl::StatusOr<std::unique_ptr<ControlClient>> Connect(Transport& transport,
                                                                const ControlOptions& options);
  ~ControlClient();

  const NodeTable& table() const { return table_; }

  // Tells the coordinator that this node's handlers are in place.
  void ReportReady();
  // Waits for the coordinator's start (every node is ready).
  absl::Status WaitForStart(absl::Time deadline);
  // Waits for the next evaluate or shutdown command.
  absl::StatusOr<Command> WaitForCommand(absl::Time deadline);
  // Queues a report for the coordinator.
  void Send(Message message);
  // Waits until queued reports have been handed to the transport.
  absl::Status Flush(absl::Time deadline);

  // OK while the job goes on; otherwise why it cannot (aborted, coordinator lost).
  absl::Status health() const;
  // Workers the coordinator declared dead since the last call.
  std::vector<int> TakeDownWorkers();
  // Checkpoint clocks the coordinator asked for since the last call.
  std::vector<int64_t> TakeCheckpointRequests();

 private:
  ControlClient(std::unique_ptr<Endpoint> endpoint, ControlOptions options, NodeTable table);
  void Loop();
  void Handle(Message& message);

  const std::unique_ptr<Endpoint> endpoint_;
  const ControlOptions options_;
  const NodeTable table_;

  mutable absl::Mutex mu_;
  std::deque<Message> outbox_ ABSL_GUARDED_BY(mu_);
  size_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  bool started_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Command> commands_ ABSL_GUARDED_BY(mu_);
  std::vector<int> down_workers_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> checkpoint_requests_ ABSL_GUARDED_BY(mu_);
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_CONTROL_CLIENT_H_
