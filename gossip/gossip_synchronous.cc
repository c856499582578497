// Synchronous gossip (D-PSGD): a round sends this node's vector to its neighbours of the step,
// waits for theirs (declaring dead those silent for peer_timeout) and moves to their
// Metropolis-Hastings average; with a difference codec the round's blocks go to CHOCO
// (gossip_choco.cc).
#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "gossip/gossip_mixer.h"
#include "gossip/topology.h"

namespace syncline {

// One synchronous round in the making: what has come, what was sent, whom it waits for.
struct GossipMixer::SyncRound {
  SyncRound(int64_t step, absl::Duration beat)
      : step(step), start(absl::Now()), beat(beat), next_beat(start + beat) {}

  // Whether every peer waited for has sent this step's values.
  bool complete() const {
    for (int r : expected) {
      if (got.count(r) == 0) return false;
    }
    return true;
  }

  const int64_t step;
  std::map<int, Incoming> got;
  std::map<int, std::vector<float>> delivered;  // CHOCO: decoded blocks that reached each peer
  std::set<int> expected, sent, skipped;
  const absl::Time start;
  // A node that waits long tells everyone it is alive: its own neighbours may be waiting for it
  // (they cannot tell waiting from dead otherwise, and a death would cascade along the graph).
  const absl::Duration beat;
  absl::Time next_beat;
};

absl::Status GossipMixer::MixSynchronous(int64_t step, std::span<float> values) {
  const Frame payload = choco_ ? Frame() : Encode(values);
  SyncRound round(step, options_.peer_timeout / 4);
  for (auto it = early_.begin(); it != early_.end() && it->first <= step;) {
    if (it->first == step) {
      for (Incoming& in : it->second) round.got[in.rank] = std::move(in);
    }
    it = early_.erase(it);
  }
  while (true) {
    TakeDownPeers(step + 1);
    ExpectPeers(round);
    if (!SendRound(round, values, payload)) continue;  // a peer died: the graph changed
    if (round.complete()) break;
    if (auto s = AwaitRound(round); !s.ok()) return s;
    FileArrivals(round, values);
  }
  if (choco_) {
    MixCompressed(step, values, round.got, round.delivered);
    return absl::OkStatus();
  }
  MixAverage(values, round.got);
  return absl::OkStatus();
}

// Who this step waits for: the graph's neighbours in the current view, and anyone who sent this
// step's values (a peer whose view differs), less the dead and those who skipped.
void GossipMixer::ExpectPeers(SyncRound& round) {
  const int64_t step = round.step;
  for (int r :
       SyncNeighbours(options_.topology, Members(step), options_.rank, step, options_.seed)) {
    round.expected.insert(r);
  }
  for (auto& [r, in] : round.got) round.expected.insert(r);
  for (auto it = round.expected.begin(); it != round.expected.end();) {
    const bool lost = dead_[*it] || gone_from_[*it] <= step || round.skipped.count(*it) > 0;
    it = (lost && round.got.count(*it) == 0) ? round.expected.erase(it) : std::next(it);
  }
}

bool GossipMixer::SendRound(SyncRound& round, std::span<const float> values, const Frame& payload) {
  for (int r : round.expected) {
    // A joiner not heard from yet is waited for: its hello comes first.
    if (round.sent.count(r) > 0 || !heard_[r]) continue;
    round.sent.insert(r);
    std::vector<float> block_value;
    const Frame frame = choco_ ? EncodeDifference(r, values, &block_value) : payload;
    const uint64_t exchanges = choco_ ? static_cast<uint64_t>(edges_[r].exchanges) : 0;
    if (auto s = SendValues(r, round.step, static_cast<int>(round.expected.size()), 0.0, frame,
                            exchanges);
        !s.ok()) {
      DeclareDead(r, round.step + 1, absl::StrCat("send failed: ", s.ToString()));
      return false;
    }
    if (choco_) round.delivered[r] = std::move(block_value);
  }
  return true;
}

absl::Status GossipMixer::AwaitRound(SyncRound& round) {
  absl::Time deadline = absl::InfiniteFuture();
  for (int r : round.expected) {
    if (round.got.count(r) > 0) continue;
    deadline = std::min(deadline, std::max(round.start, last_heard_[r]) + options_.peer_timeout);
  }
  // With a coordinator's reports to watch, the wait wakes up to look at them.
  const absl::Time poll = take_down_ || options_.interrupted ? absl::Now() + absl::Milliseconds(100)
                                                             : absl::InfiniteFuture();
  auto s = ReceiveOne(std::min({deadline, round.next_beat, poll}));
  if (!absl::IsDeadlineExceeded(s)) return s;
  if (options_.interrupted) {
    if (absl::Status stop = options_.interrupted(); !stop.ok()) {
      return absl::Status(stop.code(),
                          absl::StrCat("gossip step ", round.step, ": ", stop.message()));
    }
  }
  const absl::Time now = absl::Now();
  if (now >= round.next_beat) {
    SendHeartbeats();
    round.next_beat = now + round.beat;
  }
  for (int r : round.expected) {
    if (round.got.count(r) == 0 &&
        std::max(round.start, last_heard_[r]) + options_.peer_timeout <= now) {
      DeclareDead(r, round.step + 1,
                  absl::StrCat("sent nothing for ", absl::FormatDuration(options_.peer_timeout),
                               " at step ", round.step));
    }
  }
  return absl::OkStatus();
}

// Takes what Handle() has collected.
void GossipMixer::FileArrivals(SyncRound& round, std::span<const float> values) {
  const int64_t step = round.step;
  for (Incoming& in : arrived_) {
    if (in.step == step) {
      round.got[in.rank] = std::move(in);
    } else if (in.step < step) {
      SendSkip(in.rank, in.step);
    } else if (in.step <= step + options_.max_steps_ahead &&
               early_[in.step].size() < static_cast<size_t>(options_.num_peers)) {
      early_[in.step].push_back(std::move(in));
    } else {
      SYNCLINE_LOG(WARNING) << "gossip: dropped " << Name(in.rank) << "'s message for step "
                            << in.step << " at step " << step;
    }
  }
  arrived_.clear();
  for (auto [rank, s] : skipped_) {
    if (s == step) round.skipped.insert(rank);
  }
  skipped_.clear();
  if (!welcome_requests_.empty()) AnswerWelcomes(values);
}

void GossipMixer::MixAverage(std::span<float> values, const std::map<int, Incoming>& got) {
  std::vector<const Incoming*> received;
  std::vector<std::span<const float>> neighbour_values;
  for (auto& [r, in] : got) {
    received.push_back(&in);
    neighbour_values.push_back(in.values);
  }
  RecordProxy(values, neighbour_values);
  const int degree = static_cast<int>(received.size());
  std::vector<double> weights;
  for (const Incoming* in : received) weights.push_back(MetropolisWeight(degree, in->degree));
  for (size_t k = 0; k < values.size(); ++k) {
    const double own = values[k];
    double mixed = own;
    for (size_t j = 0; j < received.size(); ++j) {
      mixed += weights[j] * (static_cast<double>(received[j]->values[k]) - own);
    }
    values[k] = static_cast<float>(mixed);
  }
}

}  // namespace syncline
