#include "core/coordinator.h"

#include <kj/exception.h>

#include <algorithm>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "core/net.h"
#include "core/version.h"

namespace syncline {

struct Coordinator::NodeState {
  wire::Role role;
  int rank;
  std::string control_id;
  std::string address;
  std::string host;
  int pid = 0;
  absl::Time last_seen;
  bool ready = false;
  bool done = false;  // workers: finished training
  bool down = false;
  // Its process failed and a replacement is to register under its id (Restart).
  bool replacing = false;
  // During a recovery: whether it has restored the rollback's checkpoint (a replacement:
  // registered and ready), and whether it is a replacement still to be started.
  bool restored = true;
  bool needs_start = false;
  // Reported to the launcher as hung (TakeHungNodes), to be killed and restarted.
  bool hang_reported = false;
  // A replacement that has registered and waits for its table (SendReplacementTables).
  bool awaiting_table = false;
  // A worker that asked to join: given its rank, not yet its table (CompleteArrival).
  bool joining = false;
  int64_t first_clock = 0;  // workers: the clock their plan starts at (joiners: their entry)
  bool stats = false;       // servers: statistics received at shutdown
  int64_t clock = -1;       // workers: the clock their last heartbeat carried
  absl::Time clock_since;   // when that clock was first seen

  // "w2 (pid 812 on gpu3)", and the data address when it is off loopback: hosts that share a
  // name (containers, network namespaces) are still told apart.
  std::string Name() const {
    const std::string where =
        address.empty() || IsLoopbackAddress(address) ? host : absl::StrCat(host, ", ", address);
    return absl::StrFormat("%s (pid %d on %s)", DataEndpointId(role, rank), pid, where);
  }
};

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(Transport& transport,
                                                                 const std::string& address,
                                                                 CoordinatorOptions options,
                                                                 CoordinatorObserver* observer) {
  if (options.num_servers < 0 || options.num_workers < 1) {
    return absl::InvalidArgumentError("a job needs at least one worker");
  }
  auto endpoint = transport.CreateEndpoint(kCoordinatorId);
  if (!endpoint.ok()) return endpoint.status();
  auto bound = (*endpoint)->Bind(address);
  if (!bound.ok()) return bound.status();
  return std::unique_ptr<Coordinator>(
      new Coordinator(std::move(*endpoint), std::move(*bound), options, observer));
}

Coordinator::Coordinator(std::unique_ptr<Endpoint> endpoint, std::string address,
                         CoordinatorOptions options, CoordinatorObserver* observer)
    : endpoint_(std::move(endpoint)),
      address_(std::move(address)),
      options_(options),
      observer_(observer),
      restarts_left_(options.max_restarts) {
  next_rank_ = options.num_workers;
}

Coordinator::~Coordinator() = default;

void Coordinator::Abort(std::string reason) {
  absl::MutexLock lock(&mu_);
  if (abort_reason_.empty()) abort_reason_ = std::move(reason);
  abort_requested_.store(true);
}

absl::Status Coordinator::Run() {
  if (auto s = Register(); !s.ok()) return Fail(s);
  if (auto s = AwaitReady(); !s.ok()) return Fail(s);
  if (auto s = Supervise(); !s.ok()) return Fail(s);
  return Shutdown();
}

absl::Status Coordinator::Fail(absl::Status status) {
  SYNCLINE_LOG(ERROR) << "job failed: " << status.message();
  MessageBuilder b(wire::MsgType::ABORT);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setStatusCode(static_cast<int32_t>(status.code()));
  b.header().setMessage(std::string(status.message()));
  Broadcast(b.Finish());
  return status;
}

void Coordinator::SendTo(const std::string& control_id, Message message) {
  if (auto s = endpoint_->Send(control_id, std::move(message), absl::Now() + absl::Seconds(2));
      !s.ok()) {
    SYNCLINE_LOG(WARNING) << "cannot reach " << control_id << ": " << s;
  }
}

void Coordinator::Broadcast(const Message& message, std::optional<wire::Role> only) {
  for (const auto& node : nodes_) {
    if (node->down || node->replacing || node->joining) continue;
    if (!only || node->role == *only) SendCopy(node->control_id, message);
  }
}

void Coordinator::SendCopy(const std::string& control_id, const Message& message) {
  Message copy;
  copy.frames() = message.frames();  // frames share their bytes
  SendTo(control_id, std::move(copy));
}

Coordinator::NodeState* Coordinator::Find(const std::string& control_id) {
  for (auto& n : nodes_) {
    if (n->control_id == control_id) return n.get();
  }
  return nullptr;
}

absl::Status Coordinator::Register() {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  const size_t expected = options_.num_servers + options_.num_workers;
  while (nodes_.size() < expected) {
    if (abort_requested_.load()) {
      absl::MutexLock lock(&mu_);
      return absl::AbortedError(abort_reason_);
    }
    {
      // A node the launcher saw exit before it registered will never register: even a job that
      // goes on without lost workers cannot start without it (it would wait out the startup
      // timeout, naming nobody's reason).
      absl::MutexLock lock(&mu_);
      for (const auto& [control_id, reason] : lost_) {
        if (Find(control_id) == nullptr) {
          return absl::UnavailableError(absl::StrCat("a node exited before registering: ", reason));
        }
      }
    }
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      std::vector<std::string> missing;
      for (int r = 0; r < options_.num_servers; ++r) {
        if (!Find(ControlEndpointId(wire::Role::SERVER, r)))
          missing.push_back(absl::StrCat("ps", r));
      }
      for (int r = 0; r < options_.num_workers; ++r) {
        if (!Find(ControlEndpointId(wire::Role::WORKER, r)))
          missing.push_back(absl::StrCat("w", r));
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "nodes did not register within %s: missing %s",
          absl::FormatDuration(options_.startup_timeout), absl::StrJoin(missing, ", ")));
    }
    auto message = endpoint_->Receive(std::min(deadline, now + absl::Milliseconds(100)));
    if (!message.ok()) continue;
    if (auto s = message->Parse(); !s.ok()) {
      SYNCLINE_LOG(WARNING) << "malformed message from " << message->peer() << ": " << s;
      continue;
    }
    auto h = message->header();
    if (h.getType() != wire::MsgType::REGISTER || !h.getBody().isRegister()) continue;
    auto reg = h.getBody().getRegister();
    const wire::Role role = h.getRole();
    const int rank = h.getRank();
    absl::Status problem;
    const int limit = role == wire::Role::SERVER   ? options_.num_servers
                      : role == wire::Role::WORKER ? options_.num_workers
                                                   : 0;
    if (rank < 0 || rank >= limit) {
      problem = absl::InvalidArgumentError(
          absl::StrFormat("%s rank %d is outside this job (%d servers, %d workers)", RoleName(role),
                          rank, options_.num_servers, options_.num_workers));
    } else if (message->peer() != ControlEndpointId(role, rank)) {
      problem = absl::InvalidArgumentError("control endpoint id does not match role and rank");
    } else if (Find(message->peer()) != nullptr) {
      problem = absl::AlreadyExistsError(
          absl::StrFormat("%s %d is already registered", RoleName(role), rank));
    } else if (reg.getVersion() != kBuildVersion) {
      problem = absl::FailedPreconditionError(absl::StrFormat(
          "%s %d runs syncline %s, but this job's coordinator runs %s: start every node from "
          "the same build",
          RoleName(role), rank, reg.getVersion().size() > 0 ? reg.getVersion().cStr() : "(unknown)",
          kBuildVersion));
    } else if (role == wire::Role::SERVER && reg.getDataAddress().size() == 0) {
      problem = absl::InvalidArgumentError("a server must give its data address");
    }
    if (const int world = reg.getWorldSize(); world != 0 && world != static_cast<int>(expected)) {
      // The cluster launcher started the wrong number of ranks: waiting would only end in the
      // startup timeout (or, worse, in a world of its own), so the job stops now.
      const absl::Status wrong = absl::FailedPreconditionError(absl::StrFormat(
          "%s (pid %d on %s) was started as one of %d ranks, but this job has %d nodes (%d "
          "servers + %d workers): start exactly %d ranks",
          DataEndpointId(role, rank), reg.getPid(), reg.getHost().cStr(), world, expected,
          options_.num_servers, options_.num_workers, expected));
      SendTo(message->peer(), MakeErrorReply(h, wrong));
      return wrong;
    }
    if (!problem.ok()) {
      SYNCLINE_LOG(WARNING) << "rejected registration from " << message->peer() << ": " << problem;
      SendTo(message->peer(), MakeErrorReply(h, problem));
      continue;
    }
    auto node = std::make_unique<NodeState>();
    node->role = role;
    node->rank = rank;
    node->control_id = message->peer();
    node->address = reg.getDataAddress();
    node->host = reg.getHost();
    node->pid = reg.getPid();
    node->last_seen = absl::Now();
    nodes_.push_back(std::move(node));
  }

  table_.num_servers = options_.num_servers;
  table_.num_workers = options_.num_workers;
  table_.max_workers = std::max(options_.max_workers, options_.num_workers);
  table_.staleness = options_.staleness;
  table_.heartbeat_interval = options_.heartbeat_interval;
  table_.heartbeat_timeout = options_.heartbeat_timeout;
  table_.job_spec = options_.job_spec;
  table_.version = kBuildVersion;
  std::sort(nodes_.begin(), nodes_.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a->role, a->rank) < std::make_pair(b->role, b->rank);
  });
  // A node heartbeats from the moment the table reaches it, not from its registration: one that
  // registered long before the last (a slow launcher, a busy machine) was waiting, not lost.
  const absl::Time start = absl::Now();
  for (const auto& n : nodes_) n->last_seen = start;
  for (const auto& n : nodes_) {
    table_.nodes.push_back(
        NodeInfo{n->role, n->rank, DataEndpointId(n->role, n->rank), n->address});
  }
  MessageBuilder b(wire::MsgType::REGISTERED);
  b.header().setRole(wire::Role::COORDINATOR);
  table_.ToWire(b.header().getBody().initNodeTable());
  Broadcast(b.Finish());
  return absl::OkStatus();
}

absl::StatusOr<std::optional<Message>> Coordinator::Step(absl::Time deadline) {
  if (abort_requested_.load()) {
    absl::MutexLock lock(&mu_);
    return absl::AbortedError(abort_reason_);
  }
  if (auto s = CheckHeartbeats(); !s.ok()) return s;
  auto message = endpoint_->Receive(std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  if (!message.ok()) {
    if (absl::IsDeadlineExceeded(message.status())) return std::optional<Message>();
    return message.status();
  }
  if (auto s = message->Parse(); !s.ok()) {
    SYNCLINE_LOG(WARNING) << "malformed message from " << message->peer() << ": " << s;
    return std::optional<Message>();
  }
  if (message->header().getType() == wire::MsgType::JOIN) {
    HandleJoinRequest(*message);
    return std::optional<Message>();
  }
  NodeState* node = Find(message->peer());
  if (node == nullptr || node->down) return std::optional<Message>();
  // A replacement can register before this thread has taken the launcher's restart request.
  if (!node->replacing && message->header().getType() == wire::MsgType::REGISTER) {
    if (auto s = HandleRestarts(); !s.ok()) return s;
  }
  if (node->replacing) {
    // The failed process's last words are dropped; its replacement starts with a registration.
    if (message->header().getType() == wire::MsgType::REGISTER) {
      RegisterReplacement(*node, *message);
    }
    return std::optional<Message>();
  }
  node->last_seen = absl::Now();
  // Parse has read every field; a reader that still throws costs this message only.
  try {
    auto h = message->header();
    // A node that has not yet rolled back reports on the timeline that is being undone.
    const bool stale = recovering_ && !node->restored;
    switch (h.getType()) {
      case wire::MsgType::READY:
        if (!recovering_) return std::optional<Message>(std::move(*message));
        // A replacement has restored the checkpoint and is ready to serve or train.
        if (node->needs_start) node->restored = true;
        if (auto s = AdvanceRecovery(); !s.ok()) return s;
        return std::optional<Message>();
      case wire::MsgType::ROLLED_BACK:
        if (recovering_ && h.getGeneration() == generation_) {
          node->restored = true;
          if (node->role == wire::Role::WORKER) {
            steps_undone_ = std::max(steps_undone_, h.getClock() - rollback_clock_);
          }
          if (auto s = AdvanceRecovery(); !s.ok()) return s;
        }
        return std::optional<Message>();
      case wire::MsgType::WORKER_DONE:
        if (stale) return std::optional<Message>();
        return std::optional<Message>(std::move(*message));
      case wire::MsgType::HEARTBEAT:
        if (node->role == wire::Role::WORKER && !stale && h.getClock() != node->clock) {
          node->clock = h.getClock();
          node->clock_since = absl::Now();
          if (node->clock > latest_worker_clock_.load()) latest_worker_clock_.store(node->clock);
        }
        SendTo(node->control_id, MakeSimple(wire::MsgType::HEARTBEAT, wire::Role::COORDINATOR, 0));
        return std::optional<Message>();
      case wire::MsgType::PROGRESS:
        if (node->role == wire::Role::WORKER && h.getBody().isProgress() && observer_ && !stale) {
          observer_->OnProgress(node->rank, h.getBody().getProgress());
        }
        return std::optional<Message>();
      case wire::MsgType::SERVER_PROGRESS:
        if (node->role == wire::Role::SERVER && h.getBody().isServerStats() && observer_) {
          observer_->OnServerProgress(node->rank, h.getBody().getServerStats());
        }
        return std::optional<Message>();
      case wire::MsgType::CHECKPOINTED:
        // A part of a checkpoint of the undone timeline must not complete one of the new.
        if (!stale) OnCheckpointed(*node, h);
        return std::optional<Message>();
      case wire::MsgType::ABORT: {
        const std::string reason =
            absl::StrFormat("%s failed: %s", node->Name(), h.getMessage().cStr());
        const auto code = static_cast<absl::StatusCode>(h.getStatusCode());
        if (CanRestart() && code != absl::StatusCode::kInvalidArgument &&
            code != absl::StatusCode::kOutOfRange) {
          // Its process exits next, and the launcher restarts it (Restart), or fails the job
          // with these words (LastWords) when it does not.
          SYNCLINE_LOG(WARNING) << reason << " (to be restarted)";
          absl::MutexLock lock(&mu_);
          last_words_[node->control_id] = reason;
          return std::optional<Message>();
        }
        // Where the job goes on without a lost worker (ASP, SSP, gossip, --min-workers) it goes
        // on without one that failed; bad input and a diverged model stop the job all the same.
        if (node->role == wire::Role::WORKER && MinWorkers() < options_.num_workers &&
            code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kOutOfRange) {
          if (auto s = MarkDown(*node, reason); !s.ok()) return s;
          return std::optional<Message>();
        }
        return absl::Status(
            code == absl::StatusCode::kOutOfRange ? code : absl::StatusCode::kAborted, reason);
      }
      default:
        return std::optional<Message>(std::move(*message));
    }
  } catch (const kj::Exception& e) {
    SYNCLINE_LOG(WARNING) << "malformed message from " << node->Name() << ": "
                          << e.getDescription().cStr();
    return std::optional<Message>();
  }
}

absl::Status Coordinator::CheckHeartbeats() {
  // Restarts first: a checkpoint request queued meanwhile must wait for the recovery's end.
  if (auto s = HandleRestarts(); !s.ok()) return s;
  if (auto s = AdvanceRecovery(); !s.ok()) return s;
  std::vector<std::pair<std::string, std::string>> lost;
  std::vector<int64_t> checkpoints;
  {
    absl::MutexLock lock(&mu_);
    lost.swap(lost_);
    // A replacement not yet registered would miss the request: it waits for the resume.
    if (!recovering_) checkpoints.swap(checkpoint_requests_);
  }
  for (int64_t clock : checkpoints) {
    MessageBuilder b(wire::MsgType::CHECKPOINT);
    b.header().setRole(wire::Role::COORDINATOR);
    b.header().setClock(clock);
    Broadcast(b.Finish());
  }
  for (const auto& [control_id, reason] : lost) {
    NodeState* n = Find(control_id);
    if (n == nullptr || n->down) continue;
    if (auto s = MarkDown(*n, reason); !s.ok()) return s;
  }
  const absl::Time now = absl::Now();
  // Workers that have not answered the cut request in a heartbeat timeout (alive, but busy
  // for that long) are left out of the arrival: they prepare nothing past a cut they did not
  // give, and hear the arrival all the same.
  if (arrival_ && now - arrival_start_ > options_.heartbeat_timeout) {
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "%d worker%s did not answer the cut request for %s in %s: left out of its arrival",
        arrival_->waiting.size(), arrival_->waiting.size() == 1 ? "" : "s",
        DataEndpointId(wire::Role::WORKER, arrival_->joiner->rank),
        absl::FormatDuration(options_.heartbeat_timeout));
    arrival_->waiting.clear();
    CompleteArrival();
  }
  if (announcing_ && now - announcing_->since > options_.heartbeat_timeout) {
    std::vector<std::string> late;
    for (int r : announcing_->servers) late.push_back(absl::StrCat("ps", r));
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s did not take %s into the clock set within %s", absl::StrJoin(late, ", "),
        DataEndpointId(wire::Role::WORKER, announcing_->joiner->rank),
        absl::FormatDuration(options_.heartbeat_timeout)));
  }
  if (auto s = CheckStuckWorkers(now); !s.ok()) return s;
  for (auto& n : nodes_) {
    // A replacement heartbeats once it has its table (SendReplacementTables).
    if (n->down || n->replacing || n->awaiting_table || InArrival(*n) ||
        now - n->last_seen <= options_.heartbeat_timeout) {
      continue;
    }
    const std::string reason = absl::StrFormat(
        "%s sent no heartbeat for %s", n->Name(),
        absl::FormatDuration(absl::Trunc(now - n->last_seen, absl::Milliseconds(100))));
    if (ReportHung(*n, reason)) continue;
    if (auto s = MarkDown(*n, reason); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Coordinator::CheckStuckWorkers(absl::Time now) {
  if (options_.stuck_timeout <= absl::ZeroDuration() || options_.staleness < 0 || recovering_) {
    return {};
  }
  // The slowest training worker, and how many others are too far ahead of it to go on.
  NodeState* slowest = nullptr;
  for (auto& n : nodes_) {
    if (n->role != wire::Role::WORKER || n->down || n->done || n->clock < 0) continue;
    if (slowest == nullptr || n->clock < slowest->clock) slowest = n.get();
  }
  if (slowest == nullptr || now - slowest->clock_since < options_.stuck_timeout) return {};
  int waiting = 0;
  for (auto& n : nodes_) {
    if (n->role == wire::Role::WORKER && !n->down && !n->done &&
        n->clock > slowest->clock + options_.staleness) {
      ++waiting;
    }
  }
  if (waiting == 0) return {};
  const std::string reason = absl::StrFormat(
      "%s stuck at clock %d for %s while %d worker%s wait%s for it (its heartbeats arrive, so it "
      "is alive but not training: a hang?)",
      slowest->Name(), slowest->clock,
      absl::FormatDuration(absl::Trunc(now - slowest->clock_since, absl::Seconds(1))), waiting,
      waiting == 1 ? "" : "s", waiting == 1 ? "s" : "");
  if (ReportHung(*slowest, reason)) {
    slowest->clock_since = now;  // a stuck timeout more for the launcher to act
    return {};
  }
  return absl::DeadlineExceededError(reason);
}

int Coordinator::MinWorkers() const {
  if (options_.min_workers > 0) return options_.min_workers;
  return options_.staleness == 0 ? options_.num_workers : 1;
}

absl::Status Coordinator::MarkDown(NodeState& n, const std::string& reason) {
  if (n.joining && !InArrival(n)) {
    // Given a rank, never registered under it: nobody's plan knows of it.
    n.down = true;
    SYNCLINE_LOG(WARNING) << reason << " (it had asked to join, and never registered)";
    return absl::OkStatus();
  }
  // A joiner lost while its arrival is gathered: the arrival goes out first (the donors wait
  // for it), then its departure hands its share back.
  n.down = true;
  if (n.joining) {
    CompleteArrival();
    AnnounceArrival();
  }
  SYNCLINE_LOG(ERROR) << reason;
  if (observer_) observer_->OnNodeDown(n.role, n.rank, reason);
  if (n.role == wire::Role::SERVER) {
    return absl::UnavailableError(absl::StrCat("lost server: ", reason));
  }
  if (recovering_) {
    // Its batches would go to plans being restored from a checkpoint that knows nothing of
    // its departure (and to a replacement that may not have registered yet).
    return absl::UnavailableError(absl::StrFormat(
        "lost worker while the job rolled back to checkpoint %d: %s", rollback_clock_, reason));
  }
  std::vector<int> takers;
  int left = 0;
  for (const auto& w : nodes_) {
    if (w->role != wire::Role::WORKER || w->down || w->joining) continue;
    ++left;
    if (!w->done) takers.push_back(w->rank);
  }
  if (!n.done && left < MinWorkers()) {
    if (MinWorkers() == options_.num_workers && options_.staleness == 0) {
      return absl::UnavailableError(
          absl::StrCat("lost worker under BSP, which cannot go on without it",
                       options_.hand_over ? " (--min-workers lets it)" : "", ": ", reason));
    }
    return absl::UnavailableError(
        absl::StrFormat("lost worker: %s; %d worker%s left, fewer than --min-workers %d", reason,
                        left, left == 1 ? "" : "s", MinWorkers()));
  }
  // The heartbeat's clock is set once the iteration's clock messages are queued, not sent: a
  // worker killed just then may leave that iteration unfinished at the servers, which drop it.
  // One iteration earlier is never past what every server has.
  const int64_t clock = std::max<int64_t>(n.clock - 1, n.first_clock);
  // The workers' plans now differ from any checkpoint's before this departure.
  {
    absl::MutexLock lock(&mu_);
    can_roll_back_.store(false);
  }
  if (!options_.hand_over || n.done) takers.clear();
  if (takers.empty()) {
    SYNCLINE_LOG(WARNING) << "going on without " << DataEndpointId(n.role, n.rank)
                          << (options_.hand_over && !n.done
                                  ? "; no worker is still training to take its batches"
                                  : "");
  } else {
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "going on without %s: its batches from clock %d go to %s", DataEndpointId(n.role, n.rank),
        clock,
        absl::StrJoin(takers, ", ", [](std::string* out, int r) { absl::StrAppend(out, "w", r); }));
  }
  if (observer_ && !n.done) observer_->OnWorkerLeft(n.rank, clock, takers);
  MessageBuilder b(wire::MsgType::NODE_DOWN);
  b.header().setRole(wire::Role::COORDINATOR);
  auto d = b.header().getBody().initNodeDown();
  d.setRole(n.role);
  d.setRank(n.rank);
  d.setReason(reason);
  d.setClock(clock);
  auto list = d.initTakers(static_cast<unsigned>(takers.size()));
  for (size_t i = 0; i < takers.size(); ++i) list.set(static_cast<unsigned>(i), takers[i]);
  Message down = b.Finish();
  Broadcast(down);
  // A joiner hears it too, in the same order as every other worker.
  plan_events_.push_back(std::move(down));
  // A worker asked for its cut that is gone gives nothing (its departure came first).
  OnCut(n, std::nullopt);
  return absl::OkStatus();
}

void Coordinator::RequestCheckpoint(int64_t clock) {
  absl::MutexLock lock(&mu_);
  checkpoint_requests_.push_back(clock);
}

std::string Coordinator::LastWords(wire::Role role, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = last_words_.find(ControlEndpointId(role, rank));
  return it == last_words_.end() ? "" : it->second;
}

bool Coordinator::Recovering() const { return recovering_flag_.load(); }

bool Coordinator::ReportHung(NodeState& n, const std::string& reason) {
  if (n.hang_reported || !CanRestart()) return false;
  n.hang_reported = true;
  n.last_seen = absl::Now();  // one more heartbeat timeout for the launcher to act
  SYNCLINE_LOG(ERROR) << reason << "; asking the launcher to stop it, for a restart";
  absl::MutexLock lock(&mu_);
  hung_.emplace_back(DataEndpointId(n.role, n.rank), reason);
  return true;
}

std::vector<std::pair<std::string, std::string>> Coordinator::TakeHungNodes() {
  absl::MutexLock lock(&mu_);
  return std::exchange(hung_, {});
}

bool Coordinator::CanRestart() const { return restarts_left_.load() > 0 && can_roll_back_.load(); }

bool Coordinator::Restart(wire::Role role, int rank, std::string reason, int64_t clock,
                          std::string dir) {
  absl::MutexLock lock(&mu_);
  if (!CanRestart()) return false;
  restarts_left_.fetch_sub(1);
  // From now on no checkpoint is asked for until the recovery ends (Recovering).
  recovering_flag_.store(true);
  restarts_.push_back(
      RestartRequest{ControlEndpointId(role, rank), std::move(reason), clock, std::move(dir)});
  return true;
}

absl::Status Coordinator::HandleRestarts() {
  std::vector<RestartRequest> restarts;
  {
    absl::MutexLock lock(&mu_);
    restarts.swap(restarts_);
  }
  for (const RestartRequest& r : restarts) {
    NodeState* n = Find(r.control_id);
    if (n == nullptr || n->down || !can_roll_back_.load()) {
      // A worker left (or the training ended) between the request and now.
      return absl::UnavailableError(
          absl::StrCat(r.reason, "; it cannot be restarted: the job can no longer roll back"));
    }
    BeginRollback(*n, r);
  }
  return absl::OkStatus();
}

void Coordinator::BeginRollback(NodeState& n, const RestartRequest& request) {
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    last_words_.erase(n.control_id);  // the replacement's failures are its own
  }
  n.replacing = true;
  n.awaiting_table = false;
  n.hang_reported = false;
  n.restored = false;
  n.needs_start = true;
  n.ready = false;
  n.last_seen = now;
  // A worker that had finished trains again from the checkpoint too.
  n.done = false;
  const int64_t reached = n.clock;
  if (n.role == wire::Role::WORKER) n.clock = recovering_ ? rollback_clock_ : request.clock;
  recovery_deadline_ = now + options_.startup_timeout;
  if (recovering_) {
    // The others have restored the rollback's checkpoint, or are restoring it: the new
    // replacement restores the same one.
    SYNCLINE_LOG(ERROR) << request.reason << "; restarting it too, into the same rollback to clock "
                        << rollback_clock_;
    if (observer_) observer_->OnRollback(n.role, n.rank, rollback_clock_, request.reason);
    return;
  }
  ++generation_;
  recovering_ = true;
  recovering_flag_.store(true);
  latest_worker_clock_.store(-1);  // the timeline past the checkpoint is undone
  rollback_clock_ = request.clock;
  rollback_dir_ = request.dir;
  recovery_start_ = now;
  // The failed worker's clock as its last heartbeat carried it; the others' come with their
  // rolledBack.
  steps_undone_ = n.role == wire::Role::WORKER ? std::max<int64_t>(0, reached - request.clock) : 0;
  SYNCLINE_LOG(ERROR) << request.reason << "; restarting " << DataEndpointId(n.role, n.rank)
                      << " and rolling every node back to checkpoint " << request.clock << " ("
                      << request.dir << ")";
  if (observer_) observer_->OnRollback(n.role, n.rank, rollback_clock_, request.reason);
  for (auto& other : nodes_) {
    if (other->down || other.get() == &n) continue;
    other->restored = false;
    other->needs_start = false;
    if (other->role == wire::Role::WORKER) {
      other->done = false;
      other->clock = request.clock;
      other->clock_since = now;
    }
  }
  MessageBuilder b(wire::MsgType::ROLLBACK);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setClock(request.clock);
  b.header().setGeneration(generation_);
  b.header().setMessage(request.dir);
  Broadcast(b.Finish());
}

void Coordinator::RegisterReplacement(NodeState& n, Message& message) {
  auto h = message.header();
  if (!h.getBody().isRegister()) return;
  auto reg = h.getBody().getRegister();
  absl::Status problem;
  if (reg.getVersion() != kBuildVersion) {
    problem = absl::FailedPreconditionError(absl::StrFormat(
        "the replacement of %s runs syncline %s, but this job's coordinator runs %s",
        DataEndpointId(n.role, n.rank), reg.getVersion().cStr(), kBuildVersion));
  } else if (n.role == wire::Role::SERVER && reg.getDataAddress().size() == 0) {
    problem = absl::InvalidArgumentError("a server must give its data address");
  }
  if (!problem.ok()) {
    SYNCLINE_LOG(WARNING) << "rejected a replacement's registration: " << problem;
    SendTo(n.control_id, MakeErrorReply(h, problem));
    return;
  }
  n.replacing = false;
  n.awaiting_table = true;
  n.host = reg.getHost();
  n.pid = reg.getPid();
  n.last_seen = absl::Now();
  SYNCLINE_LOG(INFO) << n.Name() << " registered as a replacement; it restores checkpoint "
                     << rollback_clock_;
  SendReplacementTables();
}

void Coordinator::SendReplacementTables() {
  // A replacement worker connects to the servers: only once every surviving node has rolled
  // back, since a server busy restoring (or finishing a checkpoint of the undone timeline)
  // may not yet have let go of the failed worker's connection, and a plaintext socket
  // refuses a second one under a live id for good. A replacement server only accepts
  // connections (fresh ones, from the workers): it restores meanwhile.
  bool survivors_restored = true;
  for (const auto& n : nodes_) {
    if (!n->down && !n->needs_start && !n->restored) survivors_restored = false;
  }
  for (auto& n : nodes_) {
    if (n->down || !n->awaiting_table) continue;
    if (n->role == wire::Role::WORKER && !survivors_restored) continue;
    n->awaiting_table = false;
    n->last_seen = absl::Now();
    // Peers know the node at its old address: the replacement listens there (job/node_join.h).
    NodeTable table = table_;
    table.generation = generation_;
    table.restore = rollback_dir_;
    MessageBuilder b(wire::MsgType::REGISTERED);
    b.header().setRole(wire::Role::COORDINATOR);
    table.ToWire(b.header().getBody().initNodeTable());
    SendTo(n->control_id, b.Finish());
  }
}

absl::Status Coordinator::AdvanceRecovery() {
  if (!recovering_) return absl::OkStatus();
  SendReplacementTables();
  std::vector<std::string> waiting;
  for (const auto& n : nodes_) {
    if (n->down || n->restored) continue;
    waiting.push_back(absl::StrCat(DataEndpointId(n->role, n->rank),
                                   n->replacing        ? " (its replacement has not registered)"
                                   : n->awaiting_table ? " (its replacement waits for the others)"
                                   : n->needs_start    ? " (its replacement is restoring)"
                                                       : " (rolling back)"));
  }
  const absl::Time now = absl::Now();
  if (!waiting.empty()) {
    if (now < recovery_deadline_) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrFormat(
        "the rollback to checkpoint %d did not finish within %s: waiting for %s", rollback_clock_,
        absl::FormatDuration(options_.startup_timeout), absl::StrJoin(waiting, ", ")));
  }
  recovering_ = false;
  const absl::Duration took = now - recovery_start_;
  SYNCLINE_LOG(INFO) << "every node has restored checkpoint " << rollback_clock_
                     << "; training goes on (" << absl::FormatDuration(took)
                     << " after the restart; " << steps_undone_
                     << " iterations of the fastest worker undone)";
  // Reported before any node goes on, so that no report of the new timeline precedes it.
  if (observer_) observer_->OnRecovered(rollback_clock_, took, steps_undone_);
  recovering_flag_.store(false);
  for (auto& n : nodes_) {
    if (n->down || !n->needs_start) continue;
    n->needs_start = false;
    n->ready = true;
    SendTo(n->control_id, MakeSimple(wire::MsgType::START, wire::Role::COORDINATOR, 0));
  }
  MessageBuilder b(wire::MsgType::RESUME);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setClock(rollback_clock_);
  b.header().setGeneration(generation_);
  Broadcast(b.Finish());
  return absl::OkStatus();
}

void Coordinator::HandleJoinRequest(Message& message) {
  auto h = message.header();
  const int max_workers = std::max(options_.max_workers, options_.num_workers);
  bool pending = false;
  for (const auto& n : nodes_) pending = pending || (n->joining && !n->down);
  absl::Status problem;
  if (!h.getBody().isRegister()) {
    problem = absl::InvalidArgumentError("a join request carries the joiner's registration");
  } else if (h.getBody().getRegister().getVersion() != kBuildVersion) {
    problem = absl::FailedPreconditionError(absl::StrFormat(
        "the joiner runs syncline %s, but this job's coordinator runs %s: start it from the "
        "same build",
        h.getBody().getRegister().getVersion().cStr(), kBuildVersion));
  } else if (max_workers <= options_.num_workers) {
    problem = absl::FailedPreconditionError(
        "this job takes no joins: start it with --max-workers N (more than --workers)");
  } else if (next_rank_ >= max_workers) {
    problem = absl::ResourceExhaustedError(absl::StrFormat(
        "this job has had its --max-workers %d workers: no rank is left to join at", max_workers));
  } else if (!training_ || recovering_) {
    // Transient: before the start (or during a rollback) the joiner asks again.
    problem = absl::UnavailableError(recovering_ ? "the job is rolling back to a checkpoint"
                                                 : "the job is not training (not yet started, or "
                                                   "its workers have finished)");
  } else if (pending) {
    problem = absl::UnavailableError("another worker is joining");
  }
  if (!problem.ok()) {
    SYNCLINE_LOG(WARNING) << "refused a join request from " << message.peer() << ": " << problem;
    SendTo(message.peer(), MakeErrorReply(h, problem));
    return;
  }
  auto reg = h.getBody().getRegister();
  auto node = std::make_unique<NodeState>();
  node->role = wire::Role::WORKER;
  node->rank = next_rank_++;
  node->control_id = ControlEndpointId(wire::Role::WORKER, node->rank);
  node->host = reg.getHost();
  node->pid = reg.getPid();
  node->last_seen = absl::Now();
  node->joining = true;
  SYNCLINE_LOG(INFO) << absl::StrFormat("a worker (pid %d on %s) asks to join: it is %s", node->pid,
                                        node->host, DataEndpointId(wire::Role::WORKER, node->rank));
  {
    // The plans now differ from any checkpoint's (joins are refused with checkpoints anyway).
    absl::MutexLock lock(&mu_);
    can_roll_back_.store(false);
  }
  MessageBuilder b(wire::MsgType::JOIN);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setRequestId(h.getRequestId());
  b.header().setRank(node->rank);
  SendTo(message.peer(), b.Finish());
  nodes_.push_back(std::move(node));
}

void Coordinator::BeginArrival(NodeState& joiner, Message& message) {
  auto h = message.header();
  if (!h.getBody().isRegister()) return;
  auto reg = h.getBody().getRegister();
  joiner.address = reg.getDataAddress();
  joiner.host = reg.getHost();
  joiner.pid = reg.getPid();
  joiner.last_seen = absl::Now();
  arrival_ = PendingArrival{&joiner, {}, {}};
  arrival_start_ = absl::Now();
  for (const auto& n : nodes_) {
    if (n->role != wire::Role::WORKER || n->down || n->done || n->joining) continue;
    arrival_->waiting.push_back(n->rank);
    MessageBuilder b(wire::MsgType::CUT);
    b.header().setRole(wire::Role::COORDINATOR);
    b.header().setRank(joiner.rank);
    SendTo(n->control_id, b.Finish());
  }
  SYNCLINE_LOG(INFO) << joiner.Name() << " registered; asking " << arrival_->waiting.size()
                     << " training workers where its share of their batches starts";
  if (arrival_->waiting.empty()) CompleteArrival();
}

bool Coordinator::InArrival(const NodeState& n) const {
  return (arrival_ && arrival_->joiner == &n) || (announcing_ && announcing_->joiner == &n);
}

void Coordinator::OnCut(NodeState& worker, std::optional<int64_t> cut) {
  if (!arrival_) return;
  auto& waiting = arrival_->waiting;
  auto it = std::find(waiting.begin(), waiting.end(), worker.rank);
  if (it == waiting.end()) return;
  waiting.erase(it);
  if (cut && *cut >= 0 && !worker.down) arrival_->cuts.emplace_back(worker.rank, *cut);
  if (waiting.empty()) CompleteArrival();
}

void Coordinator::CompleteArrival() {
  if (!arrival_) return;
  PendingArrival a = std::move(*arrival_);
  arrival_.reset();
  NodeState& joiner = *a.joiner;
  // Donors in rank order; one that went down since it answered gave its batches to takers.
  std::vector<std::pair<int, int64_t>> cuts;
  for (const auto& [rank, cut] : a.cuts) {
    NodeState* n = Find(ControlEndpointId(wire::Role::WORKER, rank));
    if (n != nullptr && !n->down) cuts.emplace_back(rank, cut);
  }
  std::sort(cuts.begin(), cuts.end());
  int64_t first_clock = 0;
  for (size_t i = 0; i < cuts.size(); ++i) {
    first_clock = i == 0                         ? cuts[i].second
                  : options_.enter_at_latest_cut ? std::max(first_clock, cuts[i].second)
                                                 : std::min(first_clock, cuts[i].second);
  }
  MessageBuilder b(wire::MsgType::ARRIVAL);
  b.header().setRole(wire::Role::COORDINATOR);
  auto body = b.header().getBody().initArrival();
  body.setWorker(joiner.rank);
  body.setFirstClock(first_clock);
  auto donors = body.initDonors(static_cast<unsigned>(cuts.size()));
  auto clocks = body.initCuts(static_cast<unsigned>(cuts.size()));
  std::vector<int> donor_ranks;
  for (size_t i = 0; i < cuts.size(); ++i) {
    donors.set(static_cast<unsigned>(i), cuts[i].first);
    clocks.set(static_cast<unsigned>(i), cuts[i].second);
    donor_ranks.push_back(cuts[i].first);
  }
  Message arrival = b.Finish();
  joiner.first_clock = first_clock;
  joiner.clock = first_clock;
  joiner.clock_since = absl::Now();
  joiner.last_seen = absl::Now();
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "%s joins at clock %d: %s give%s it one in %d of their batches from their cuts (%s)",
      joiner.Name(), first_clock,
      cuts.empty() ? "no worker still training"
                   : absl::StrJoin(donor_ranks, ", ",
                                   [](std::string* out, int r) { absl::StrAppend(out, "w", r); }),
      cuts.size() == 1 ? "s" : "", cuts.size() + 1,
      absl::StrJoin(cuts, ", ", [](std::string* out, const std::pair<int, int64_t>& c) {
        absl::StrAppend(out, "w", c.first, " at ", c.second);
      }));
  // The servers first: each takes the joiner into its clock set at its first clock before any
  // donor, hearing the arrival, goes past its cut (under BSP the joiner's first iteration is
  // then one of every server's clocks).
  announcing_ = Announcement{&joiner, std::move(arrival), {}, std::move(donor_ranks), absl::Now()};
  for (const auto& n : nodes_) {
    if (n->role != wire::Role::SERVER || n->down) continue;
    announcing_->servers.push_back(n->rank);
    SendCopy(n->control_id, announcing_->message);
  }
  if (announcing_->servers.empty()) AnnounceArrival();
}

void Coordinator::OnArrivalTaken(const NodeState& server, int64_t worker) {
  if (!announcing_ || worker != announcing_->joiner->rank) return;
  auto& servers = announcing_->servers;
  servers.erase(std::remove(servers.begin(), servers.end(), server.rank), servers.end());
  if (servers.empty()) AnnounceArrival();
}

void Coordinator::AnnounceArrival() {
  if (!announcing_) return;
  Announcement a = std::move(*announcing_);
  announcing_.reset();
  NodeState& joiner = *a.joiner;
  // The workers (the joiner, still joining, hears it after its table).
  Broadcast(a.message, wire::Role::WORKER);
  plan_events_.push_back(std::move(a.message));
  if (joiner.down) return;
  joiner.joining = false;
  joiner.clock_since = absl::Now();
  joiner.last_seen = absl::Now();
  table_.nodes.push_back(
      NodeInfo{joiner.role, joiner.rank, DataEndpointId(joiner.role, joiner.rank), joiner.address});
  MessageBuilder t(wire::MsgType::REGISTERED);
  t.header().setRole(wire::Role::COORDINATOR);
  table_.ToWire(t.header().getBody().initNodeTable());
  SendTo(joiner.control_id, t.Finish());
  for (const Message& event : plan_events_) SendCopy(joiner.control_id, event);
  if (observer_) {
    observer_->OnWorkerJoined(joiner.rank, joiner.Name(), joiner.first_clock, a.donors);
  }
}

void Coordinator::ReportLost(wire::Role role, int rank, std::string reason) {
  absl::MutexLock lock(&mu_);
  lost_.emplace_back(ControlEndpointId(role, rank), std::move(reason));
}

absl::Status Coordinator::AwaitReady() {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  auto all_ready = [&] {
    return std::all_of(nodes_.begin(), nodes_.end(), [](const auto& n) { return n->ready; });
  };
  while (!all_ready()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError("nodes did not report ready in time");
    }
    auto message = Step(deadline);
    if (!message.ok()) return message.status();
    if (!message->has_value()) continue;
    if ((*message)->header().getType() == wire::MsgType::READY) {
      Find((*message)->peer())->ready = true;
    }
  }
  Broadcast(MakeSimple(wire::MsgType::START, wire::Role::COORDINATOR, 0));
  if (observer_) observer_->OnStarted(table_);
  return absl::OkStatus();
}

absl::Status Coordinator::Supervise() {
  can_roll_back_.store(options_.max_restarts > 0);
  absl::Cleanup no_more_rollbacks = [this] { can_roll_back_.store(false); };
  auto workers_finished = [&] {
    return !recovering_ && std::all_of(nodes_.begin(), nodes_.end(), [](const auto& n) {
      return n->role != wire::Role::WORKER || n->done || n->down;
    });
  };
  training_ = true;
  absl::Cleanup no_more_joins = [this] { training_ = false; };
  while (!workers_finished()) {
    auto message = Step(absl::InfiniteFuture());
    if (!message.ok()) return message.status();
    if (!message->has_value()) continue;
    Message& m = **message;
    NodeState* node = Find(m.peer());
    auto h = m.header();
    if (node->role == wire::Role::SERVER && h.getType() == wire::MsgType::ARRIVAL) {
      OnArrivalTaken(*node, h.getClock());
      continue;
    }
    if (node->role != wire::Role::WORKER) continue;
    switch (h.getType()) {
      case wire::MsgType::WORKER_DONE:
        node->done = true;
        if (observer_ && h.getBody().isWorkerStats()) {
          observer_->OnWorkerDone(node->rank, h.getBody().getWorkerStats());
        }
        OnCut(*node, std::nullopt);
        break;
      case wire::MsgType::REGISTER:
        if (node->joining && !arrival_ && !announcing_) BeginArrival(*node, m);
        break;
      case wire::MsgType::CUT:
        OnCut(*node, h.getClock());
        break;
      case wire::MsgType::READY:
        // A joiner has its handlers in place: it starts at once.
        if (!node->ready && !node->joining) {
          node->ready = true;
          SendTo(node->control_id, MakeSimple(wire::MsgType::START, wire::Role::COORDINATOR, 0));
        }
        break;
      default:
        break;
    }
  }
  training_ = false;
  // Evaluation reads the final model: a failure from here on stops the job.
  {
    absl::MutexLock lock(&mu_);
    can_roll_back_.store(false);
    if (!restarts_.empty()) {
      return absl::UnavailableError(absl::StrCat(
          restarts_.front().reason, " as the training ended; it cannot be restarted then"));
    }
  }
  if (!options_.evaluate) return absl::OkStatus();

  NodeState* evaluator = nullptr;
  for (auto& n : nodes_) {
    if (n->role == wire::Role::WORKER && !n->down) {
      evaluator = n.get();
      break;
    }
  }
  if (evaluator == nullptr) return absl::UnavailableError("every worker is down");
  SendTo(evaluator->control_id, MakeSimple(wire::MsgType::EVALUATE, wire::Role::COORDINATOR, 0));
  const absl::Time deadline = absl::Now() + options_.evaluate_timeout;
  while (true) {
    if (absl::Now() >= deadline) return absl::DeadlineExceededError("evaluation took too long");
    if (evaluator->down) return absl::UnavailableError("the evaluating worker is down");
    auto message = Step(deadline);
    if (!message.ok()) return message.status();
    if (!message->has_value()) continue;
    auto h = (**message).header();
    if (h.getType() == wire::MsgType::RESULT && (**message).peer() == evaluator->control_id) {
      if (observer_ && h.getBody().isEvaluation()) {
        observer_->OnEvaluation(evaluator->rank, h.getBody().getEvaluation());
      }
      return absl::OkStatus();
    }
  }
}

void Coordinator::OnCheckpointed(const NodeState& node, const wire::Header::Reader& h) {
  if (observer_) observer_->OnCheckpointed(node.role, node.rank, h.getClock(), StatusFromHeader(h));
}

absl::Status Coordinator::Shutdown() {
  Broadcast(MakeSimple(wire::MsgType::SHUTDOWN, wire::Role::COORDINATOR, 0));
  const absl::Time deadline = absl::Now() + options_.shutdown_timeout;
  auto all_stats = [&] {
    return std::all_of(nodes_.begin(), nodes_.end(), [](const auto& n) {
      return n->role != wire::Role::SERVER || n->stats || n->down;
    });
  };
  while (!all_stats() && absl::Now() < deadline) {
    auto message = endpoint_->Receive(deadline);
    if (!message.ok() || !message->Parse().ok()) continue;
    NodeState* node = Find(message->peer());
    auto h = message->header();
    if (node && h.getType() == wire::MsgType::SERVER_STATS && h.getBody().isServerStats()) {
      node->stats = true;
      if (observer_) observer_->OnServerStats(node->rank, h.getBody().getServerStats());
    }
    // A server finishes writing its last checkpoint before it reports its statistics.
    if (node && h.getType() == wire::MsgType::CHECKPOINTED) OnCheckpointed(*node, h);
  }
  if (!all_stats()) SYNCLINE_LOG(WARNING) << "some servers did not report statistics at shutdown";
  return absl::OkStatus();
}

}  // namespace syncline
