#include "worker/worker_node.h"

#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint_requests.h"
#include "client/kv_client.h"
#include "client/worker_metrics.h"
#include "compression/codec.h"
#include "core/endpoint_split.h"
#include "core/log.h"
#include "device/cuda_model.h"
#include "device/placement.h"
#include "job/federated.h"
#include "job/job_spec.h"
#include "job/node_trace.h"
#include "job/options.h"
#include "job/privacy_options.h"
#include "job/privacy_plan.h"
#include "models/model.h"
#include "worker/attack.h"
#include "worker/coordinated_rendezvous.h"
#include "worker/dp_sgd.h"
#include "worker/federated_client.h"
#include "worker/held_out.h"
#include "worker/ps_backend.h"
#include "worker/replicated_model.h"
#include "worker/secagg_channel.h"
#include "worker/slowness.h"
#include "worker/trainer.h"
#include "worker/worker_checkpoint.h"
#include "worker/worker_data.h"

namespace syncline {
namespace {

StepSeconds ToStepSeconds(const StepTimes& t) {
  return StepSeconds{.steps = t.steps,
                     .batch = absl::ToDoubleSeconds(t.batch),
                     .upload = absl::ToDoubleSeconds(t.upload),
                     .compute = absl::ToDoubleSeconds(t.compute),
                     .compress = absl::ToDoubleSeconds(t.compress),
                     .download = absl::ToDoubleSeconds(t.download),
                     .network = absl::ToDoubleSeconds(t.network)};
}

// What talks to the servers or peers: made afresh at the start and after every rollback, so
// that nothing of the undone timeline (requests in flight, residuals, copies) survives it.
struct Link {
  std::unique_ptr<PeerRendezvous> rendezvous;  // outlives the backend, which may use it
  std::unique_ptr<EndpointSplit> split;
  std::unique_ptr<KVClient> client;
  std::unique_ptr<SyncBackend> backend;
};

// One timeline's trainer options and what their callbacks keep. Not movable: the callbacks
// point into it.
struct TimelineHooks {
  TimelineHooks() = default;
  TimelineHooks(const TimelineHooks&) = delete;
  TimelineHooks& operator=(const TimelineHooks&) = delete;

  TrainerOptions options;
  // The clocks the coordinator asked to checkpoint (time-based checkpoints).
  CheckpointRequests requests;
  const Trainer* running = nullptr;  // the trainer whose plan a checkpoint saves
  // Workers that leave a job that goes on hand their batches to those still training: a
  // leaver's partition is read here when it leaves (the same file, its part).
  std::map<int, std::unique_ptr<WorkerData>> leavers;
  // Plan events heard but not yet handed to the trainer: a departure waits until the backend
  // knows the clock its batches go from (SyncBackend::DepartureClock), and the events after it
  // with it, so that every worker applies them in one order.
  std::deque<ControlClient::PlanEvent> held;
};

// How a timeline ends: the node's exit, or a rollback to train again from.
using TimelineEnd = std::variant<NodeExit, ControlClient::Rollback>;

// One worker's part in a job it joined, phase by phase: the model on its device, the data, the
// servers, the parameters' layout; then timelines (connect, train, report, serve the
// coordinator's commands) until the job ends, one more after each rollback.
//
// Thread-safety: one thread runs it; the trainer's callbacks run on that thread too.
class WorkerRun {
 public:
  WorkerRun(Transport& transport, JoinedJob& joined, const NodeOptions& options,
            const ServerlessBackendFactory& serverless_backend,
            const HybridBackendFactory& hybrid_backend, TraceRecorder* trace)
      : transport_(transport),
        options_(options),
        serverless_backend_(serverless_backend),
        hybrid_backend_(hybrid_backend),
        spec_(joined.spec),
        control_(*joined.control),
        table_(control_.table()),
        endpoint_(*joined.data),
        rank_(options.rank),
        // A worker that joined has no partition of its own: it trains the donors' batches,
        // read from their partitions, and reads partition 0 for what every worker shares (the
        // features, the test set).
        joiner_(rank_ >= spec_.workers),
        checkpoints_(spec_.checkpoint.enabled()),
        slowness_(SlownessForWorker(spec_.slowness, rank_, spec_.seed)),
        metrics_(joined.metrics || trace
                     ? std::make_unique<WorkerMetrics>(
                           joined.metrics ? &joined.metrics->registry() : nullptr, trace,
                           spec_.observe.trace_first, spec_.observe.trace_end,
                           CollectiveName(spec_.sync))
                     : nullptr),
        held_out_(spec_, rank_, control_, metrics_.get()) {}

  NodeExit Run();

 private:
  // Before the first timeline.
  absl::Status MakeModel();
  absl::Status ReadData();
  absl::Status FindServers();
  absl::Status LayOutParameters();

  // A timeline, from connecting to its end.
  TimelineEnd RunTimeline(uint32_t generation, const std::string& restore);
  absl::StatusOr<Link> Connect(uint32_t generation) const;
  absl::Status WaitForStart();
  void EncodeOnDevice(SyncBackend& backend);
  void SetUpTrainer(SyncBackend& backend, TimelineHooks& t);
  void SetUpCheckpoints(SyncBackend& backend, TimelineHooks& t);
  void SetUpHandOver(SyncBackend& backend, TimelineHooks& t);
  // `servers`: the link's client of the servers (null without servers).
  absl::StatusOr<TrainResult> Train(SyncBackend& backend, TimelineHooks& t, KVClient* servers);
  absl::StatusOr<TrainResult> TrainFederated(SyncBackend& backend, KVClient* servers);
  TimelineEnd AfterFailure(const absl::Status& status);
  TimelineEnd AfterTraining(const TrainResult& result, SyncBackend& backend, TimelineHooks& t);
  TimelineEnd ServeCommands(SyncBackend& backend);
  absl::Status AwaitResume(ControlClient::Rollback& back);

  // Reports to the coordinator.
  void ReportProgress(const TrainProgress& p, const SyncBackend& backend);
  void ReportMissed(CheckpointRequests& requests, int64_t before);
  void ReportDone(const TrainResult& result, SyncBackend& backend);
  // Tells the coordinator why this worker cannot go on; bad input exits with code 2.
  NodeExit Fail(absl::Status status, bool bad_input = false);

  Transport& transport_;
  const NodeOptions& options_;
  const ServerlessBackendFactory& serverless_backend_;
  const HybridBackendFactory& hybrid_backend_;
  const JobSpec& spec_;
  ControlClient& control_;
  const NodeTable& table_;
  Endpoint& endpoint_;
  const int rank_;
  const bool joiner_;
  const bool checkpoints_;
  const SlownessOptions slowness_;
  // What the job sees of this worker as it trains: its /metrics series and trace, and the
  // held-out evaluations of --eval-every.
  const std::unique_ptr<WorkerMetrics> metrics_;
  HeldOutEvaluation held_out_;

  // Made before the first timeline, kept across rollbacks.
  std::unique_ptr<Model> model_;
  DeviceChoice device_;
  std::unique_ptr<WorkerData> data_;
  KVClientOptions kv_options_;
  double request_s_ = 0;  // the backend's request deadline
  bool attacker_ = false;
  ParameterLayout layout_;
  OptimizerConfig local_optimizer_;
  // --dp example: this worker's part of each DP-SGD step (made with the layout).
  std::optional<DpSgdStep> dp_sgd_;

  bool started_ = false;
  // Where this process began training (a resumed checkpoint's clock), and the bytes of the
  // timelines rolled back: the report counts everything this process did.
  std::optional<int64_t> first_step_;
  uint64_t earlier_pushed_ = 0, earlier_pulled_ = 0;
};

NodeExit WorkerRun::Run() {
  if (SlownessInjector(slowness_).active()) {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "injected slowness: factor %g, jitter %g:%g, delay %s, min step %s, seed %d",
        slowness_.factor, slowness_.jitter_probability, slowness_.jitter_factor,
        absl::FormatDuration(slowness_.delay), absl::FormatDuration(slowness_.min_step),
        slowness_.seed);
  }
  // No worker trains a DP job without its noise.
  if (auto s = CheckPrivacyResolved(spec_); !s.ok()) return Fail(s, /*bad_input=*/true);
  if (auto s = MakeModel(); !s.ok()) return Fail(s, /*bad_input=*/true);
  if (auto s = ReadData(); !s.ok()) return Fail(s, /*bad_input=*/true);
  if (auto s = FindServers(); !s.ok()) return Fail(s);
  if (auto s = LayOutParameters(); !s.ok()) return Fail(s, /*bad_input=*/true);
  if (spec_.privacy.level == DpLevel::kExample) {
    absl::StatusOr<DpSgdOptions> dp = DpSgdOptionsFor(spec_, rank_, layout_.num_features);
    if (!dp.ok()) return Fail(dp.status(), /*bad_input=*/true);
    dp_sgd_.emplace(*dp);
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "DP-SGD: Poisson batches at rate %.6g of its %d examples, each example's gradient "
        "clipped to %g, noise of standard deviation %.6g on every one of the %d rows' and the "
        "bias' coordinates (its share of the step's)",
        dp->sampling_rate, data_->train.size(), dp->clip, dp->noise_stddev, dp->features);
  }
  // One timeline: from the start (or a resumed checkpoint), and again from the checkpoint of
  // every rollback, until the coordinator shuts the job down.
  uint32_t generation = control_.generation();
  std::string restore = spec_.checkpoint.restore;
  while (true) {
    TimelineEnd end = RunTimeline(generation, restore);
    if (auto* exit = std::get_if<NodeExit>(&end)) return std::move(*exit);
    ControlClient::Rollback back = std::get<ControlClient::Rollback>(std::move(end));
    if (auto s = AwaitResume(back); !s.ok()) return Fail(s);
    generation = back.generation;
    restore = back.dir;
  }
}

// Refused before any data is read: a job that insists on a GPU it cannot have is a wrong
// command line (exit code 2).
absl::Status WorkerRun::MakeModel() {
  const ModelOptions model_options{.num_classes = spec_.model.classes,
                                   .embedding_dim = spec_.model.embedding_dim,
                                   .hidden = spec_.model.hidden};
  auto model = Model::Create(ModelName(spec_.model.kind), model_options);
  if (!model.ok()) return model.status();
  DeviceSpec device_spec = options_.device.value_or(spec_.device);
  // DP clips each example's (client's) gradient on the CPU model.
  if (spec_.privacy.on() && device_spec.kind == DeviceKind::kAuto) {
    device_spec.kind = DeviceKind::kCpu;
  }
  absl::StatusOr<DeviceChoice> device =
      ChooseDevice(device_spec, (*model)->name(), ProbeDevices(), rank_);
  if (!device.ok()) return device.status();
  if (device->gpu >= 0) {
    auto gpu_model = CreateCudaModel((*model)->name(), model_options, device->gpu);
    if (gpu_model.ok()) {
      model = std::move(gpu_model);
    } else if (device_spec.kind == DeviceKind::kCuda) {
      return absl::FailedPreconditionError(
          absl::StrCat("--device=", device->device, ": ", gpu_model.status().message()));
    } else {
      device = DeviceChoice{.device = "cpu", .reason = std::string(gpu_model.status().message())};
    }
  }
  SYNCLINE_LOG(INFO) << "device: " << device->device << " (--device " << DeviceName(device_spec)
                     << ": " << device->reason << ")";
  model_ = std::move(*model);
  device_ = std::move(*device);
  return absl::OkStatus();
}

absl::Status WorkerRun::ReadData() {
  auto data = ReadWorkerData(spec_, joiner_ ? 0 : rank_);
  if (!data.ok()) return data.status();
  data_ = std::move(*data);
  if (joiner_) {
    SYNCLINE_LOG(INFO) << "joined the running job: trains batches the workers still training give "
                          "it, from their partitions";
  } else {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "%d training examples (partition %d of %d), %s", data_->source->size(), rank_,
        spec_.workers,
        data_->criteo ? "Criteo layout, streamed"
                      : absl::StrCat(data_->train.num_features, " features"));
  }
  return absl::OkStatus();
}

absl::Status WorkerRun::FindServers() {
  absl::StatusOr<KVClientOptions> kv_options = ConnectToServers(endpoint_, control_, rank_);
  if (!kv_options.ok()) return kv_options.status();
  kv_options_ = std::move(*kv_options);
  kv_options_.pull_codec = spec_.training.pull_codec;
  // A wait for the servers also ends when the job rolls back (in-place recovery).
  ControlClient* control = &control_;
  kv_options_.health = [control]() -> absl::Status {
    if (auto back = control->PendingRollback()) return RollingBack(*back);
    return control->health();
  };
  // A federated client's pull waits for every round before its own (each up to
  // --round-timeout): a dead server is the heartbeats' to find, not this deadline's.
  request_s_ =
      spec_.sync.fedavg()
          ? std::min(86400.0 * 7, spec_.timeouts.request_s +
                                      spec_.federated.round_timeout_s * spec_.federated.rounds)
          : spec_.timeouts.request_s;
  attacker_ = IsByzantine(spec_.byzantine, rank_);
  if (attacker_) {
    SYNCLINE_LOG(WARNING) << "byzantine worker: sends crafted updates (--byzantine "
                          << ByzantineName(spec_.byzantine) << ", seed " << spec_.seed << ")";
  }
  return absl::OkStatus();
}

absl::Status WorkerRun::LayOutParameters() {
  layout_.row_dim = model_->row_dim();
  layout_.bias_dim = model_->bias_dim();
  layout_.num_features = data_->train.num_features;  // 0 for Criteo data: any 64-bit id
  layout_.row_init_scale = model_->row_init_scale();
  layout_.bias_init_scale = model_->bias_init_scale();
  // Sparse data keeps sparse rows whatever the codec: top-K and sign1 keep a residual per row
  // (compression/sparse_rows.h), fp16 none; only dense (CSV) data, whose batches touch every
  // row, compresses a dense gradient of a dense table (gossip peers keep the whole model
  // anyway).
  // The choice depends on the job alone, so that every worker declares the same tables.
  // A federated client pulls a bounded model whole as dense tables; hashed (Criteo) ids stay
  // sparse, and a client pulls and pushes the rows its own examples hold.
  const CodecKind codec = spec_.training.codec.kind;
  const bool dense_data = ResolveFormat(spec_.data.train, spec_.data.format) == DataFormat::kCsv;
  layout_.dense_rows = (spec_.sync.fedavg() || (codec != CodecKind::kNone && dense_data)) &&
                       !spec_.sync.serverless() && layout_.num_features > 0;
  layout_.optimizer.kind = spec_.training.optimizer;
  layout_.optimizer.learning_rate = static_cast<float>(spec_.training.learning_rate);
  layout_.optimizer.l2 = static_cast<float>(spec_.training.l2);
  layout_.seed = spec_.seed;
  if (spec_.sync.serverless()) {
    // Every peer keeps the whole model: bad input, named with the line that sized it.
    const std::string where = absl::StrCat(spec_.data.train, ":", data_->train.largest_id_line);
    if (auto s = CheckReplicatedModelFits(layout_, layout_.optimizer.kind, where); !s.ok()) {
      return s;
    }
  }
  // Federated clients train locally with the job's optimizer; the servers step on the
  // averaged update with --server-optimizer at --server-lr.
  local_optimizer_ = layout_.optimizer;
  if (spec_.sync.fedavg()) {
    layout_.optimizer =
        ServerOptimizerConfig(spec_.federated.server_optimizer, spec_.federated.server_lr);
  }
  return absl::OkStatus();
}

TimelineEnd WorkerRun::RunTimeline(uint32_t generation, const std::string& restore) {
  // A replacement whose peers meet through the coordinator meets them once the job resumes,
  // which waits for this node's start.
  const bool peers = spec_.sync.serverless() || spec_.sync.hybrid();
  if (!started_ && peers && generation > 0) {
    if (auto s = WaitForStart(); !s.ok()) return Fail(s);
  }
  absl::StatusOr<Link> link = Connect(generation);
  // A rollback ordered while the peers meet ends their meeting.
  if (!link.ok()) return AfterFailure(link.status());
  SyncBackend& backend = *link->backend;
  backend.WatchDownWorkers([this] { return control_.TakeDownWorkers(); });
  if (!started_) {
    if (auto s = WaitForStart(); !s.ok()) return Fail(s);
  }
  // A rollback ordered while this timeline starts ends it there too (below).
  absl::Status setup = backend.Init(layout_);
  model_->StopEncoding();  // the last timeline's backend is gone
  if (setup.ok() && !spec_.sync.fedavg()) EncodeOnDevice(backend);
  TimelineHooks t;
  SetUpTrainer(backend, t);
  if (setup.ok() && !restore.empty()) {
    setup = RestoreWorker(restore, rank_, spec_.workers, backend, t.options);
  }
  control_.SetClock(t.options.start_step);
  if (!first_step_) first_step_ = t.options.start_step;
  // A trainer reads its partition from the start (and skips to its first batch).
  if (auto s = data_->source->Rewind(); !s.ok()) return Fail(s, /*bad_input=*/true);
  const absl::StatusOr<TrainResult> result =
      setup.ok() ? Train(backend, t, link->client.get()) : absl::StatusOr<TrainResult>(setup);

  // Where this timeline ends: a rollback (ordered, or about to be: a server that vanished is
  // being replaced), or the job's end.
  TimelineEnd end =
      result.ok() ? AfterTraining(*result, backend, t) : AfterFailure(result.status());
  if (std::holds_alternative<ControlClient::Rollback>(end)) {
    // Roll back: this timeline's connections and state go as this returns.
    backend.Settle(absl::ZeroDuration());
    earlier_pushed_ += backend.bytes_pushed();
    earlier_pulled_ += backend.bytes_pulled();
  }
  return end;
}

absl::StatusOr<Link> WorkerRun::Connect(uint32_t generation) const {
  Link link;
  link.rendezvous = MakeCoordinatedRendezvous(control_, transport_, options_, generation);
  KVClientOptions kv = kv_options_;
  kv.generation = generation;
  // A hybrid worker hears the servers (its KVClient) and the other workers (its all-reduce)
  // on one endpoint: each hears only its own.
  if (spec_.sync.hybrid()) {
    link.split = std::make_unique<EndpointSplit>(&endpoint_, [](const std::string& peer) {
      return peer.starts_with("ps") ? 0 : 1;  // DataEndpointId's: "ps<rank>", "w<rank>"
    });
  }
  link.client =
      std::make_unique<KVClient>(link.split ? &link.split->side(0) : &endpoint_, std::move(kv));
  if (spec_.sync.hybrid()) {
    if (!hybrid_backend_) {
      return absl::FailedPreconditionError(
          "this worker was built without the hybrid backend (--sync hybrid)");
    }
    auto rows =
        std::make_unique<PsBackend>(link.client.get(), absl::Seconds(spec_.timeouts.request_s),
                                    spec_.training.codec, spec_.training.residual_rows);
    rows->KeepBiasElsewhere();
    auto made = hybrid_backend_(spec_, layout_, table_, rank_, link.split->side(1), std::move(rows),
                                device_.device, *link.rendezvous);
    if (!made.ok()) return made.status();
    link.backend = std::move(*made);
  } else if (spec_.sync.serverless()) {
    if (!serverless_backend_) {
      return absl::FailedPreconditionError(
          "this worker was built without serverless backends (gossip, all-reduce)");
    }
    auto made = serverless_backend_(spec_, layout_, table_, rank_, endpoint_, device_.device,
                                    *link.rendezvous);
    if (!made.ok()) return made.status();
    link.backend = std::move(*made);
  } else {
    link.backend = std::make_unique<PsBackend>(link.client.get(), absl::Seconds(request_s_),
                                               spec_.training.codec, spec_.training.residual_rows);
  }
  // A federated client corrupts its round's delta itself; other workers' gradients are
  // corrupted on their way to the backend.
  if (attacker_ && !spec_.sync.fedavg() && spec_.byzantine.attack.kind != AttackKind::kLabelFlip) {
    link.backend = std::make_unique<AttackingBackend>(std::move(link.backend),
                                                      spec_.byzantine.attack, spec_.seed, rank_);
  }
  return link;
}

absl::Status WorkerRun::WaitForStart() {
  control_.ReportReady();
  // A replacement waits for the other nodes' rollback, which the coordinator bounds (its
  // deadline moves when another node fails meanwhile): the wait ends with the job's health.
  const absl::Time until =
      table_.generation > 0 ? absl::InfiniteFuture() : absl::Now() + options_.startup_timeout;
  if (auto s = control_.WaitForStart(until); !s.ok()) return s;
  started_ = true;
  return absl::OkStatus();
}

// A backend that encodes dense gradients with error feedback (a compressing all-reduce's
// rows; parameter servers' dense rows and dense table) takes its blocks from a GPU model,
// which keeps those gradients and their residuals on its device: only the blocks cross
// PCIe. Not for a federated client, whose local steps need the gradients themselves.
void WorkerRun::EncodeOnDevice(SyncBackend& backend) {
  for (const GradientCompression& want : backend.CompressionWanted()) {
    if (GradientEncoder* encoder = model_->EncodeGradients(want)) {
      backend.SetEncoder(want.table, encoder);
      SYNCLINE_LOG(INFO) << (want.table == GradientTable::kRows ? "row" : "dense-table")
                         << " gradients are encoded on " << device_.device << " ("
                         << CodecName(want.codec)
                         << " with error feedback there): only the blocks cross PCIe";
    }
  }
  if (std::optional<RowCompression> want = backend.RowCompressionWanted()) {
    if (RowGradientEncoder* encoder = model_->EncodeRows(*want)) {
      backend.SetRowEncoder(encoder);
      SYNCLINE_LOG(INFO) << "sparse row gradients are encoded on " << device_.device << " ("
                         << CodecName(want->codec) << " with a residual per row there, at most "
                         << want->residual_rows << " rows a server): only what is sent "
                         << "crosses PCIe";
    }
  }
  // Compressed pulls: the copy of the pulled rows lives on the device, and the replies'
  // bytes go up as they came.
  if (std::optional<PullDecoding> want = backend.PullDecodingWanted()) {
    if (PulledRowDecoder* decoder = model_->DecodePulls(*want)) {
      backend.SetPullDecoder(decoder);
      SYNCLINE_LOG(INFO) << "compressed pulls are decoded on " << device_.device << " ("
                         << CodecName(spec_.training.pull_codec)
                         << " deltas against the copy of the pulled rows kept there): only "
                         << "the replies' bytes cross PCIe";
    }
  }
}

void WorkerRun::SetUpTrainer(SyncBackend& backend, TimelineHooks& t) {
  TrainerOptions& o = t.options;
  o.epochs = spec_.training.epochs;
  o.batch_size = spec_.training.batch_size;
  o.log_every = spec_.training.log_every;
  o.slowness = slowness_;
  // A read may miss this worker's last push under ASP and SSP (S >= 1): pull a batch ahead.
  o.read_ahead =
      spec_.training.read_ahead && !spec_.sync.serverless() && spec_.sync.server_staleness() != 0;
  o.interrupted = [this]() -> absl::Status {
    if (auto back = control_.PendingRollback()) return RollingBack(*back);
    return absl::OkStatus();
  };
  SetUpCheckpoints(backend, t);
  o.on_step = [this](int64_t clock) { control_.SetClock(clock); };
  o.observer = metrics_.get();
  if (held_out_.active()) {
    o.between_steps = [this, &backend](int64_t clock) {
      return held_out_.AfterStep(clock, *model_, layout_, backend, *data_);
    };
  }
  o.rank = rank_;
  o.partitions = spec_.workers;
  if (dp_sgd_) o.dp_sgd = &*dp_sgd_;
  if (HandsOverBatches(spec_.sync) && !dp_sgd_) SetUpHandOver(backend, t);
}

// Periodic checkpoints, and the clocks the coordinator asks for (time-based ones).
void WorkerRun::SetUpCheckpoints(SyncBackend& backend, TimelineHooks& t) {
  t.options.checkpoint_every = checkpoints_ ? spec_.checkpoint.every : 0;
  t.options.checkpoint_requested = [this, &t](int64_t clock) {
    if (!checkpoints_) return false;
    ReportMissed(t.requests, clock);
    return t.requests.Consume(clock);
  };
  t.options.on_checkpoint = [this, &t, &backend](int64_t clock) -> absl::Status {
    auto state = backend.SaveState();
    absl::Status status = state.status();
    if (status.ok()) {
      status = WriteWorkerCheckpoint(spec_.checkpoint.dir, rank_,
                                     {clock, *state, t.running ? t.running->SavePlan() : ""});
    }
    // A checkpoint that cannot be written is reported (the launcher never completes it);
    // training goes on.
    if (!status.ok()) SYNCLINE_LOG(ERROR) << "checkpoint " << clock << " failed: " << status;
    control_.ReportCheckpointed(clock, status);
    t.requests.Taken(clock);
    return absl::OkStatus();
  };
}

// Workers that leave a job that goes on hand their batches to those still training; workers
// that join take some.
void WorkerRun::SetUpHandOver(SyncBackend& backend, TimelineHooks& t) {
  TrainerOptions& o = t.options;
  o.take_plan_events = [this, &t, &backend] {
    for (ControlClient::PlanEvent& e : control_.TakePlanEvents()) t.held.push_back(std::move(e));
    std::vector<PlanEvent> events;
    for (; !t.held.empty(); t.held.pop_front()) {
      ControlClient::PlanEvent& e = t.held.front();
      if (auto* l = std::get_if<ControlClient::WorkerLeft>(&e)) {
        const std::optional<int64_t> clock = backend.DepartureClock(l->worker, l->clock);
        if (!clock) break;  // not agreed yet: it and the events after it wait
        events.push_back(Departure{l->worker, *clock, std::move(l->takers)});
        continue;
      }
      auto& a = std::get<ControlClient::WorkerArrived>(e);
      Arrival arrival{a.worker, a.first_clock, {}};
      for (const auto& [donor, cut] : a.cuts) arrival.cuts.push_back(Cut{donor, cut});
      events.push_back(std::move(arrival));
    }
    return events;
  };
  // Under ASP nothing waits on a worker's clock, so one that has trained its plan can wait,
  // idle, until every other worker has finished too: a worker lost within a heartbeat
  // timeout of the others' end still has takers for its batches. (Under BSP and SSP an idle
  // worker would hold the others' clocks back; there its batches go only to those still
  // training.)
  if (spec_.sync.kind == SyncKind::kAsp) {
    o.await_release = [this] { return control_.AwaitRelease(); };
  }
  if (MaxWorkers(spec_) > spec_.workers) {
    o.take_cut_request = [this] { return control_.TakeCutRequest(); };
    o.report_cut = [this](int64_t cut) { control_.ReportCut(cut); };
    // Bounded by the coordinator, which completes an arrival within a heartbeat timeout.
    o.cut_timeout = table_.heartbeat_timeout * 4 + absl::Seconds(5);
  }
  o.partition_source = [this, &t](int partition) -> absl::StatusOr<ExampleSource*> {
    auto read = ReadWorkerData(spec_, partition, /*hand_over=*/true);
    if (!read.ok()) return read.status();
    ExampleSource* source = (*read)->source.get();
    t.leavers[partition] = std::move(*read);
    return source;
  };
}

absl::StatusOr<TrainResult> WorkerRun::Train(SyncBackend& backend, TimelineHooks& t,
                                             KVClient* servers) {
  if (spec_.sync.fedavg()) return TrainFederated(backend, servers);
  Trainer trainer(*model_, backend, t.options);
  t.running = &trainer;
  absl::StatusOr<TrainResult> result = trainer.Run(
      *data_->source, [this, &backend](const TrainProgress& p) { ReportProgress(p, backend); });
  t.running = nullptr;
  return result;
}

absl::StatusOr<TrainResult> WorkerRun::TrainFederated(SyncBackend& backend, KVClient* servers) {
  FederatedClientOptions f;
  f.federated = spec_.federated;
  f.rank = rank_;
  f.workers = spec_.workers;
  f.seed = spec_.seed;
  f.picker = RoundPickerFor(spec_);
  if (spec_.privacy.level == DpLevel::kClient) f.dp_clip = spec_.privacy.clip;
  f.batch_size = spec_.training.batch_size;
  f.local_optimizer = local_optimizer_;
  if (attacker_) f.attack = spec_.byzantine.attack;
  f.slowness = slowness_;
  std::optional<KvSecAggChannel> channel;
  if (spec_.federated.secure_aggregation) {
    if (servers == nullptr) {
      return absl::FailedPreconditionError("secure aggregation needs the parameter servers");
    }
    channel.emplace(servers);
    f.secagg = SecureAggregationParams(spec_);
    f.secagg_channel = &*channel;
    f.secagg_stage_timeout = absl::Seconds(SecAggStageTimeoutSeconds(spec_));
    if (UsesDistributedDp(spec_)) f.distributed_dp = DistributedDpFor(spec_);
    if (spec_.privacy.on() && spec_.privacy.noise_seed != 0) {
      absl::StatusOr<DpKey> key = ParseDpKeyHex(spec_.privacy.key);
      if (!key.ok()) return key.status();
      f.randomness_key = *key;
    }
  }
  FederatedClient client_loop(*model_, backend, layout_, f);
  auto rounds = client_loop.Run(*data_->source, [this, &backend](const TrainProgress& p) {
    control_.SetClock(p.clock);
    ReportProgress(p, backend);
  });
  if (!rounds.ok()) return rounds.status();
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "federated: trained in %d rounds, not picked for %d, dropped out of %d%s", rounds->rounds,
      rounds->skipped, rounds->dropped,
      spec_.federated.secure_aggregation
          ? absl::StrFormat(", lost by secure aggregation in %d", rounds->secagg_lost)
          : "");
  return TrainResult{.steps = rounds->steps,
                     .examples = rounds->examples,
                     .last_loss = rounds->last_loss,
                     .times = rounds->times};
}

TimelineEnd WorkerRun::AfterFailure(const absl::Status& status) {
  std::optional<ControlClient::Rollback> back = control_.PendingRollback();
  if (!back && spec_.max_restarts > 0 && !IsDiverged(status) && !absl::IsInvalidArgument(status)) {
    SYNCLINE_LOG(WARNING) << "training stopped (" << status
                          << "); waiting for the coordinator to roll the job back";
    back = control_.WaitForRollback(absl::Now() + table_.heartbeat_timeout + absl::Seconds(2));
  }
  if (!back) return Fail(status);
  return *back;
}

TimelineEnd WorkerRun::AfterTraining(const TrainResult& result, SyncBackend& backend,
                                     TimelineHooks& t) {
  // Requests that came after the last step can no longer be served.
  if (checkpoints_) ReportMissed(t.requests, std::numeric_limits<int64_t>::max());
  ReportDone(result, backend);
  return ServeCommands(backend);
}

// Evaluates when the coordinator asks, until it shuts the job down or rolls it back.
TimelineEnd WorkerRun::ServeCommands(SyncBackend& backend) {
  while (true) {
    // The job may evaluate for a long time; the coordinator's heartbeats keep this honest.
    auto command = control_.WaitForCommand(absl::Now() + absl::Milliseconds(100));
    if (!command.ok()) {
      if (!absl::IsDeadlineExceeded(command.status())) return NodeExit{command.status()};
      if (std::optional<ControlClient::Rollback> back = control_.PendingRollback()) return *back;
      continue;
    }
    if (*command == Command::kShutdown) {
      (void)control_.Flush(absl::Now() + absl::Seconds(2));
      return NodeExit{};
    }
    auto eval = EvaluateModel(spec_, *model_, layout_, backend, *data_);
    if (!eval.ok()) return Fail(eval.status());
    control_.ReportResult(*eval);
  }
}

// Tells the coordinator this timeline is dropped, and waits until every node has (a newer
// rollback may come first: that one is taken instead).
absl::Status WorkerRun::AwaitResume(ControlClient::Rollback& back) {
  while (true) {
    control_.ReportRolledBack(back.generation);
    // Bounded by the coordinator's recovery deadline (the job fails, and health says so).
    if (auto s = control_.WaitForResume(back.generation, absl::InfiniteFuture()); !s.ok()) {
      return s;
    }
    std::optional<ControlClient::Rollback> newer = control_.PendingRollback();
    if (!newer) break;
    back = std::move(*newer);
  }
  SYNCLINE_LOG(INFO) << "rolled back to checkpoint " << back.clock << "; training again";
  return absl::OkStatus();
}

void WorkerRun::ReportProgress(const TrainProgress& p, const SyncBackend& backend) {
  control_.ReportProgress(ProgressReport{.clock = p.clock,
                                         .epoch = p.epoch,
                                         .train_loss = p.train_loss,
                                         .examples = p.examples,
                                         .total_steps = p.total_steps,
                                         .staleness = p.staleness,
                                         .consensus = p.consensus,
                                         .step_seconds = ToStepSeconds(p.times),
                                         .bytes = earlier_pushed_ + earlier_pulled_ +
                                                  backend.bytes_pushed() + backend.bytes_pulled()});
}

// Takes the coordinator's new checkpoint requests, and reports those for clocks before
// `before` that this worker had passed when they arrived.
void WorkerRun::ReportMissed(CheckpointRequests& requests, int64_t before) {
  for (int64_t c : control_.TakeCheckpointRequests()) requests.Request(c);
  for (int64_t missed : requests.TakeMissedBefore(before)) {
    control_.ReportCheckpointed(
        missed, absl::FailedPreconditionError(absl::StrFormat(
                    "w%d had finished clock %d before the request for it arrived", rank_, missed)));
  }
}

void WorkerRun::ReportDone(const TrainResult& result, SyncBackend& backend) {
  if (dp_sgd_) {
    SYNCLINE_LOG(INFO) << absl::StrFormat("DP-SGD: %d of %d examples' gradients were clipped",
                                          dp_sgd_->clipped(), dp_sgd_->examples());
  }
  // A replacement (generation > 0) redid its predecessor's steps from a checkpoint: the
  // run's steps are counted from its start, as the predecessor's were.
  const int64_t began = result.joined_at >= 0   ? result.joined_at
                        : table_.generation > 0 ? 0
                                                : *first_step_;
  control_.ReportWorkerDone(WorkerDoneReport{
      .steps = result.steps,
      .steps_trained = std::max<int64_t>(0, result.steps - began),
      .examples = result.examples,
      .bytes_pushed = earlier_pushed_ + backend.bytes_pushed(),
      .bytes_pulled = earlier_pulled_ + backend.bytes_pulled(),
      .step_seconds = ToStepSeconds(result.times),
      .device = device_.device,
      // Not after a rollback: the count is not in the checkpoints.
      .examples_in_model = control_.generation() == 0 ? backend.ExamplesInModel() : -1});
  // Said once the coordinator has been told: the job needs nothing more of this worker's
  // training.
  (void)control_.Flush(absl::Now() + absl::Seconds(1));
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "trained %d iterations (%s%s), last loss %.5f; step time: %s",
      result.steps - std::max<int64_t>(0, result.joined_at),
      joiner_ ? "every one a batch given by the workers it joined"
              : absl::StrFormat("%d of them other workers' batches", result.batches_taken_over),
      result.batches_given > 0
          ? absl::StrFormat(", %d of its own given to joiners", result.batches_given)
          : "",
      result.last_loss, result.times.ToString());
}

NodeExit WorkerRun::Fail(absl::Status status, bool bad_input) {
  control_.ReportAbort(status);
  const bool diverged = IsDiverged(status);
  return NodeExit{std::move(status), bad_input, diverged};
}

}  // namespace

NodeExit WorkerNode::Run() {
  auto joined = JoinJob(transport_, wire::Role::WORKER, options_);
  if (!joined.ok()) return {joined.status(), absl::IsInvalidArgument(joined.status())};
  std::unique_ptr<TraceRecorder> trace = MakeNodeTrace(*joined, wire::Role::WORKER, options_.rank);
  NodeExit exit =
      WorkerRun(transport_, *joined, options_, serverless_backend_, hybrid_backend_, trace.get())
          .Run();
  WriteNodeTrace(trace.get(), *joined, wire::Role::WORKER, options_.rank);
  return exit;
}

}  // namespace syncline
