#include "syncline/worker_session.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>
#include <numeric>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/checkpoint_requests.h"
#include "checkpoint/worker_part.h"
#include "client/kv_client.h"
#include "client/peer_context.h"
#include "client/worker_metrics.h"
#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "core/control_client.h"
#include "core/endpoint_split.h"
#include "core/net.h"
#include "core/sharding.h"
#include "core/table_config.h"
#include "core/zmq_transport.h"
#include "job/node_join.h"
#include "job/node_trace.h"
#include "job/options.h"

namespace syncline {
namespace {

// A declared table and the error feedback of its compressed pushes.
struct TableState {
  TableConfig config;
  // A sparse table under top-K or sign1: one residual table per server.
  std::vector<SparseErrorFeedback> rows;
  // A dense table under any codec: one residual per server's range.
  std::vector<ErrorFeedback> ranges;
  // The weight of the last compressed push: what Finish's drain is scaled by.
  float last_weight = 1.0f;
  bool pushed_compressed = false;
};

// What a session ticket waits for: the KV client's tickets, and the encoded bytes their
// requests borrow until then.
struct PendingTicket {
  std::vector<Ticket> requests;
  std::deque<SparsePush> sparse;  // a deque: the requests borrow its elements
  std::vector<std::vector<std::byte>> blocks;
};

}  // namespace

struct WorkerSession::State {
  std::unique_ptr<ZmqTransport> transport;
  JoinedJob job;
  // A hybrid worker hears the servers (its KV client) and the workers (its collectives) on one
  // data endpoint: each side hears only its own.
  std::unique_ptr<EndpointSplit> split;
  std::unique_ptr<KVClient> kv;            // null in a job without servers (--sync allreduce)
  std::unique_ptr<PeerCollectives> peers;  // null in a job of servers only
  bool encrypted = false;                  // the job's connections have a key
  PortRange ports;                         // where this worker may listen
  // Checkpoints: the program's state, the coordinator's requested clocks, and what a resumed
  // job restored.
  std::function<absl::StatusOr<std::string>()> save;
  CheckpointRequests requests;
  std::optional<std::string> restored;
  int64_t start_clock = 0;  // the checkpoint's clock in a resumed job
  int rank = 0;
  int64_t clock = 0;
  bool finished = false;
  // Since the last progress report.
  double loss_sum = 0;
  double loss_examples = 0;
  uint64_t examples = 0;
  uint64_t unreported_examples = 0;
  // --compress: null for none.
  std::unique_ptr<Codec> codec;
  absl::flat_hash_map<uint32_t, TableState> tables;
  absl::flat_hash_map<WorkerSession::Ticket, PendingTicket> pending;
  WorkerSession::Ticket next_ticket = 1;
  // Its /metrics series and trace (null without a page and a trace): each Clock() ends a step,
  // whose time in Wait() is its wait and the rest the program's own.
  std::unique_ptr<TraceRecorder> trace;
  std::unique_ptr<WorkerMetrics> metrics;
  absl::Time step_begin;
  absl::Duration waited;
  void TraceWritten() {
    WriteNodeTrace(trace.get(), job, wire::Role::WORKER, rank);
    trace.reset();
  }

  WorkerSession::Ticket Issue(PendingTicket p) {
    const WorkerSession::Ticket t = next_ticket++;
    pending.emplace(t, std::move(p));
    return t;
  }
  absl::Status NeedServers(const char* call) const {
    if (kv != nullptr) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(
        call, ": this job has no parameter servers (--sync ", SyncModeName(job.spec.sync),
        "): its workers sync with collectives (AllReduce, Broadcast)"));
  }
  absl::StatusOr<TableState*> FindTable(uint32_t id) {
    auto it = tables.find(id);
    if (it == tables.end()) {
      return absl::FailedPreconditionError(absl::StrFormat("table %d was not declared", id));
    }
    return &it->second;
  }
};

// What the session talks to: the servers (a KV client), the other workers (collectives), or
// both (hybrid, over one endpoint split in two).
absl::Status WorkerSession::ConnectSession(State& s, const SessionOptions& options) {
  const JobSpec& spec = s.job.spec;
  ControlClient& control = *s.job.control;
  if (spec.sync.gossip() || spec.sync.fedavg()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a WorkerSession does not run --sync ", SyncModeName(spec.sync),
        " jobs: use bsp, ssp:S, asp, hybrid or allreduce (or syncline-worker's built-in models)"));
  }
  const bool servers = !spec.sync.serverless();
  const bool collectives = spec.sync.serverless() || spec.sync.hybrid();
  if (collectives && !options.peers) {
    return absl::FailedPreconditionError(
        spec.sync.hybrid()
            ? "a hybrid job's workers all-reduce its dense layers every step: this session was "
              "joined without collectives (SessionOptions::peers; the Python package's "
              "syncline.torch has them, or use syncline-worker)"
            : "a WorkerSession of an all-reduce job needs collectives among the workers "
              "(SessionOptions::peers; the Python package's syncline.torch has them)");
  }
  Endpoint* to_servers = s.job.data.get();
  Endpoint* to_workers = s.job.data.get();
  if (servers && collectives) {
    s.split = std::make_unique<EndpointSplit>(s.job.data.get(), [](const std::string& peer) {
      return peer.starts_with("ps") ? 0 : 1;  // DataEndpointId's: "ps<rank>", "w<rank>"
    });
    to_servers = &s.split->side(0);
    to_workers = &s.split->side(1);
  }
  if (servers) {
    absl::StatusOr<KVClientOptions> kv = ConnectToServers(*to_servers, control, s.rank);
    if (!kv.ok()) return kv.status();
    kv->pull_codec = spec.training.pull_codec;
    s.kv = std::make_unique<KVClient>(to_servers, *kv);
  }
  if (spec.training.codec.kind != CodecKind::kNone) s.codec = Codec::Create(spec.training.codec);
  if (collectives) {
    absl::StatusOr<std::unique_ptr<PeerCollectives>> peers =
        options.peers(PeerContext{.spec = spec,
                                  .table = control.table(),
                                  .rank = s.rank,
                                  .endpoint = *to_workers,
                                  .encrypted = s.encrypted,
                                  .ports = s.ports});
    if (!peers.ok()) return peers.status();
    s.peers = std::move(*peers);
  }
  return absl::OkStatus();
}

// A job resumed from a checkpoint: the session starts at its clock, with what this worker saved
// there (a worker the checkpoint holds nothing of starts at the checkpoint's clock).
absl::Status WorkerSession::Resume(State& s) {
  const std::string& restore = s.job.spec.checkpoint.restore;
  if (restore.empty()) return absl::OkStatus();
  absl::StatusOr<Manifest> manifest = ReadManifest(restore);
  if (!manifest.ok()) return manifest.status();
  const std::string me = absl::StrCat("w", s.rank);
  s.clock = manifest->clock;
  if (std::find(manifest->nodes.begin(), manifest->nodes.end(), me) != manifest->nodes.end()) {
    absl::StatusOr<WorkerCheckpoint> saved = ReadWorkerCheckpoint(restore, s.rank);
    if (!saved.ok()) return saved.status();
    s.clock = saved->clock;
    s.restored = std::move(saved->state);
  }
  s.start_clock = s.clock;
  s.job.control->SetClock(s.clock);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Join(const SessionOptions& options) {
  auto state = std::make_unique<State>();
  NodeOptions node;
  node.coordinator = options.coordinator;
  node.rank = options.rank;
  node.bind = options.bind;
  node.interface = options.interface;
  node.world_size = options.world_size;
  if (!options.port_range.empty()) {
    absl::StatusOr<PortRange> ports = ParsePortRange(options.port_range);
    if (!ports.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("port range: ", ports.status().message()));
    }
    node.ports = *ports;
  }
  node.startup_timeout = options.startup_timeout;
  node.key_file = options.key_file;
  node.insecure = options.insecure;
  node.metrics_port = options.metrics_port;
  absl::StatusOr<ZmqOptions> transport = NodeTransportOptions(node);
  if (!transport.ok()) return transport.status();
  state->encrypted = transport->key != nullptr;
  state->ports = node.ports;
  state->transport = std::make_unique<ZmqTransport>(*transport);
  auto joined = JoinJob(*state->transport, wire::Role::WORKER, node);
  if (!joined.ok()) return joined.status();
  state->job = std::move(*joined);
  state->rank = options.rank;
  ControlClient* control = state->job.control.get();
  if (auto s = ConnectSession(*state, options); !s.ok()) {
    control->ReportAbort(s);
    return s;
  }
  if (auto s = Resume(*state); !s.ok()) {
    control->ReportAbort(s);
    return s;
  }
  control->ReportReady();
  if (auto s = control->WaitForStart(absl::Now() + options.startup_timeout); !s.ok()) {
    control->ReportAbort(s);
    return s;
  }
  state->trace = MakeNodeTrace(state->job, wire::Role::WORKER, state->rank);
  if (state->job.metrics || state->trace) {
    const JobSpec::Observe& o = state->job.spec.observe;
    state->metrics = std::make_unique<WorkerMetrics>(
        state->job.metrics ? &state->job.metrics->registry() : nullptr, state->trace.get(),
        o.trace_first, o.trace_end);
  }
  state->step_begin = absl::Now();
  return std::unique_ptr<WorkerSession>(new WorkerSession(std::move(state)));
}

WorkerSession::WorkerSession(std::unique_ptr<State> state) : state_(std::move(state)) {}

void WorkerSession::Abort(const absl::Status& why) {
  if (state_->finished) return;
  state_->finished = true;  // the destructor reports nothing more
  state_->job.control->ReportAbort(
      why.ok() ? absl::AbortedError(absl::StrCat("w", state_->rank, " aborted")) : why);
  (void)state_->job.control->Flush(absl::Now() + absl::Seconds(2));
}

WorkerSession::~WorkerSession() {
  state_->TraceWritten();
  if (!state_->finished) {
    state_->job.control->ReportAbort(absl::AbortedError(absl::StrCat(
        "w", state_->rank, "'s WorkerSession ended before Finish() (the program quit early)")));
  }
}

const JobSpec& WorkerSession::spec() const { return state_->job.spec; }
int WorkerSession::rank() const { return state_->rank; }
int64_t WorkerSession::clock() const { return state_->clock; }

absl::Status WorkerSession::DeclareTable(const TableOptions& t, absl::Time deadline) {
  return Declare(t, {}, /*await_initial=*/false, deadline);
}

absl::Status WorkerSession::DeclareTableFrom(const TableOptions& t, std::span<const float> initial,
                                             absl::Time deadline) {
  if (!t.dense) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: only a dense table starts from given values", t.id));
  }
  return Declare(t, initial, /*await_initial=*/initial.empty(), deadline);
}

absl::Status WorkerSession::Declare(const TableOptions& t, std::span<const float> initial,
                                    bool await_initial, absl::Time deadline) {
  State& s = *state_;
  if (auto st = s.NeedServers("DeclareTable"); !st.ok()) return st;
  TableConfig c;
  c.id = t.id;
  c.dense = t.dense;
  c.num_keys = t.num_keys;
  c.dim = t.dim;
  c.optimizer.kind = t.optimizer;
  c.optimizer.learning_rate = t.learning_rate;
  c.optimizer.l2 = t.l2;
  c.optimizer.epsilon = t.epsilon;
  c.optimizer.beta1 = t.beta1;
  c.optimizer.beta2 = t.beta2;
  c.init_scale = t.init_scale;
  c.seed = t.seed;
  if (auto st = s.kv->DeclareTable(c, deadline, initial, await_initial); !st.ok()) return st;
  TableState table;
  table.config = c;
  const int servers = s.kv->num_servers();
  if (s.codec != nullptr && c.dense) {
    table.ranges.assign(servers, ErrorFeedback());
  } else if (s.codec != nullptr && s.codec->spec().kind != CodecKind::kFp16) {
    for (int i = 0; i < servers; ++i) {
      table.rows.emplace_back(c.dim, s.job.spec.training.residual_rows);
    }
  }
  s.tables.insert_or_assign(t.id, std::move(table));
  return absl::OkStatus();
}

namespace {

// Sparse rows of a push, grouped by server and in ascending key order within each (as
// SparseErrorFeedback takes them); rows of a key given twice are added up.
struct ShardedRows {
  std::vector<std::vector<uint64_t>> keys;
  std::vector<std::vector<float>> values;
};

ShardedRows ShardRows(const KVClient& kv, std::span<const uint64_t> keys,
                      std::span<const float> values, uint32_t dim) {
  std::vector<uint32_t> order(keys.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return keys[a] < keys[b]; });
  ShardedRows out;
  out.keys.resize(kv.num_servers());
  out.values.resize(kv.num_servers());
  for (uint32_t i : order) {
    const int server = kv.SparseServerOf(keys[i]);
    std::vector<uint64_t>& k = out.keys[server];
    std::vector<float>& v = out.values[server];
    const float* row = values.data() + size_t{i} * dim;
    if (!k.empty() && k.back() == keys[i]) {
      float* into = v.data() + v.size() - dim;
      for (uint32_t j = 0; j < dim; ++j) into[j] += row[j];
      continue;
    }
    k.push_back(keys[i]);
    v.insert(v.end(), row, row + dim);
  }
  return out;
}

}  // namespace

absl::StatusOr<WorkerSession::Ticket> WorkerSession::Push(uint32_t table,
                                                          std::span<const uint64_t> keys,
                                                          std::span<const float> values,
                                                          float weight) {
  State& s = *state_;
  if (auto st = s.NeedServers("Push"); !st.ok()) return st;
  absl::StatusOr<TableState*> t = s.FindTable(table);
  if (!t.ok()) return t.status();
  PendingTicket p;
  if (!(*t)->rows.empty()) {
    const uint32_t dim = (*t)->config.dim;
    if (values.size() != keys.size() * dim) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: %d keys of dim %d need %d values, got %d", table, keys.size(),
                          dim, keys.size() * dim, values.size()));
    }
    ShardedRows rows = ShardRows(*s.kv, keys, values, dim);
    p.sparse.resize(rows.keys.size());
    for (size_t server = 0; server < rows.keys.size(); ++server) {
      if (rows.keys[server].empty()) continue;
      (*t)->rows[server].Compress(*s.codec, rows.keys[server], rows.values[server],
                                  &p.sparse[server], weight);
    }
    for (size_t server = 0; server < rows.keys.size(); ++server) {
      if (auto st = s.kv->PushSparse(table, static_cast<int>(server), dim, p.sparse[server],
                                     s.clock, weight, &p.requests);
          !st.ok()) {
        return st;
      }
    }
    (*t)->last_weight = weight;
    (*t)->pushed_compressed = true;
    return s.Issue(std::move(p));
  }
  const bool half = s.codec != nullptr && s.codec->spec().kind == CodecKind::kFp16;
  auto r = half ? s.kv->PushHalf(table, keys, values, s.clock, weight)
                : s.kv->Push(table, keys, values, s.clock, weight);
  if (!r.ok()) return r.status();
  p.requests.push_back(*r);
  return s.Issue(std::move(p));
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::Pull(uint32_t table,
                                                          std::span<const uint64_t> keys,
                                                          std::span<float> out) {
  State& s = *state_;
  if (auto st = s.NeedServers("Pull"); !st.ok()) return st;
  auto r = s.kv->Pull(table, keys, out, ReadClock());
  if (!r.ok()) return r.status();
  return s.Issue(PendingTicket{.requests = {*r}});
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PushPull(uint32_t table,
                                                              std::span<const uint64_t> keys,
                                                              std::span<const float> values,
                                                              std::span<float> out, float weight) {
  State& s = *state_;
  if (auto st = s.NeedServers("PushPull"); !st.ok()) return st;
  if (s.codec == nullptr) {
    auto r = s.kv->PushPull(table, keys, values, out, s.clock, weight);
    if (!r.ok()) return r.status();
    return s.Issue(PendingTicket{.requests = {*r}});
  }
  // A compressed push is a request of its own; the pull follows it on every connection, so it
  // reads what the push wrote, as one push-pull would.
  absl::StatusOr<Ticket> pushed = Push(table, keys, values, weight);
  if (!pushed.ok()) return pushed;
  auto r = s.kv->Pull(table, keys, out, ReadClock());
  if (!r.ok()) return r.status();
  s.pending[*pushed].requests.push_back(*r);
  return pushed;
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PushDense(uint32_t table, uint64_t begin,
                                                               std::span<const float> values,
                                                               float weight) {
  State& s = *state_;
  if (auto st = s.NeedServers("PushDense"); !st.ok()) return st;
  absl::StatusOr<TableState*> t = s.FindTable(table);
  if (!t.ok()) return t.status();
  const TableConfig& config = (*t)->config;
  PendingTicket p;
  if ((*t)->ranges.empty() || values.size() < kMinCompressedDenseValues ||
      values.size() % config.dim != 0) {
    auto r = s.kv->PushDense(table, begin, values, s.clock, weight);
    if (!r.ok()) return r.status();
    p.requests.push_back(*r);
    return s.Issue(std::move(p));
  }
  // One compressed block per server's range the push covers, each with its residual.
  const uint64_t end = begin + values.size() / config.dim;
  const int servers = s.kv->num_servers();
  for (int server = 0; server < servers; ++server) {
    const KeyRange range = DenseShardRange(config.num_keys, server, servers);
    const uint64_t lo = std::max(begin, range.begin), hi = std::min(end, range.end);
    if (lo >= hi) continue;
    std::span<const float> part = values.subspan((lo - begin) * config.dim, (hi - lo) * config.dim);
    std::vector<std::byte>& block = p.blocks.emplace_back();
    (*t)->ranges[server].Compress(*s.codec, part, &block);
    auto r = s.kv->PushDenseEncoded(table, lo, hi, static_cast<uint8_t>(s.codec->spec().kind),
                                    block, s.clock, weight);
    if (!r.ok()) return r.status();
    p.requests.push_back(*r);
  }
  (*t)->last_weight = weight;
  (*t)->pushed_compressed = true;
  return s.Issue(std::move(p));
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PullDense(uint32_t table, uint64_t begin,
                                                               std::span<float> out) {
  State& s = *state_;
  if (auto st = s.NeedServers("PullDense"); !st.ok()) return st;
  auto r = s.kv->PullDense(table, begin, out, ReadClock());
  if (!r.ok()) return r.status();
  return s.Issue(PendingTicket{.requests = {*r}});
}

void WorkerSession::SetCheckpointState(std::function<absl::StatusOr<std::string>()> save) {
  state_->save = std::move(save);
}

const std::optional<std::string>& WorkerSession::restored_state() const { return state_->restored; }

// This worker's part of checkpoint `clock` when it is one: every --checkpoint-every clocks, or
// the clocks the coordinator asked for (time-based checkpoints). A part that cannot be written is
// reported (the launcher never completes that checkpoint); training goes on.
void WorkerSession::MaybeCheckpoint() {
  State& s = *state_;
  ReportMissedCheckpoints(s.clock);
  const int every = s.job.spec.checkpoint.every;
  if (!((every > 0 && s.clock % every == 0) || s.requests.Consume(s.clock))) return;
  absl::StatusOr<std::string> state = s.save ? s.save() : std::string();
  absl::Status status = state.status();
  if (status.ok()) {
    status = WriteWorkerCheckpoint(s.job.spec.checkpoint.dir, s.rank, {s.clock, *state, ""});
  }
  s.job.control->ReportCheckpointed(s.clock, status);
  s.requests.Taken(s.clock);
}

// Takes the coordinator's new checkpoint requests, and reports those for clocks before `before`
// that this worker had passed when they arrived.
void WorkerSession::ReportMissedCheckpoints(int64_t before) {
  State& s = *state_;
  for (int64_t c : s.job.control->TakeCheckpointRequests()) s.requests.Request(c);
  for (int64_t missed : s.requests.TakeMissedBefore(before)) {
    s.job.control->ReportCheckpointed(
        missed,
        absl::FailedPreconditionError(absl::StrFormat(
            "w%d had finished clock %d before the request for it arrived", s.rank, missed)));
  }
}

absl::Status WorkerSession::AllReduce(std::span<float> data, bool compress, uint32_t residual) {
  State& s = *state_;
  if (s.peers == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("AllReduce: the workers of this job (--sync ", SyncModeName(s.job.spec.sync),
                     ") sync through the parameter servers, not among themselves"));
  }
  if (s.finished) return absl::FailedPreconditionError("AllReduce after Finish()");
  if (auto st = s.peers->AllReduce(data, compress, residual); !st.ok()) return st;
  return s.job.control->health();
}

absl::Status WorkerSession::Broadcast(std::span<float> data, int root) {
  State& s = *state_;
  if (s.peers == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("Broadcast: the workers of this job (--sync ", SyncModeName(s.job.spec.sync),
                     ") sync through the parameter servers, not among themselves"));
  }
  if (root < 0 || root >= s.job.spec.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Broadcast: root ", root, " is not a worker's rank, 0..", s.job.spec.workers - 1));
  }
  if (s.finished) return absl::FailedPreconditionError("Broadcast after Finish()");
  if (auto st = s.peers->Broadcast(data, root); !st.ok()) return st;
  return s.job.control->health();
}

int64_t WorkerSession::ReadClock() const {
  // After Finish (evaluation) a read asks for the final model.
  return state_->finished ? -1 : state_->clock;
}

absl::Status WorkerSession::Wait(Ticket ticket, absl::Time deadline) {
  State& s = *state_;
  auto it = s.pending.find(ticket);
  if (it == s.pending.end()) {
    return absl::NotFoundError(
        absl::StrFormat("ticket %d is not pending (waited for already, or never issued)", ticket));
  }
  absl::Status status;
  const absl::Time begin = absl::Now();
  for (Ticket request : it->second.requests) {
    if (auto st = s.kv->Wait(request, deadline); !st.ok() && status.ok()) status = st;
  }
  s.waited += absl::Now() - begin;
  s.pending.erase(it);
  return status;
}

absl::Status WorkerSession::Clock(double examples, double train_loss) {
  State& s = *state_;
  if (!(examples >= 0) || !std::isfinite(examples)) {
    return absl::InvalidArgumentError(absl::StrCat("Clock: examples must be >= 0, not ", examples));
  }
  ++s.clock;
  if (s.kv != nullptr) {
    if (auto st = s.kv->Clock(s.clock, static_cast<float>(examples)); !st.ok()) return st;
  }
  if (s.metrics) {
    // The program's own time is its compute; its waits for tickets, the wire's and the
    // servers' (BSP's barrier among them).
    const absl::Time now = absl::Now();
    const absl::Duration network = std::min(s.waited, now - s.step_begin);
    // Its waits, summed, drawn at the step's end (they are spread over it).
    const StepPhase phases[] = {{"wait", now - network, now}};
    s.metrics->OnStep(
        StepRecord{.step = s.clock - 1,
                   .begin = s.step_begin,
                   .end = now,
                   .compute = now - s.step_begin - network,
                   .network = network,
                   .loss = std::isfinite(train_loss) ? train_loss * examples : 0,
                   .examples = static_cast<uint64_t>(examples),
                   .phases = absl::MakeConstSpan(phases, s.waited > absl::ZeroDuration() ? 1 : 0)});
    s.step_begin = now;
    s.waited = absl::ZeroDuration();
  }
  s.job.control->SetClock(s.clock);  // heartbeats carry it: a stuck program is named
  if (s.job.spec.checkpoint.enabled()) MaybeCheckpoint();
  s.examples += static_cast<uint64_t>(examples);
  s.unreported_examples += static_cast<uint64_t>(examples);
  if (std::isfinite(train_loss)) {
    s.loss_sum += train_loss * examples;
    s.loss_examples += examples;
  }
  if (s.clock % s.job.spec.training.log_every == 0) {
    s.job.control->ReportProgress(
        ProgressReport{.clock = s.clock,
                       .epoch = 1,
                       .train_loss = s.loss_examples > 0 ? s.loss_sum / s.loss_examples : 0,
                       .examples = s.unreported_examples,
                       .total_steps = 0,  // unknown: the caller's loop decides
                       .staleness = s.kv != nullptr ? s.kv->TakeMeanStaleness() : 0});
    s.loss_sum = s.loss_examples = 0;
    s.unreported_examples = 0;
  }
  return s.job.control->health();
}

// What the compressed pushes' residuals still hold goes to the servers whole, as the pushes of
// one more iteration (of no examples of its own, weighted as the last push was), so that no
// gradient is lost (PsBackend sends it with its last iteration, which it knows in advance).
absl::Status WorkerSession::DrainResiduals(absl::Time deadline) {
  State& s = *state_;
  if (s.kv == nullptr) return absl::OkStatus();
  PendingTicket p;
  std::deque<std::vector<float>> held;  // the dense residuals being sent
  float weight = 0;
  for (auto& [id, t] : s.tables) {
    if (!t.pushed_compressed) continue;
    weight = std::max(weight, t.last_weight);
    const int servers = s.kv->num_servers();
    for (int server = 0; server < static_cast<int>(t.rows.size()); ++server) {
      SparsePush& push = p.sparse.emplace_back();
      t.rows[server].Drain(&push, t.last_weight);
      if (auto st =
              s.kv->PushSparse(id, server, t.config.dim, push, s.clock, t.last_weight, &p.requests);
          !st.ok()) {
        return st;
      }
    }
    for (int server = 0; server < static_cast<int>(t.ranges.size()); ++server) {
      const std::span<const float> residual = t.ranges[server].residual();
      if (residual.empty()) continue;
      const KeyRange range = DenseShardRange(t.config.num_keys, server, servers);
      if (residual.size() != range.size() * t.config.dim) continue;  // pushed parts of it only
      const std::vector<float>& kept = held.emplace_back(residual.begin(), residual.end());
      auto r = s.kv->PushDense(id, range.begin, kept, s.clock, t.last_weight);
      if (!r.ok()) return r.status();
      p.requests.push_back(*r);
      t.ranges[server].Reset();
    }
  }
  if (p.requests.empty()) return absl::OkStatus();
  absl::Status status;
  for (Ticket request : p.requests) {
    if (auto st = s.kv->Wait(request, deadline); !st.ok() && status.ok()) status = st;
  }
  if (!status.ok()) return status;
  return s.kv->Clock(s.clock + 1, weight);
}

absl::Status WorkerSession::Finish(std::function<absl::StatusOr<EvaluationResult>()> evaluate,
                                   absl::Duration timeout) {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError("Finish() was called already");
  const absl::Time deadline = absl::Now() + timeout;
  ControlClient* control = s.job.control.get();
  // The caller's requests first: their errors are the caller's to see.
  absl::Status pending;
  for (auto& [ticket, p] : s.pending) {
    for (Ticket request : p.requests) {
      if (auto st = s.kv->Wait(request, deadline); !st.ok() && pending.ok()) pending = st;
    }
  }
  s.pending.clear();
  if (!pending.ok()) return pending;
  if (auto st = DrainResiduals(deadline); !st.ok()) return st;
  if (s.job.spec.checkpoint.enabled()) ReportMissedCheckpoints(std::numeric_limits<int64_t>::max());
  if (s.kv != nullptr) {
    if (auto st = s.kv->Finish(deadline); !st.ok()) return st;
  }
  s.finished = true;
  // A worker's collectives count as its pushes (what it sends) and pulls (what it receives).
  const uint64_t pushed = (s.kv ? s.kv->bytes_pushed() : 0) + (s.peers ? s.peers->bytes_sent() : 0);
  const uint64_t pulled =
      (s.kv ? s.kv->bytes_pulled() : 0) + (s.peers ? s.peers->bytes_received() : 0);
  // A resumed session trained the clocks since its checkpoint's.
  control->ReportWorkerDone(WorkerDoneReport{.steps = s.clock,
                                             .steps_trained = s.clock - s.start_clock,
                                             .examples = s.examples,
                                             .bytes_pushed = pushed,
                                             .bytes_pulled = pulled});
  while (true) {
    absl::StatusOr<Command> command = control->WaitForCommand(deadline);
    if (!command.ok()) return command.status();
    if (*command == Command::kShutdown) break;
    EvaluationResult result;
    if (evaluate) {
      absl::StatusOr<EvaluationResult> r = evaluate();
      if (!r.ok()) {
        control->ReportAbort(r.status());
        return r.status();
      }
      result = *r;
    }
    control->ReportResult(EvaluationReport{.loss = result.loss,
                                           .auc = result.auc,
                                           .accuracy = result.accuracy,
                                           .examples = result.examples});
  }
  s.TraceWritten();
  return control->Flush(absl::Now() + absl::Seconds(2));
}

}  // namespace syncline
