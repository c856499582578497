#include "gossip/gossip_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"

namespace syncline {

GossipMixer::GossipMixer(Endpoint* endpoint, GossipOptions options)
    : endpoint_(endpoint), options_(std::move(options)) {}

absl::Status GossipMixer::Init(size_t size) {
  const int n = options_.num_peers;
  if (n < 1 || options_.rank < 0 || options_.rank >= n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gossip rank %d is not in [0, %d)", options_.rank, n));
  }
  if (static_cast<int>(options_.peer_ids.size()) != n) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "gossip needs the ids of all %d peers, got %d", n, options_.peer_ids.size()));
  }
  if (options_.peer_timeout <= absl::ZeroDuration() || options_.max_steps_ahead < 1) {
    return absl::InvalidArgumentError("gossip peer_timeout and max_steps_ahead must be positive");
  }
  if (auto s = ValidateCodecSpec(options_.codec); !s.ok()) return s;
  if (options_.codec.kind != CodecKind::kNone && options_.codec.kind != CodecKind::kFp16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gossip exchanges parameters, which only fp16 compresses without losing them; codec ",
        CodecName(options_.codec), " is not supported"));
  }
  if (options_.codec.kind == CodecKind::kFp16) codec_ = Codec::Create(options_.codec);
  size_ = size;
  gone_from_.assign(n, kAlive);
  dead_.assign(n, false);
  start_time_ = absl::Now();
  last_heard_.assign(n, start_time_);
  weight_ = 1.0;
  initialized_ = true;
  SYNCLINE_LOG(INFO) << "gossip " << GossipTopologyName(options_.topology)
                     << (options_.asynchronous ? " push-sum" : " synchronous") << ": rank "
                     << options_.rank << " of " << n << ", seed " << options_.seed << ", " << size
                     << " floats, codec " << CodecName(options_.codec);
  return absl::OkStatus();
}

std::string GossipMixer::Name(int rank) const {
  return absl::StrCat(options_.peer_ids[rank], " (rank ", rank, ")");
}

std::vector<int> GossipMixer::Members(int64_t step) const {
  std::vector<int> members;
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == options_.rank || gone_from_[r] > step) members.push_back(r);
  }
  return members;
}

std::vector<int> GossipMixer::dead_peers() const {
  std::vector<int> dead;
  for (int r = 0; r < static_cast<int>(dead_.size()); ++r) {
    if (dead_[r]) dead.push_back(r);
  }
  return dead;
}

double GossipMixer::TakeConsensusProxy() {
  const double mean = proxy_rounds_ == 0 ? 0.0 : proxy_sum_ / proxy_rounds_;
  proxy_sum_ = 0;
  proxy_rounds_ = 0;
  return mean;
}

double GossipMixer::TakeBytesPerPeerStep() {
  const double mean =
      window_messages_ == 0 ? 0.0 : static_cast<double>(window_bytes_) / window_messages_;
  window_bytes_ = 0;
  window_messages_ = 0;
  return mean;
}

Frame GossipMixer::Encode(std::span<const float> values) {
  if (codec_ == nullptr) return Frame::Copy(values.data(), values.size_bytes());
  codec_->Encode(values, &block_);
  return Frame::Copy(block_.data(), block_.size());
}

absl::Status GossipMixer::SendValues(int peer, int64_t step, int degree, double weight,
                                     const Frame& payload) {
  MessageBuilder b(wire::MsgType::GOSSIP);
  auto h = b.header();
  h.setRole(wire::Role::WORKER);
  h.setRank(options_.rank);
  h.setClock(step);
  h.setWeight(static_cast<float>(weight));
  h.setRangeBegin(static_cast<uint64_t>(degree));
  h.setValueCount(size_);
  h.setCodec(static_cast<uint8_t>(options_.codec.kind));
  b.AddFrame(payload);
  Message m = b.Finish();
  const size_t bytes = m.ByteSize();
  auto s =
      endpoint_->Send(options_.peer_ids[peer], std::move(m), absl::Now() + options_.peer_timeout);
  if (!s.ok()) return s;
  bytes_sent_ += bytes;
  window_bytes_ += bytes;
  ++window_messages_;
  return absl::OkStatus();
}

void GossipMixer::SendSkip(int peer, int64_t step) {
  MessageBuilder b(wire::MsgType::ERROR);
  auto h = b.header();
  h.setRole(wire::Role::WORKER);
  h.setRank(options_.rank);
  h.setClock(step);
  h.setStatusCode(static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
  h.setMessage("step already finished");
  // A lost skip only makes the peer wait for its timeout.
  (void)endpoint_->Send(options_.peer_ids[peer], b.Finish(), absl::Now() + options_.peer_timeout);
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
  } else if (!dead) {
    SYNCLINE_LOG(INFO) << "gossip peer " << Name(rank) << " leaves from step " << from_step;
  }
}

void GossipMixer::DeclareDead(int rank, int64_t from_step, const std::string& why) {
  if (dead_[rank]) return;
  MarkGone(rank, from_step, true, why);
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == options_.rank || r == rank || dead_[r] || gone_from_[r] != kAlive) continue;
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

void GossipMixer::SendHeartbeats() {
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == options_.rank || dead_[r] || gone_from_[r] != kAlive) continue;
    (void)endpoint_->Send(options_.peer_ids[r],
                          MakeSimple(wire::MsgType::HEARTBEAT, wire::Role::WORKER, options_.rank),
                          absl::Now() + options_.peer_timeout);
  }
}

void GossipMixer::Leave(int64_t next_step) {
  if (!initialized_) return;
  for (int r = 0; r < options_.num_peers; ++r) {
    if (r == options_.rank || dead_[r] || gone_from_[r] != kAlive) continue;
    MessageBuilder b(wire::MsgType::FINISH);
    auto h = b.header();
    h.setRole(wire::Role::WORKER);
    h.setRank(options_.rank);
    h.setClock(next_step);
    (void)endpoint_->Send(options_.peer_ids[r], b.Finish(), absl::Now() + options_.peer_timeout);
  }
}

absl::Status GossipMixer::Decode(Message& message, Incoming* out) {
  auto h = message.header();
  if (h.getValueCount() != size_ || message.payload_count() != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gossip message of %d values in %d frames, want %d values in 1",
                        h.getValueCount(), message.payload_count(), size_));
  }
  if (h.getRangeBegin() > static_cast<uint64_t>(options_.num_peers)) {
    return absl::InvalidArgumentError(absl::StrCat("gossip degree ", h.getRangeBegin()));
  }
  const float weight = h.getWeight();
  if (!std::isfinite(weight) || weight < 0) {
    return absl::InvalidArgumentError(absl::StrCat("gossip weight ", weight));
  }
  out->step = h.getClock();
  out->degree = static_cast<int>(h.getRangeBegin());
  out->weight = weight;
  auto kind = CodecKindFromWire(h.getCodec());
  if (!kind.ok()) return kind.status();
  Frame& frame = message.payload(0);
  if (*kind == CodecKind::kNone) {
    auto values = frame.As<float>();
    if (!values.ok()) return values.status();
    if (values->size() != size_) return absl::InvalidArgumentError("gossip values frame size");
    out->values.assign(values->begin(), values->end());
    return absl::OkStatus();
  }
  auto codec = Codec::Create(CodecSpec{.kind = *kind});
  if (codec == nullptr) return absl::InvalidArgumentError("gossip codec");
  out->values.assign(size_, 0.0f);
  return codec->DecodeAdd(std::span<const std::byte>(frame.data(), frame.size()), out->values);
}

void GossipMixer::Handle(Message message) {
  bytes_received_ += message.ByteSize();
  if (auto s = message.Parse(); !s.ok()) {
    SYNCLINE_LOG(WARNING) << "gossip: dropped a malformed message from " << message.peer() << ": "
                          << s;
    return;
  }
  auto h = message.header();
  const int rank = h.getRank();
  if (rank < 0 || rank >= options_.num_peers || rank == options_.rank ||
      options_.peer_ids[rank] != message.peer()) {
    SYNCLINE_LOG(WARNING) << "gossip: dropped a message from " << message.peer()
                          << " claiming rank " << rank;
    return;
  }
  last_heard_[rank] = absl::Now();
  switch (h.getType()) {
    case wire::MsgType::GOSSIP: {
      Incoming in;
      in.rank = rank;
      if (auto s = Decode(message, &in); !s.ok()) {
        SYNCLINE_LOG(WARNING) << "gossip: dropped a bad message from " << Name(rank) << ": " << s;
        return;
      }
      arrived_.push_back(std::move(in));
      return;
    }
    case wire::MsgType::NODE_DOWN: {
      if (!h.getBody().isNodeDown()) return;
      const int down = h.getBody().getNodeDown().getRank();
      if (down < 0 || down >= options_.num_peers) return;
      // A peer can tell of a death only from a step not yet mixed here: a report from the past
      // (INT64_MIN, say) would rewrite steps already done.
      MarkGone(down, std::max<int64_t>(h.getClock(), current_step_ + 1), true,
               absl::StrCat("reported by ", Name(rank), ": ",
                            std::string(h.getBody().getNodeDown().getReason().cStr())));
      return;
    }
    case wire::MsgType::FINISH:
      MarkGone(rank, h.getClock(), false, "finished");
      return;
    case wire::MsgType::ERROR:
      if (h.getStatusCode() == static_cast<int32_t>(absl::StatusCode::kFailedPrecondition)) {
        skipped_.emplace_back(rank, h.getClock());
      }
      return;
    case wire::MsgType::HEARTBEAT:
      return;  // last_heard_ is all it is for
    default:
      SYNCLINE_LOG(WARNING) << "gossip: ignored a " << MsgTypeName(h.getType()) << " from "
                            << Name(rank);
  }
}

absl::Status GossipMixer::ReceiveOne(absl::Time deadline) {
  auto message = endpoint_->Receive(deadline);
  if (!message.ok()) return message.status();
  Handle(std::move(*message));
  return absl::OkStatus();
}

void GossipMixer::RecordProxy(std::span<const float> values,
                              const std::vector<const Incoming*>& received) {
  if (received.empty()) return;
  double sq = 0;
  const double inv = 1.0 / received.size();
  for (size_t k = 0; k < values.size(); ++k) {
    double mean = 0;
    for (const Incoming* in : received) mean += in->values[k];
    const double d = values[k] - mean * inv;
    sq += d * d;
  }
  proxy_sum_ += std::sqrt(sq);
  ++proxy_rounds_;
}

absl::Status GossipMixer::MixOnce(int64_t step, std::span<float> values) {
  if (!initialized_) return absl::FailedPreconditionError("GossipMixer::Init was not called");
  if (values.size() != size_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gossip vector of %d floats, want %d", values.size(), size_));
  }
  if (step <= current_step_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gossip step %d after step %d", step, current_step_));
  }
  current_step_ = step;
  return options_.asynchronous ? MixPushSum(step, values) : MixSynchronous(step, values);
}

absl::Status GossipMixer::MixSynchronous(int64_t step, std::span<float> values) {
  std::map<int, Incoming> got;
  for (auto it = early_.begin(); it != early_.end() && it->first <= step;) {
    if (it->first == step) {
      for (Incoming& in : it->second) got[in.rank] = std::move(in);
    }
    it = early_.erase(it);
  }
  const Frame payload = Encode(values);
  const absl::Time start = absl::Now();
  std::set<int> expected, sent, skipped;
  // A node that waits long tells everyone it is alive: its own neighbours may be waiting for it
  // (they cannot tell waiting from dead otherwise, and a death would cascade along the graph).
  const absl::Duration beat = options_.peer_timeout / 4;
  absl::Time next_beat = start + beat;
  // Takes what Handle() has collected.
  auto file_arrivals = [&] {
    for (Incoming& in : arrived_) {
      if (in.step == step) {
        got[in.rank] = std::move(in);
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
      if (s == step) skipped.insert(rank);
    }
    skipped_.clear();
  };
  while (true) {
    // Who this step waits for: the graph's neighbours in the current view, and anyone who sent
    // this step's values (a peer whose view differs), less the dead and those who skipped.
    for (int r :
         SyncNeighbours(options_.topology, Members(step), options_.rank, step, options_.seed)) {
      expected.insert(r);
    }
    for (auto& [r, in] : got) expected.insert(r);
    for (auto it = expected.begin(); it != expected.end();) {
      const bool lost = dead_[*it] || gone_from_[*it] <= step || skipped.count(*it) > 0;
      it = (lost && got.count(*it) == 0) ? expected.erase(it) : std::next(it);
    }
    bool changed = false;
    for (int r : expected) {
      if (sent.count(r) > 0) continue;
      sent.insert(r);
      if (auto s = SendValues(r, step, static_cast<int>(expected.size()), 0.0, payload); !s.ok()) {
        DeclareDead(r, step + 1, absl::StrCat("send failed: ", s.ToString()));
        changed = true;
        break;
      }
    }
    if (changed) continue;
    absl::Time deadline = absl::InfiniteFuture();
    bool complete = true;
    for (int r : expected) {
      if (got.count(r) > 0) continue;
      complete = false;
      deadline = std::min(deadline, std::max(start, last_heard_[r]) + options_.peer_timeout);
    }
    if (complete) break;
    auto s = ReceiveOne(std::min(deadline, next_beat));
    if (absl::IsDeadlineExceeded(s)) {
      const absl::Time now = absl::Now();
      if (now >= next_beat) {
        SendHeartbeats();
        next_beat = now + beat;
      }
      for (int r : expected) {
        if (got.count(r) == 0 && std::max(start, last_heard_[r]) + options_.peer_timeout <= now) {
          DeclareDead(r, step + 1,
                      absl::StrCat("sent nothing for ", absl::FormatDuration(options_.peer_timeout),
                                   " at step ", step));
        }
      }
    } else if (!s.ok()) {
      return s;
    }
    file_arrivals();
  }

  std::vector<const Incoming*> received;
  for (auto& [r, in] : got) received.push_back(&in);
  RecordProxy(values, received);
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
  if (arrived_.empty()) return absl::OkStatus();
  std::vector<const Incoming*> received;
  for (const Incoming& in : arrived_) received.push_back(&in);
  RecordProxy(values, received);
  for (const Incoming& in : arrived_) {
    const double total = weight_ + in.weight;
    if (total <= 0) continue;
    for (size_t k = 0; k < values.size(); ++k) {
      values[k] = static_cast<float>((weight_ * values[k] + in.weight * in.values[k]) / total);
    }
    weight_ = total;
  }
  arrived_.clear();
  return absl::OkStatus();
}

absl::Status GossipMixer::MixPushSum(int64_t step, std::span<float> values) {
  if (auto s = DrainIncoming(values); !s.ok()) return s;
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
    if (!dead_[r]) out.push_back(r);
  }
  if (out.empty()) return absl::OkStatus();
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

}  // namespace syncline
