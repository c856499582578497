// syncline-worker: trains on its partition of the training data and keeps its replica in sync
// through a SyncBackend (the parameter servers). Started by syncline-launch (or mpirun/srun):
// it reads its data, registers with the job's coordinator, trains, and when asked evaluates
// the final model on the test set.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "core/command_line.h"
#include "core/control_client.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "gossip/gossip_backend.h"
#include "gossip/topology.h"
#include "ps/optimizer.h"
#include "worker/criteo.h"
#include "worker/dataset.h"
#include "worker/kv_client.h"
#include "worker/metrics.h"
#include "worker/model.h"
#include "worker/ps_backend.h"
#include "worker/trainer.h"
#include "worker/worker_checkpoint.h"

namespace syncline {
namespace {

const char* EnvOr(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

struct WorkerFlags {
  std::string coordinator = EnvOr("SYNCLINE_COORDINATOR", "");
  int rank = std::atoi(EnvOr("SYNCLINE_RANK", "0"));
  int num_workers = 1;
  std::string train, test, format = "auto", index_base = "auto";
  std::string model = "logreg";
  int classes = 2;
  int embedding_dim = 8;
  int hidden = 64;
  int epochs = 1;
  int batch_size = 256;
  std::string optimizer = "sgd";
  double lr = 0.1, l2 = 0;
  uint64_t seed = 1;
  int log_every = 10;
  double request_timeout_s = 60, startup_timeout_s = 120;
  std::string dump_params;
  std::string straggler, jitter, delay;
  std::string compress = "none";
  std::string sync = "bsp";
  std::string bind = "tcp://127.0.0.1:0";
  double peer_timeout_s = 10;
  double min_step_ms = 0;
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  std::string restore;
};

absl::StatusOr<ReadOptions> MakeReadOptions(const WorkerFlags& f, int partition, int partitions) {
  ReadOptions o;
  if (f.format == "libsvm") {
    o.format = DataFormat::kLibsvm;
  } else if (f.format == "csv") {
    o.format = DataFormat::kCsv;
  } else if (f.format == "criteo") {
    o.format = DataFormat::kCriteo;
  } else if (f.format != "auto") {
    return absl::InvalidArgumentError("--format must be auto, libsvm, csv or criteo");
  }
  if (f.index_base == "0") {
    o.index_base = IndexBase::kZero;
  } else if (f.index_base == "1") {
    o.index_base = IndexBase::kOne;
  } else if (f.index_base != "auto") {
    return absl::InvalidArgumentError("--index-base must be auto, 0 or 1");
  }
  o.partition = partition;
  o.num_partitions = partitions;
  o.num_classes = f.classes;
  return o;
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

// The flags a Criteo job (or a ctr model) cannot be combined with.
absl::Status CheckCriteoCombination(const WorkerFlags& f, bool criteo) {
  if (f.model == "ctr" && !criteo) {
    return absl::InvalidArgumentError(
        "--model ctr needs Criteo data (--format criteo, or a .tsv file)");
  }
  if (!criteo) return absl::OkStatus();
  if (f.compress != "none" && f.compress != "fp16") {
    return absl::InvalidArgumentError(
        "--compress top-K and sign1 need a bounded feature count; Criteo ids are 64-bit hashes "
        "(their sparse pushes take --compress fp16)");
  }
  if (f.sync.starts_with("gossip")) {
    return absl::InvalidArgumentError(
        "gossip peers hold the whole model and need a bounded feature count; Criteo ids are "
        "64-bit hashes: use parameter servers (--sync bsp|asp|ssp:S)");
  }
  return absl::OkStatus();
}

// Opens and validates a Criteo file; *reader streams partition `partition` of `partitions`.
absl::Status OpenCriteo(const std::string& path, int partition, int partitions,
                        std::unique_ptr<CriteoReader>* reader) {
  CriteoOptions options;
  options.partition = partition;
  options.num_partitions = partitions;
  auto opened = CriteoReader::Open(path, options);
  if (!opened.ok()) return opened.status();
  *reader = std::move(*opened);
  return absl::OkStatus();
}

int Fail(ControlClient* control, const absl::Status& status) {
  SYNCLINE_LOG(ERROR) << status;
  if (control != nullptr) {
    MessageBuilder b(wire::MsgType::ABORT);
    b.header().setRole(wire::Role::WORKER);
    b.header().setStatusCode(static_cast<int32_t>(status.code()));
    b.header().setMessage(std::string(status.message()));
    control->Send(b.Finish());
    (void)control->Flush(absl::Now() + absl::Seconds(2));
  }
  return 1;
}

int Main(int argc, char** argv) {
  WorkerFlags f;
  CLI::App app(
      "syncline-worker: trains a model on one partition of the data, in sync with the others "
      "through the parameter servers.\nUsually started by syncline-launch, which passes every "
      "flag.");
  app.add_option("--coordinator", f.coordinator,
                 "address of the job's coordinator [SYNCLINE_COORDINATOR]")
      ->required(f.coordinator.empty());
  app.add_option("--rank", f.rank, "this worker's index, 0..workers-1 [SYNCLINE_RANK]")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--workers", f.num_workers, "workers in the job (the data is split among them)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--train", f.train, "training data file (libsvm, CSV or Criteo)")->required();
  app.add_option("--test", f.test, "test data file, evaluated at the end");
  app.add_option("--format", f.format,
                 "auto | libsvm | csv | criteo (auto: .csv is CSV, .tsv Criteo, else libsvm; "
                 "Criteo files are streamed, not held in memory)")
      ->capture_default_str();
  app.add_option("--index-base", f.index_base, "libsvm feature indices: auto | 0 | 1")
      ->capture_default_str();
  app.add_option("--model", f.model, "logreg | softmax | ctr (Criteo data only)")
      ->capture_default_str();
  app.add_option("--classes", f.classes, "classes of a softmax model")->capture_default_str();
  app.add_option("--embedding-dim", f.embedding_dim, "ctr: floats per categorical embedding")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--hidden", f.hidden, "ctr: hidden units of the top MLP")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--epochs", f.epochs, "passes over the partition")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--batch-size", f.batch_size, "examples per iteration per worker")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--optimizer", f.optimizer, "server-side rule: sgd | adagrad | adam | ftrl")
      ->capture_default_str();
  app.add_option("--lr", f.lr, "learning rate")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--l2", f.l2, "L2 weight decay")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of parameter initialisation")->capture_default_str();
  app.add_option("--log-every", f.log_every, "iterations between progress reports")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--request-timeout", f.request_timeout_s, "seconds one push or pull may take")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--startup-timeout", f.startup_timeout_s,
                 "seconds to wait for every node to register")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dump-params", f.dump_params,
                 "evaluator only: write the final parameters of the test set's features here");
  app.add_option("--sync", f.sync,
                 "bsp | asp | ssp:S (the servers enforce these), or gossip:ring|exp|random[:async] "
                 "(no servers: this worker averages with its peers)")
      ->capture_default_str();
  app.add_option("--bind", f.bind, "gossip: ZeroMQ address peers reach this worker at")
      ->capture_default_str();
  app.add_option("--peer-timeout", f.peer_timeout_s,
                 "gossip: seconds of silence after which a peer is declared dead")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compress", f.compress,
                 "gradient compression with error feedback: none, topk:R, sign1[:CHUNK], fp16; "
                 "anything but none keeps the rows in a dense table")
      ->capture_default_str();
  app.add_option("--straggler", f.straggler,
                 "experiments: RANK:FACTOR makes worker RANK always FACTOR times slower");
  app.add_option("--jitter", f.jitter,
                 "experiments: P:FACTOR makes each step FACTOR times slower with probability P");
  app.add_option("--delay", f.delay, "experiments: RANK:MS delays worker RANK's requests");
  app.add_option("--min-step-ms", f.min_step_ms,
                 "experiments: pad each step's compute to at least this many milliseconds")
      ->check(CLI::Range(0.0, 60000.0));
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "folder of the job's checkpoints; with it the coordinator may also ask for "
                 "checkpoints (time-based ones)");
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "write this worker's part of a checkpoint (its clock and error-feedback "
                 "residuals) every this many steps; 0: never")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--restore", f.restore,
                 "start from this checkpoint folder (one validated by the launcher)");
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-worker")) return *exit_code;
  if (f.checkpoint_every > 0 && f.checkpoint_dir.empty()) {
    std::cerr << "syncline-worker: --checkpoint-every needs --checkpoint-dir\n";
    return 2;
  }
  SetLogTag("w" + std::to_string(f.rank));
  auto slowness_or =
      SlownessForWorker(f.straggler, f.jitter, f.delay, f.min_step_ms, f.rank, f.seed);
  if (!slowness_or.ok()) {
    std::cerr << "syncline-worker: " << slowness_or.status().message() << "\n";
    return 2;
  }
  const SlownessOptions& slowness = *slowness_or;
  if (SlownessInjector(slowness).active()) {
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "injected slowness: factor %g, jitter %g:%g, delay %s, min step %s, seed %d",
        slowness.factor, slowness.jitter_probability, slowness.jitter_factor,
        absl::FormatDuration(slowness.delay), absl::FormatDuration(slowness.min_step),
        slowness.seed);
  }
  auto optimizer = ParseOptimizer(f.optimizer);
  auto codec = ParseCodec(f.compress);
  std::optional<std::pair<GossipTopology, bool>> gossip;
  if (f.sync.starts_with("gossip")) {
    auto mode = ParseGossipMode(f.sync);
    if (!mode.ok()) {
      std::cerr << "syncline-worker: " << mode.status().message() << "\n";
      return 2;
    }
    gossip = *mode;
  }
  auto model = Model::Create(
      f.model,
      ModelOptions{.num_classes = f.classes, .embedding_dim = f.embedding_dim, .hidden = f.hidden});
  auto read_options = MakeReadOptions(f, f.rank, f.num_workers);
  for (const absl::Status& s :
       {optimizer.status(), model.status(), read_options.status(), codec.status()}) {
    if (!s.ok()) {
      std::cerr << "syncline-worker: " << s.message() << "\n";
      return 2;
    }
  }
  // Criteo files are streamed; their hashed ids have no bound, which dense rows need.
  const bool criteo = ResolveFormat(f.train, read_options->format) == DataFormat::kCriteo;
  if (absl::Status s = CheckCriteoCombination(f, criteo); !s.ok()) {
    std::cerr << "syncline-worker: " << s.message() << "\n";
    return 2;
  }

  // Data first: a bad file fails fast, before the job waits on this worker.
  std::unique_ptr<CriteoReader> train_stream, test_stream;
  if (criteo) {
    auto opened = OpenCriteo(f.train, f.rank, f.num_workers, &train_stream);
    if (opened.ok() && !f.test.empty()) opened = OpenCriteo(f.test, 0, 1, &test_stream);
    if (!opened.ok()) {
      std::cerr << "syncline-worker: " << opened.message() << "\n";
      return 2;
    }
  }
  auto train = criteo ? absl::StatusOr<Dataset>(Dataset()) : ReadDataset(f.train, *read_options);
  if (!train.ok()) {
    std::cerr << "syncline-worker: " << train.status().message() << "\n";
    return 2;
  }
  std::unique_ptr<ExampleSource> train_source;
  if (criteo) {
    train_source = std::move(train_stream);
  } else {
    train_source = std::make_unique<InMemorySource>(*train);
  }
  Dataset test;
  if (!f.test.empty() && !criteo) {
    ReadOptions test_options = *read_options;
    test_options.partition = 0;
    test_options.num_partitions = 1;
    test_options.index_base = train->index_base;
    auto t = ReadDataset(f.test, test_options);
    if (!t.ok()) {
      std::cerr << "syncline-worker: " << t.status().message() << "\n";
      return 2;
    }
    test = std::move(*t);
  }
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "%d training examples (partition %d of %d), %s", train_source->size(), f.rank, f.num_workers,
      criteo ? "Criteo layout, streamed" : absl::StrCat(train->num_features, " features"));

  ZmqTransport transport;
  auto endpoint = transport.CreateEndpoint(DataEndpointId(wire::Role::WORKER, f.rank));
  if (!endpoint.ok()) return Fail(nullptr, endpoint.status());
  std::string data_address;
  if (gossip) {
    // Peers reach each other directly: listen before registering the address.
    auto bound = (*endpoint)->Bind(f.bind);
    if (!bound.ok()) return Fail(nullptr, bound.status());
    data_address = *bound;
  }
  ControlOptions control_options;
  control_options.coordinator_address = f.coordinator;
  control_options.role = wire::Role::WORKER;
  control_options.rank = f.rank;
  control_options.data_address = data_address;
  control_options.startup_timeout = absl::Seconds(f.startup_timeout_s);
  auto control_or = ControlClient::Connect(transport, control_options);
  if (!control_or.ok()) {
    SYNCLINE_LOG(ERROR) << "cannot join the job: " << control_or.status();
    return 1;
  }
  ControlClient* control = control_or->get();
  const NodeTable& table = control->table();
  if (table.num_workers != f.num_workers) {
    return Fail(control, absl::InvalidArgumentError(
                             absl::StrFormat("--workers %d disagrees with the job's %d workers",
                                             f.num_workers, table.num_workers)));
  }

  KVClientOptions kv_options;
  kv_options.rank = f.rank;
  for (const NodeInfo* s : table.Servers()) {
    kv_options.server_ids.push_back(s->id);
    if (auto st = (*endpoint)->Connect(s->id, s->address); !st.ok()) return Fail(control, st);
  }
  kv_options.health = [control] { return control->health(); };
  KVClient client(endpoint->get(), kv_options);
  std::unique_ptr<SyncBackend> backend;
  if (gossip) {
    GossipOptions g;
    g.topology = gossip->first;
    g.asynchronous = gossip->second;
    g.rank = f.rank;
    g.num_peers = table.num_workers;
    g.seed = f.seed;
    g.peer_timeout = absl::Seconds(std::min(f.request_timeout_s, f.peer_timeout_s));
    g.optimizer.kind = *optimizer;
    g.optimizer.learning_rate = static_cast<float>(f.lr);
    g.optimizer.l2 = static_cast<float>(f.l2);
    g.codec = *codec;
    for (int w = 0; w < table.num_workers; ++w)
      g.peer_ids.push_back(DataEndpointId(wire::Role::WORKER, w));
    // One connection per pair, opened by the lower rank: two ROUTER sockets that connect to
    // each other under the same routing ids trip ZeroMQ. The higher rank answers over the
    // connection it accepted.
    for (const NodeInfo& n : table.nodes) {
      if (n.role != wire::Role::WORKER || n.rank <= f.rank) continue;
      if (auto st = (*endpoint)->Connect(n.id, n.address); !st.ok()) return Fail(control, st);
    }
    backend = std::make_unique<GossipBackend>(endpoint->get(), g);
  } else {
    backend = std::make_unique<PsBackend>(&client, absl::Seconds(f.request_timeout_s), *codec);
  }

  control->ReportReady();
  if (auto s = control->WaitForStart(absl::Now() + absl::Seconds(f.startup_timeout_s)); !s.ok()) {
    return Fail(control, s);
  }

  ParameterLayout layout;
  layout.row_dim = (*model)->row_dim();
  layout.bias_dim = (*model)->bias_dim();
  layout.num_features = train->num_features;  // 0 for Criteo data: any 64-bit id
  layout.row_init_scale = (*model)->row_init_scale();
  layout.bias_init_scale = (*model)->bias_init_scale();
  // Compressed pushes work on a dense gradient (gossip peers keep the whole model anyway),
  // except for Criteo's unbounded ids, whose sparse pushes go as fp16 (PsBackend).
  layout.dense_rows = codec->kind != CodecKind::kNone && !gossip && layout.num_features > 0;
  layout.optimizer.kind = *optimizer;
  layout.optimizer.learning_rate = static_cast<float>(f.lr);
  layout.optimizer.l2 = static_cast<float>(f.l2);
  layout.seed = f.seed;
  if (auto s = backend->Init(layout); !s.ok()) return Fail(control, s);

  TrainerOptions trainer_options;
  trainer_options.epochs = f.epochs;
  trainer_options.batch_size = f.batch_size;
  trainer_options.log_every = f.log_every;
  trainer_options.slowness = slowness;
  if (!f.restore.empty()) {
    auto manifest = ReadManifest(f.restore);
    if (!manifest.ok()) return Fail(control, manifest.status());
    const std::string me = absl::StrCat("w", f.rank);
    const bool listed =
        std::find(manifest->nodes.begin(), manifest->nodes.end(), me) != manifest->nodes.end();
    // Only a part the manifest lists belongs to this checkpoint (a file of an abandoned
    // attempt may lie next to it).
    auto saved = listed ? ReadWorkerCheckpoint(f.restore, f.rank)
                        : absl::StatusOr<WorkerCheckpoint>(absl::NotFoundError("not listed"));
    if (!listed) {
      // The worker had finished, or was lost, before that checkpoint: start at its clock.
      trainer_options.start_step = manifest->clock;
      SYNCLINE_LOG(WARNING) << "no saved state for this worker in " << f.restore
                            << "; starting at clock " << manifest->clock;
    } else if (!saved.ok()) {
      return Fail(control, saved.status());
    } else {
      if (auto s = backend->RestoreState(saved->state); !s.ok()) {
        return Fail(control, absl::Status(s.code(), absl::StrCat(f.restore, "/", me,
                                                                 ".state: ", s.message())));
      }
      trainer_options.start_step = saved->clock;
      SYNCLINE_LOG(INFO) << "resuming at clock " << saved->clock << " from " << f.restore;
    }
  }
  trainer_options.checkpoint_every = f.checkpoint_every;
  // Tells the coordinator how this worker's part of checkpoint `clock` went.
  auto report_checkpoint = [&](int64_t clock, const absl::Status& status) {
    control->Send(MakeCheckpointed(wire::Role::WORKER, f.rank, clock, status));
  };

  // Time-based checkpoints: clocks the coordinator asked for, ahead of this worker.
  std::set<int64_t> requested;
  std::set<int64_t> written;  // the latest clocks this worker checkpointed (bounded)
  auto miss_requests_before = [&](int64_t clock) {
    while (!requested.empty() && *requested.begin() < clock) {
      const int64_t missed = *requested.begin();
      requested.erase(requested.begin());
      if (written.contains(missed)) continue;  // a periodic checkpoint took it
      report_checkpoint(missed, absl::FailedPreconditionError(absl::StrFormat(
                                    "w%d had finished clock %d before the request for it arrived",
                                    f.rank, missed)));
    }
  };
  trainer_options.checkpoint_requested = [&](int64_t clock) {
    if (f.checkpoint_dir.empty()) return false;
    for (int64_t c : control->TakeCheckpointRequests()) requested.insert(c);
    miss_requests_before(clock);
    return requested.erase(clock) > 0 && !written.contains(clock);
  };
  trainer_options.on_checkpoint = [&](int64_t clock) -> absl::Status {
    auto state = backend->SaveState();
    absl::Status status = state.status();
    if (status.ok()) status = WriteWorkerCheckpoint(f.checkpoint_dir, f.rank, {clock, *state});
    // A checkpoint that cannot be written is reported (the launcher never completes it);
    // training goes on.
    if (!status.ok()) SYNCLINE_LOG(ERROR) << "checkpoint " << clock << " failed: " << status;
    report_checkpoint(clock, status);
    written.insert(clock);
    while (written.size() > 64) written.erase(written.begin());
    return absl::OkStatus();
  };
  Trainer trainer(**model, *backend, trainer_options);
  auto result = trainer.Run(*train_source, [&](const TrainProgress& p) {
    MessageBuilder b(wire::MsgType::PROGRESS);
    b.header().setRole(wire::Role::WORKER);
    b.header().setRank(f.rank);
    auto progress = b.header().getBody().initProgress();
    progress.setClock(p.clock);
    progress.setEpoch(p.epoch);
    progress.setTrainLoss(p.train_loss);
    progress.setExamples(p.examples);
    progress.setTotalSteps(p.total_steps);
    progress.setStaleness(p.staleness);
    progress.setConsensus(p.consensus);
    control->Send(b.Finish());
  });
  if (!result.ok()) return Fail(control, result.status());
  if (!f.checkpoint_dir.empty()) {
    // Requests that came after the last step can no longer be served.
    for (int64_t c : control->TakeCheckpointRequests()) requested.insert(c);
    miss_requests_before(std::numeric_limits<int64_t>::max());
  }

  MessageBuilder done(wire::MsgType::WORKER_DONE);
  done.header().setRole(wire::Role::WORKER);
  done.header().setRank(f.rank);
  auto stats = done.header().getBody().initWorkerStats();
  stats.setSteps(result->steps);
  stats.setExamples(result->examples);
  stats.setBytesPushed(backend->bytes_pushed());
  stats.setBytesPulled(backend->bytes_pulled());
  control->Send(done.Finish());
  SYNCLINE_LOG(INFO) << absl::StrFormat("trained %d iterations, last loss %.5f", result->steps,
                                        result->last_loss);

  while (true) {
    // The job may evaluate for a long time; the coordinator's heartbeats keep this honest.
    auto command = control->WaitForCommand(absl::InfiniteFuture());
    if (!command.ok()) return Fail(nullptr, command.status());
    if (*command == Command::kShutdown) break;
    // Evaluate the final model on the test set.
    Evaluation eval;
    if (test_stream != nullptr) {
      // Streamed: the test file need not fit in memory, so there is no --dump-params output.
      auto e = EvaluateSource(**model, *backend, *test_stream);
      if (!e.ok()) return Fail(control, e.status());
      eval = *e;
    } else if (test.size() > 0) {
      std::vector<uint32_t> all(test.size());
      for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
      std::vector<uint64_t> keys = UniqueKeys(test, all);
      if (layout.dense_rows || gossip) {
        // A dense model has no rows for features the training data never had; the model
        // treats missing keys as zero rows, as a server does for a feature it never saw.
        std::erase_if(keys, [&](uint64_t k) { return k >= layout.num_features; });
      }
      std::vector<float> rows(keys.size() * (*model)->row_dim());
      std::vector<float> bias((*model)->bias_dim());
      if (auto s = backend->Read(-1, keys, rows, bias); !s.ok()) return Fail(control, s);
      eval = Evaluate(**model, test, keys, rows, bias);
      if (!f.dump_params.empty()) {
        if (auto s = DumpParameters(f.dump_params, keys, rows, bias, (*model)->row_dim());
            !s.ok()) {
          return Fail(control, s);
        }
      }
    }
    MessageBuilder r(wire::MsgType::RESULT);
    r.header().setRole(wire::Role::WORKER);
    r.header().setRank(f.rank);
    auto e = r.header().getBody().initEvaluation();
    e.setLoss(eval.loss);
    e.setAuc((*model)->binary() ? eval.auc : -1);
    e.setAccuracy(eval.accuracy);
    e.setExamples(eval.examples);
    control->Send(r.Finish());
  }
  (void)control->Flush(absl::Now() + absl::Seconds(2));
  return 0;
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) { return syncline::Main(argc, argv); }
