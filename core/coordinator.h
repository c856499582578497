// Coordinator: rendezvous and supervision of one job.
//
// Nodes register with their role, rank and data address; once all expected nodes are in,
// every node receives the NodeTable. Nodes report ready when their handlers are in place and
// the coordinator then starts them all. During the run it answers heartbeats and declares a
// node that stays silent for the heartbeat timeout down, by name: under BSP, or when a server
// is lost, the job is aborted (every node is told why); under ASP/SSP a lost worker leaves the
// clock set and the others go on. When every worker is done it asks one worker to evaluate
// the final model, then shuts every node down and collects the servers' statistics. With
// min_workers below the number of workers, a lost worker leaves the job in every mode that
// allows it (BSP too), and with hand_over its NODE_DOWN tells the others who takes its batches.
//
// With max_workers above num_workers, workers may join while the job trains: a join request
// gets the next rank, the workers still training give their cuts, every server takes the
// joiner into its clock set, and then every worker hears the arrival in the same sequence as
// departures (docs/FAULT_TOLERANCE.md, "Workers joining a running job").
//
// With max_restarts, a failed node can instead be replaced in place (Restart): every other node
// rolls back to a checkpoint, the replacement restores the same one, and the job goes on once
// all of them have (docs/FAULT_TOLERANCE.md, "Restarts and rollbacks").
//
// The observer sees progress, results and failures as they come (the launcher turns them into
// a progress line, metrics.csv and summary.json).
//
// The implementation is spread by concept: coordinator.cc (the run and its message pump),
// coordinator_rendezvous.cc, coordinator_supervision.cc, coordinator_joins.cc and
// coordinator_recovery.cc (restarts and rollbacks).
//
// Thread-safety: Run() is called from one thread; Abort() may be called from any thread.
#ifndef SYNCLINE_CORE_COORDINATOR_H_
#define SYNCLINE_CORE_COORDINATOR_H_

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/message.h"
#include "core/node_table.h"
#include "core/transport.h"

namespace syncline {

struct CoordinatorOptions {
  int num_servers = 1;
  int num_workers = 1;
  // 0 = BSP, -1 = ASP (unbounded), s > 0 = SSP(s). Handed to every node.
  int64_t staleness = 0;
  // The job goes on after losing a worker while at least this many workers are left (done or
  // training); below it the job is aborted, naming the lost one. 0: every worker under BSP
  // (staleness 0), 1 otherwise.
  int min_workers = 0;
  // A lost worker's remaining batches go to the workers still training: its NODE_DOWN names
  // them (takers) and the clock it had reached (worker/work_plan.h).
  bool hand_over = false;
  // Failed nodes that may be replaced in place (Restart), in all.
  int max_restarts = 0;
  // Workers may join while the job trains (a `join` request, then registration under the rank
  // it is given), up to this many workers in all; 0 or num_workers: none. Each donor still
  // training gives the joiner a share of its batches from a cut it names (worker/work_plan.h).
  int max_workers = 0;
  // A joiner's first clock is the latest of the donors' cuts instead of the earliest. Gossip
  // peers switch graphs at the joiner's first step, which no donor may have mixed before it
  // hears the arrival (a donor prepares nothing at or past its own cut until then). An elastic
  // all-reduce takes the joiner into its ring where the others are, no later than any cut: the
  // joiner's iterations count on from there, in step with theirs.
  bool enter_at_latest_cut = false;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  // A node silent for this long is declared down.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // How long registration and the ready barrier may take.
  absl::Duration startup_timeout = absl::Seconds(120);
  // How long evaluation may take once every worker is done.
  absl::Duration evaluate_timeout = absl::Seconds(600);
  // A worker whose clock (carried by its heartbeats) has not moved for this long while other
  // workers wait for it (they are more than the staleness bound ahead) is named and the job
  // stops: "w2 stuck at clock 17 for 54 s while 3 workers wait". Zero: never. Set it below the
  // workers' request timeout, so that the stuck worker is named before the others time out.
  absl::Duration stuck_timeout = absl::ZeroDuration();
  // How long nodes have to report their statistics at shutdown.
  absl::Duration shutdown_timeout = absl::Seconds(10);
  // Ask a worker to evaluate the final model when every worker is done.
  bool evaluate = true;
  // The job spec handed to every node with the node table: a flat wire::JobSpec message
  // (job/job_wire.h's JobSpecToBytes); empty: none.
  std::string job_spec;
};

// Callbacks from Run()'s thread. The readers are valid during the call only.
class CoordinatorObserver {
 public:
  virtual ~CoordinatorObserver() = default;
  virtual void OnStarted(const NodeTable& table) {}
  // A node registered (at the start, as a joiner or as a replacement): where it runs, and the
  // port of its /metrics page on its data address's host (0: none).
  virtual void OnNodeRegistered(wire::Role role, int rank, const std::string& host,
                                const std::string& data_address, int metrics_port) {}
  // A worker evaluated the model on the test set after `clock` iterations (--eval-every).
  virtual void OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) {}
  virtual void OnProgress(int worker, wire::Progress::Reader progress) {}
  virtual void OnWorkerDone(int worker, wire::WorkerStats::Reader stats) {}
  virtual void OnEvaluation(int worker, wire::Evaluation::Reader evaluation) {}
  virtual void OnServerStats(int server, wire::ServerStats::Reader stats) {}
  // A server's statistics so far, while it serves.
  virtual void OnServerProgress(int server, wire::ServerStats::Reader stats) {}
  virtual void OnNodeDown(wire::Role role, int rank, const std::string& reason) {}
  // A lost worker left a job that goes on: the clock its batches are handed over from, and
  // the workers that take them (empty: none).
  virtual void OnWorkerLeft(int worker, int64_t clock, const std::vector<int>& takers) {}
  // A worker joined the running job at `first_clock` (its clocks count from there); `donors`
  // give it a share of their batches. `name` is as the coordinator logs it ("w3 (pid ...)").
  virtual void OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                              const std::vector<int>& donors) {}
  // A failed node is being replaced and every other node rolls back to checkpoint `clock`.
  virtual void OnRollback(wire::Role role, int rank, int64_t clock, const std::string& reason) {}
  // Every node has restored checkpoint `clock` and training goes on, `took` after the restart;
  // the fastest worker had finished `undone` iterations past it, which are trained again.
  virtual void OnRecovered(int64_t clock, absl::Duration took, int64_t undone) {}
  // A node wrote its part of checkpoint `clock` (status OK) or failed to.
  virtual void OnCheckpointed(wire::Role role, int rank, int64_t clock,
                              const absl::Status& status) {}
};

class Coordinator {
 public:
  // Binds the coordinator's endpoint at `address` (e.g. "tcp://127.0.0.1:0").
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(Transport& transport,
                                                             const std::string& address,
                                                             CoordinatorOptions options,
                                                             CoordinatorObserver* observer);
  ~Coordinator();

  // The address nodes connect to.
  const std::string& address() const { return address_; }
  // What its endpoint has sent and received (the launcher's /metrics page counts it).
  const TrafficCounters& traffic() const { return endpoint_->counters(); }

  // Runs the job's control protocol to the end. OK when every worker finished and every
  // server shut down; otherwise the reason the job failed (after telling every node).
  absl::Status Run();

  // Makes Run() abort the job with `reason` (e.g. the launcher saw a process die).
  void Abort(std::string reason);

  // A node is gone (e.g. the launcher saw its process exit): handled as if its heartbeats had
  // stopped, at once. Under ASP/SSP a lost worker leaves the job and the others go on;
  // otherwise the job is aborted.
  void ReportLost(wire::Role role, int rank, std::string reason);

  // Asks every node to take part in checkpoint `clock` (sent from Run()'s thread).
  void RequestCheckpoint(int64_t clock);

  // The process of a node failed (`reason`) and the launcher starts a replacement, which
  // registers under the same role and rank: every other node is told to roll back to the
  // checkpoint in folder `dir` (at `clock`), the replacement restores it, and training goes on
  // from there once all of them have. False, and nothing happens, when the job cannot roll
  // back: no restart left (max_restarts), not training (before the start, after the last
  // worker finished), or a worker has left the job. Handle the failure as usual then. A node
  // that fails while the job recovers is replaced in the same recovery.
  bool Restart(wire::Role role, int rank, std::string reason, int64_t clock, std::string dir);
  // Whether a failed node could be restarted now (Restart would take it, given a checkpoint).
  bool CanRestart() const;
  // Whether a rollback is under way (no checkpoint should be asked for then).
  bool Recovering() const;
  // The highest clock a worker's heartbeat has reported since the start or the last rollback
  // (-1: none). Any thread.
  int64_t LatestWorkerClock() const { return latest_worker_clock_.load(); }
  // Heartbeats the nodes missed while the job trained (a silence of k intervals misses k - 1,
  // counted when the node is heard again). Any thread.
  int64_t HeartbeatMisses() const { return heartbeat_misses_.load(std::memory_order_relaxed); }
  // Nodes (data endpoint ids, "ps1") that hang, with why, since the last call: while a restart
  // is possible a node whose heartbeats stop, or a worker stuck while others wait, is not
  // declared down at once but handed to the launcher to kill (its exit is then restarted). One
  // that is still there a heartbeat timeout later is declared down as usual.
  std::vector<std::pair<std::string, std::string>> TakeHungNodes();
  // Whether the job still needs node (role, rank): false once the final model is evaluated
  // (params.tsv and the result are in; a node lost then costs only its statistics), and for a
  // worker other than the evaluator once every worker has finished training. The launcher
  // fails no job over the exit of a node it no longer needs. Any thread.
  bool StillNeeds(wire::Role role, int rank) const;
  // What node (role, rank) said when it failed, if it said so while it could have been
  // restarted (the job then goes on until the launcher restarts it or gives up); else empty.
  std::string LastWords(wire::Role role, int rank);

 private:
  // What the coordinator knows of a node (core/coordinator_node_state.h).
  struct NodeState;
  Coordinator(std::unique_ptr<Endpoint> endpoint, std::string address, CoordinatorOptions options,
              CoordinatorObserver* observer);

  // The run and its message pump (coordinator.cc).
  absl::Status Shutdown();
  // Receives one message until `deadline`, handling heartbeats, failures and reports.
  // Returns the message for the caller when it is something else, else nullopt.
  absl::StatusOr<std::optional<Message>> Step(absl::Time deadline);
  // Step's handling of a message from a registered node that is up.
  absl::StatusOr<std::optional<Message>> Handle(NodeState& node, Message& message);
  // A node reported that it failed: it is to be restarted, or a worker leaves a job that goes
  // on (OK), or the job fails (the error).
  absl::Status OnNodeFailed(NodeState& node, const wire::Header::Reader& header);
  absl::Status Fail(absl::Status status);
  // To every node that is up (with `only`, of that role), except joiners not yet announced.
  void Broadcast(const Message& message, std::optional<wire::Role> only = std::nullopt);
  void SendCopy(const std::string& control_id, const Message& message);
  void SendTo(const std::string& control_id, Message message);
  NodeState* Find(const std::string& control_id);
  void OnCheckpointed(const NodeState& node, const wire::Header::Reader& header);

  // Rendezvous (coordinator_rendezvous.cc): every node registers, gets the table, is ready.
  absl::Status Register();
  // A registration: the node is taken, or told why not (OK either way); an error stops the job
  // (a cluster launcher started the wrong number of ranks).
  absl::Status Admit(Message& message);
  // Why the registration `reg` from endpoint `peer` cannot be taken; OK when it can.
  absl::Status RegistrationProblem(const std::string& peer, wire::Role role, int rank,
                                   wire::Register::Reader reg);
  // DeadlineExceeded naming the nodes that have not registered.
  absl::Status MissingNodes();
  // Builds the node table and sends it to every node.
  void PublishTable();
  absl::Status AwaitReady();

  // Supervision (coordinator_supervision.cc): heartbeats, stuck workers, lost nodes, the end of
  // training and the evaluation.
  absl::Status Supervise();
  // A message Step handed back while the workers train.
  void OnTrainingMessage(Message& message);
  absl::Status EvaluateFinalModel();
  absl::Status CheckHeartbeats();
  absl::Status CheckStuckWorkers(absl::Time now);
  absl::Status MarkDown(NodeState& node, const std::string& reason);
  // Tells every node that worker `node` left a job that goes on, and who takes its batches.
  void AnnounceDeparture(NodeState& node, const std::string& reason,
                         const std::vector<int>& takers);
  // Releases the idle workers (workerIdle) once no worker is still training.
  void MaybeRelease();
  // The fewest workers the job goes on with.
  int MinWorkers() const;

  // Restarts and rollbacks (coordinator_recovery.cc).
  struct RestartRequest {
    std::string control_id;
    std::string reason;
    int64_t clock = 0;
    std::string dir;
  };
  // Takes the launcher's restart requests (BeginRollback for each); an error when one can no
  // longer be honoured (a worker left since).
  absl::Status HandleRestarts();
  // Starts (or, during a recovery, extends) a rollback for a failed node.
  void BeginRollback(NodeState& node, const RestartRequest& request);
  // A replacement's registration, during a recovery.
  void RegisterReplacement(NodeState& node, Message& message);
  // Sends the registered replacements their node table once every other node has rolled back.
  void SendReplacementTables();
  // Ends the recovery once every node has restored; fails it past its deadline.
  absl::Status AdvanceRecovery();
  // A worker's address of a generation's peers (collective and gossip jobs after a rollback):
  // once every worker has sent its own for the current generation, every worker gets them all.
  void OnPeerAddress(NodeState& node, const wire::Header::Reader& header);

  // Joins (coordinator_joins.cc): a `join` request from the joiner's first endpoint, answered
  // with a rank or why not.
  void HandleJoinRequest(Message& message);
  // Why a join request cannot be taken now; OK when it can.
  absl::Status JoinRefusal(const wire::Header::Reader& header) const;
  // The joiner registered under its rank: every training worker is asked for its cut.
  void BeginArrival(NodeState& joiner, Message& message);
  // A worker answered (cut), finished, or went down: the arrival completes once none is left.
  void OnCut(NodeState& worker, std::optional<int64_t> cut);
  // The cuts are in: the arrival goes to every server, which takes the joiner into its clock
  // set and says so (OnArrivalTaken); then AnnounceArrival.
  void CompleteArrival();
  void OnArrivalTaken(const NodeState& server, int64_t worker);
  // Sends the arrival to every worker, then the joiner its table and every plan event so far.
  void AnnounceArrival();
  // An arrival whose cuts or servers are late past a heartbeat timeout: it goes on without the
  // late workers' cuts; servers that have not taken the joiner in fail the job.
  absl::Status CheckArrival(absl::Time now);
  // Whether `n` is the joiner whose arrival is being gathered or announced.
  bool InArrival(const NodeState& n) const;
  bool training_ = false;  // Supervise() runs: joins are taken
  int next_rank_ = 0;      // the rank the next joiner gets
  struct PendingArrival {
    NodeState* joiner = nullptr;
    std::vector<int> waiting;                   // workers asked for a cut that have not answered
    std::vector<std::pair<int, int64_t>> cuts;  // (donor, cut), as they came
  };
  std::optional<PendingArrival> arrival_;
  absl::Time arrival_start_;
  struct Announcement {
    NodeState* joiner = nullptr;
    Message message;           // the arrival
    std::vector<int> servers;  // servers that have not yet taken the joiner in
    std::vector<int> donors;
    absl::Time since;
  };
  std::optional<Announcement> announcing_;
  // Every worker departure (NODE_DOWN) and arrival sent, in order: a joiner hears them all.
  std::vector<Message> plan_events_;

  const std::unique_ptr<Endpoint> endpoint_;
  const std::string address_;
  const CoordinatorOptions options_;
  CoordinatorObserver* const observer_;
  NodeTable table_;
  std::vector<std::unique_ptr<NodeState>> nodes_;

  absl::Mutex mu_;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  // (control endpoint id, reason) of nodes reported lost, not yet handled.
  std::vector<std::pair<std::string, std::string>> lost_ ABSL_GUARDED_BY(mu_);
  // Checkpoint clocks requested, not yet sent.
  std::vector<int64_t> checkpoint_requests_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> abort_requested_{false};

  // Restarts: requested by the launcher, not yet handled; and how many are left.
  std::vector<RestartRequest> restarts_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> restarts_left_{0};
  // Whether a rollback is possible now: training, and no worker has left.
  std::atomic<bool> can_roll_back_{false};
  std::atomic<bool> recovering_flag_{false};  // recovering_, for other threads
  std::atomic<int64_t> latest_worker_clock_{-1};
  std::atomic<int64_t> heartbeat_misses_{0};
  // StillNeeds: every worker has finished (the evaluator's rank then, else -1), and the
  // final model is evaluated.
  std::atomic<bool> training_over_{false};
  std::atomic<int> evaluator_rank_{-1};
  std::atomic<bool> results_in_{false};
  // Failures reported by nodes that could have been restarted, by control id.
  absl::flat_hash_map<std::string, std::string> last_words_ ABSL_GUARDED_BY(mu_);
  std::vector<std::pair<std::string, std::string>> hung_ ABSL_GUARDED_BY(mu_);
  // Reports a hung node to the launcher (TakeHungNodes) when a restart is possible and it has
  // not been reported yet; false: handle it as without restarts.
  bool ReportHung(NodeState& node, const std::string& reason);
  // The recovery under way (Run()'s thread only).
  uint32_t generation_ = 0;
  bool recovering_ = false;
  int64_t rollback_clock_ = 0;
  int64_t steps_undone_ = 0;
  std::string rollback_dir_;
  absl::Time recovery_start_;
  absl::Time recovery_deadline_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_COORDINATOR_H_
