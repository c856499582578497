// The coordinator's run (rendezvous, supervision, shutdown) and its message pump, Step. The
// phases live beside it: coordinator_rendezvous.cc, coordinator_supervision.cc,
// coordinator_joins.cc and coordinator_recovery.cc.
#include "core/coordinator.h"

#include <kj/exception.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "core/coordinator_node_state.h"
#include "core/log.h"

namespace syncline {
namespace {

// The answer to a heartbeat: its send time (requestId) echoed with the coordinator's clock, from
// which the node measures the offset between the two (ControlClient::ClockOffsetMicros).
Message HeartbeatAnswer(const wire::Header::Reader& heartbeat) {
  MessageBuilder b(wire::MsgType::HEARTBEAT);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setRequestId(heartbeat.getRequestId());
  b.header().setWallMicros(absl::ToUnixMicros(absl::Now()));
  return b.Finish();
}

}  // namespace

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
  const absl::Time now = absl::Now();
  // A node heartbeats every interval from its own thread: a longer silence lost some.
  if (training_ && now - node->last_seen > 2 * options_.heartbeat_interval) {
    heartbeat_misses_.fetch_add((now - node->last_seen) / options_.heartbeat_interval - 1,
                                std::memory_order_relaxed);
  }
  node->last_seen = now;
  // Parse has read every field; a reader that still throws costs this message only.
  try {
    return Handle(*node, *message);
  } catch (const kj::Exception& e) {
    SYNCLINE_LOG(WARNING) << "malformed message from " << node->Name() << ": "
                          << e.getDescription().cStr();
    return std::optional<Message>();
  }
}

absl::StatusOr<std::optional<Message>> Coordinator::Handle(NodeState& node, Message& message) {
  auto h = message.header();
  // A node that has not yet rolled back reports on the timeline that is being undone.
  const bool stale = recovering_ && !node.restored;
  switch (h.getType()) {
    case wire::MsgType::READY:
      if (!recovering_) return std::optional<Message>(std::move(message));
      // A replacement has restored the checkpoint and is ready to serve or train.
      if (node.needs_start) node.restored = true;
      if (auto s = AdvanceRecovery(); !s.ok()) return s;
      return std::optional<Message>();
    case wire::MsgType::ROLLED_BACK:
      if (recovering_ && h.getGeneration() == generation_) {
        node.restored = true;
        if (node.role == wire::Role::WORKER) {
          steps_undone_ = std::max(steps_undone_, h.getClock() - rollback_clock_);
        }
        if (auto s = AdvanceRecovery(); !s.ok()) return s;
      }
      return std::optional<Message>();
    case wire::MsgType::WORKER_DONE:
      if (stale) return std::optional<Message>();
      return std::optional<Message>(std::move(message));
    case wire::MsgType::HEARTBEAT:
      if (node.role == wire::Role::WORKER && !stale && h.getClock() != node.clock) {
        node.clock = h.getClock();
        node.clock_since = absl::Now();
        if (node.clock > latest_worker_clock_.load()) latest_worker_clock_.store(node.clock);
      }
      SendTo(node.control_id, HeartbeatAnswer(h));
      return std::optional<Message>();
    case wire::MsgType::PROGRESS:
      if (node.role == wire::Role::WORKER && h.getBody().isProgress() && observer_ && !stale) {
        observer_->OnProgress(node.rank, h.getBody().getProgress());
      }
      return std::optional<Message>();
    case wire::MsgType::HELD_OUT:
      if (node.role == wire::Role::WORKER && h.getBody().isEvaluation() && observer_ && !stale) {
        observer_->OnHeldOut(node.rank, h.getClock(), h.getBody().getEvaluation());
      }
      return std::optional<Message>();
    case wire::MsgType::SERVER_PROGRESS:
      if (node.role == wire::Role::SERVER && h.getBody().isServerStats() && observer_) {
        observer_->OnServerProgress(node.rank, h.getBody().getServerStats());
      }
      return std::optional<Message>();
    case wire::MsgType::CHECKPOINTED:
      // A part of a checkpoint of the undone timeline must not complete one of the new.
      if (!stale) OnCheckpointed(node, h);
      return std::optional<Message>();
    case wire::MsgType::ABORT:
      if (auto s = OnNodeFailed(node, h); !s.ok()) return s;
      return std::optional<Message>();
    case wire::MsgType::PEER_ADDRESS:
      if (node.role == wire::Role::WORKER) OnPeerAddress(node, h);
      return std::optional<Message>();
    default:
      return std::optional<Message>(std::move(message));
  }
}

absl::Status Coordinator::OnNodeFailed(NodeState& node, const wire::Header::Reader& h) {
  const std::string reason = absl::StrFormat("%s failed: %s", node.Name(), h.getMessage().cStr());
  const auto code = static_cast<absl::StatusCode>(h.getStatusCode());
  if (CanRestart() && code != absl::StatusCode::kInvalidArgument &&
      code != absl::StatusCode::kOutOfRange) {
    // Its process exits next, and the launcher restarts it (Restart), or fails the job with
    // these words (LastWords) when it does not.
    SYNCLINE_LOG(WARNING) << reason << " (to be restarted)";
    absl::MutexLock lock(&mu_);
    last_words_[node.control_id] = reason;
    return absl::OkStatus();
  }
  // Where the job goes on without a lost worker (ASP, SSP, gossip, --min-workers) it goes on
  // without one that failed; bad input and a diverged model stop the job all the same.
  if (node.role == wire::Role::WORKER && MinWorkers() < options_.num_workers &&
      code != absl::StatusCode::kInvalidArgument && code != absl::StatusCode::kOutOfRange) {
    return MarkDown(node, reason);
  }
  return absl::Status(code == absl::StatusCode::kOutOfRange ? code : absl::StatusCode::kAborted,
                      reason);
}

void Coordinator::RequestCheckpoint(int64_t clock) {
  absl::MutexLock lock(&mu_);
  checkpoint_requests_.push_back(clock);
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
    {
      // A node lost now (the launcher saw its exit) sends no statistics: nothing waits for
      // them. Its part of the job was done.
      absl::MutexLock lock(&mu_);
      for (const auto& [control_id, reason] : std::exchange(lost_, {})) {
        if (NodeState* n = Find(control_id)) n->down = true;
      }
    }
    auto message = endpoint_->Receive(std::min(deadline, absl::Now() + absl::Milliseconds(100)));
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
