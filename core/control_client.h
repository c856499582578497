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

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/message.h"
#include "core/node_table.h"
#include "core/transport.h"
#include "core/version.h"

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
  // The build this node runs; the coordinator refuses one that differs from its own.
  std::string version = kBuildVersion;
  // The ranks a cluster launcher started this node among (0: unknown); the coordinator refuses
  // a world of another size.
  int world_size = 0;
  // Where this node serves /metrics, on its data address's host (0: it does not); the
  // coordinator hands it to the launcher, which lists it for Prometheus.
  int metrics_port = 0;
};

// Where a worker's training iterations spent their time, in seconds: the parts of
// worker/trainer.h's StepTimes.
struct StepSeconds {
  int64_t steps = 0;  // the iterations these seconds cover
  double batch = 0, upload = 0, compute = 0, compress = 0, download = 0, network = 0;
};

// A worker's progress since its last report (metrics.csv rows, the launcher's progress line).
struct ProgressReport {
  int64_t clock = 0;        // iterations finished
  int epoch = 0;            // 1-based
  double train_loss = 0;    // mean loss per example since the last report
  uint64_t examples = 0;    // examples since the last report
  int64_t total_steps = 0;  // steps this worker will run
  double staleness = 0;     // mean staleness of the reads served since the last report
  double consensus = 0;     // gossip: mean distance from the neighbours' models
  // The split of the iterations since the last report.
  StepSeconds step_seconds;
  uint64_t bytes = 0;  // pushed and pulled since the worker started
};

// What a worker did, once it has trained its last step.
struct WorkerDoneReport {
  int64_t steps = 0;          // the clock it stopped at
  int64_t steps_trained = 0;  // iterations this process trained, from its first clock
  uint64_t examples = 0;
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  StepSeconds step_seconds;       // of its iterations since it (re)started training
  std::string device;             // where it computed ("cpu")
  double examples_in_model = -1;  // WorkerStats.examplesInModel
};

// The final model on the test set.
struct EvaluationReport {
  double loss = 0;
  double auc = -1;       // binary models, else -1
  double accuracy = -1;  // multiclass models, else -1
  uint64_t examples = 0;
  double seconds = 0;  // how long it took
};

enum class Command { kEvaluate, kShutdown };

// A worker started with --join asks the coordinator at `coordinator` for a rank, from a
// control endpoint of its own ("joiner.ctl"), and returns it. Transient refusals (the job has
// not started, another worker is joining, a rollback) are asked again until `timeout`; a
// final one (the job takes no joins, no rank left, another build) is returned as it is.
absl::StatusOr<int> RequestJoin(Transport& transport, const std::string& coordinator,
                                absl::Duration timeout, const std::string& version = kBuildVersion);

class ControlClient {
 public:
  // Registers and blocks until the coordinator hands out the node table (or the startup
  // timeout passes, or the coordinator rejects the registration).
  static absl::StatusOr<std::unique_ptr<ControlClient>> Connect(Transport& transport,
                                                                const ControlOptions& options);
  ~ControlClient();

  const NodeTable& table() const { return table_; }
  // What the control endpoint has sent and received (a node's /metrics page counts it).
  const TrafficCounters& traffic() const { return endpoint_->counters(); }

  // Tells the coordinator that this node's handlers are in place.
  void ReportReady();
  // Waits for the coordinator's start (every node is ready).
  absl::Status WaitForStart(absl::Time deadline);
  // Waits for the next evaluate or shutdown command.
  absl::StatusOr<Command> WaitForCommand(absl::Time deadline);
  // Queues a report for the coordinator.
  void Send(Message message);
  // The reports, each queued as its message from this node's role and rank.
  void ReportProgress(const ProgressReport& report);
  void ReportWorkerDone(const WorkerDoneReport& report);
  void ReportResult(const EvaluationReport& report);
  // The model on the test set after `clock` iterations, while the job trains (--eval-every).
  void ReportHeldOut(int64_t clock, const EvaluationReport& report);
  // This node's part of checkpoint `clock` is on disk (OK), or could not be written.
  void ReportCheckpointed(int64_t clock, const absl::Status& status);
  // Tells the coordinator that this node cannot go on (the job fails with `status`), and waits
  // up to `flush` for the message to leave.
  void ReportAbort(const absl::Status& status, absl::Duration flush = absl::Seconds(2));
  // Waits until queued reports have been handed to the transport.
  absl::Status Flush(absl::Time deadline);

  // OK while the job goes on; otherwise why it cannot (aborted, coordinator lost).
  absl::Status health() const;
  // The iterations this worker has finished; heartbeats carry it, so that the coordinator can
  // name a worker that is alive but stuck.
  void SetClock(int64_t clock) { clock_.store(clock, std::memory_order_relaxed); }

  // The coordinator's wall clock less this node's, in microseconds, as measured over the
  // heartbeats: from the answer with the shortest round trip so far (Cristian's method: the
  // coordinator read its clock about half a round trip before the answer came). 0 before the
  // first answer. Trace files carry it, so that the launcher aligns the nodes' timelines.
  int64_t ClockOffsetMicros() const { return clock_offset_us_.load(std::memory_order_relaxed); }
  // The round trip that offset was measured over (its uncertainty is half of it); -1: none.
  int64_t ClockOffsetRoundTripMicros() const {
    return best_round_trip_us_.load(std::memory_order_relaxed);
  }

  // Workers the coordinator declared dead since the last call.
  std::vector<int> TakeDownWorkers();
  // The same departures with what a worker needs to take over their batches, in the order the
  // coordinator sent them: every worker hears the same sequence.
  struct WorkerLeft {
    int worker = -1;
    int64_t clock = 0;        // the iterations it had finished, as the coordinator last heard
    std::vector<int> takers;  // the workers still training that take its batches (rank order)
  };
  // A worker joined: the donors (rank order) give it a share of their batches from their cuts
  // (worker/work_plan.h); its clocks count from first_clock.
  struct WorkerArrived {
    int worker = -1;
    int64_t first_clock = 0;
    std::vector<std::pair<int, int64_t>> cuts;  // (donor, cut)
  };
  using PlanEvent = std::variant<WorkerLeft, WorkerArrived>;
  // Departures and arrivals since the last call, in the coordinator's order (a joiner hears
  // every earlier one right after its table).
  std::vector<PlanEvent> TakePlanEvents();
  // Under ASP with hand-over, once this worker has trained every batch of its plan: tells the
  // coordinator so (workerIdle), and waits until it releases the worker (true: every worker
  // has finished or is down, no batches will come) or hands it batches or asks for a cut
  // (false: TakePlanEvents or TakeCutRequest has them). Aborted when the job rolls back meanwhile;
  // the coordinator's loss ends the wait with the client's health (its heartbeats bound it).
  absl::StatusOr<bool> AwaitRelease();
  // The joiner whose arrival the coordinator gathers cuts for, when it asked this worker and
  // the request has not been taken yet. The worker answers with ReportCut.
  std::optional<int> TakeCutRequest();
  // The first iteration this worker will not prepare until it hears the arrival.
  void ReportCut(int64_t clock);
  // A server has taken joiner `worker` into its clock set.
  void ReportArrivalTaken(int worker);
  // Checkpoint clocks the coordinator asked for since the last call.
  std::vector<int64_t> TakeCheckpointRequests();

  // In-place recovery: a node failed and is being replaced, and this node is to go back to
  // the checkpoint in folder `dir`, taken at `clock`. Generations count the job's rollbacks.
  struct Rollback {
    uint32_t generation = 0;
    int64_t clock = 0;
    std::string dir;
  };
  // The newest rollback the coordinator ordered that this node has not reported done.
  std::optional<Rollback> PendingRollback() const;
  // Waits up to `deadline` for a rollback order (a node whose peer vanished may be about to
  // get one); nullopt when none came, or the job ended.
  std::optional<Rollback> WaitForRollback(absl::Time deadline);
  // This node has stopped the timeline being undone (a worker: at the clock SetClock last
  // gave) and is ready for `generation`'s.
  void ReportRolledBack(uint32_t generation);
  // Waits until the coordinator resumes the job at `generation` (every node has restored) or
  // orders a newer rollback (then OK, and PendingRollback says which); an error when the job
  // ended or the deadline passed.
  absl::Status WaitForResume(uint32_t generation, absl::Time deadline);
  // The generation this node is at: the node table's, then each rollback it reported done.
  uint32_t generation() const;
  // The departures (nodeDown of a worker) and arrivals of workers heard so far, in all: every
  // worker counts the same sequence, as the coordinator does.
  uint64_t PlanEventsHeard() const;
  // Peers meeting on endpoints of their own (collective and gossip workers after a rollback, an
  // elastic all-reduce after a departure), one meeting per generation and count of plan
  // events: tells the coordinator where this worker's endpoint for the meeting listens.
  void ReportPeerAddress(uint32_t generation, uint64_t plan_events, const std::string& address);
  // Every member's address of the meeting, by rank (NodeTable::MaxWorkers entries, "" for a
  // rank that is not a member: gone, or not joined), once the coordinator has them all.
  // Aborted when a newer rollback or another plan event comes first, the job's health when it
  // ends, DeadlineExceeded at `deadline`.
  absl::StatusOr<std::vector<std::string>> AwaitPeerAddresses(uint32_t generation,
                                                              uint64_t plan_events,
                                                              absl::Time deadline);

 private:
  ControlClient(std::unique_ptr<Endpoint> endpoint, ControlOptions options, NodeTable table);
  void Loop();
  void Handle(Message& message);
  // A message of `type` whose header names this node as the sender.
  MessageBuilder FromThisNode(wire::MsgType type) const;
  Message EvaluationMessage(wire::MsgType type, int64_t clock, const EvaluationReport& r) const;

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
  std::vector<PlanEvent> plan_events_ ABSL_GUARDED_BY(mu_);
  bool released_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<int> cut_request_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> checkpoint_requests_ ABSL_GUARDED_BY(mu_);
  std::optional<Rollback> rollback_ ABSL_GUARDED_BY(mu_);
  uint32_t generation_ ABSL_GUARDED_BY(mu_) = 0;  // restored (reported), or the table's
  uint32_t resumed_ ABSL_GUARDED_BY(mu_) = 0;     // the newest generation resumed
  uint64_t plan_events_heard_ ABSL_GUARDED_BY(mu_) = 0;
  // The newest meeting's peer addresses (AwaitPeerAddresses): its generation and plan events.
  struct PeerMeeting {
    uint32_t generation = 0;
    uint64_t plan_events = 0;
    std::vector<std::string> addresses;
    std::pair<uint32_t, uint64_t> key() const { return {generation, plan_events}; }
  };
  std::optional<PeerMeeting> peer_addresses_ ABSL_GUARDED_BY(mu_);
  absl::Status health_ ABSL_GUARDED_BY(mu_);
  std::atomic<int64_t> clock_{-1};
  std::atomic<int64_t> clock_offset_us_{0};
  std::atomic<int64_t> best_round_trip_us_{-1};
  std::thread thread_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_CONTROL_CLIENT_H_
