// The coordinator's supervision of a training job: heartbeats, stuck workers, nodes lost or
// hung, workers that leave a job that goes on, and the final evaluation.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/coordinator.h"
#include "core/coordinator_node_state.h"
#include "core/log.h"

namespace syncline {

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
    if (message->has_value()) OnTrainingMessage(**message);
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
  if (options_.evaluate) {
    if (auto s = EvaluateFinalModel(); !s.ok()) return s;
  }
  training_over_.store(true);
  results_in_.store(true);
  return absl::OkStatus();
}

bool Coordinator::StillNeeds(wire::Role role, int rank) const {
  if (results_in_.load()) return false;
  // The final model is in every worker's replica or on the servers: only the evaluator's
  // worker (and the servers it reads from) take part in the evaluation.
  return !training_over_.load() || role != wire::Role::WORKER || rank == evaluator_rank_.load();
}

void Coordinator::OnTrainingMessage(Message& m) {
  NodeState* node = Find(m.peer());
  auto h = m.header();
  if (node->role == wire::Role::SERVER && h.getType() == wire::MsgType::ARRIVAL) {
    OnArrivalTaken(*node, h.getClock());
    return;
  }
  if (node->role != wire::Role::WORKER) return;
  switch (h.getType()) {
    case wire::MsgType::WORKER_IDLE:
      if (!node->done && !node->released) {
        node->idle = true;
        MaybeRelease();
      }
      break;
    case wire::MsgType::WORKER_DONE:
      node->done = true;
      node->idle = false;
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

absl::Status Coordinator::EvaluateFinalModel() {
  NodeState* evaluator = nullptr;
  for (auto& n : nodes_) {
    if (n->role == wire::Role::WORKER && !n->down) {
      evaluator = n.get();
      break;
    }
  }
  if (evaluator == nullptr) return absl::UnavailableError("every worker is down");
  evaluator_rank_.store(evaluator->rank);  // before training_over_: StillNeeds reads them
  training_over_.store(true);
  SYNCLINE_LOG(INFO) << "every worker has finished training; " << evaluator->Name()
                     << " evaluates the final model";
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
  if (auto s = CheckArrival(now); !s.ok()) return s;
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
    if (!w->done && !w->released) takers.push_back(w->rank);
  }
  // A worker that had trained its whole plan (done, or idle and waiting) leaves no batches.
  const bool finished = n.done || n.idle || n.released;
  if (!finished && left < MinWorkers()) {
    if (MinWorkers() == options_.num_workers && options_.staleness == 0) {
      return absl::UnavailableError(
          absl::StrCat("lost worker under BSP, which cannot go on without it",
                       options_.hand_over ? " (--min-workers lets it)" : "", ": ", reason));
    }
    return absl::UnavailableError(
        absl::StrFormat("lost worker: %s; %d worker%s left, fewer than --min-workers %d", reason,
                        left, left == 1 ? "" : "s", MinWorkers()));
  }
  // The workers' plans now differ from any checkpoint's before this departure.
  {
    absl::MutexLock lock(&mu_);
    can_roll_back_.store(false);
  }
  if (!options_.hand_over || finished) takers.clear();
  AnnounceDeparture(n, reason, takers);
  // The takers have batches again; and the lost worker may have been the last one training.
  for (auto& w : nodes_) {
    if (std::find(takers.begin(), takers.end(), w->rank) != takers.end() &&
        w->role == wire::Role::WORKER) {
      w->idle = false;
    }
  }
  MaybeRelease();
  return absl::OkStatus();
}

void Coordinator::MaybeRelease() {
  if (recovering_) return;
  bool any_idle = false;
  for (const auto& w : nodes_) {
    if (w->role != wire::Role::WORKER || w->down || w->done || w->released) continue;
    if (!w->idle) return;  // still training: it may yet be lost, and its batches handed over
    any_idle = true;
  }
  if (!any_idle) return;
  for (auto& w : nodes_) {
    if (w->role != wire::Role::WORKER || !w->idle) continue;
    w->idle = false;
    w->released = true;
    SendTo(w->control_id, MakeSimple(wire::MsgType::RELEASE, wire::Role::COORDINATOR, 0));
  }
}

void Coordinator::AnnounceDeparture(NodeState& n, const std::string& reason,
                                    const std::vector<int>& takers) {
  // The heartbeat's clock is set once the iteration's clock messages are queued, not sent: a
  // worker killed just then may leave that iteration unfinished at the servers, which drop it.
  // One iteration earlier is never past what every server has.
  const int64_t clock = std::max<int64_t>(n.clock - 1, n.first_clock);
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
}

void Coordinator::ReportLost(wire::Role role, int rank, std::string reason) {
  absl::MutexLock lock(&mu_);
  lost_.emplace_back(ControlEndpointId(role, rank), std::move(reason));
}

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

}  // namespace syncline
