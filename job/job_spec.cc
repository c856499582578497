#include "job/job_spec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/codec.h"
#include "job/aggregate_rule.h"
#include "job/federated.h"
#include "job/options.h"
#include "job/privacy_plan.h"

namespace syncline {
namespace {

absl::Status CheckInRange(absl::string_view flag, int64_t value, int64_t min, int64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  return InvalidFlag(flag, absl::StrCat(value), absl::StrCat("must be in [", min, ", ", max, "]"));
}

absl::Status CheckPositive(absl::string_view flag, double value) {
  if (value > 0 && std::isfinite(value)) return absl::OkStatus();
  return InvalidFlag(flag, absl::StrCat(value), "must be a positive number");
}

absl::Status CheckAtMost(absl::string_view flag, double value, double max) {
  if (value <= max) return absl::OkStatus();
  return InvalidFlag(flag, absl::StrCat(value), absl::StrCat("must be at most ", max));
}

absl::Status CheckNonNegative(absl::string_view flag, double value) {
  if (value >= 0 && std::isfinite(value)) return absl::OkStatus();
  return InvalidFlag(flag, absl::StrCat(value), "must be a number >= 0");
}

// Criteo data (and so the ctr model) has unbounded 64-bit hashed ids: no dense rows, no gossip.
absl::Status CheckCriteo(const JobSpec& s) {
  if (!UsesCriteoData(s)) {
    if (s.model.kind == ModelKind::kCtr) {
      return InvalidFlag("model", "ctr",
                         "needs Criteo data: --format criteo, or a .tsv --train file");
    }
    return absl::OkStatus();
  }
  if (s.model.classes != 2) {
    return InvalidFlag("classes", absl::StrCat(s.model.classes), "Criteo data is binary (needs 2)");
  }
  if (s.model.kind == ModelKind::kSoftmax) {
    return InvalidFlag("model", "softmax", "Criteo data is binary");
  }
  if (s.sync.fedavg() && s.training.codec.kind != CodecKind::kNone &&
      s.training.codec.kind != CodecKind::kFp16) {
    return InvalidFlag("compress", CodecName(s.training.codec),
                       "federated clients of Criteo data push their rows' deltas as they are or "
                       "as fp16; top-K and sign1 of them are not built");
  }
  if (s.sync.serverless()) {
    return InvalidFlag("sync", SyncModeName(s.sync),
                       "serverless workers hold the whole model and need a bounded feature "
                       "count; Criteo ids are 64-bit hashes");
  }
  return absl::OkStatus();
}

// --hidden per model: ctr one width, mlp 1 to kMaxHiddenLayers, every width in
// [1, kMaxHiddenWidth], and an mlp's dense layers no more than kMaxMlpDenseParams floats. The
// linear models have no hidden layers and ignore the flag (as they do --embedding-dim).
absl::Status CheckHidden(const JobSpec::Model& m) {
  if (m.kind != ModelKind::kCtr && m.kind != ModelKind::kMlp) return absl::OkStatus();
  const std::string text = HiddenName(m.hidden);
  const size_t most = m.kind == ModelKind::kCtr ? 1 : kMaxHiddenLayers;
  if (m.hidden.size() > most) {
    return InvalidFlag("hidden", text,
                       m.kind == ModelKind::kCtr
                           ? "the ctr model has one hidden layer: give one width"
                           : absl::StrCat("at most ", kMaxHiddenLayers, " hidden layers"));
  }
  for (const int width : m.hidden) {
    if (width < 1 || width > kMaxHiddenWidth) {
      return InvalidFlag("hidden", text,
                         absl::StrCat("every width must be in [1, ", kMaxHiddenWidth, "]"));
    }
  }
  if (m.kind == ModelKind::kMlp && m.classes >= 2) {
    const std::vector<int> hidden = m.hidden.empty() ? DefaultHidden(m.kind) : m.hidden;
    uint64_t params = static_cast<uint64_t>(hidden[0]);
    int in = hidden[0];
    for (size_t i = 1; i <= hidden.size(); ++i) {
      const int out = i < hidden.size() ? hidden[i] : m.classes;
      params += static_cast<uint64_t>(in) * out + out;
      in = out;
    }
    if (params > kMaxMlpDenseParams) {
      return InvalidFlag("hidden", text,
                         absl::StrCat("the dense layers would hold ", params,
                                      " parameters, more than ", kMaxMlpDenseParams));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const DeviceSpec& d) {
  if (d.kind == DeviceKind::kCuda && (d.index < 0 || d.index > 1023)) {
    return InvalidFlag("device", DeviceName(d), "the device number must be in [0, 1023]");
  }
  return absl::OkStatus();
}

absl::Status CheckFederated(const JobSpec& s) {
  const JobSpec::Federated& f = s.federated;
  for (const absl::Status& status : {
           CheckAtLeast("rounds", f.rounds, 1),
           CheckAtLeast("local-epochs", f.local_epochs, 1),
           CheckAtLeast("local-steps", f.local_steps, 0),
           CheckPositive("round-timeout", f.round_timeout_s),
           CheckAtMost("round-timeout", f.round_timeout_s, 86400),
           CheckNonNegative("prox-mu", f.prox_mu),
           CheckPositive("server-lr", f.server_lr),
       }) {
    if (!status.ok()) return status;
  }
  if (!(f.participation > 0 && f.participation <= 1)) {
    return InvalidFlag("participation", absl::StrCat(f.participation), "must be in (0, 1]");
  }
  if (!(f.client_dropout >= 0 && f.client_dropout < 1)) {
    return InvalidFlag("client-dropout", absl::StrCat(f.client_dropout), "must be in [0, 1)");
  }
  if (!s.sync.fedavg()) return absl::OkStatus();
  if (s.checkpoint.enabled() || !s.checkpoint.restore.empty()) {
    return InvalidFlag("sync", "fedavg",
                       "checkpoints (--checkpoint-every, --checkpoint-seconds, --resume) are not "
                       "supported with federated rounds yet");
  }
  return absl::OkStatus();
}

absl::Status CheckRobustness(const JobSpec& s) {
  const PartitionSpec& p = s.data.partition;
  if (p.kind == PartitionKind::kDirichlet && !(p.alpha > 0 && std::isfinite(p.alpha))) {
    return InvalidFlag("partition", PartitionName(p), "ALPHA must be a positive number");
  }
  if (p.kind == PartitionKind::kShards && p.shards < 1) {
    return InvalidFlag("partition", PartitionName(p), "K must be >= 1");
  }
  if (p.kind != PartitionKind::kStrided && UsesCriteoData(s)) {
    return InvalidFlag("partition", PartitionName(p),
                       "needs data read into memory; Criteo files are streamed (strided only)");
  }
  const std::string rule = AggregateRuleName(s.aggregate);
  if (s.aggregate.robust()) {
    if (s.sync.kind != SyncKind::kBsp && !s.sync.fedavg()) {
      return InvalidFlag("aggregate", rule,
                         absl::StrCat("combines the updates of one clock or round: needs --sync "
                                      "bsp or fedavg, not ",
                                      SyncModeName(s.sync)));
    }
    // Every round (every clock) must have enough updates for the rule.
    const int n =
        s.sync.fedavg() ? ClientsPerRound(s.workers, s.federated.participation) : s.workers;
    if (absl::Status bound = CheckAggregateRule(s.aggregate, n); !bound.ok()) {
      return InvalidFlag(
          "aggregate", rule,
          absl::StrCat(bound.message(), s.sync.fedavg() ? " (clients per round)" : " (workers)"));
    }
  }
  const JobSpec::Byzantine& b = s.byzantine;
  if (b.attack.kind != AttackKind::kNone) {
    if (b.ranks.empty()) {
      return InvalidFlag("byzantine", ByzantineName(b), "names no worker");
    }
    for (int r : b.ranks) {
      if (r < 0 || r >= s.workers) {
        return InvalidFlag("byzantine", ByzantineName(b),
                           absl::StrCat("rank ", r, " is not a worker (", s.workers, " workers)"));
      }
    }
    if (b.attack.kind == AttackKind::kGaussian &&
        !(b.attack.sigma > 0 && std::isfinite(b.attack.sigma))) {
      return InvalidFlag("byzantine", ByzantineName(b), "SIGMA must be a positive number");
    }
    if (b.attack.kind == AttackKind::kScale && !std::isfinite(b.attack.factor)) {
      return InvalidFlag("byzantine", ByzantineName(b), "K must be a finite number");
    }
    if (b.attack.kind == AttackKind::kLabelFlip && UsesCriteoData(s)) {
      return InvalidFlag("byzantine", ByzantineName(b), "labelflip needs data read into memory");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string AsyncGossipCannotCheckpoint(const SyncMode& sync) {
  // Push-sum weight in flight between asynchronous peers would be lost.
  return absl::StrCat(
      "--checkpoint-every, --checkpoint-seconds and --resume need parameter servers or "
      "synchronous gossip (",
      SyncModeName(sync), " is asynchronous)");
}

absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t min) {
  if (value >= min) return absl::OkStatus();
  return InvalidFlag(flag, absl::StrCat(value), absl::StrCat("must be >= ", min));
}

absl::Status InvalidFlag(absl::string_view flag, absl::string_view value, absl::string_view rule) {
  return absl::InvalidArgumentError(absl::StrFormat("--%s=%s: %s", flag, value, rule));
}

bool UsesCriteoData(const JobSpec& s) {
  if (s.data.format == DataFormat::kCriteo) return true;
  if (s.data.format != DataFormat::kAuto) return false;
  // Without a training file the launcher generates Criteo data for the ctr model.
  return s.data.train.empty() ? s.model.kind == ModelKind::kCtr
                              : absl::EndsWithIgnoreCase(s.data.train, ".tsv");
}

bool HandsOverBatches(const SyncMode& sync) {
  return sync.kind == SyncKind::kBsp || sync.kind == SyncKind::kSsp ||
         sync.kind == SyncKind::kAsp || sync.kind == SyncKind::kGossip || sync.allreduce();
}

bool RollsBackInPlace(const SyncMode& sync) {
  // Push-sum weight in flight is in no checkpoint; federated rounds are not checkpointed.
  return !sync.fedavg() && !(sync.gossip() && sync.asynchronous);
}

int MinWorkers(const JobSpec& s) {
  if (s.min_workers > 0) return s.min_workers;
  // Collectives and federated rounds need every worker; BSP did before --min-workers.
  const bool every = s.sync.kind == SyncKind::kBsp || s.sync.fedavg() || s.sync.collective() ||
                     (s.sync.kind == SyncKind::kSsp && s.sync.staleness == 0);
  return every ? s.workers : 1;
}

int MaxWorkers(const JobSpec& s) { return std::max(s.workers, s.max_workers); }

namespace {

// Each number within its range, in the order of the flags' table.
absl::Status CheckRanges(const JobSpec& s) {
  const auto& t = s.training;
  for (const absl::Status& status : {
           s.sync.serverless() ? CheckInRange("servers", s.servers, 0, 0)
                               : CheckInRange("servers", s.servers, 1, kMostNodes),
           CheckInRange("workers", s.workers, 1, kMostNodes),
           CheckInRange("min-workers", s.min_workers, 0, s.workers),
           CheckInRange("max-restarts", s.max_restarts, 0, 1000),
           s.max_workers != 0 ? CheckInRange("max-workers", s.max_workers, s.workers, kMostNodes)
                              : absl::OkStatus(),
           s.sync.kind == SyncKind::kSsp ? CheckAtLeast("sync", s.sync.staleness, 0)
           : s.sync.hybrid()             ? CheckAtLeast("embedding-sync", s.sync.staleness, -1)
                                         : absl::OkStatus(),
           CheckAtLeast("classes", s.model.classes, 2),
           CheckInRange("embedding-dim", s.model.embedding_dim, 1, 256),
           CheckHidden(s.model),
           CheckDevice(s.device),
           CheckAtLeast("epochs", t.epochs, 1),
           CheckAtLeast("batch-size", t.batch_size, 1),
           CheckPositive("lr", t.learning_rate),
           CheckNonNegative("l2", t.l2),
           CheckAtLeast("log-every", t.log_every, 1),
           CheckPositive("request-timeout", s.timeouts.request_s),
           CheckPositive("heartbeat-interval", s.timeouts.heartbeat_interval_s),
           CheckPositive("heartbeat-timeout", s.timeouts.heartbeat_timeout_s),
           // The node table carries them as 32-bit milliseconds.
           CheckAtMost("heartbeat-interval", s.timeouts.heartbeat_interval_s, 86400),
           CheckAtMost("heartbeat-timeout", s.timeouts.heartbeat_timeout_s, 86400),
           CheckPositive("peer-timeout", s.timeouts.peer_s),
           CheckAtLeast("embedding-admit-after", s.embedding.admit_after, 0),
           CheckAtLeast("embedding-expire-steps", s.embedding.expire_steps, 0),
           CheckAtLeast("checkpoint-every", s.checkpoint.every, 0),
           CheckNonNegative("checkpoint-seconds", s.checkpoint.seconds),
           CheckInRange("update-threads", s.update_threads, 1, 64),
           CheckAtLeast("max-reply", static_cast<int64_t>(s.limits.reply_bytes), 1 << 20),
           CheckAtLeast("max-parked", static_cast<int64_t>(s.limits.parked_bytes_per_worker),
                        1 << 20),
           CheckAtLeast("reply-backlog", static_cast<int64_t>(s.limits.reply_backlog_bytes),
                        1 << 20),
           CheckInRange("max-stores", s.limits.stores, 1, 1024),
           CheckAtLeast("checkpoint-keep", s.checkpoint.keep, 1),
       }) {
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

// Combinations of the model's settings and of the timeouts.
absl::Status CheckModelAndTimeouts(const JobSpec& s) {
  if (s.model.kind == ModelKind::kLogreg && s.model.classes != 2) {
    return InvalidFlag("classes", absl::StrCat(s.model.classes),
                       "needs --model softmax or mlp (logreg is binary)");
  }
  if (s.timeouts.heartbeat_timeout_s <= s.timeouts.heartbeat_interval_s) {
    return InvalidFlag("heartbeat-timeout", absl::StrCat(s.timeouts.heartbeat_timeout_s),
                       absl::StrCat("must be more than --heartbeat-interval (",
                                    s.timeouts.heartbeat_interval_s, ")"));
  }
  return absl::OkStatus();
}

// The push and pull codecs, and where a compressed pull cannot go.
absl::Status CheckCodecs(const JobSpec& s) {
  const auto& t = s.training;
  if (absl::Status codec = ValidateCodecSpec(t.codec); !codec.ok()) {
    return InvalidFlag("compress", CodecName(t.codec), codec.message());
  }
  if (absl::Status codec = ValidateCodecSpec(t.pull_codec); !codec.ok()) {
    return InvalidFlag("compress-pull", CodecName(t.pull_codec), codec.message());
  }
  if (t.pull_codec.kind != CodecKind::kNone) {
    const bool csv = s.data.format == DataFormat::kCsv ||
                     (s.data.format == DataFormat::kAuto && absl::EndsWith(s.data.train, ".csv"));
    std::string why;
    if (s.sync.serverless()) why = "needs parameter servers (this mode has none)";
    if (s.sync.fedavg()) why = "is not built for federated rounds (clients pull once a round)";
    if (csv) why = "compresses sparse rows; CSV data keeps its rows in a dense table";
    if (!why.empty()) return InvalidFlag("compress-pull", CodecName(t.pull_codec), why);
  }
  return absl::OkStatus();
}

// Workers that leave (--min-workers), fail and come back (--max-restarts) or join
// (--max-workers): each only in the modes that can take it.
absl::Status CheckMembership(const JobSpec& s) {
  const auto& t = s.training;
  if (s.min_workers > 0 && s.min_workers < s.workers && !HandsOverBatches(s.sync)) {
    return InvalidFlag(
        "min-workers", absl::StrCat(s.min_workers),
        "is for --sync bsp, ssp, asp, gossip and allreduce: in this mode every step needs "
        "every worker");
  }
  const bool residuals = t.codec.kind == CodecKind::kTopK || t.codec.kind == CodecKind::kSign1;
  if (s.min_workers > 0 && s.min_workers < s.workers && s.sync.allreduce() && residuals) {
    return InvalidFlag(
        "min-workers", absl::StrCat(s.min_workers),
        absl::StrCat("cannot be combined with an all-reduce of --compress ", CodecName(t.codec),
                     ": a worker that takes over another's model after a "
                     "departure would keep its own residual; use none or fp16"));
  }
  if (s.max_restarts > 0 && !RollsBackInPlace(s.sync)) {
    return InvalidFlag("max-restarts", absl::StrCat(s.max_restarts),
                       "is for --sync bsp, ssp, asp, allreduce, hybrid and synchronous gossip: "
                       "federated rounds and push-sum weight in flight are in no checkpoint to "
                       "roll back to");
  }
  if (s.max_restarts > 0 && !s.checkpoint.enabled()) {
    return InvalidFlag("max-restarts", absl::StrCat(s.max_restarts),
                       "needs checkpoints to roll back to: add --checkpoint-every N or "
                       "--checkpoint-seconds S");
  }
  if (s.max_workers <= s.workers) return absl::OkStatus();
  const std::string value = absl::StrCat(s.max_workers);
  if (!HandsOverBatches(s.sync)) {
    return InvalidFlag("max-workers", value,
                       "is for --sync bsp, ssp, asp, gossip and allreduce: a worker joins a "
                       "parameter-server, gossip or all-reduce job");
  }
  if (s.sync.allreduce() && residuals) {
    return InvalidFlag(
        "max-workers", value,
        absl::StrCat("cannot be combined with an all-reduce of --compress ", CodecName(t.codec),
                     ": a joiner takes the others' model but has no residual of "
                     "its own to match it; use none or fp16"));
  }
  if (s.sync.gossip() && (t.codec.kind == CodecKind::kTopK || t.codec.kind == CodecKind::kSign1)) {
    return InvalidFlag("max-workers", value,
                       absl::StrCat("cannot be combined with gossip's compressed differences "
                                    "(--compress ",
                                    CodecName(t.codec),
                                    ", CHOCO): a joiner has no public copies to start from; "
                                    "use --compress none or fp16"));
  }
  if (s.checkpoint.enabled() || s.max_restarts > 0 || !s.checkpoint.restore.empty()) {
    return InvalidFlag("max-workers", value,
                       "cannot be combined with checkpoints, --resume or --max-restarts yet: "
                       "a checkpoint does not hold a joined worker's part");
  }
  return absl::OkStatus();
}

// The settings of one sync mode's exchange: all-reduce's rows, gossip's consensus step and
// codecs, and the bounds of the workers' compression state.
absl::Status CheckExchange(const JobSpec& s) {
  const auto& t = s.training;
  const bool sparsifies = t.codec.kind == CodecKind::kTopK || t.codec.kind == CodecKind::kSign1;
  if (s.sync.allreduce_rows != AllReduceRows::kAuto && (!s.sync.allreduce() || sparsifies)) {
    return InvalidFlag("allreduce-rows", AllReduceRowsName(s.sync.allreduce_rows),
                       "is for --sync allreduce without top-K or sign1 (which all-gather their "
                       "own blocks)");
  }
  if (!(s.sync.consensus_step >= 0 && s.sync.consensus_step <= 1)) {
    return InvalidFlag("consensus-step", absl::StrCat(s.sync.consensus_step),
                       "must be in [0, 1] (0: the codec's default)");
  }
  if (s.sync.consensus_step != 0 && !(s.sync.gossip() && !s.sync.asynchronous && sparsifies)) {
    return InvalidFlag("consensus-step", absl::StrCat(s.sync.consensus_step),
                       "is for synchronous gossip with --compress topk:R or sign1");
  }
  if (s.sync.gossip() && s.sync.asynchronous && sparsifies) {
    return InvalidFlag("compress", CodecName(t.codec),
                       "push-sum gossip (:async) exchanges whole parameters: none or fp16");
  }
  if (t.residual_rows < 1 || t.residual_rows > (uint64_t{1} << 40)) {
    return InvalidFlag("residual-rows", absl::StrCat(t.residual_rows),
                       "must be between 1 and 2^40");
  }
  if (t.pull_copy_rows < 1 || t.pull_copy_rows > (uint64_t{1} << 40)) {
    return InvalidFlag("pull-copy-rows", absl::StrCat(t.pull_copy_rows),
                       "must be between 1 and 2^40");
  }
  return absl::OkStatus();
}

// The slowness injected for experiments names real workers and sane factors.
absl::Status CheckSlowness(const JobSpec& s) {
  const auto& sl = s.slowness;
  if (sl.straggler_rank >= s.workers || sl.straggler_rank < -1 ||
      !(sl.straggler_factor >= 1 && std::isfinite(sl.straggler_factor))) {
    return InvalidFlag("straggler", absl::StrCat(sl.straggler_rank, ":", sl.straggler_factor),
                       absl::StrCat("RANK must name a worker (", s.workers,
                                    " workers) and FACTOR be a number >= 1"));
  }
  if (sl.delay_rank >= s.workers || sl.delay_rank < -1 || !(sl.delay_ms >= 0) ||
      sl.delay_ms > 60000) {
    return InvalidFlag(
        "delay", absl::StrCat(sl.delay_rank, ":", sl.delay_ms),
        absl::StrCat("RANK must name a worker (", s.workers, " workers) and MS be in [0, 60000]"));
  }
  if (!(sl.jitter_probability >= 0 && sl.jitter_probability <= 1) ||
      !(sl.jitter_factor >= 1 && std::isfinite(sl.jitter_factor))) {
    return InvalidFlag("jitter", absl::StrCat(sl.jitter_probability, ":", sl.jitter_factor),
                       "P must be in [0, 1] and FACTOR a number >= 1");
  }
  if (!(sl.min_step_ms >= 0) || sl.min_step_ms > 60000) {
    return InvalidFlag("min-step-ms", absl::StrCat(sl.min_step_ms), "must be in [0, 60000]");
  }
  return absl::OkStatus();
}

// A test set needs its training set; asynchronous gossip has no consistent state to save.
absl::Status CheckDataAndCheckpoints(const JobSpec& s) {
  if (!s.data.test.empty() && s.data.train.empty()) {
    return InvalidFlag("test", s.data.test,
                       "needs --train (synthetic data brings its own test set)");
  }
  if (s.sync.gossip() && s.sync.asynchronous &&
      (s.checkpoint.enabled() || !s.checkpoint.restore.empty())) {
    return InvalidFlag("sync", SyncModeName(s.sync), AsyncGossipCannotCheckpoint(s.sync));
  }
  return absl::OkStatus();
}

}  // namespace

// The trace's window and the held-out evaluation's period.
absl::Status CheckObserve(const JobSpec& s) {
  const JobSpec::Observe& o = s.observe;
  if (o.tracing() && (o.trace_first < 0 || o.trace_end <= o.trace_first)) {
    return InvalidFlag("trace-steps", absl::StrCat(o.trace_first, ":", o.trace_end),
                       "must be A:B with 0 <= A < B (the steps [A, B) are traced)");
  }
  if (o.eval_every_steps < 0 || o.eval_every_seconds < 0 ||
      (o.eval_every_steps > 0 && o.eval_every_seconds > 0)) {
    return InvalidFlag("eval-every",
                       absl::StrCat(o.eval_every_steps, " steps, ", o.eval_every_seconds, " s"),
                       "must be N (steps) or Ns (seconds), N > 0");
  }
  const std::string every = o.eval_every_steps > 0 ? absl::StrCat(o.eval_every_steps)
                                                   : absl::StrCat(o.eval_every_seconds, "s");
  if (o.evaluates() && !s.worker_command.empty()) {
    return InvalidFlag("eval-every", every,
                       "is for syncline-worker's models: a worker command evaluates its own "
                       "model (WorkerSession::Finish)");
  }
  // Without --train the launcher generates both files, the test set included.
  if (o.evaluates() && s.data.test.empty() && !s.data.train.empty()) {
    return InvalidFlag("eval-every", every, "needs --test: it evaluates on the test set");
  }
  return absl::OkStatus();
}

// The phases in a fixed order: the first error found is the one reported.
absl::Status ValidateJobSpec(const JobSpec& s) {
  for (absl::Status (*check)(const JobSpec&) :
       {CheckRanges, CheckCriteo, CheckFederated, CheckRobustness, CheckModelAndTimeouts,
        CheckCodecs, CheckMembership, CheckExchange, CheckSlowness, CheckDataAndCheckpoints,
        CheckPrivacyOptions, CheckObserve}) {
    if (absl::Status status = check(s); !status.ok()) return status;
  }
  return absl::OkStatus();
}

std::vector<std::string> JobSpecWarnings(const JobSpec& s) {
  std::vector<std::string> out;
  const CodecSpec& pull = s.training.pull_codec;
  if ((s.model.kind == ModelKind::kCtr || s.model.kind == ModelKind::kMlp) &&
      pull.kind == CodecKind::kTopK && pull.ratio < 0.1 &&
      s.training.codec.kind == CodecKind::kNone) {
    out.push_back(absl::StrFormat(
        "--compress-pull %s with uncompressed pushes on a model with dense layers: the servers "
        "change every dense weight at every step, and a pull that brings %g of the changes lets "
        "the workers' copy drift from the model they train (a ctr job's test loss went from 0.52 "
        "to 1.89 at topk:0.01, fine at topk:0.1); pair it with --compress topk, or pull with a "
        "larger ratio, sign1 or fp16",
        CodecName(pull), pull.ratio));
  }
  if (!s.model.hidden.empty() && DefaultHidden(s.model.kind).empty()) {
    out.push_back(absl::StrFormat("--hidden has no effect on the %s model (it has no hidden layer)",
                                  ModelName(s.model.kind)));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> ManifestEntries(const JobSpec& s) {
  std::vector<std::pair<std::string, std::string>> entries = {
      {"sync", SyncModeName(s.sync)},
      {"model", ModelName(s.model.kind)},
      {"classes", absl::StrCat(s.model.classes)},
      {"embedding-dim", absl::StrCat(s.model.embedding_dim)},
      {"train", s.data.train},
      {"format", DataFormatName(s.data.format)},
      {"batch-size", absl::StrCat(s.training.batch_size)},
      {"seed", absl::StrCat(s.seed)},
      {"optimizer", OptimizerName(s.training.optimizer)},
      {"lr", absl::StrFormat("%.9g", s.training.learning_rate)},
      {"l2", absl::StrFormat("%.9g", s.training.l2)},
      {"compress", CodecName(s.training.codec)},
      // The pulled rows' copies are not in a checkpoint (a resumed run sends each row whole
      // once): a resume under another pull codec would train another model still.
      {"compress-pull", CodecName(s.training.pull_codec)},
      {"partition", PartitionName(s.data.partition)},
      {"aggregate", AggregateRuleName(s.aggregate)},
      {"byzantine", ByzantineName(s.byzantine)}};
  // Only models with hidden layers have them to compare (the linear models ignore --hidden).
  if (!DefaultHidden(s.model.kind).empty()) {
    entries.emplace_back("hidden", HiddenName(s.model.hidden.empty() ? DefaultHidden(s.model.kind)
                                                                     : s.model.hidden));
  }
  return entries;
}

}  // namespace syncline
