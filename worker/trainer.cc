#include "worker/trainer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "core/log.h"

namespace syncline {
namespace {

// How long a trainer that stops on an error waits for its pushes in flight.
constexpr absl::Duration kSettleTimeout = absl::Seconds(5);
// A cut is this many iterations past the first one not prepared: the read-ahead may prepare
// one more before the next check, and the rest leaves the arrival time to come back without
// holding the worker up.
constexpr int64_t kCutAhead = 6;

// Adds `took`, the time of a call of the model's, to *times: the copies the model reports
// (at most the call's time) as upload and download, the rest as compute.
void AddModelTime(const Model& model, absl::Duration took, StepTimes* times) {
  const TransferTimes copies = model.TakeTransferTimes();
  const absl::Duration upload = std::clamp(copies.upload, absl::ZeroDuration(), took);
  const absl::Duration download = std::clamp(copies.download, absl::ZeroDuration(), took - upload);
  times->upload += upload;
  times->download += download;
  times->compute += took - upload - download;
}

}  // namespace

absl::Status DivergedError(int64_t step, double loss, double first_loss) {
  return absl::OutOfRangeError(
      first_loss >= 0
          ? absl::StrFormat("diverged at step %d: training loss %g, against %g at the start "
                            "(lower --lr?)",
                            step, loss, first_loss)
          : absl::StrFormat("diverged at step %d: training loss %g (lower --lr?)", step, loss));
}

bool IsDiverged(const absl::Status& status) {
  return absl::IsOutOfRange(status) && absl::StartsWith(status.message(), "diverged at step");
}

StepTimes& StepTimes::operator+=(const StepTimes& other) {
  batch += other.batch;
  upload += other.upload;
  compute += other.compute;
  compress += other.compress;
  download += other.download;
  network += other.network;
  steps += other.steps;
  return *this;
}

std::string StepTimes::ToString() const {
  const double all = absl::ToDoubleSeconds(total());
  auto share = [all](absl::Duration d) {
    return all > 0 ? 100.0 * absl::ToDoubleSeconds(d) / all : 0.0;
  };
  return absl::StrFormat(
      "batch %.0f%% upload %.0f%% compute %.0f%% compress %.0f%% download %.0f%% network %.0f%% "
      "(of %.2f s)",
      share(batch), share(upload), share(compute), share(compress), share(download), share(network),
      all);
}

void AddBackendTime(SyncBackend& backend, absl::Time start, StepTimes* times, bool local) {
  const absl::Duration took = absl::Now() - start;
  const absl::Duration codec = std::clamp(backend.TakeCodecTime(), absl::ZeroDuration(), took);
  times->compress += codec;
  (local ? times->compute : times->network) += took - codec;
}

int64_t StepsPerEpoch(size_t examples, int batch_size) {
  return static_cast<int64_t>((examples + batch_size - 1) / batch_size);
}

absl::StatusOr<Evaluation> EvaluateSource(const Model& model, SyncBackend& backend,
                                          ExampleSource& source, size_t chunk) {
  if (auto s = source.Rewind(); !s.ok()) return s;
  std::unique_ptr<ModelEvaluator> evaluator = model.NewEvaluator();
  std::vector<float> rows, bias(model.bias_dim());
  std::vector<uint32_t> examples;
  while (true) {
    absl::StatusOr<DataSlice> slice = source.Next(chunk);
    if (!slice.ok()) return slice.status();
    if (slice->size() == 0) break;
    const Dataset& data = *slice->data;
    examples.resize(slice->size());
    std::iota(examples.begin(), examples.end(), slice->begin);
    const std::vector<uint64_t> keys = model.BatchKeys(data, examples);
    rows.assign(keys.size() * model.row_dim(), 0.0f);
    if (auto s = backend.Read(-1, keys, rows, bias); !s.ok()) return s;
    evaluator->Add(data, examples, keys, rows, bias);
  }
  return evaluator->Finish();
}

absl::StatusOr<TrainResult> Trainer::Run(
    const Dataset& data, const std::function<void(const TrainProgress&)>& on_progress) {
  InMemorySource source(data);
  return Run(source, on_progress);
}

namespace {

// One Trainer::Run over a source: the work plan, the sources of the partitions it reads, the
// two sets of batch buffers, and what has been trained so far. The plan is the Trainer's, so
// that a checkpoint taken during the run can save it.
//
// Thread-safety: one thread, once.
class TrainingRun {
 public:
  TrainingRun(const Model& model, SyncBackend& backend, const TrainerOptions& options,
              ExampleSource& source, const std::function<void(const TrainProgress&)>& on_progress,
              std::optional<WorkPlan>& plan)
      : model_(model),
        backend_(backend),
        options_(options),
        on_progress_(on_progress),
        plan_(plan),
        self_(options.rank),
        batch_(options.batch_size),
        slowness_(options.slowness),
        // With a read-ahead, iteration t+1's batch is prepared and its read sent before t
        // computes. DP-SGD's batches are drawn, not read in turn.
        read_ahead_(options.read_ahead && source.KeepsPreviousSlice() && !options.dp_sgd),
        // A model that stages batches (a GPU model) is handed iteration t+1's batch before t
        // computes, whatever the backend: it packs and uploads it while t computes.
        prefetch_(model.WantsPrefetch() && source.KeepsPreviousSlice() && !options.dp_sgd) {
    cursors_[self_].source = &source;
  }

  absl::StatusOr<TrainResult> Run();

 private:
  // Where a partition's source stands: the batch its next Next() returns (max: unknown, so the
  // first use rewinds).
  struct Cursor {
    ExampleSource* source = nullptr;
    int64_t next = std::numeric_limits<int64_t>::max();
  };
  // A batch and what the backend and the model read and write for it.
  struct Buffers {
    const Dataset* data = nullptr;  // the batch's slice's data
    std::vector<uint32_t> examples;
    std::vector<uint64_t> keys;
    std::vector<float> rows, grads, bias, bias_grad;
  };

  // Before the first iteration.
  absl::Status MakePlan();
  void KeepDataOnDevice();
  absl::Status HearOwnArrival();
  // The batches.
  absl::StatusOr<ExampleSource*> SourceOf(int partition);
  absl::StatusOr<DataSlice> Fetch(const BatchRef& ref, int epoch);
  absl::Status Prepare(int64_t step, Buffers* b);
  absl::Status PrepareDpBatch(int64_t step, Buffers* b);
  // An iteration, phase by phase.
  absl::Status Iterate(int64_t step);
  absl::Status ReadBatch(int64_t step, Buffers& b, StepTimes& times);
  absl::Status PrepareNext(int64_t step, StepTimes& times);
  absl::StatusOr<double> Compute(int64_t step, Buffers& b, StepTimes& times);
  absl::Status Push(int64_t step, const Buffers& b, StepTimes& times);
  absl::Status Checkpoint(int64_t clock);
  absl::Status Report(int64_t step);
  // Workers that leave and join.
  absl::Status Hear(int64_t next_step);
  absl::Status ApplyPlanEvents(int64_t next_step);
  absl::Status Depart(const Departure& d, int64_t next_step);
  absl::Status Arrive(const Arrival& a);
  int64_t StepsInPlan() const;
  void Replan();

  const Model& model_;
  SyncBackend& backend_;
  const TrainerOptions& options_;
  const std::function<void(const TrainProgress&)>& on_progress_;
  std::optional<WorkPlan>& plan_;
  const int self_;
  const int batch_;
  SlownessInjector slowness_;

  std::map<int, Cursor> cursors_;
  // Two sets of buffers, alternating by iteration: what was pushed in iteration t may still be
  // on the wire while iteration t+1 fills the other set (see SyncBackend::Update).
  std::array<Buffers, 2> buffers_;
  bool read_ahead_;
  bool prefetch_;
  bool prepared_ = false;  // buffers_[step % 2] holds the step's batch already
  // A cut given for a joiner whose arrival has not been heard yet: (joiner, cut).
  std::optional<std::pair<int, int64_t>> pending_cut_;

  int64_t total_ = 0;  // the iterations this worker runs, as the plan stands
  TrainResult result_;
  TrainProgress progress_;
  double loss_since_report_ = 0;
  double first_loss_ = -1;  // the mean loss of this run's first batch, once there is one
  uint64_t examples_since_report_ = 0;
  StepTimes times_since_report_;
  // The phases of the iteration in progress, for options_.observer.
  std::array<StepPhase, 10> phases_;
  size_t phase_count_ = 0;
  void Mark(const char* name, absl::Time begin, absl::Time end) {
    if (phase_count_ < phases_.size()) phases_[phase_count_++] = StepPhase{name, begin, end};
  }
};

absl::StatusOr<TrainResult> TrainingRun::Run() {
  if (auto s = MakePlan(); !s.ok()) return s;
  // Pushes borrow the buffers until they are acknowledged: on an error return they may still
  // be on the wire (or, in process, in a server's queue), so wait for them before the buffers
  // go. Bounded: the error may be a server that no longer answers.
  bool finished = false;
  absl::Cleanup settle = [&] {
    if (!finished) backend_.Settle(kSettleTimeout);
  };
  KeepDataOnDevice();
  absl::Cleanup forget = [&] { model_.KeepData(nullptr); };
  progress_.total_steps = total_;
  if (options_.start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resume at step %d", options_.start_step));
  }
  if (auto s = HearOwnArrival(); !s.ok()) return s;
  // A restored plan with departures reads other partitions too.
  if (plan_->changed()) read_ahead_ = prefetch_ = false;
  // A worker whose run ended before the checkpoint's clock has nothing left to do; one that
  // resumes mid-epoch skips the batches the run already trained on (Fetch's cursor does).
  const int64_t start = std::min(std::max(options_.start_step, result_.joined_at), total_);
  // Codec and copy times from before the first iteration (a restore, say) are no step's.
  (void)backend_.TakeCodecTime();
  (void)model_.TakeTransferTimes();
  result_.steps = start;
  int64_t step = start;
  while (true) {
    for (; step < total_; ++step) {
      if (auto s = Iterate(step); !s.ok()) return s;
    }
    // A departure heard during the last iteration may still add batches to this worker's plan.
    const int64_t planned = total_;
    if (auto s = Hear(step); !s.ok()) return s;
    if (total_ != planned) continue;
    if (!options_.await_release) break;
    absl::StatusOr<bool> released = options_.await_release();
    if (!released.ok()) return released.status();
    // Released or not, what came meanwhile is heard; a release means no batches will come.
    if (auto s = Hear(step); !s.ok()) return s;
    if (*released && total_ == planned) break;
  }
  finished = true;  // Finish waits for the pushes itself, and reports their errors
  if (auto s = backend_.Finish(); !s.ok()) return s;
  return result_;
}

absl::Status TrainingRun::MakePlan() {
  auto batches_of = [this](int p) -> absl::StatusOr<int64_t> {
    // DP-SGD: every worker's epoch is the job's, whatever its partition holds.
    if (options_.dp_sgd != nullptr) return options_.dp_sgd->steps_per_epoch();
    auto s = SourceOf(p);
    if (!s.ok()) return s.status();
    return StepsPerEpoch((*s)->size(), batch_);
  };
  auto created = options_.partitions > 0
                     ? WorkPlan::Create(self_, options_.epochs, batches_of, options_.partitions)
                     : WorkPlan::Create(self_, options_.epochs, batches_of);
  if (!created.ok()) return created.status();
  plan_ = std::move(*created);
  if (!options_.all_departures.empty()) {
    if (auto s = plan_->Restore(options_.restored_departures, options_.all_departures,
                                options_.start_step);
        !s.ok()) {
      return s;
    }
  }
  total_ = StepsInPlan();
  backend_.SetFinalClock(plan_->total_steps() - 1);
  return absl::OkStatus();
}

// A partition held in memory may stay where the model computes (a GPU's memory): then a batch
// goes up as its example indices. Until this run ends: the source's data may not outlive it.
void TrainingRun::KeepDataOnDevice() {
  const Dataset* resident = cursors_[self_].source->Resident();
  if (resident != nullptr && model_.KeepData(resident)) {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "the partition's %d examples (%.1f MB of features) stay on the model's device: a "
        "batch goes up as its example indices",
        resident->size(), (resident->ids.size() * 12.0 + resident->size() * 8.0) / 1e6);
  }
}

// A joiner hears every event before its own arrival, and that, before it starts: its clocks
// start where the arrival says.
absl::Status TrainingRun::HearOwnArrival() {
  if (options_.partitions <= 0 || self_ < options_.partitions) return absl::OkStatus();
  if (auto s = ApplyPlanEvents(0); !s.ok()) return s;
  if (result_.joined_at < 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("w%d is a joiner but heard no arrival of its own before its start", self_));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExampleSource*> TrainingRun::SourceOf(int partition) {
  if (auto it = cursors_.find(partition); it != cursors_.end()) return it->second.source;
  if (!options_.partition_source) {
    return absl::FailedPreconditionError("this trainer cannot read other partitions");
  }
  auto opened = options_.partition_source(partition);
  if (!opened.ok()) return opened.status();
  cursors_[partition].source = *opened;
  return *opened;
}

// Batch `ref` of its partition, from the partition's source: sequential reads, rewinding when
// the plan goes back (a new epoch) and skipping forward past batches of other workers.
absl::StatusOr<DataSlice> TrainingRun::Fetch(const BatchRef& ref, int epoch) {
  auto s = SourceOf(ref.partition);
  if (!s.ok()) return s.status();
  Cursor& c = cursors_[ref.partition];
  if (ref.batch < c.next) {
    if (auto r = c.source->Rewind(); !r.ok()) return r;
    c.next = 0;
  }
  // c.next <= ref.batch here: read (and skip) up to the batch wanted.
  for (;; ++c.next) {
    absl::StatusOr<DataSlice> slice = c.source->Next(batch_);
    if (!slice.ok()) return slice.status();
    if (slice->size() == 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "the training data ended after %d of %d examples of epoch %d%s (did the file "
          "change?)",
          c.next * batch_, c.source->size(), epoch + 1,
          ref.partition == self_ ? "" : absl::StrFormat(" in partition %d", ref.partition)));
    }
    if (c.next == ref.batch) {
      ++c.next;
      return slice;
    }
  }
}

// The next batch of the plan into *b: its examples, unique keys and zeroed read buffers.
absl::Status TrainingRun::Prepare(int64_t step, Buffers* b) {
  if (options_.dp_sgd != nullptr) return PrepareDpBatch(step, b);
  const std::optional<WorkPlan::Located> at = plan_->At(step);
  if (!at) return absl::InternalError(absl::StrFormat("no batch for iteration %d", step));
  // The batch's examples stay valid until the next Next() (the one after it, with a
  // read-ahead); keys and gradients, which may still be on the wire, live in the buffers.
  absl::StatusOr<DataSlice> slice = Fetch(at->batch, at->epoch);
  if (!slice.ok()) return slice.status();
  b->data = slice->data;
  b->examples.resize(slice->size());
  std::iota(b->examples.begin(), b->examples.end(), slice->begin);
  b->keys = model_.BatchKeys(*b->data, b->examples);
  b->rows.assign(b->keys.size() * model_.row_dim(), 0.0f);
  b->bias.assign(model_.bias_dim(), 0.0f);
  return absl::OkStatus();
}

// DP-SGD's batch: a Poisson sample of the partition held in memory, reading every row.
absl::Status TrainingRun::PrepareDpBatch(int64_t step, Buffers* b) {
  const Dataset* data = cursors_[self_].source->Resident();
  if (data == nullptr) {
    return absl::FailedPreconditionError("--dp example needs the partition in memory");
  }
  b->data = data;
  b->examples = options_.dp_sgd->SampleBatch(step, static_cast<uint32_t>(data->size()));
  b->keys = options_.dp_sgd->keys();
  b->rows.assign(b->keys.size() * model_.row_dim(), 0.0f);
  b->bias.assign(model_.bias_dim(), 0.0f);
  return absl::OkStatus();
}

// Iteration `step`: its batch and read, the next batch's (ahead), the loss and gradients, the
// push, then a checkpoint and a progress report where they are due.
absl::Status TrainingRun::Iterate(int64_t step) {
  if (options_.interrupted) {
    if (auto s = options_.interrupted(); !s.ok()) return s;
  }
  if (auto s = Hear(prepared_ ? step + 1 : step); !s.ok()) return s;
  Buffers& b = buffers_[step % 2];
  StepTimes times{.steps = 1};  // this iteration's
  const absl::Time begin = absl::Now();
  phase_count_ = 0;
  if (auto s = ReadBatch(step, b, times); !s.ok()) return s;
  if (auto s = PrepareNext(step, times); !s.ok()) return s;
  absl::StatusOr<double> loss = Compute(step, b, times);
  if (!loss.ok()) return loss.status();
  if (auto s = Push(step, b, times); !s.ok()) return s;
  result_.times += times;
  times_since_report_ += times;

  result_.steps = step + 1;
  result_.examples += b.examples.size();
  if (options_.on_step) options_.on_step(step + 1);
  if (auto s = Checkpoint(step + 1); !s.ok()) return s;
  if (options_.observer) {
    options_.observer->OnStep(
        StepRecord{.step = step,
                   .begin = begin,
                   .end = absl::Now(),
                   .batch = times.batch,
                   .upload = times.upload,
                   .compute = times.compute,
                   .compress = times.compress,
                   .download = times.download,
                   .network = times.network,
                   .loss = *loss,
                   .examples = b.examples.size(),
                   .phases = absl::MakeConstSpan(phases_.data(), phase_count_)});
  }
  if (options_.between_steps) {
    if (auto s = options_.between_steps(step + 1); !s.ok()) return s;
  }
  loss_since_report_ += *loss;
  examples_since_report_ += b.examples.size();
  if ((step + 1) % options_.log_every == 0 || step + 1 == total_) return Report(step);
  return absl::OkStatus();
}

// The step's batch (unless it was prepared ahead) and its rows.
absl::Status TrainingRun::ReadBatch(int64_t step, Buffers& b, StepTimes& times) {
  const absl::Time t0 = absl::Now();
  if (!prepared_) {
    if (auto s = Prepare(step, &b); !s.ok()) return s;
    slowness_.BeforeRequest();
  }
  const absl::Time t1 = absl::Now();
  times.batch += t1 - t0;
  if (!prepared_) Mark("batch", t0, t1);
  if (auto s = backend_.Read(step, b.keys, b.rows, b.bias); !s.ok()) return s;
  AddBackendTime(backend_, t1, &times, options_.local_backend);
  Mark("read", t1, absl::Now());
  prepared_ = false;
  return absl::OkStatus();
}

// The next step's batch, its read sent ahead and its upload started, where allowed.
absl::Status TrainingRun::PrepareNext(int64_t step, StepTimes& times) {
  if (!(read_ahead_ || prefetch_) || step + 1 >= total_) return absl::OkStatus();
  Buffers& next = buffers_[(step + 1) % 2];
  const absl::Time t0 = absl::Now();
  if (auto s = Prepare(step + 1, &next); !s.ok()) return s;
  prepared_ = true;
  slowness_.BeforeRequest();
  const absl::Time t1 = absl::Now();
  times.batch += t1 - t0;
  Mark("next batch", t0, t1);
  if (read_ahead_) {
    read_ahead_ = backend_.ReadAhead(step + 1, next.keys, next.rows, next.bias);
    AddBackendTime(backend_, t1, &times, options_.local_backend);
    Mark("read ahead", t1, absl::Now());
  }
  if (prefetch_) model_.Prefetch(*next.data, next.examples, next.keys);
  return absl::OkStatus();
}

// The batch's loss and gradients; a loss that is not finite stops training before its push.
absl::StatusOr<double> TrainingRun::Compute(int64_t step, Buffers& b, StepTimes& times) {
  const absl::Time compute_start = absl::Now();
  b.grads.assign(b.rows.size(), 0.0f);
  b.bias_grad.assign(b.bias.size(), 0.0f);
  const double loss =
      options_.dp_sgd != nullptr
          ? options_.dp_sgd->ClippedNoisyGradient(step, model_, *b.data, b.examples, b.rows, b.bias,
                                                  absl::MakeSpan(b.grads),
                                                  absl::MakeSpan(b.bias_grad))
          : model_.LossAndGradient(*b.data, b.examples, b.keys, b.rows, b.bias,
                                   absl::MakeSpan(b.grads), absl::MakeSpan(b.bias_grad));
  const absl::Duration took = absl::Now() - compute_start;
  Mark("compute", compute_start, compute_start + took);
  AddModelTime(model_, took, &times);
  if (slowness_.active()) slowness_.AfterCompute(took);
  if (!std::isfinite(loss)) return DivergedError(step + 1, loss, first_loss_);
  // The model this worker started from is the reference: its first batch's mean loss.
  if (first_loss_ < 0 && !b.examples.empty()) first_loss_ = loss / b.examples.size();
  return loss;
}

absl::Status TrainingRun::Push(int64_t step, const Buffers& b, StepTimes& times) {
  // DP-SGD divides by the expected batch: the drawn one's size would tell who is in it.
  const float n = options_.dp_sgd != nullptr ? options_.dp_sgd->reported_examples()
                                             : static_cast<float>(b.examples.size());
  slowness_.BeforeRequest();
  const absl::Time t1 = absl::Now();
  if (auto s = backend_.Update(step, b.keys, b.grads, b.bias_grad, n); !s.ok()) return s;
  const absl::Time t2 = absl::Now();
  if (auto s = backend_.EndIteration(step, n); !s.ok()) return s;
  AddBackendTime(backend_, t1, &times, options_.local_backend);
  const absl::Time t3 = absl::Now();
  Mark("push", t1, t3);
  // Inside the push: the iteration's end, where the serverless and hybrid backends run their
  // collective (the trace's collectives track, client/worker_metrics.h).
  Mark(kEndIterationPhase, t2, t3);
  return absl::OkStatus();
}

// A checkpoint after `clock` iterations, when it is a periodic one or was asked for.
absl::Status TrainingRun::Checkpoint(int64_t clock) {
  if (!options_.on_checkpoint) return absl::OkStatus();
  const bool periodic = options_.checkpoint_every > 0 && clock % options_.checkpoint_every == 0;
  const bool requested = options_.checkpoint_requested && options_.checkpoint_requested(clock);
  if (!periodic && !requested) return absl::OkStatus();
  const absl::Time begin = absl::Now();
  absl::Status status = options_.on_checkpoint(clock);
  Mark("checkpoint", begin, absl::Now());
  return status;
}

// The progress since the last report, after `step`; a mean loss far above the first batch's
// stops training (the model diverged).
absl::Status TrainingRun::Report(int64_t step) {
  progress_.clock = step + 1;
  const std::optional<WorkPlan::Located> at = plan_->At(step);
  progress_.epoch = at ? at->epoch + 1 : options_.epochs;
  progress_.train_loss = loss_since_report_ / std::max<uint64_t>(1, examples_since_report_);
  progress_.examples = examples_since_report_;
  progress_.staleness = backend_.TakeMeanStaleness();
  progress_.consensus = backend_.TakeConsensusProxy();
  progress_.times = std::exchange(times_since_report_, StepTimes{});
  result_.last_loss = progress_.train_loss;
  if (on_progress_) on_progress_(progress_);
  if (first_loss_ >= 0 && progress_.train_loss > kDivergenceFactor * std::max(first_loss_, 0.01)) {
    return DivergedError(step + 1, progress_.train_loss, first_loss_);
  }
  loss_since_report_ = 0;
  examples_since_report_ = 0;
  return absl::OkStatus();
}

// Plan events heard since the last call, and cut requests answered; `next_step` is the first
// iteration not prepared. Nothing at or past a cut is prepared before its arrival is heard.
absl::Status TrainingRun::Hear(int64_t next_step) {
  if (options_.take_cut_request) {
    if (std::optional<int> joiner = options_.take_cut_request()) {
      pending_cut_.emplace(*joiner, next_step + kCutAhead);
      options_.report_cut(pending_cut_->second);
      SYNCLINE_LOG(INFO) << absl::StrFormat("w%d is joining: this worker's cut is clock %d",
                                            *joiner, pending_cut_->second);
    }
  }
  if (auto s = ApplyPlanEvents(next_step); !s.ok()) return s;
  const absl::Time waiting_since = absl::Now();
  const absl::Time deadline = waiting_since + options_.cut_timeout;
  bool waited = false;
  while (pending_cut_ && next_step + 1 >= pending_cut_->second && next_step < total_) {
    waited = true;
    if (options_.interrupted) {
      if (auto s = options_.interrupted(); !s.ok()) return s;
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "gave clock %d as its cut for w%d's arrival and heard no arrival within %s",
          pending_cut_->second, pending_cut_->first, absl::FormatDuration(options_.cut_timeout)));
    }
    absl::SleepFor(absl::Milliseconds(1));
    if (auto s = ApplyPlanEvents(next_step); !s.ok()) return s;
  }
  if (waited) {
    SYNCLINE_LOG(INFO) << "waited " << absl::FormatDuration(absl::Now() - waiting_since)
                       << " at its cut for the arrival";
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::ApplyPlanEvents(int64_t next_step) {
  if (!options_.take_plan_events) return absl::OkStatus();
  for (const PlanEvent& event : options_.take_plan_events()) {
    absl::Status s = std::holds_alternative<Departure>(event)
                         ? Depart(std::get<Departure>(event), next_step)
                         : Arrive(std::get<Arrival>(event));
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status TrainingRun::Depart(const Departure& d, int64_t next_step) {
  auto taken = plan_->Leave(d, next_step);
  if (!taken.ok()) return taken.status();
  if (*taken == 0) return absl::OkStatus();
  result_.batches_taken_over += *taken;
  Replan();
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "w%d left at clock %d: this worker takes %d of its batches (%d iterations in all now)",
      d.worker, d.clock, *taken, total_);
  return absl::OkStatus();
}

absl::Status TrainingRun::Arrive(const Arrival& a) {
  auto changed = plan_->Arrive(a);
  if (!changed.ok()) return changed.status();
  std::vector<int> donors;
  for (const Cut& c : a.cuts) donors.push_back(c.donor);
  if (auto s = backend_.OnArrival(a.worker, a.first_clock, donors); !s.ok()) return s;
  if (pending_cut_ && pending_cut_->first == a.worker) pending_cut_.reset();
  if (a.worker == self_) {
    result_.joined_at = a.first_clock;
    Replan();
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "joined at clock %d: %d batches from %d workers still training (%d iterations to the "
        "end)",
        a.first_clock, *changed, a.cuts.size(), total_ - a.first_clock);
  } else if (*changed != 0) {
    result_.batches_given -= *changed;
    Replan();
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "w%d joined: this worker gives it %d of its batches (%d iterations in all now)", a.worker,
        -*changed, total_);
  }
  return absl::OkStatus();
}

int64_t TrainingRun::StepsInPlan() const {
  const int64_t all = plan_->total_steps();
  return options_.stop_step > 0 ? std::min(all, options_.stop_step) : all;
}

void TrainingRun::Replan() {
  total_ = StepsInPlan();
  progress_.total_steps = total_;
  backend_.SetFinalClock(plan_->total_steps() - 1);
  // Batches now come from other sources, or skip in this one: a slice need not outlive the
  // next Next() of its source, so every read from now on is made in its own iteration.
  read_ahead_ = false;
  prefetch_ = false;
}

}  // namespace

absl::StatusOr<TrainResult> Trainer::Run(
    ExampleSource& source, const std::function<void(const TrainProgress&)>& on_progress) {
  return TrainingRun(model_, backend_, options_, source, on_progress, plan_).Run();
}

}  // namespace syncline
