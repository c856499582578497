#include "worker/worker_node.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <variant>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_requests.h"
#include "client/kv_client.h"
#include "compression/codec.h"
#include "core/endpoint_split.h"
#include "core/log.h"
#include "data/criteo.h"
#include "data/dataset.h"
#include "data/partition.h"
#include "data/prefetching_source.h"
#include "device/cuda_model.h"
#include "device/placement.h"
#include "job/federated.h"
#include "job/job_spec.h"
#include "job/options.h"
#include "models/metrics.h"
#include "models/model.h"
#include "worker/attack.h"
#include "worker/federated_client.h"
#include "worker/ps_backend.h"
#include "worker/replicated_model.h"
#include "worker/slowness.h"
#include "worker/trainer.h"
#include "worker/worker_checkpoint.h"

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

// Writes the parameters of `keys` and the bias, one key per line, for comparing runs.
absl::Status DumpParameters(const std::string& path, std::span<const uint64_t> keys,
                            std::span<const float> rows, std::span<const float> bias, int row_dim) {
  std::ofstream out(path);
  if (!out) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  out.precision(9);
  out << "bias";
  for (float b : bias) out << '\t' << b;
  out << '\n';
  for (size_t i = 0; i < keys.size(); ++i) {
    out << keys[i];
    for (int j = 0; j < row_dim; ++j) out << '\t' << rows[i * row_dim + j];
    out << '\n';
  }
  return out.good() ? absl::OkStatus()
                    : absl::DataLossError(absl::StrFormat("write to %s failed", path));
}

// The worker's training and test data: streamed (Criteo) or in memory. Not movable: `source`
// may point into `train`.
struct WorkerData {
  WorkerData() = default;
  WorkerData(const WorkerData&) = delete;
  WorkerData& operator=(const WorkerData&) = delete;

  bool criteo = false;
  Dataset train;  // in memory (not Criteo)
  Dataset test;
  std::unique_ptr<ExampleSource> source;
  std::unique_ptr<ExampleSource> test_source;  // streamed (Criteo), parsed ahead
};

absl::StatusOr<std::unique_ptr<CriteoReader>> OpenCriteo(const std::string& path, int partition,
                                                         int partitions) {
  CriteoOptions options;
  options.partition = partition;
  options.num_partitions = partitions;
  return CriteoReader::Open(path, options);
}

// Reads (or, for Criteo, validates and opens) partition `rank` of the training data and the
// whole test set. Errors name the file and line. A hand-over reads a leaver's partition only:
// no test set, histograms or attack.
absl::StatusOr<std::unique_ptr<WorkerData>> ReadWorkerData(const JobSpec& spec, int rank,
                                                           bool hand_over = false) {
  auto data = std::make_unique<WorkerData>();
  WorkerData& d = *data;
  ReadOptions o;
  o.format = spec.data.format;
  o.index_base = spec.data.index_base;
  o.partition = rank;
  o.num_partitions = spec.workers;
  o.num_classes = spec.model.classes;
  // Criteo files are streamed; their hashed ids have no bound, which dense rows need.
  d.criteo = ResolveFormat(spec.data.train, o.format) == DataFormat::kCriteo;
  if (d.criteo) {
    auto train = OpenCriteo(spec.data.train, rank, spec.workers);
    if (!train.ok()) return train.status();
    // Parse the next batches while training on this one (or scoring, for the test set), on
    // several threads where the machine has the cores: a GPU worker's step is shorter than one
    // core's parsing of its batch. A quarter of the hardware threads (a machine may run several
    // nodes), 1 to 4.
    const int parsers = std::clamp(static_cast<int>(std::thread::hardware_concurrency() / 4), 1, 4);
    if (!spec.data.test.empty() && !hand_over) {
      auto test = OpenCriteo(spec.data.test, 0, 1);
      if (!test.ok()) return test.status();
      d.test_source = std::make_unique<PrefetchingSource>(std::move(*test), /*depth=*/4, parsers);
    }
    d.source = std::make_unique<PrefetchingSource>(std::move(*train), /*depth=*/4, parsers);
    if (!hand_over) {
      SYNCLINE_LOG(INFO) << absl::StrFormat("w%d parses its Criteo partition on %d thread%s", rank,
                                            parsers, parsers == 1 ? "" : "s");
    }
    return data;
  }
  const PartitionSpec& partition = spec.data.partition;
  if (partition.kind != PartitionKind::kStrided) {
    // By label: every worker reads the whole file and takes its part of the same split.
    o.partition = 0;
    o.num_partitions = 1;
  }
  auto train = ReadDataset(spec.data.train, o);
  if (!train.ok()) return train.status();
  d.train = std::move(*train);
  if (partition.kind != PartitionKind::kStrided) {
    auto parts =
        PartitionByLabel(d.train.labels, spec.model.classes, spec.workers, partition, spec.seed);
    if (!parts.ok()) return parts.status();
    if (rank == 0 && !spec.data.histograms_out.empty() && !hand_over) {
      const std::string tsv =
          LabelHistogramsTsv(LabelHistograms(d.train.labels, spec.model.classes, *parts));
      std::ofstream out(spec.data.histograms_out, std::ios::trunc);
      out << tsv;
      if (!out) {
        return absl::PermissionDeniedError(
            absl::StrFormat("cannot write %s", spec.data.histograms_out));
      }
      SYNCLINE_LOG(INFO) << "label histograms (--partition " << PartitionName(partition)
                         << ", seed " << spec.seed << ") in " << spec.data.histograms_out;
    }
    Dataset mine = SelectExamples(d.train, (*parts)[rank]);
    d.train = std::move(mine);
  }
  if (IsByzantine(spec.byzantine, rank) && spec.byzantine.attack.kind == AttackKind::kLabelFlip &&
      !hand_over) {
    FlipLabels(d.train, spec.model.classes);
    SYNCLINE_LOG(WARNING) << "byzantine worker: training on flipped labels (--byzantine "
                          << ByzantineName(spec.byzantine) << ")";
  }
  if (!spec.data.test.empty() && !hand_over) {
    ReadOptions t = o;
    t.partition = 0;
    t.num_partitions = 1;
    t.index_base = d.train.index_base;  // number the test set's features as the train set's
    auto test = ReadDataset(spec.data.test, t);
    if (!test.ok()) return test.status();
    d.test = std::move(*test);
  }
  d.source = std::make_unique<InMemorySource>(d.train);
  return data;
}

// The final model on the test set; writes the test features' parameters to params_out.
absl::StatusOr<EvaluationReport> EvaluateModel(const JobSpec& spec, const Model& model,
                                               const ParameterLayout& layout, SyncBackend& backend,
                                               WorkerData& data) {
  Evaluation eval;
  if (data.test_source != nullptr) {
    // Streamed: the test file need not fit in memory, so no parameters are written.
    auto e = EvaluateSource(model, backend, *data.test_source);
    if (!e.ok()) return e.status();
    eval = *e;
  } else if (data.test.size() > 0) {
    std::vector<uint32_t> all(data.test.size());
    for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
    std::vector<uint64_t> keys = UniqueKeys(data.test, all);
    if (layout.num_features > 0) {
      // The training file bounds the model's features (its tables have no rows past them):
      // a test feature it never had counts as a zero row, as a feature no example trained.
      const size_t seen = keys.size();
      std::erase_if(keys, [&](uint64_t k) { return k >= layout.num_features; });
      if (keys.size() < seen) {
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "%s: %d feature%s past the training file's %d count as zero weights", spec.data.test,
            seen - keys.size(), seen - keys.size() == 1 ? "" : "s", layout.num_features);
      }
    }
    std::vector<float> rows(keys.size() * model.row_dim());
    std::vector<float> bias(model.bias_dim());
    if (auto s = backend.Read(-1, keys, rows, bias); !s.ok()) return s;
    eval = Evaluate(model, data.test, keys, rows, bias);
    if (!spec.data.params_out.empty()) {
      if (auto s = DumpParameters(spec.data.params_out, keys, rows, bias, model.row_dim());
          !s.ok()) {
        return s;
      }
    }
  }
  return EvaluationReport{.loss = eval.loss,
                          .auc = model.binary() ? eval.auc : -1,
                          .accuracy = eval.accuracy,
                          .examples = eval.examples};
}

// Where a resumed worker starts: its saved clock and state, or the checkpoint's clock when
// the checkpoint holds nothing of it (it had finished, or was lost, before). The departures
// of workers that had left are restored from its own state and from the longest list any
// worker's state holds (a leaver's rank has no state: it learns there that it left).
absl::Status RestoreWorker(const std::string& restore, int rank, int workers, SyncBackend& backend,
                           TrainerOptions& trainer) {
  auto manifest = ReadManifest(restore);
  if (!manifest.ok()) return manifest.status();
  const std::string me = absl::StrCat("w", rank);
  // Only a part the manifest lists belongs to this checkpoint (a file of an abandoned attempt
  // may lie next to it). Departures are in the workers' states: the others' are read only when
  // some worker is missing from the checkpoint or this worker's own state names departures
  // (then another's list may be longer).
  // The departures node's state file saved, or DataLoss naming the file.
  const auto departures_of =
      [&](const std::string& node,
          const std::string& plan) -> absl::StatusOr<std::vector<SavedDeparture>> {
    auto departures = WorkPlan::Load(plan, workers);
    if (!departures.ok()) {
      return absl::DataLossError(
          absl::StrCat(restore, "/", node, ".state: ", departures.status().message()));
    }
    return departures;
  };
  const auto read_others = [&]() -> absl::Status {
    for (const std::string& node : manifest->nodes) {
      int r = -1;
      if (!node.starts_with("w") || !absl::SimpleAtoi(node.substr(1), &r) || r == rank) continue;
      auto other = ReadWorkerCheckpoint(restore, r);
      if (!other.ok()) return other.status();
      auto departures = departures_of(node, other->plan);
      if (!departures.ok()) return departures.status();
      if (departures->size() > trainer.all_departures.size()) {
        trainer.all_departures = std::move(*departures);
      }
    }
    return absl::OkStatus();
  };
  const int parts = static_cast<int>(
      std::count_if(manifest->nodes.begin(), manifest->nodes.end(),
                    [](const std::string& node) { return node.starts_with("w"); }));
  const bool some_missing = parts < workers;
  if (std::find(manifest->nodes.begin(), manifest->nodes.end(), me) == manifest->nodes.end()) {
    if (auto s = read_others(); !s.ok()) return s;
    trainer.start_step = manifest->clock;
    SYNCLINE_LOG(WARNING) << "no saved state for this worker in " << restore
                          << "; starting at clock " << manifest->clock;
    return absl::OkStatus();
  }
  auto saved = ReadWorkerCheckpoint(restore, rank);
  if (!saved.ok()) return saved.status();
  if (auto s = backend.RestoreState(saved->state); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(restore, "/", me, ".state: ", s.message()));
  }
  auto own = departures_of(me, saved->plan);
  if (!own.ok()) return own.status();
  trainer.restored_departures = std::move(*own);
  if (some_missing || !trainer.restored_departures.empty()) {
    if (auto s = read_others(); !s.ok()) return s;
  }
  if (trainer.restored_departures.size() > trainer.all_departures.size()) {
    trainer.all_departures = trainer.restored_departures;
  }
  trainer.start_step = saved->clock;
  SYNCLINE_LOG(INFO) << "resuming at clock " << saved->clock << " from " << restore
                     << (trainer.all_departures.empty()
                             ? std::string()
                             : absl::StrFormat(" (%d worker%s had left)",
                                               trainer.all_departures.size(),
                                               trainer.all_departures.size() == 1 ? "" : "s"));
  return absl::OkStatus();
}

// What stops a trainer (or a wait for the servers) when the job rolls back.
absl::Status RollingBack(const ControlClient::Rollback& back) {
  return absl::AbortedError(absl::StrFormat(
      "the job is rolling back to checkpoint %d (a node is being replaced)", back.clock));
}

}  // namespace

NodeExit WorkerNode::Run() {
  const int rank = options_.rank;
  auto joined = JoinJob(transport_, wire::Role::WORKER, options_);
  if (!joined.ok()) return {joined.status(), absl::IsInvalidArgument(joined.status())};
  const JobSpec& spec = joined->spec;
  ControlClient* control = joined->control.get();
  const NodeTable& table = control->table();
  // Tells the coordinator why this worker cannot go on; bad input exits with code 2.
  auto fail = [control](absl::Status status, bool bad_input = false) {
    control->ReportAbort(status);
    const bool diverged = IsDiverged(status);
    return NodeExit{std::move(status), bad_input, diverged};
  };

  const SlownessOptions slowness = SlownessForWorker(spec.slowness, rank, spec.seed);
  if (SlownessInjector(slowness).active()) {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "injected slowness: factor %g, jitter %g:%g, delay %s, min step %s, seed %d",
        slowness.factor, slowness.jitter_probability, slowness.jitter_factor,
        absl::FormatDuration(slowness.delay), absl::FormatDuration(slowness.min_step),
        slowness.seed);
  }
  const ModelOptions model_options{.num_classes = spec.model.classes,
                                   .embedding_dim = spec.model.embedding_dim,
                                   .hidden = spec.model.hidden};
  auto model = Model::Create(ModelName(spec.model.kind), model_options);
  if (!model.ok()) return fail(model.status(), true);
  // Refused before any data is read: a job that insists on a GPU it cannot have is a wrong
  // command line (exit code 2).
  const DeviceSpec device_spec = options_.device.value_or(spec.device);
  absl::StatusOr<DeviceChoice> device =
      ChooseDevice(device_spec, (*model)->name(), ProbeDevices(), rank);
  if (!device.ok()) return fail(device.status(), true);
  if (device->gpu >= 0) {
    auto gpu_model = CreateCudaModel((*model)->name(), model_options, device->gpu);
    if (gpu_model.ok()) {
      model = std::move(gpu_model);
    } else if (device_spec.kind == DeviceKind::kCuda) {
      return fail(absl::FailedPreconditionError(absl::StrCat("--device=", device->device, ": ",
                                                             gpu_model.status().message())),
                  true);
    } else {
      device = DeviceChoice{.device = "cpu", .reason = std::string(gpu_model.status().message())};
    }
  }
  SYNCLINE_LOG(INFO) << "device: " << device->device << " (--device " << DeviceName(device_spec)
                     << ": " << device->reason << ")";
  // A worker that joined has no partition of its own: it trains the donors' batches, read
  // from their partitions, and reads partition 0 for what every worker shares (the features,
  // the test set).
  const bool joiner = rank >= spec.workers;
  auto data = ReadWorkerData(spec, joiner ? 0 : rank);
  if (!data.ok()) return fail(data.status(), true);
  if (joiner) {
    SYNCLINE_LOG(INFO) << "joined the running job: trains batches the workers still training give "
                          "it, from their partitions";
  } else {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "%d training examples (partition %d of %d), %s", (*data)->source->size(), rank,
        spec.workers,
        (*data)->criteo ? "Criteo layout, streamed"
                        : absl::StrCat((*data)->train.num_features, " features"));
  }

  Endpoint& endpoint = *joined->data;
  absl::StatusOr<KVClientOptions> kv_options = ConnectToServers(endpoint, *control, rank);
  if (!kv_options.ok()) return fail(kv_options.status());
  kv_options->pull_codec = spec.training.pull_codec;
  // A wait for the servers also ends when the job rolls back (in-place recovery).
  kv_options->health = [control]() -> absl::Status {
    if (auto back = control->PendingRollback()) return RollingBack(*back);
    return control->health();
  };
  // A federated client's pull waits for every round before its own (each up to
  // --round-timeout): a dead server is the heartbeats' to find, not this deadline's.
  const double request_s =
      spec.sync.fedavg()
          ? std::min(86400.0 * 7, spec.timeouts.request_s +
                                      spec.federated.round_timeout_s * spec.federated.rounds)
          : spec.timeouts.request_s;
  const bool attacker = IsByzantine(spec.byzantine, rank);
  if (attacker) {
    SYNCLINE_LOG(WARNING) << "byzantine worker: sends crafted updates (--byzantine "
                          << ByzantineName(spec.byzantine) << ", seed " << spec.seed << ")";
  }

  // What talks to the servers or peers: made afresh at the start and after every rollback, so
  // that nothing of the undone timeline (requests in flight, residuals, copies) survives it.
  struct Link {
    std::unique_ptr<EndpointSplit> split;
    std::unique_ptr<KVClient> client;
    std::unique_ptr<SyncBackend> backend;
  };
  auto connect = [&](uint32_t generation) -> absl::StatusOr<Link> {
    Link link;
    KVClientOptions kv = *kv_options;
    kv.generation = generation;
    // A hybrid worker hears the servers (its KVClient) and the other workers (its all-reduce)
    // on one endpoint: each hears only its own.
    if (spec.sync.hybrid()) {
      link.split = std::make_unique<EndpointSplit>(&endpoint, [](const std::string& peer) {
        return peer.starts_with("ps") ? 0 : 1;  // DataEndpointId's: "ps<rank>", "w<rank>"
      });
    }
    link.client =
        std::make_unique<KVClient>(link.split ? &link.split->side(0) : &endpoint, std::move(kv));
    if (spec.sync.hybrid()) {
      if (!hybrid_backend_) {
        return absl::FailedPreconditionError(
            "this worker was built without the hybrid backend (--sync hybrid)");
      }
      auto rows =
          std::make_unique<PsBackend>(link.client.get(), absl::Seconds(spec.timeouts.request_s),
                                      spec.training.codec, spec.training.residual_rows);
      rows->KeepBiasElsewhere();
      auto made =
          hybrid_backend_(spec, table, rank, link.split->side(1), std::move(rows), device->device);
      if (!made.ok()) return made.status();
      link.backend = std::move(*made);
    } else if (spec.sync.serverless()) {
      if (!serverless_backend_) {
        return absl::FailedPreconditionError(
            "this worker was built without serverless backends (gossip, all-reduce)");
      }
      auto made = serverless_backend_(spec, table, rank, endpoint, device->device);
      if (!made.ok()) return made.status();
      link.backend = std::move(*made);
    } else {
      link.backend = std::make_unique<PsBackend>(link.client.get(), absl::Seconds(request_s),
                                                 spec.training.codec, spec.training.residual_rows);
    }
    // A federated client corrupts its round's delta itself; other workers' gradients are
    // corrupted on their way to the backend.
    if (attacker && !spec.sync.fedavg() && spec.byzantine.attack.kind != AttackKind::kLabelFlip) {
      link.backend = std::make_unique<AttackingBackend>(std::move(link.backend),
                                                        spec.byzantine.attack, spec.seed, rank);
    }
    return link;
  };

  ParameterLayout layout;
  layout.row_dim = (*model)->row_dim();
  layout.bias_dim = (*model)->bias_dim();
  layout.num_features = (*data)->train.num_features;  // 0 for Criteo data: any 64-bit id
  layout.row_init_scale = (*model)->row_init_scale();
  layout.bias_init_scale = (*model)->bias_init_scale();
  // Sparse data keeps sparse rows whatever the codec: top-K and sign1 keep a residual per row
  // (compression/sparse_rows.h), fp16 none; only dense (CSV) data, whose batches touch every
  // row, compresses a dense gradient of a dense table (gossip peers keep the whole model
  // anyway).
  // The choice depends on the job alone, so that every worker declares the same tables.
  // A federated client pulls a bounded model whole as dense tables; hashed (Criteo) ids stay
  // sparse, and a client pulls and pushes the rows its own examples hold.
  const CodecKind codec = spec.training.codec.kind;
  const bool dense_data = ResolveFormat(spec.data.train, spec.data.format) == DataFormat::kCsv;
  layout.dense_rows = (spec.sync.fedavg() || (codec != CodecKind::kNone && dense_data)) &&
                      !spec.sync.serverless() && layout.num_features > 0;
  layout.optimizer.kind = spec.training.optimizer;
  layout.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
  layout.optimizer.l2 = static_cast<float>(spec.training.l2);
  layout.seed = spec.seed;
  if (spec.sync.serverless()) {
    // Every peer keeps the whole model: bad input, named with the line that sized it.
    const std::string where = absl::StrCat(spec.data.train, ":", (*data)->train.largest_id_line);
    if (auto s = CheckReplicatedModelFits(layout, layout.optimizer.kind, where); !s.ok()) {
      return fail(s, true);
    }
  }
  // Federated clients train locally with the job's optimizer; the servers step on the
  // averaged update with SGD at --server-lr.
  const OptimizerConfig local_optimizer = layout.optimizer;
  if (spec.sync.fedavg()) {
    layout.optimizer = OptimizerConfig{};
    layout.optimizer.kind = OptimizerKind::kSgd;
    layout.optimizer.learning_rate = static_cast<float>(spec.federated.server_lr);
    layout.optimizer.l2 = 0;
  }
  const bool checkpoints = spec.checkpoint.enabled();
  auto report = [control](const TrainProgress& p) {
    control->ReportProgress(ProgressReport{.clock = p.clock,
                                           .epoch = p.epoch,
                                           .train_loss = p.train_loss,
                                           .examples = p.examples,
                                           .total_steps = p.total_steps,
                                           .staleness = p.staleness,
                                           .consensus = p.consensus,
                                           .step_seconds = ToStepSeconds(p.times)});
  };

  // One timeline: from the start (or a resumed checkpoint), and again from the checkpoint of
  // every rollback, until the coordinator shuts the job down.
  uint32_t generation = control->generation();
  std::string restore = spec.checkpoint.restore;
  bool started = false;
  // Where this process began training (a resumed checkpoint's clock), and the bytes of the
  // timelines rolled back: the report counts everything this process did.
  std::optional<int64_t> first_step;
  uint64_t earlier_pushed = 0, earlier_pulled = 0;
  while (true) {
    absl::StatusOr<Link> link = connect(generation);
    if (!link.ok()) return fail(link.status());
    SyncBackend* backend = link->backend.get();
    backend->WatchDownWorkers([control] { return control->TakeDownWorkers(); });
    if (!started) {
      control->ReportReady();
      // A replacement waits for the other nodes' rollback, which the coordinator bounds (its
      // deadline moves when another node fails meanwhile): the wait ends with the job's health.
      const absl::Time until =
          table.generation > 0 ? absl::InfiniteFuture() : absl::Now() + options_.startup_timeout;
      if (auto s = control->WaitForStart(until); !s.ok()) return fail(s);
      started = true;
    }
    // A rollback ordered while this timeline starts ends it there too (below).
    absl::Status setup = backend->Init(layout);
    // A backend that encodes dense gradients with error feedback (a compressing all-reduce's
    // rows; parameter servers' dense rows and dense table) takes its blocks from a GPU model,
    // which keeps those gradients and their residuals on its device: only the blocks cross
    // PCIe. Not for a federated client, whose local steps need the gradients themselves.
    (*model)->StopEncoding();  // the last timeline's backend is gone
    if (setup.ok() && !spec.sync.fedavg()) {
      for (const GradientCompression& want : backend->CompressionWanted()) {
        if (GradientEncoder* encoder = (*model)->EncodeGradients(want)) {
          backend->SetEncoder(want.table, encoder);
          SYNCLINE_LOG(INFO) << (want.table == GradientTable::kRows ? "row" : "dense-table")
                             << " gradients are encoded on " << device->device << " ("
                             << CodecName(want.codec)
                             << " with error feedback there): only the blocks cross PCIe";
        }
      }
      if (std::optional<RowCompression> want = backend->RowCompressionWanted()) {
        if (RowGradientEncoder* encoder = (*model)->EncodeRows(*want)) {
          backend->SetRowEncoder(encoder);
          SYNCLINE_LOG(INFO) << "sparse row gradients are encoded on " << device->device << " ("
                             << CodecName(want->codec) << " with a residual per row there, at most "
                             << want->residual_rows << " rows a server): only what is sent "
                             << "crosses PCIe";
        }
      }
      // Compressed pulls: the copy of the pulled rows lives on the device, and the replies'
      // bytes go up as they came.
      if (std::optional<PullDecoding> want = backend->PullDecodingWanted()) {
        if (PulledRowDecoder* decoder = (*model)->DecodePulls(*want)) {
          backend->SetPullDecoder(decoder);
          SYNCLINE_LOG(INFO) << "compressed pulls are decoded on " << device->device << " ("
                             << CodecName(spec.training.pull_codec)
                             << " deltas against the copy of the pulled rows kept there): only "
                             << "the replies' bytes cross PCIe";
        }
      }
    }

    TrainerOptions trainer_options;
    trainer_options.epochs = spec.training.epochs;
    trainer_options.batch_size = spec.training.batch_size;
    trainer_options.log_every = spec.training.log_every;
    trainer_options.slowness = slowness;
    // A read may miss this worker's last push under ASP and SSP (S >= 1): pull a batch ahead.
    trainer_options.read_ahead =
        spec.training.read_ahead && !spec.sync.serverless() && spec.sync.server_staleness() != 0;
    if (setup.ok() && !restore.empty()) {
      setup = RestoreWorker(restore, rank, spec.workers, *backend, trainer_options);
    }
    trainer_options.interrupted = [control]() -> absl::Status {
      if (auto back = control->PendingRollback()) return RollingBack(*back);
      return absl::OkStatus();
    };
    // Periodic checkpoints, and the clocks the coordinator asks for (time-based ones).
    trainer_options.checkpoint_every = checkpoints ? spec.checkpoint.every : 0;
    CheckpointRequests requests;
    const Trainer* running = nullptr;  // the trainer whose plan a checkpoint saves
    auto report_missed = [&](int64_t before) {
      for (int64_t c : control->TakeCheckpointRequests()) requests.Request(c);
      for (int64_t missed : requests.TakeMissedBefore(before)) {
        control->ReportCheckpointed(
            missed,
            absl::FailedPreconditionError(absl::StrFormat(
                "w%d had finished clock %d before the request for it arrived", rank, missed)));
      }
    };
    trainer_options.checkpoint_requested = [&](int64_t clock) {
      if (!checkpoints) return false;
      report_missed(clock);
      return requests.Consume(clock);
    };
    trainer_options.on_checkpoint = [&](int64_t clock) -> absl::Status {
      auto state = backend->SaveState();
      absl::Status status = state.status();
      if (status.ok()) {
        status = WriteWorkerCheckpoint(spec.checkpoint.dir, rank,
                                       {clock, *state, running ? running->SavePlan() : ""});
      }
      // A checkpoint that cannot be written is reported (the launcher never completes it);
      // training goes on.
      if (!status.ok()) SYNCLINE_LOG(ERROR) << "checkpoint " << clock << " failed: " << status;
      control->ReportCheckpointed(clock, status);
      requests.Taken(clock);
      return absl::OkStatus();
    };
    trainer_options.on_step = [control](int64_t clock) { control->SetClock(clock); };
    // Workers that leave a job that goes on hand their batches to those still training: a
    // leaver's partition is read here when it leaves (the same file, its part).
    std::map<int, std::unique_ptr<WorkerData>> leavers;
    trainer_options.rank = rank;
    trainer_options.partitions = spec.workers;
    if (HandsOverBatches(spec.sync)) {
      trainer_options.take_plan_events = [control] {
        std::vector<PlanEvent> events;
        for (ControlClient::PlanEvent& e : control->TakePlanEvents()) {
          if (auto* l = std::get_if<ControlClient::WorkerLeft>(&e)) {
            events.push_back(Departure{l->worker, l->clock, std::move(l->takers)});
            continue;
          }
          auto& a = std::get<ControlClient::WorkerArrived>(e);
          Arrival arrival{a.worker, a.first_clock, {}};
          for (const auto& [donor, cut] : a.cuts) arrival.cuts.push_back(Cut{donor, cut});
          events.push_back(std::move(arrival));
        }
        return events;
      };
      if (MaxWorkers(spec) > spec.workers) {
        trainer_options.take_cut_request = [control] { return control->TakeCutRequest(); };
        trainer_options.report_cut = [control](int64_t cut) { control->ReportCut(cut); };
        // Bounded by the coordinator, which completes an arrival within a heartbeat timeout.
        trainer_options.cut_timeout = table.heartbeat_timeout * 4 + absl::Seconds(5);
      }
      trainer_options.partition_source = [&](int partition) -> absl::StatusOr<ExampleSource*> {
        auto read = ReadWorkerData(spec, partition, /*hand_over=*/true);
        if (!read.ok()) return read.status();
        ExampleSource* source = (*read)->source.get();
        leavers[partition] = std::move(*read);
        return source;
      };
    }
    control->SetClock(trainer_options.start_step);
    if (!first_step) first_step = trainer_options.start_step;
    // A trainer reads its partition from the start (and skips to its first batch).
    if (auto s = (*data)->source->Rewind(); !s.ok()) return fail(s, true);
    absl::StatusOr<TrainResult> result;
    if (!setup.ok()) {
      result = setup;
    } else if (spec.sync.fedavg()) {
      FederatedClientOptions f;
      f.federated = spec.federated;
      f.rank = rank;
      f.workers = spec.workers;
      f.seed = spec.seed;
      f.batch_size = spec.training.batch_size;
      f.local_optimizer = local_optimizer;
      if (attacker) f.attack = spec.byzantine.attack;
      f.slowness = slowness;
      FederatedClient client_loop(**model, *backend, layout, f);
      auto rounds = client_loop.Run(*(*data)->source, [&](const TrainProgress& p) {
        control->SetClock(p.clock);
        report(p);
      });
      if (rounds.ok()) {
        SYNCLINE_LOG(INFO) << absl::StrFormat(
            "federated: trained in %d rounds, not picked for %d, dropped out of %d", rounds->rounds,
            rounds->skipped, rounds->dropped);
        result = TrainResult{.steps = rounds->steps,
                             .examples = rounds->examples,
                             .last_loss = rounds->last_loss,
                             .times = rounds->times};
      } else {
        result = rounds.status();
      }
    } else {
      Trainer trainer(**model, *backend, trainer_options);
      running = &trainer;
      result = trainer.Run(*(*data)->source, report);
      running = nullptr;
    }

    // Where this timeline ends: a rollback (ordered, or about to be: a server that vanished is
    // being replaced), or the job's end.
    std::optional<ControlClient::Rollback> back;
    if (!result.ok()) {
      back = control->PendingRollback();
      if (!back && spec.max_restarts > 0 && !IsDiverged(result.status()) &&
          !absl::IsInvalidArgument(result.status())) {
        SYNCLINE_LOG(WARNING) << "training stopped (" << result.status()
                              << "); waiting for the coordinator to roll the job back";
        back = control->WaitForRollback(absl::Now() + table.heartbeat_timeout + absl::Seconds(2));
      }
      if (!back) return fail(result.status());
    } else {
      // Requests that came after the last step can no longer be served.
      if (checkpoints) report_missed(std::numeric_limits<int64_t>::max());
      // A replacement (generation > 0) redid its predecessor's steps from a checkpoint: the
      // run's steps are counted from its start, as the predecessor's were.
      const int64_t began = result->joined_at >= 0 ? result->joined_at
                            : table.generation > 0 ? 0
                                                   : *first_step;
      control->ReportWorkerDone(
          WorkerDoneReport{.steps = result->steps,
                           .steps_trained = std::max<int64_t>(0, result->steps - began),
                           .examples = result->examples,
                           .bytes_pushed = earlier_pushed + backend->bytes_pushed(),
                           .bytes_pulled = earlier_pulled + backend->bytes_pulled(),
                           .step_seconds = ToStepSeconds(result->times),
                           .device = device->device});
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "trained %d iterations (%s%s), last loss %.5f; step time: %s",
          result->steps - std::max<int64_t>(0, result->joined_at),
          joiner ? "every one a batch given by the workers it joined"
                 : absl::StrFormat("%d of them other workers' batches", result->batches_taken_over),
          result->batches_given > 0
              ? absl::StrFormat(", %d of its own given to joiners", result->batches_given)
              : "",
          result->last_loss, result->times.ToString());
      while (!back) {
        // The job may evaluate for a long time; the coordinator's heartbeats keep this honest.
        auto command = control->WaitForCommand(absl::Now() + absl::Milliseconds(100));
        if (!command.ok()) {
          if (!absl::IsDeadlineExceeded(command.status())) return {command.status()};
          back = control->PendingRollback();
          continue;
        }
        if (*command == Command::kShutdown) {
          (void)control->Flush(absl::Now() + absl::Seconds(2));
          return {};
        }
        auto eval = EvaluateModel(spec, **model, layout, *backend, **data);
        if (!eval.ok()) return fail(eval.status());
        control->ReportResult(*eval);
      }
    }
    // Roll back: drop this timeline's connections and state, tell the coordinator, and wait
    // until every node has (a newer rollback may come first: that one is taken instead).
    backend->Settle(absl::ZeroDuration());
    earlier_pushed += backend->bytes_pushed();
    earlier_pulled += backend->bytes_pulled();
    link = absl::CancelledError("rolled back");
    while (true) {
      control->ReportRolledBack(back->generation);
      // Bounded by the coordinator's recovery deadline (the job fails, and health says so).
      if (auto s = control->WaitForResume(back->generation, absl::InfiniteFuture()); !s.ok()) {
        return fail(s);
      }
      std::optional<ControlClient::Rollback> newer = control->PendingRollback();
      if (!newer) break;
      back = std::move(newer);
    }
    SYNCLINE_LOG(INFO) << "rolled back to checkpoint " << back->clock << "; training again";
    generation = back->generation;
    restore = back->dir;
  }
}

}  // namespace syncline
