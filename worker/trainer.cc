#include "worker/trainer.h"

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <numeric>
#include <utility>

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

absl::StatusOr<TrainResult> Trainer::Run(
    ExampleSource& source, const std::function<void(const TrainProgress&)>& on_progress) {
  const int batch = options_.batch_size;
  const int self = options_.rank;
  // Where each partition's source stands: the batch its next Next() returns (max: unknown, so
  // the first use rewinds).
  struct Cursor {
    ExampleSource* source = nullptr;
    int64_t next = std::numeric_limits<int64_t>::max();
  };
  std::map<int, Cursor> cursors;
  cursors[self].source = &source;
  auto source_of = [&](int partition) -> absl::StatusOr<ExampleSource*> {
    if (auto it = cursors.find(partition); it != cursors.end()) return it->second.source;
    if (!options_.partition_source) {
      return absl::FailedPreconditionError("this trainer cannot read other partitions");
    }
    auto opened = options_.partition_source(partition);
    if (!opened.ok()) return opened.status();
    cursors[partition].source = *opened;
    return *opened;
  };
  auto batches_of = [&](int p) -> absl::StatusOr<int64_t> {
    auto s = source_of(p);
    if (!s.ok()) return s.status();
    return StepsPerEpoch((*s)->size(), batch);
  };
  auto created = options_.partitions > 0
                     ? WorkPlan::Create(self, options_.epochs, batches_of, options_.partitions)
                     : WorkPlan::Create(self, options_.epochs, batches_of);
  if (!created.ok()) return created.status();
  plan_ = std::move(*created);
  std::optional<WorkPlan>& plan = plan_;
  if (!options_.all_departures.empty()) {
    if (auto s = plan->Restore(options_.restored_departures, options_.all_departures,
                               options_.start_step);
        !s.ok()) {
      return s;
    }
  }
  auto steps_in_plan = [&] {
    const int64_t all = plan->total_steps();
    return options_.stop_step > 0 ? std::min(all, options_.stop_step) : all;
  };
  int64_t total = steps_in_plan();
  backend_.SetFinalClock(plan->total_steps() - 1);
  // Two sets of buffers, alternating by iteration: what was pushed in iteration t may still be
  // on the wire while iteration t+1 fills the other set (see SyncBackend::Update).
  struct Buffers {
    const Dataset* data = nullptr;  // the batch's slice's data
    std::vector<uint32_t> examples;
    std::vector<uint64_t> keys;
    std::vector<float> rows, grads, bias, bias_grad;
  };
  std::array<Buffers, 2> buffers;
  // Pushes borrow the buffers until they are acknowledged: on an error return they may still
  // be on the wire (or, in process, in a server's queue), so wait for them before the buffers
  // go. Bounded: the error may be a server that no longer answers.
  bool finished = false;
  absl::Cleanup settle = [&] {
    if (!finished) backend_.Settle(kSettleTimeout);
  };
  // A partition held in memory may stay where the model computes (a GPU's memory): then a
  // batch goes up as its example indices. Until this run ends: the source's data may not
  // outlive it.
  if (const Dataset* resident = source.Resident();
      resident != nullptr && model_.KeepData(resident)) {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "the partition's %d examples (%.1f MB of features) stay on the model's device: a "
        "batch goes up as its example indices",
        resident->size(), (resident->ids.size() * 12.0 + resident->size() * 8.0) / 1e6);
  }
  absl::Cleanup forget = [&] { model_.KeepData(nullptr); };
  SlownessInjector slowness(options_.slowness);
  TrainResult result;
  TrainProgress progress;
  progress.total_steps = total;
  double loss_since_report = 0;
  double first_loss = -1;  // the mean loss of this run's first batch, once there is one
  uint64_t examples_since_report = 0;
  StepTimes times_since_report;

  if (options_.start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("cannot resume at step %d", options_.start_step));
  }
  // A worker whose run ended before the checkpoint's clock has nothing left to do; one that
  // resumes mid-epoch skips the batches the run already trained on (the cursor does).
  // Batch `ref` of its partition, from the partition's source: sequential reads, rewinding
  // when the plan goes back (a new epoch) and skipping forward past batches of other workers.
  auto fetch = [&](const BatchRef& ref, int epoch) -> absl::StatusOr<DataSlice> {
    auto s = source_of(ref.partition);
    if (!s.ok()) return s.status();
    Cursor& c = cursors[ref.partition];
    if (ref.batch < c.next) {
      if (auto r = c.source->Rewind(); !r.ok()) return r;
      c.next = 0;
    }
    // c.next <= ref.batch here: read (and skip) up to the batch wanted.
    for (;; ++c.next) {
      absl::StatusOr<DataSlice> slice = c.source->Next(batch);
      if (!slice.ok()) return slice.status();
      if (slice->size() == 0) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "the training data ended after %d of %d examples of epoch %d%s (did the file "
            "change?)",
            c.next * batch, c.source->size(), epoch + 1,
            ref.partition == self ? "" : absl::StrFormat(" in partition %d", ref.partition)));
      }
      if (c.next == ref.batch) {
        ++c.next;
        return slice;
      }
    }
  };
  // The next batch of the plan into *b: its examples, unique keys and zeroed read buffers.
  auto prepare = [&](int64_t step, Buffers* b) -> absl::Status {
    const std::optional<WorkPlan::Located> at = plan->At(step);
    if (!at) return absl::InternalError(absl::StrFormat("no batch for iteration %d", step));
    // The batch's examples stay valid until the next Next() (the one after it, with a
    // read-ahead); keys and gradients, which may still be on the wire, live in the buffers.
    absl::StatusOr<DataSlice> slice = fetch(at->batch, at->epoch);
    if (!slice.ok()) return slice.status();
    b->data = slice->data;
    b->examples.resize(slice->size());
    std::iota(b->examples.begin(), b->examples.end(), slice->begin);
    b->keys = model_.BatchKeys(*b->data, b->examples);
    b->rows.assign(b->keys.size() * model_.row_dim(), 0.0f);
    b->bias.assign(model_.bias_dim(), 0.0f);
    return absl::OkStatus();
  };
  // With a read-ahead, iteration t+1's batch is prepared and its read sent before t computes.
  bool read_ahead = options_.read_ahead && source.KeepsPreviousSlice();
  // A model that stages batches (a GPU model) is handed iteration t+1's batch before t
  // computes, whatever the backend: it packs and uploads it while t computes.
  bool prefetch = model_.WantsPrefetch() && source.KeepsPreviousSlice();
  bool prepared = false;  // buffers[step % 2] holds the step's batch already
  // A cut given for a joiner whose arrival has not been heard yet: (joiner, cut).
  std::optional<std::pair<int, int64_t>> pending_cut;
  auto replan = [&] {
    total = steps_in_plan();
    progress.total_steps = total;
    backend_.SetFinalClock(plan->total_steps() - 1);
    // Batches now come from other sources, or skip in this one: a slice need not outlive the
    // next Next() of its source, so every read from now on is made in its own iteration.
    read_ahead = false;
    prefetch = false;
  };
  auto apply = [&](int64_t next_step) -> absl::Status {
    if (!options_.take_plan_events) return absl::OkStatus();
    for (const PlanEvent& event : options_.take_plan_events()) {
      if (const Departure* d = std::get_if<Departure>(&event)) {
        auto taken = plan->Leave(*d, next_step);
        if (!taken.ok()) return taken.status();
        if (*taken == 0) continue;
        result.batches_taken_over += *taken;
        replan();
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "w%d left at clock %d: this worker takes %d of its batches (%d iterations in all "
            "now)",
            d->worker, d->clock, *taken, total);
        continue;
      }
      const Arrival& a = std::get<Arrival>(event);
      auto changed = plan->Arrive(a);
      if (!changed.ok()) return changed.status();
      std::vector<int> donors;
      for (const Cut& c : a.cuts) donors.push_back(c.donor);
      if (auto s = backend_.OnArrival(a.worker, a.first_clock, donors); !s.ok()) return s;
      if (pending_cut && pending_cut->first == a.worker) pending_cut.reset();
      if (a.worker == self) {
        result.joined_at = a.first_clock;
        replan();
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "joined at clock %d: %d batches from %d workers still training (%d iterations to "
            "the end)",
            a.first_clock, *changed, a.cuts.size(), total - a.first_clock);
      } else if (*changed != 0) {
        result.batches_given -= *changed;
        replan();
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "w%d joined: this worker gives it %d of its batches (%d iterations in all now)",
            a.worker, -*changed, total);
      }
    }
    return absl::OkStatus();
  };
  // Plan events heard since the last call, and cut requests answered; `next_step` is the first
  // iteration not prepared. Nothing at or past a cut is prepared before its arrival is heard.
  auto hear = [&](int64_t next_step) -> absl::Status {
    if (options_.take_cut_request) {
      if (std::optional<int> joiner = options_.take_cut_request()) {
        pending_cut.emplace(*joiner, next_step + kCutAhead);
        options_.report_cut(pending_cut->second);
        SYNCLINE_LOG(INFO) << absl::StrFormat("w%d is joining: this worker's cut is clock %d",
                                              *joiner, pending_cut->second);
      }
    }
    if (auto s = apply(next_step); !s.ok()) return s;
    const absl::Time waiting_since = absl::Now();
    const absl::Time deadline = waiting_since + options_.cut_timeout;
    bool waited = false;
    while (pending_cut && next_step + 1 >= pending_cut->second && next_step < total) {
      waited = true;
      if (options_.interrupted) {
        if (auto s = options_.interrupted(); !s.ok()) return s;
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "gave clock %d as its cut for w%d's arrival and heard no arrival within %s",
            pending_cut->second, pending_cut->first, absl::FormatDuration(options_.cut_timeout)));
      }
      absl::SleepFor(absl::Milliseconds(1));
      if (auto s = apply(next_step); !s.ok()) return s;
    }
    if (waited) {
      SYNCLINE_LOG(INFO) << "waited " << absl::FormatDuration(absl::Now() - waiting_since)
                         << " at its cut for the arrival";
    }
    return absl::OkStatus();
  };
  // A joiner hears every event before its own arrival, and that, before it starts: its clocks
  // start where the arrival says.
  if (options_.partitions > 0 && self >= options_.partitions) {
    if (auto s = apply(0); !s.ok()) return s;
    if (result.joined_at < 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "w%d is a joiner but heard no arrival of its own before its start", self));
    }
  }
  // A restored plan with departures reads other partitions too.
  if (plan->changed()) read_ahead = prefetch = false;
  const int64_t start = std::min(std::max(options_.start_step, result.joined_at), total);
  // Codec and copy times from before the first iteration (a restore, say) are no step's.
  (void)backend_.TakeCodecTime();
  (void)model_.TakeTransferTimes();
  result.steps = start;
  int64_t step = start;
  while (true) {
    for (; step < total; ++step) {
      if (options_.interrupted) {
        if (auto s = options_.interrupted(); !s.ok()) return s;
      }
      if (auto s = hear(prepared ? step + 1 : step); !s.ok()) return s;
      Buffers& b = buffers[step % 2];
      StepTimes times{.steps = 1};  // this iteration's
      absl::Time t0 = absl::Now();
      if (!prepared) {
        if (auto s = prepare(step, &b); !s.ok()) return s;
        slowness.BeforeRequest();
      }
      absl::Time t1 = absl::Now();
      times.batch += t1 - t0;
      if (auto s = backend_.Read(step, b.keys, b.rows, b.bias); !s.ok()) return s;
      AddBackendTime(backend_, t1, &times, options_.local_backend);
      prepared = false;
      if ((read_ahead || prefetch) && step + 1 < total) {
        Buffers& next = buffers[(step + 1) % 2];
        t0 = absl::Now();
        if (auto s = prepare(step + 1, &next); !s.ok()) return s;
        prepared = true;
        slowness.BeforeRequest();
        t1 = absl::Now();
        times.batch += t1 - t0;
        if (read_ahead) {
          read_ahead = backend_.ReadAhead(step + 1, next.keys, next.rows, next.bias);
          AddBackendTime(backend_, t1, &times, options_.local_backend);
        }
        if (prefetch) model_.Prefetch(*next.data, next.examples, next.keys);
      }
      const Dataset& data = *b.data;

      const absl::Time compute_start = absl::Now();
      b.grads.assign(b.rows.size(), 0.0f);
      b.bias_grad.assign(b.bias.size(), 0.0f);
      const double loss =
          model_.LossAndGradient(data, b.examples, b.keys, b.rows, b.bias, absl::MakeSpan(b.grads),
                                 absl::MakeSpan(b.bias_grad));
      t0 = absl::Now();
      AddModelTime(model_, t0 - compute_start, &times);
      if (slowness.active()) slowness.AfterCompute(t0 - compute_start);
      if (!std::isfinite(loss)) return DivergedError(step + 1, loss, first_loss);
      // The model this worker started from is the reference: its first batch's mean loss.
      if (first_loss < 0 && !b.examples.empty()) first_loss = loss / b.examples.size();
      const float n = static_cast<float>(b.examples.size());
      slowness.BeforeRequest();
      t1 = absl::Now();
      if (auto s = backend_.Update(step, b.keys, b.grads, b.bias_grad, n); !s.ok()) return s;
      if (auto s = backend_.EndIteration(step, n); !s.ok()) return s;
      AddBackendTime(backend_, t1, &times, options_.local_backend);
      result.times += times;
      times_since_report += times;

      result.steps = step + 1;
      result.examples += b.examples.size();
      if (options_.on_step) options_.on_step(step + 1);
      if (options_.on_checkpoint) {
        const bool periodic =
            options_.checkpoint_every > 0 && (step + 1) % options_.checkpoint_every == 0;
        const bool requested =
            options_.checkpoint_requested && options_.checkpoint_requested(step + 1);
        if (periodic || requested) {
          if (auto s = options_.on_checkpoint(step + 1); !s.ok()) return s;
        }
      }
      loss_since_report += loss;
      examples_since_report += b.examples.size();
      if ((step + 1) % options_.log_every == 0 || step + 1 == total) {
        progress.clock = step + 1;
        const std::optional<WorkPlan::Located> at = plan->At(step);
        progress.epoch = at ? at->epoch + 1 : options_.epochs;
        progress.train_loss = loss_since_report / std::max<uint64_t>(1, examples_since_report);
        progress.examples = examples_since_report;
        progress.staleness = backend_.TakeMeanStaleness();
        progress.consensus = backend_.TakeConsensusProxy();
        progress.times = std::exchange(times_since_report, StepTimes{});
        result.last_loss = progress.train_loss;
        if (on_progress) on_progress(progress);
        if (first_loss >= 0 &&
            progress.train_loss > kDivergenceFactor * std::max(first_loss, 0.01)) {
          return DivergedError(step + 1, progress.train_loss, first_loss);
        }
        loss_since_report = 0;
        examples_since_report = 0;
      }
    }
    // A departure heard during the last iteration may still add batches to this worker's plan.
    const int64_t planned = total;
    if (auto s = hear(step); !s.ok()) return s;
    if (total == planned) break;
  }
  finished = true;  // Finish waits for the pushes itself, and reports their errors
  if (auto s = backend_.Finish(); !s.ok()) return s;
  return result;
}

}  // namespace syncline
