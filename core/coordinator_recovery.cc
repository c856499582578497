// Restarts and rollbacks: a failed node replaced in place while every other node rolls back to
// a checkpoint, the replacement's registration, and the recovery's end (docs/FAULT_TOLERANCE.md,
// "Restarts and rollbacks").
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

bool Coordinator::Recovering() const { return recovering_flag_.load(); }

std::string Coordinator::LastWords(wire::Role role, int rank) {
  absl::MutexLock lock(&mu_);
  auto it = last_words_.find(ControlEndpointId(role, rank));
  return it == last_words_.end() ? "" : it->second;
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
  n.done = n.idle = n.released = false;
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
      other->done = other->idle = other->released = false;
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
  n.Registered(reg, observer_, /*replacement=*/true);
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

void Coordinator::OnPeerAddress(NodeState& node, const wire::Header::Reader& h) {
  // A meeting is of one generation and one membership (the plan events so far): an address for
  // an undone generation, or for a membership that has changed since, is of no use (its peers
  // meet again).
  const std::pair<uint32_t, uint64_t> meeting(generation_, plan_events_.size());
  if (h.getGeneration() != meeting.first || h.getClock() < 0 ||
      static_cast<uint64_t>(h.getClock()) != meeting.second || recovering_) {
    return;
  }
  node.peer_meeting = meeting;
  node.peer_address = h.getMessage();
  std::vector<const NodeState*> workers;
  for (const auto& n : nodes_) {
    if (n->role != wire::Role::WORKER || n->down || n->joining) continue;
    if (n->peer_meeting != meeting) return;  // not every member's yet
    workers.push_back(n.get());
  }
  MessageBuilder b(wire::MsgType::PEER_ADDRESS);
  b.header().setRole(wire::Role::COORDINATOR);
  b.header().setGeneration(meeting.first);
  b.header().setClock(static_cast<int64_t>(meeting.second));
  auto list = b.header().getBody().initNodeTable().initNodes(static_cast<unsigned>(workers.size()));
  for (size_t i = 0; i < workers.size(); ++i) {
    auto info = list[static_cast<unsigned>(i)];
    info.setRole(wire::Role::WORKER);
    info.setRank(workers[i]->rank);
    info.setId(DataEndpointId(wire::Role::WORKER, workers[i]->rank));
    info.setAddress(workers[i]->peer_address);
  }
  SYNCLINE_LOG(INFO) << "every worker listens for the peers of generation " << generation_
                     << (meeting.second > 0
                             ? absl::StrCat(" after ", meeting.second, " departures and arrivals")
                             : "")
                     << ": handing out the addresses of " << workers.size();
  Broadcast(b.Finish(), wire::Role::WORKER);
}

}  // namespace syncline
