// Workers joining a running job: the join request, the donors' cuts, the servers taking the
// joiner into their clock sets, and the arrival every worker hears (docs/FAULT_TOLERANCE.md,
// "Workers joining a running job").
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

void Coordinator::HandleJoinRequest(Message& message) {
  auto h = message.header();
  if (absl::Status problem = JoinRefusal(h); !problem.ok()) {
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

absl::Status Coordinator::JoinRefusal(const wire::Header::Reader& h) const {
  const int max_workers = std::max(options_.max_workers, options_.num_workers);
  bool pending = false;
  for (const auto& n : nodes_) pending = pending || (n->joining && !n->down);
  if (!h.getBody().isRegister()) {
    return absl::InvalidArgumentError("a join request carries the joiner's registration");
  }
  if (h.getBody().getRegister().getVersion() != kBuildVersion) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "the joiner runs syncline %s, but this job's coordinator runs %s: start it from the "
        "same build",
        h.getBody().getRegister().getVersion().cStr(), kBuildVersion));
  }
  if (max_workers <= options_.num_workers) {
    return absl::FailedPreconditionError(
        "this job takes no joins: start it with --max-workers N (more than --workers)");
  }
  if (next_rank_ >= max_workers) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "this job has had its --max-workers %d workers: no rank is left to join at", max_workers));
  }
  if (!training_ || recovering_) {
    // Transient: before the start (or during a rollback) the joiner asks again.
    return absl::UnavailableError(recovering_ ? "the job is rolling back to a checkpoint"
                                              : "the job is not training (not yet started, or "
                                                "its workers have finished)");
  }
  if (pending) return absl::UnavailableError("another worker is joining");
  return absl::OkStatus();
}

void Coordinator::BeginArrival(NodeState& joiner, Message& message) {
  auto h = message.header();
  if (!h.getBody().isRegister()) return;
  joiner.Registered(h.getBody().getRegister(), observer_);
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

absl::Status Coordinator::CheckArrival(absl::Time now) {
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
  return absl::OkStatus();
}

}  // namespace syncline
