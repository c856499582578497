// Push-sum gossip (SGP): shares of weight and model pushed to out-peers without waiting,
// merged as they arrive, and the eras that keep the weights summing to the survivors' number
// after a death.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "gossip/gossip_mixer.h"
#include "gossip/topology.h"

namespace syncline {

absl::Status GossipMixer::MixPushSum(int64_t step, std::span<float> values) {
  if (auto s = DrainIncoming(values); !s.ok()) return s;
  TakeDownPeers(step + 1);
  const std::vector<int> members = Members(step);
  const absl::Time now = absl::Now();
  for (int r : PushSumInPeers(options_.topology, members, options_.rank)) {
    if (!dead_[r] && std::max(start_time_, last_heard_[r]) + options_.peer_timeout <= now) {
      DeclareDead(r, step + 1,
                  absl::StrCat("pushed nothing for ", absl::FormatDuration(options_.peer_timeout)));
    }
  }
  std::vector<int> out;
  for (int r :
       PushSumOutPeers(options_.topology, Members(step), options_.rank, step, options_.seed)) {
    if (!dead_[r] && heard_[r]) out.push_back(r);
  }
  // A joiner without weight yet has no mass to give.
  if (out.empty() || weight_ <= 0) return absl::OkStatus();
  // Rounded to what the header carries, so that what leaves here is exactly what arrives.
  const double share = static_cast<float>(weight_ / (out.size() + 1));
  const Frame payload = Encode(values);
  for (int r : out) {
    if (auto s = SendValues(r, step, static_cast<int>(out.size()), share, payload); !s.ok()) {
      DeclareDead(r, step + 1, absl::StrCat("send failed: ", s.ToString()));
      continue;
    }
    weight_ -= share;
  }
  return absl::OkStatus();
}

absl::Status GossipMixer::DrainIncoming(std::span<float> values) {
  if (!initialized_) return absl::FailedPreconditionError("GossipMixer::Init was not called");
  if (values.size() != size_) return absl::InvalidArgumentError("gossip vector size");
  while (true) {
    auto s = ReceiveOne(absl::Now());
    if (absl::IsDeadlineExceeded(s)) break;
    if (!s.ok()) return s;
  }
  skipped_.clear();
  MergeArrived(values);
  if (!welcome_requests_.empty()) AnswerWelcomes(values);
  return absl::OkStatus();
}

void GossipMixer::MergeArrived(std::span<float> values) {
  if (arrived_.empty()) return;
  std::vector<std::span<const float>> received;
  for (const Incoming& in : arrived_) received.push_back(in.values);
  RecordProxy(values, received);
  for (const Incoming& in : arrived_) {
    if (options_.asynchronous && in.era != era_ && !left_) {
      // A share of an era this node has left was part of a weight no survivor counts any
      // more: dropped. One of a later era means the sender knows of a death this node will
      // hear of next: it starts that era now.
      if (in.era < era_) {
        ++shares_dropped_;
        continue;
      }
      EnterEra(in.era);
    }
    const double total = weight_ + in.weight;
    if (total <= 0) continue;
    for (size_t k = 0; k < values.size(); ++k) {
      values[k] = static_cast<float>((weight_ * values[k] + in.weight * in.values[k]) / total);
    }
    weight_ = total;
    if (in.weight > 0) holds_mass_ = true;
  }
  arrived_.clear();
}

void GossipMixer::EnterEra(uint32_t era) {
  // A joiner that has held no weight yet brought none that the era's count could include.
  const double weight = holds_mass_ ? 1.0 : 0.0;
  SYNCLINE_LOG(INFO) << "push-sum: weight " << weight_ << " reset to " << weight
                     << " after a peer's death (era " << era << ")";
  era_ = era;
  weight_ = weight;
}

}  // namespace syncline
