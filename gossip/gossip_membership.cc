// GossipMixer's membership: who takes part in which step, joiners admitted and entering, peers
// that leave or are declared dead, and the notices that tell the others.
#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "gossip/gossip_mixer.h"
#include "gossip/topology.h"

namespace syncline {

namespace {
// How long a push-sum node that leaves goes on forwarding the shares still arriving.
constexpr absl::Duration kLeaveLinger = absl::Milliseconds(200);
}  // namespace

std::vector<int> GossipMixer::Members(int64_t step) const {
  std::vector<int> members;
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == options_.rank || (joined_from_[r] <= step && gone_from_[r] > step)) {
      members.push_back(r);
    }
  }
  return members;
}

bool GossipMixer::Reachable(int rank) const {
  return rank != options_.rank && !dead_[rank] && gone_from_[rank] == kAlive &&
         joined_from_[rank] != kAlive && heard_[rank];
}

absl::Status GossipMixer::Admit(int rank, int64_t first_step, std::span<const int> members) {
  if (!initialized_) return absl::FailedPreconditionError("GossipMixer::Init was not called");
  const int n = options_.num_peers;
  const int initial = options_.initial_peers == 0 ? n : options_.initial_peers;
  if (rank < initial || rank >= n || first_step < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gossip arrival of rank %d at step %d: joiners are ranks in [%d, %d) at steps >= 0", rank,
        first_step, initial, n));
  }
  for (int m : members) {
    if (m < 0 || m >= n) {
      return absl::InvalidArgumentError(absl::StrFormat("gossip arrival names member %d", m));
    }
  }
  if (choco_) {
    return absl::InvalidArgumentError(
        absl::StrCat("gossip with compressed differences (codec ", CodecName(options_.codec),
                     ") takes no joins: a joiner has no public copies to start from"));
  }
  if (joined_from_[rank] != kAlive) return absl::OkStatus();  // heard before
  joined_from_[rank] = first_step;
  if (rank != options_.rank) {
    // Its silence counts from now: it may still be starting.
    last_heard_[rank] = std::max(last_heard_[rank], absl::Now());
    SYNCLINE_LOG(INFO) << "gossip peer " << Name(rank) << " joins at step " << first_step;
    return absl::OkStatus();
  }
  // This node joins: the ranks still training are its graph; every other rank below it has
  // finished or died (ranks above it join later, if ever).
  std::vector<bool> member(n, false);
  for (int m : members) member[m] = true;
  for (int r = 0; r < rank; ++r) {
    if (member[r]) {
      joined_from_[r] = std::min(joined_from_[r], first_step);
    } else {
      gone_from_[r] = std::min(gone_from_[r], first_step);
    }
  }
  entry_step_ = first_step;
  current_step_ = first_step - 1;
  if (options_.asynchronous) {
    weight_ = 0;  // it brings no mass: its first shares give it the others' estimate
    holds_mass_ = false;
  }
  SYNCLINE_LOG(INFO) << "gossip: this node joins at step " << first_step << " with "
                     << members.size() << " peers still training";
  return absl::OkStatus();
}

absl::Status GossipMixer::Enter(std::span<float> values) {
  if (!initialized_ || entry_step_ < 0) {
    return absl::FailedPreconditionError("gossip Enter: not a joiner that has yet to enter");
  }
  if (values.size() != size_) return absl::InvalidArgumentError("gossip vector size");
  const int64_t step = entry_step_;
  entry_step_ = -1;
  const int self = options_.rank;
  const std::vector<int> members = Members(step);
  std::vector<int> asked =
      options_.asynchronous ? PushSumInPeers(options_.topology, members, self)
                            : SyncNeighbours(options_.topology, members, self, step, options_.seed);
  if (options_.asynchronous && asked.empty() && members.size() > 1) {
    // Random push-sum's in-peers are not predictable: the previous member is asked.
    const size_t at = std::find(members.begin(), members.end(), self) - members.begin();
    asked.push_back(members[(at + members.size() - 1) % members.size()]);
  }
  std::set<int> waiting = Greet(step, members, asked);
  absl::StatusOr<std::vector<std::vector<float>>> models = AwaitWelcomes(step, waiting);
  if (!models.ok()) return models.status();
  for (int r : waiting) {
    SYNCLINE_LOG(WARNING) << "gossip: no model from " << Name(r) << " within "
                          << absl::FormatDuration(options_.peer_timeout / 2) << " of the hello";
  }
  if (options_.asynchronous) {
    MergeArrived(values);
    SYNCLINE_LOG(INFO) << "push-sum: entered at step " << step << " with weight " << weight_
                       << " from " << asked.size() - waiting.size() << " peers' shares";
    return absl::OkStatus();
  }
  if (models->empty()) {
    SYNCLINE_LOG(WARNING) << "gossip: entered at step " << step
                          << " with no neighbour's model: its own zeros mix in";
    return absl::OkStatus();
  }
  for (size_t k = 0; k < size_; ++k) {
    double sum = 0;
    for (const std::vector<float>& m : *models) sum += m[k];
    values[k] = static_cast<float>(sum / models->size());
  }
  SYNCLINE_LOG(INFO) << "gossip: entered at step " << step << " with the mean of " << models->size()
                     << " neighbours' models";
  return absl::OkStatus();
}

std::set<int> GossipMixer::Greet(int64_t step, const std::vector<int>& members,
                                 const std::vector<int>& asked) {
  const int self = options_.rank;
  std::set<int> waiting;
  for (int r : members) {
    if (r == self) continue;
    const bool ask = std::find(asked.begin(), asked.end(), r) != asked.end();
    MessageBuilder b(wire::MsgType::JOIN);
    auto h = b.header();
    h.setRole(wire::Role::WORKER);
    h.setRank(self);
    h.setClock(step);
    h.setRangeBegin(ask ? 1 : 0);
    if (auto s =
            endpoint_->Send(options_.peer_ids[r], b.Finish(), absl::Now() + options_.peer_timeout);
        !s.ok()) {
      // The first round finds out whether it is dead.
      SYNCLINE_LOG(WARNING) << "gossip: could not greet " << Name(r) << ": " << s;
      continue;
    }
    if (ask) waiting.insert(r);
  }
  return waiting;
}

absl::StatusOr<std::vector<std::vector<float>>> GossipMixer::AwaitWelcomes(int64_t step,
                                                                           std::set<int>& waiting) {
  // Within half a timeout: the peers that got the hello count this node's silence from then.
  const absl::Time deadline = absl::Now() + options_.peer_timeout / 2;
  std::vector<std::vector<float>> models;
  while (!waiting.empty()) {
    auto s = ReceiveOne(deadline);
    if (absl::IsDeadlineExceeded(s)) break;
    if (!s.ok()) return s;
    for (const Incoming& in : arrived_) {
      if (in.step < step) waiting.erase(in.rank);
    }
    if (options_.asynchronous) continue;  // shares, merged by Enter
    for (Incoming& in : arrived_) {
      if (in.step < step) {
        models.push_back(std::move(in.values));
      } else if (in.step <= step + options_.max_steps_ahead) {
        early_[in.step].push_back(std::move(in));
      }
    }
    arrived_.clear();
  }
  return models;
}

void GossipMixer::AnswerWelcomes(std::span<const float> values) {
  for (const auto& [rank, first_step] : welcome_requests_) {
    if (dead_[rank]) continue;
    // Push-sum: half of this node's weight goes with its model, so that no mass is made.
    const double share = options_.asynchronous ? static_cast<float>(weight_ / 2) : 0.0;
    if (SendValues(rank, first_step - 1, 1, share, Encode(values)).ok()) {
      weight_ -= share;
      SYNCLINE_LOG(INFO) << "gossip: sent this node's model to joiner " << Name(rank)
                         << (options_.asynchronous ? absl::StrCat(" with weight ", share) : "");
    }
  }
  welcome_requests_.clear();
}

std::vector<int> GossipMixer::dead_peers() const {
  std::vector<int> dead;
  for (int r = 0; r < static_cast<int>(dead_.size()); ++r) {
    if (dead_[r]) dead.push_back(r);
  }
  return dead;
}

void GossipMixer::MarkGone(int rank, int64_t from_step, bool dead, const std::string& why) {
  if (rank == options_.rank) {
    SYNCLINE_LOG(WARNING) << "a peer reports this node (" << Name(rank) << ") gone: " << why;
    return;
  }
  gone_from_[rank] = std::min(gone_from_[rank], from_step);
  if (dead && !dead_[rank]) {
    dead_[rank] = true;
    SYNCLINE_LOG(WARNING) << "gossip peer " << Name(rank) << " is dead from step "
                          << gone_from_[rank] << ": " << why;
    // Push-sum: the weight the dead peer held, and the shares on their way to it, are gone.
    // Every survivor starts a new era with weight 1 (its model unchanged), unless a share of
    // that era already made it start one.
    if (options_.asynchronous && ++deaths_ > era_ && !left_) EnterEra(deaths_);
  } else if (!dead) {
    SYNCLINE_LOG(INFO) << "gossip peer " << Name(rank) << " leaves from step " << from_step;
  }
}

void GossipMixer::DeclareDead(int rank, int64_t from_step, const std::string& why) {
  if (dead_[rank]) return;
  MarkGone(rank, from_step, true, why);
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == rank || !Reachable(r)) continue;
    MessageBuilder b(wire::MsgType::NODE_DOWN);
    auto h = b.header();
    h.setRole(wire::Role::WORKER);
    h.setRank(options_.rank);
    h.setClock(gone_from_[rank]);
    auto down = h.getBody().initNodeDown();
    down.setRole(wire::Role::WORKER);
    down.setRank(rank);
    down.setReason(why);
    (void)endpoint_->Send(options_.peer_ids[r], b.Finish(), absl::Now() + options_.peer_timeout);
  }
}

void GossipMixer::TakeDownPeers(int64_t from_step) {
  if (!take_down_) return;
  for (int rank : take_down_()) {
    // The coordinator names only workers of the job; an initial rank or an admitted joiner.
    if (rank < 0 || rank >= options_.num_peers || rank == options_.rank || dead_[rank]) continue;
    if (joined_from_[rank] == kAlive) continue;
    DeclareDead(rank, from_step, "the job's coordinator declared it down");
  }
}

uint64_t GossipMixer::DeadMask() const {
  uint64_t mask = 0;
  for (int r = 0; r < std::min(options_.num_peers, 64); ++r) {
    if (dead_[r]) mask |= uint64_t{1} << r;
  }
  return mask;
}

int GossipMixer::NextHeir() const {
  for (int k = 1; k < options_.num_peers; ++k) {
    const int r = (options_.rank + k) % options_.num_peers;
    if (Reachable(r)) return r;
  }
  return -1;
}

void GossipMixer::Leave(int64_t next_step, std::span<const float> values) {
  if (!initialized_) return;
  left_ = true;  // a death heard from now on resets no weight: this node holds none
  // Push-sum: hand this node's weight and mass to the next live peer, so that the nodes still
  // mixing hold all of it and reach the average of everyone's vectors, not of theirs only.
  int heir = -1;
  if (options_.asynchronous && values.size() == size_ && weight_ > 0) {
    for (int r = NextHeir(); r >= 0; r = NextHeir()) {
      // Rounded to what the header carries, as every push-sum share.
      const double share = static_cast<float>(weight_);
      if (SendValues(r, std::max<int64_t>(current_step_, 0), 1, share, Encode(values)).ok()) {
        weight_ -= share;
        heir = r;
        break;
      }
      // Taken as gone (not dead: a death would start an era at the peers still mixing).
      MarkGone(r, current_step_ + 1, false, "the hand-over of this node's weight failed");
    }
  }
  for (int r = 0; r < options_.num_peers; ++r) {
    if (!Reachable(r)) continue;
    MessageBuilder b(wire::MsgType::FINISH);
    auto h = b.header();
    h.setRole(wire::Role::WORKER);
    h.setRank(options_.rank);
    h.setClock(next_step);
    (void)endpoint_->Send(options_.peer_ids[r], b.Finish(), absl::Now() + options_.peer_timeout);
  }
  if (heir < 0) return;
  // Shares pushed here before the peers heard of the leave are still on their way: for a
  // moment, every one that arrives goes on as it came, to a peer still mixing. Never to one
  // heard to leave: peers that leave at once may each have chosen the next as heir, and a
  // share passed on around that circle went round until every linger ended (a storm of whole
  // models: 373-481 MB moved by a job of 4 peers that needs 8-13). A peer that leaves tells
  // every peer it holds reachable before it passes anything on, so a share only moves to a
  // peer that left later than the one passing it: at most num_peers - 1 hops.
  const absl::Time until = absl::Now() + std::min(options_.peer_timeout, kLeaveLinger);
  while (absl::Now() < until) {
    if (!ReceiveOne(until).ok()) continue;
    for (const Incoming& in : arrived_) {
      if (!Reachable(heir)) heir = NextHeir();
      if (heir < 0) {
        ++shares_dropped_;  // every other peer has left or died: nobody mixes it any more
        continue;
      }
      if (!SendValues(heir, std::max<int64_t>(current_step_, 0), 1, in.weight, Encode(in.values), 0,
                      in.era)
               .ok()) {
        MarkGone(heir, current_step_ + 1, false, "a share passed on to it was refused");
      }
    }
    arrived_.clear();
    if (heir < 0 || (!Reachable(heir) && NextHeir() < 0)) break;  // nobody left to pass to
  }
  skipped_.clear();
}

}  // namespace syncline
