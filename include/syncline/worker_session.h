// WorkerSession: a worker of your own program in a running Syncline job. Start the job's
// coordinator and servers with `syncline-launch --external-workers` (it prints the
// coordinator's address), then in each of your worker processes:
//
//   auto session = syncline::WorkerSession::Join({.coordinator = address, .rank = r});
//   (*session)->DeclareTable({.id = 1, .dense = true, .num_keys = n, .dim = 1});
//   for (...) {
//     auto pulled = (*session)->PullDense(1, 0, weights);   // a ticket, at once
//     (*session)->Wait(*pulled, absl::Now() + absl::Seconds(10));
//     ... compute the gradient sum of a batch ...
//     (*session)->Wait(*(*session)->PushDense(1, 0, gradient, batch), deadline);
//     (*session)->Clock(batch, loss);                        // iteration done
//   }
//   (*session)->Finish(evaluate);  // done; evaluates when the coordinator asks; shuts down
//
// The servers apply each table's update rule to the pushed gradient sums (divided by the
// pushed weight, the examples behind them) and keep the job's consistency model (BSP, SSP or
// ASP, from the job spec): under BSP a pull of iteration c waits until every worker has
// clocked c iterations. Pushes and pulls take the job's codecs (--compress, --compress-pull):
// a top-K or sign1 push keeps its error-feedback residual here (per row of a sparse table, per
// server's range of a dense one: push the same range every iteration) and Finish sends what is
// left; an fp16 push keeps none. Push, Pull and PushPull return a ticket at once, so that requests
// overlap; the arrays passed to them must stay alive and unchanged until Wait returns for
// that ticket. Every call returns an absl::Status; nothing throws. The session heartbeats from
// a thread of its own, so a long computation does not make the worker look dead, and a job that
// is aborted (or a coordinator that is gone) turns every later call into an error.
//
// Thread-safety: thread-compatible: call one session from one thread at a time. Use one
// session per worker process (each with its own rank).
#ifndef SYNCLINE_WORKER_SESSION_H_
#define SYNCLINE_WORKER_SESSION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "syncline/job_spec.h"
#include "syncline/options.h"

namespace syncline {

// Collectives among a job's workers, for the dense layers of an all-reduce or hybrid job: the
// session makes them, when it joins such a job, with SessionOptions::peers (Syncline's Python
// package passes one, built on collective/). Every worker calls them in the same order.
class PeerCollectives {
 public:
  virtual ~PeerCollectives() = default;
  // Sums `data` over every worker, in place, with the job's algorithm (--sync allreduce:ALGO);
  // every worker ends with bitwise the same values. `compress`: with the job's --compress
  // codec (fp16 on the wire; top-K or sign1 with an error-feedback residual kept per
  // `residual`, one per buffer that is all-reduced again and again).
  virtual absl::Status AllReduce(std::span<float> data, bool compress, uint32_t residual) = 0;
  // Every worker's `data` becomes worker `root`'s.
  virtual absl::Status Broadcast(std::span<float> data, int root) = 0;
  virtual uint64_t bytes_sent() const = 0;
  virtual uint64_t bytes_received() const = 0;
};

// What a PeerCollectives connector is given (client/peer_context.h): the job, its node table,
// this worker's rank and the side of its data endpoint that hears the other workers.
struct PeerContext;
using PeerConnector =
    std::function<absl::StatusOr<std::unique_ptr<PeerCollectives>>(const PeerContext&)>;

struct SessionOptions {
  // The coordinator's address, as syncline-launch --external-workers prints it.
  std::string coordinator;
  // This worker's rank, 0..workers-1; each rank joins once.
  int rank = 0;
  // Where this worker's data endpoint listens (port 0: any free one). Empty: on `interface`'s
  // address, or else on the address whose route reaches the coordinator (loopback when it is
  // on loopback), at a port in `port_range`.
  std::string bind;
  std::string interface;   // a network interface's name, as syncline-launch --interface
  std::string port_range;  // "FIRST-LAST" or "PORT"; empty: any free port
  // The number of ranks a cluster launcher started (mpirun, srun), checked by the
  // coordinator; 0: not started as one world.
  int world_size = 0;
  // How long to wait for every node of the job to join.
  absl::Duration startup_timeout = absl::Seconds(120);
  // The key when the job is keyed (off loopback): this worker's own (syncline-launch's
  // OUT/keys/w<rank>.key), the folder OUT/keys, or the job's OUT/job.key (which gives it the
  // whole job's authority; needed with --node-keys off or --max-workers). Connections are then
  // encrypted and authenticated. Empty: plaintext, refused off loopback unless `insecure`.
  std::string key_file;
  bool insecure = false;
  // Where this worker serves its Prometheus /metrics page, on its data address's host: a port,
  // or 0 for any free one (in `port_range`); -1: none. syncline-launch --metrics-port sets
  // SYNCLINE_METRICS_PORT for the workers it starts.
  int metrics_port = -1;
  // Connects the workers' collectives. A job whose workers sync dense layers among themselves
  // (--sync allreduce, hybrid) is refused without it; in one with servers only, it is not used.
  PeerConnector peers;
};

// A parameter table on the servers. Every worker declares the same tables (the first
// declaration creates them; a different spec under the same id is refused).
struct TableOptions {
  uint32_t id = 0;
  // Dense: keys [0, num_keys), split into contiguous ranges over the servers. Sparse: any
  // 64-bit key below num_keys (0: any key), spread by hash, rows created on first touch.
  bool dense = true;
  uint64_t num_keys = 0;
  uint32_t dim = 1;  // floats per key
  // The rule the servers apply to this table's pushed gradients (optim/optimizer.h): w -=
  // rule(g / weight + l2 w). Adagrad: h += g^2, w -= lr g / (sqrt(h) + epsilon), h from 0 (as
  // torch.optim.Adagrad with initial_accumulator_value 0 and its eps; torch's default eps is
  // 1e-10). Adam: beta1, beta2, epsilon as torch.optim.Adam, with one step count per row.
  OptimizerKind optimizer = OptimizerKind::kSgd;
  float learning_rate = 0.1f;
  float l2 = 0.0f;
  float epsilon = 1e-8f;    // Adagrad and Adam
  float beta1 = 0.9f;       // Adam
  float beta2 = 0.999f;     // Adam
  float init_scale = 0.0f;  // rows start uniform in [-init_scale, init_scale]; 0: zeros
  uint64_t seed = 1;
};

// The final model on the test set, as the caller's evaluation computes it.
struct EvaluationResult {
  double loss = 0;
  double auc = -1;       // binary models, else -1
  double accuracy = -1;  // multiclass models, else -1
  uint64_t examples = 0;
};

class WorkerSession {
 public:
  using Ticket = uint64_t;

  // Joins the job and waits for the coordinator to start it (every node joined and ready).
  static absl::StatusOr<std::unique_ptr<WorkerSession>> Join(const SessionOptions& options);
  // A session destroyed before Finish() tells the coordinator that this worker failed.
  ~WorkerSession();

  // The job as the coordinator describes it (sync mode, workers, servers, seed, ...).
  const JobSpec& spec() const;
  int rank() const;
  // Iterations this worker has clocked.
  int64_t clock() const;

  absl::Status DeclareTable(const TableOptions& table, absl::Time deadline);
  // A dense table that starts from values a worker holds (say, rank 0's model as it was
  // initialised): the worker that passes `initial` (num_keys * dim floats) makes the table with
  // them; the others pass none and wait until that declaration has arrived. A table that exists
  // already (a job resumed from a checkpoint) keeps its values.
  absl::Status DeclareTableFrom(const TableOptions& table, std::span<const float> initial,
                                absl::Time deadline);

  // Reads of the current iteration wait as the consistency model says; after Finish() (in
  // the evaluation) they read the final model.
  // Sparse tables: `values` and `out` hold keys.size() * dim floats. `weight`: the examples
  // behind the pushed gradient sum.
  absl::StatusOr<Ticket> Push(uint32_t table, std::span<const uint64_t> keys,
                              std::span<const float> values, float weight);
  absl::StatusOr<Ticket> Pull(uint32_t table, std::span<const uint64_t> keys, std::span<float> out);
  absl::StatusOr<Ticket> PushPull(uint32_t table, std::span<const uint64_t> keys,
                                  std::span<const float> values, std::span<float> out,
                                  float weight);
  // Dense tables: keys [begin, begin + values.size() / dim).
  absl::StatusOr<Ticket> PushDense(uint32_t table, uint64_t begin, std::span<const float> values,
                                   float weight);
  absl::StatusOr<Ticket> PullDense(uint32_t table, uint64_t begin, std::span<float> out);

  // Collectives among the workers (an all-reduce or hybrid job's; FailedPrecondition in a job
  // of servers only): see PeerCollectives.
  absl::Status AllReduce(std::span<float> data, bool compress = false, uint32_t residual = 0);
  absl::Status Broadcast(std::span<float> data, int root);

  // Completes a ticket: OK, the first error a server answered, or DeadlineExceeded. A ticket
  // is waited for once; an unknown one is NotFound.
  absl::Status Wait(Ticket ticket, absl::Time deadline);

  // Ends this worker's current iteration, which trained on `examples` examples with mean
  // loss `train_loss` per example (reported to the coordinator's metrics.csv every
  // log-every iterations; NaN: none).
  absl::Status Clock(double examples, double train_loss);

  // Leaves the job: tells the servers and the coordinator that this worker is done, answers
  // the coordinator's request to evaluate the final model with `evaluate` (without it, an
  // empty result), and returns when the coordinator shuts the job down (or `timeout` passes).
  absl::Status Finish(std::function<absl::StatusOr<EvaluationResult>()> evaluate = nullptr,
                      absl::Duration timeout = absl::Minutes(10));

  // Checkpoints (--checkpoint-every, --checkpoint-seconds). At each checkpoint clock the session
  // calls `save` for this program's own state (its place in its data, its dense parameters
  // under all-reduce, its optimizer's state: any bytes) and writes it with the clock as this
  // worker's part of the checkpoint, while the servers write theirs; without `save` the part
  // holds the clock alone. A job resumed from a checkpoint (--resume) starts the session at the
  // checkpoint's clock (clock()), and restored_state() is what `save` gave then.
  void SetCheckpointState(std::function<absl::StatusOr<std::string>()> save);
  const std::optional<std::string>& restored_state() const;

  // Tells the coordinator that this worker failed, with `why` (say, the exception that ended
  // the program), so that the job ends with that reason; later calls fail. No-op after Finish.
  void Abort(const absl::Status& why);

  struct State;

 private:
  explicit WorkerSession(std::unique_ptr<State> state);
  int64_t ReadClock() const;
  absl::Status DrainResiduals(absl::Time deadline);
  absl::Status Declare(const TableOptions& table, std::span<const float> initial,
                       bool await_initial, absl::Time deadline);
  static absl::Status ConnectSession(State& state, const SessionOptions& options);
  static absl::Status Resume(State& state);
  void MaybeCheckpoint();
  void ReportMissedCheckpoints(int64_t before);
  std::unique_ptr<State> state_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_SESSION_H_
