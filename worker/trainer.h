// Trainer: the worker's training loop, the same for every sync backend. Each iteration takes
// the next mini-batch of the worker's partition, reads the parameters of the batch's unique
// feature ids, computes the loss and gradient sums, sends them and ends the iteration.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_TRAINER_H_
#define SYNCLINE_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "client/step_observer.h"
#include "data/dataset.h"
#include "data/example_source.h"
#include "models/metrics.h"
#include "models/model.h"
#include "worker/dp_sgd.h"
#include "worker/slowness.h"
#include "worker/sync_backend.h"
#include "worker/work_plan.h"

namespace syncline {

// A change to the workers' plans, as every worker hears them in one order.
using PlanEvent = std::variant<Departure, Arrival>;

struct TrainerOptions {
  int epochs = 1;
  int batch_size = 256;
  // Iterations between progress reports.
  int log_every = 10;
  // Injected slowness, for experiments.
  SlownessOptions slowness;
  // Resume: the iterations already done (from a checkpoint). The run starts at this clock, at
  // the batch where an uninterrupted run would be (nothing is left when it is past the end).
  int64_t start_step = 0;
  // Stop after this step (0: after `epochs` epochs), e.g. a federated client's local steps.
  int64_t stop_step = 0;
  // The backend is this process's own replica (a federated client's local training): its
  // reads and updates count as compute in the step split, not network.
  bool local_backend = false;
  // Checkpoints: on_checkpoint(clock) runs after every iteration that ends a multiple of
  // checkpoint_every clocks (0: never) or for which checkpoint_requested(clock) (may be empty)
  // says yes; an error stops training.
  int64_t checkpoint_every = 0;
  std::function<bool(int64_t clock)> checkpoint_requested;
  std::function<absl::Status(int64_t clock)> on_checkpoint;
  // Read a batch ahead: prepare iteration t+1's batch and send its read (SyncBackend::ReadAhead)
  // before iteration t computes, so that the pull overlaps the computation. Only where the
  // consistency model allows it (ASP, SSP with a bound >= 1: see ReadAhead), and only with a
  // source that KeepsPreviousSlice(); otherwise every read is made in its own iteration.
  bool read_ahead = false;
  // Called after every iteration with the clocks finished (may be empty).
  std::function<void(int64_t clock)> on_step;
  // Sees every iteration with its phases' times (metrics, a trace); null: nothing does.
  StepObserver* observer = nullptr;
  // Work between iterations that is no iteration's and is left out of their times (a held-out
  // evaluation), after `clock` iterations (may be empty); an error stops training.
  std::function<absl::Status(int64_t clock)> between_steps;
  // Elastic jobs (worker/work_plan.h): this worker's rank, the workers that left or joined
  // since the last call, in the coordinator's order (asked before every iteration; may be
  // empty: nobody ever leaves), and the source of another worker's partition (it must stay
  // valid for the run; asked once per partition). `partitions`: the data's partitions (the
  // job's first workers); a rank at or above it is a joiner's, which has none of its own.
  int rank = 0;
  int partitions = 0;  // 0: every rank has a partition
  std::function<std::vector<PlanEvent>()> take_plan_events;
  std::function<absl::StatusOr<ExampleSource*>(int partition)> partition_source;
  // Asked when this worker has trained every batch of its plan, before it finishes: waits
  // while another worker may still be lost and its batches handed here (false: plan events
  // came; true: none will). Empty: the worker finishes at once (a lost worker's remaining
  // batches then go only to those still training).
  std::function<absl::StatusOr<bool>()> await_release;
  // Joins: a cut the coordinator asks for (the joiner's rank), asked before every iteration
  // (may be empty), and where the answer goes. The trainer answers with an iteration a few
  // ahead, prepares none at or past it until it hears the arrival, and gives up after
  // cut_timeout.
  std::function<std::optional<int>()> take_cut_request;
  std::function<void(int64_t cut)> report_cut;
  absl::Duration cut_timeout = absl::Seconds(60);
  // Resume: the departures this worker's checkpoint saved, and the longest list any worker's
  // did (WorkPlan::Restore); empty in a job where nobody had left.
  std::vector<SavedDeparture> restored_departures, all_departures;
  // Asked before every iteration (may be empty): a non-OK status stops training with it (the
  // job is rolling back to a checkpoint, say).
  std::function<absl::Status()> interrupted;
  // --dp example (may be null; must outlive the run): every epoch is dp_sgd's steps, each a
  // Poisson sample of the partition (which must be in memory) reading every row, with clipped
  // per-example gradients and this worker's share of the noise, pushed as the expected batch.
  DpSgdStep* dp_sgd = nullptr;
};

// A diverged model: OutOfRange "diverged at step N: ...". The trainer stops with it when a
// batch's loss is not finite (before its gradient is pushed), or when a report's mean loss is
// more than kDivergenceFactor times the mean loss of the run's first batch (at least 0.01): the
// model it started from.
inline constexpr double kDivergenceFactor = 1000;
absl::Status DivergedError(int64_t step, double loss, double first_loss);
bool IsDiverged(const absl::Status& status);

// Where a worker's training time went, summed over its iterations: the per-step split that
// tells a model-bound job from a network- or server-bound one. The parts are disjoint; total()
// is the time of the iterations.
struct StepTimes {
  absl::Duration batch;     // the next batch from the source, and its unique keys
  absl::Duration upload;    // the model's copies to its device (Model::TakeTransferTimes)
  absl::Duration compute;   // the model's loss and gradients, less its copies
  absl::Duration compress;  // the backend's codecs: encoding, decoding, error feedback
  absl::Duration download;  // the model's copies back from its device
  // The rest of the backend's calls (Read, ReadAhead, Update, EndIteration): sending,
  // receiving and waiting for servers or peers (BSP's barrier too).
  absl::Duration network;
  int64_t steps = 0;  // the iterations these times cover

  absl::Duration total() const { return batch + upload + compute + compress + download + network; }
  StepTimes& operator+=(const StepTimes& other);
  // "batch 4% upload 0% compute 45% compress 3% download 0% network 48% (of 2.31 s)"
  std::string ToString() const;
};

// Adds the time of a SyncBackend call that started at `start` and ended now to *times: the
// codec time the backend reports (SyncBackend::TakeCodecTime, at most the call's time) as
// compress, the rest as network (as compute for a `local` backend: no wire, no peers).
void AddBackendTime(SyncBackend& backend, absl::Time start, StepTimes* times, bool local = false);

struct TrainProgress {
  int64_t clock = 0;        // iterations finished
  int64_t total_steps = 0;  // iterations this worker will run
  int epoch = 0;            // 1-based
  double train_loss = 0;    // mean loss per example since the last report
  uint64_t examples = 0;    // examples since the last report
  double staleness = 0;     // mean staleness of the reads since the last report
  double consensus = 0;     // gossip: distance from the neighbours' models since the last report
  StepTimes times;          // of the iterations since the last report
};

struct TrainResult {
  int64_t steps = 0;
  uint64_t examples = 0;
  double last_loss = 0;
  StepTimes times;
  int64_t batches_taken_over = 0;  // of workers that left (take_plan_events)
  int64_t batches_given = 0;       // to workers that joined
  int64_t joined_at = -1;          // a joiner: the clock it entered at
};

// Iterations of one epoch over a partition of `examples` examples.
int64_t StepsPerEpoch(size_t examples, int batch_size);

// Evaluates a model's latest parameters (SyncBackend::Read with clock -1) over one pass of
// `source`, `chunk` examples (and their keys) at a time through Model::NewEvaluator, so a test
// file larger than memory needs only its scores and labels kept (on the model's device, for a
// GPU model). Errors: the source's or the backend's.
absl::StatusOr<Evaluation> EvaluateSource(const Model& model, SyncBackend& backend,
                                          ExampleSource& source, size_t chunk = 8192);

class Trainer {
 public:
  Trainer(const Model& model, SyncBackend& backend, TrainerOptions options)
      : model_(model), backend_(backend), options_(options) {}

  // Trains on `data`; `on_progress` (may be empty) is called every log_every iterations and
  // after the last one. Stops at the first backend error.
  absl::StatusOr<TrainResult> Run(const Dataset& data,
                                  const std::function<void(const TrainProgress&)>& on_progress);

  // The same over a source that may stream from disk: each epoch rewinds it and takes
  // consecutive batches, StepsPerEpoch(source.size(), batch_size) of them, then the batches of
  // workers that left which this worker takes over. Also stops at the first source error, or
  // when a pass ends before source.size() examples (FailedPrecondition).
  absl::StatusOr<TrainResult> Run(ExampleSource& source,
                                  const std::function<void(const TrainProgress&)>& on_progress);

  // The plan's departures (WorkPlan::Save), for a checkpoint taken during Run(); empty before.
  std::string SavePlan() const { return plan_ ? plan_->Save() : std::string(); }

 private:
  const Model& model_;
  SyncBackend& backend_;
  const TrainerOptions options_;
  std::optional<WorkPlan> plan_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_TRAINER_H_
