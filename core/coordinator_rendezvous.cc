// The coordinator's rendezvous: every node registers (checked against the job and the build),
// receives the node table, and reports ready; then the job starts.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/coordinator.h"
#include "core/coordinator_node_state.h"
#include "core/log.h"
#include "core/version.h"

namespace syncline {

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
    if (now >= deadline) return MissingNodes();
    auto message = endpoint_->Receive(std::min(deadline, now + absl::Milliseconds(100)));
    if (!message.ok()) continue;
    if (auto s = message->Parse(); !s.ok()) {
      SYNCLINE_LOG(WARNING) << "malformed message from " << message->peer() << ": " << s;
      continue;
    }
    if (auto s = Admit(*message); !s.ok()) return s;
  }
  PublishTable();
  return absl::OkStatus();
}

absl::Status Coordinator::MissingNodes() {
  std::vector<std::string> missing;
  for (int r = 0; r < options_.num_servers; ++r) {
    if (!Find(ControlEndpointId(wire::Role::SERVER, r))) missing.push_back(absl::StrCat("ps", r));
  }
  for (int r = 0; r < options_.num_workers; ++r) {
    if (!Find(ControlEndpointId(wire::Role::WORKER, r))) missing.push_back(absl::StrCat("w", r));
  }
  return absl::DeadlineExceededError(absl::StrFormat("nodes did not register within %s: missing %s",
                                                     absl::FormatDuration(options_.startup_timeout),
                                                     absl::StrJoin(missing, ", ")));
}

absl::Status Coordinator::Admit(Message& message) {
  auto h = message.header();
  if (h.getType() != wire::MsgType::REGISTER || !h.getBody().isRegister()) {
    return absl::OkStatus();
  }
  auto reg = h.getBody().getRegister();
  const wire::Role role = h.getRole();
  const int rank = h.getRank();
  const absl::Status problem = RegistrationProblem(message.peer(), role, rank, reg);
  const size_t expected = options_.num_servers + options_.num_workers;
  if (const int world = reg.getWorldSize(); world != 0 && world != static_cast<int>(expected)) {
    // The cluster launcher started the wrong number of ranks: waiting would only end in the
    // startup timeout (or, worse, in a world of its own), so the job stops now.
    const absl::Status wrong = absl::FailedPreconditionError(absl::StrFormat(
        "%s (pid %d on %s) was started as one of %d ranks, but this job has %d nodes (%d "
        "servers + %d workers): start exactly %d ranks",
        DataEndpointId(role, rank), reg.getPid(), reg.getHost().cStr(), world, expected,
        options_.num_servers, options_.num_workers, expected));
    SendTo(message.peer(), MakeErrorReply(h, wrong));
    return wrong;
  }
  if (!problem.ok()) {
    SYNCLINE_LOG(WARNING) << "rejected registration from " << message.peer() << ": " << problem;
    SendTo(message.peer(), MakeErrorReply(h, problem));
    return absl::OkStatus();
  }
  auto node = std::make_unique<NodeState>();
  node->role = role;
  node->rank = rank;
  node->control_id = message.peer();
  node->Registered(reg, observer_);
  node->last_seen = absl::Now();
  nodes_.push_back(std::move(node));
  return absl::OkStatus();
}

absl::Status Coordinator::RegistrationProblem(const std::string& peer, wire::Role role, int rank,
                                              wire::Register::Reader reg) {
  const int limit = role == wire::Role::SERVER   ? options_.num_servers
                    : role == wire::Role::WORKER ? options_.num_workers
                                                 : 0;
  if (rank < 0 || rank >= limit) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s rank %d is outside this job (%d servers, %d workers)", RoleName(role),
                        rank, options_.num_servers, options_.num_workers));
  }
  if (peer != ControlEndpointId(role, rank)) {
    return absl::InvalidArgumentError("control endpoint id does not match role and rank");
  }
  if (Find(peer) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrFormat("%s %d is already registered", RoleName(role), rank));
  }
  if (reg.getVersion() != kBuildVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %d runs syncline %s, but this job's coordinator runs %s: start every node from "
        "the same build",
        RoleName(role), rank, reg.getVersion().size() > 0 ? reg.getVersion().cStr() : "(unknown)",
        kBuildVersion));
  }
  if (role == wire::Role::SERVER && reg.getDataAddress().size() == 0) {
    return absl::InvalidArgumentError("a server must give its data address");
  }
  return absl::OkStatus();
}

void Coordinator::PublishTable() {
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
}

absl::Status Coordinator::AwaitReady() {
  const absl::Time deadline = absl::Now() + options_.startup_timeout;
  // A node lost meanwhile (a job that goes on without it) is not waited for.
  auto all_ready = [&] {
    return std::all_of(nodes_.begin(), nodes_.end(),
                       [](const auto& n) { return n->ready || n->down; });
  };
  while (!all_ready()) {
    if (absl::Now() >= deadline) {
      std::vector<std::string> late;
      for (const auto& n : nodes_) {
        if (!n->ready && !n->down) late.push_back(n->Name());
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "nodes did not report ready within the startup timeout (",
          absl::FormatDuration(options_.startup_timeout), "): ", absl::StrJoin(late, ", ")));
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

}  // namespace syncline
