#include "syncline/worker_session.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "client/kv_client.h"
#include "core/control_client.h"
#include "core/table_config.h"
#include "core/zmq_transport.h"
#include "job/node_join.h"

namespace syncline {

struct WorkerSession::State {
  std::unique_ptr<ZmqTransport> transport;
  JoinedJob job;
  std::unique_ptr<KVClient> kv;
  int rank = 0;
  int64_t clock = 0;
  bool finished = false;
  // Since the last progress report.
  double loss_sum = 0;
  double loss_examples = 0;
  uint64_t examples = 0;
  uint64_t unreported_examples = 0;
};

absl::StatusOr<std::unique_ptr<WorkerSession>> WorkerSession::Join(const SessionOptions& options) {
  auto state = std::make_unique<State>();
  NodeOptions node;
  node.coordinator = options.coordinator;
  node.rank = options.rank;
  node.bind = options.bind;
  node.startup_timeout = options.startup_timeout;
  node.key_file = options.key_file;
  node.insecure = options.insecure;
  absl::StatusOr<ZmqOptions> transport = NodeTransportOptions(node);
  if (!transport.ok()) return transport.status();
  state->transport = std::make_unique<ZmqTransport>(*transport);
  auto joined = JoinJob(*state->transport, wire::Role::WORKER, node);
  if (!joined.ok()) return joined.status();
  state->job = std::move(*joined);
  state->rank = options.rank;
  ControlClient* control = state->job.control.get();
  if (state->job.spec.sync.serverless() || state->job.spec.sync.hybrid()) {
    absl::Status s = absl::FailedPreconditionError(
        state->job.spec.sync.hybrid()
            ? "a WorkerSession talks to parameter servers only; a hybrid job's workers also "
              "all-reduce its dense layers every step (use syncline-worker)"
            : "a WorkerSession needs parameter servers; this job is serverless (gossip or "
              "all-reduce)");
    control->ReportAbort(s);
    return s;
  }
  absl::StatusOr<KVClientOptions> kv = ConnectToServers(*state->job.data, *control, options.rank);
  if (!kv.ok()) {
    control->ReportAbort(kv.status());
    return kv.status();
  }
  state->kv = std::make_unique<KVClient>(state->job.data.get(), *kv);
  control->ReportReady();
  if (auto s = control->WaitForStart(absl::Now() + options.startup_timeout); !s.ok()) {
    control->ReportAbort(s);
    return s;
  }
  return std::unique_ptr<WorkerSession>(new WorkerSession(std::move(state)));
}

WorkerSession::WorkerSession(std::unique_ptr<State> state) : state_(std::move(state)) {}

WorkerSession::~WorkerSession() {
  if (!state_->finished) {
    state_->job.control->ReportAbort(absl::AbortedError(absl::StrCat(
        "w", state_->rank, "'s WorkerSession ended before Finish() (the program quit early)")));
  }
}

const JobSpec& WorkerSession::spec() const { return state_->job.spec; }
int WorkerSession::rank() const { return state_->rank; }
int64_t WorkerSession::clock() const { return state_->clock; }

absl::Status WorkerSession::DeclareTable(const TableOptions& t, absl::Time deadline) {
  TableConfig c;
  c.id = t.id;
  c.dense = t.dense;
  c.num_keys = t.num_keys;
  c.dim = t.dim;
  c.optimizer.kind = t.optimizer;
  c.optimizer.learning_rate = t.learning_rate;
  c.optimizer.l2 = t.l2;
  c.init_scale = t.init_scale;
  c.seed = t.seed;
  return state_->kv->DeclareTable(c, deadline);
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::Push(uint32_t table,
                                                          std::span<const uint64_t> keys,
                                                          std::span<const float> values,
                                                          float weight) {
  return state_->kv->Push(table, keys, values, state_->clock, weight);
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::Pull(uint32_t table,
                                                          std::span<const uint64_t> keys,
                                                          std::span<float> out) {
  return state_->kv->Pull(table, keys, out, ReadClock());
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PushPull(uint32_t table,
                                                              std::span<const uint64_t> keys,
                                                              std::span<const float> values,
                                                              std::span<float> out, float weight) {
  return state_->kv->PushPull(table, keys, values, out, state_->clock, weight);
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PushDense(uint32_t table, uint64_t begin,
                                                               std::span<const float> values,
                                                               float weight) {
  return state_->kv->PushDense(table, begin, values, state_->clock, weight);
}

absl::StatusOr<WorkerSession::Ticket> WorkerSession::PullDense(uint32_t table, uint64_t begin,
                                                               std::span<float> out) {
  return state_->kv->PullDense(table, begin, out, ReadClock());
}

int64_t WorkerSession::ReadClock() const {
  // After Finish (evaluation) a read asks for the final model.
  return state_->finished ? -1 : state_->clock;
}

absl::Status WorkerSession::Wait(Ticket ticket, absl::Time deadline) {
  return state_->kv->Wait(ticket, deadline);
}

absl::Status WorkerSession::Clock(double examples, double train_loss) {
  State& s = *state_;
  if (!(examples >= 0) || !std::isfinite(examples)) {
    return absl::InvalidArgumentError(absl::StrCat("Clock: examples must be >= 0, not ", examples));
  }
  ++s.clock;
  if (auto st = s.kv->Clock(s.clock, static_cast<float>(examples)); !st.ok()) return st;
  s.job.control->SetClock(s.clock);  // heartbeats carry it: a stuck program is named
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
                       .staleness = s.kv->TakeMeanStaleness()});
    s.loss_sum = s.loss_examples = 0;
    s.unreported_examples = 0;
  }
  return s.job.control->health();
}

absl::Status WorkerSession::Finish(std::function<absl::StatusOr<EvaluationResult>()> evaluate,
                                   absl::Duration timeout) {
  State& s = *state_;
  if (s.finished) return absl::FailedPreconditionError("Finish() was called already");
  const absl::Time deadline = absl::Now() + timeout;
  ControlClient* control = s.job.control.get();
  if (auto st = s.kv->Finish(deadline); !st.ok()) return st;
  s.finished = true;
  // Every clock of a session is one it trained (a session neither resumes nor joins late).
  control->ReportWorkerDone(WorkerDoneReport{.steps = s.clock,
                                             .steps_trained = s.clock,
                                             .examples = s.examples,
                                             .bytes_pushed = s.kv->bytes_pushed(),
                                             .bytes_pulled = s.kv->bytes_pulled()});
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
  return control->Flush(absl::Now() + absl::Seconds(2));
}

}  // namespace syncline
