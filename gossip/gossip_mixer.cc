#include "gossip/gossip_mixer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "job/options.h"
#include "worker/sync_backend.h"

namespace syncline {

namespace {
// How long a push-sum node that leaves goes on forwarding the shares still arriving.
constexpr absl::Duration kLeaveLinger = absl::Milliseconds(200);
}  // namespace

namespace {

bool IsDifferenceCodec(CodecKind kind) {
  return kind == CodecKind::kTopK || kind == CodecKind::kSign1;
}

// The kind alone: a received block's ratio or chunk is not known.
std::string KindName(CodecKind kind) {
  std::string name = CodecName(CodecSpec{.kind = kind});
  return name.substr(0, name.find(':'));
}

}  // namespace

double ConsensusStep(const GossipOptions& options) {
  if (!IsDifferenceCodec(options.codec.kind)) return 0;
  if (options.consensus_step != 0) return options.consensus_step;
  // Measured on rings, exponential graphs and random matchings of 8 and 16 nodes
  // (docs/GOSSIP_COMPRESSION.md): topk diverges from about 4 R (ring of 8); sign1 is fastest
  // near 0.1 on a ring and slower above it on random matchings.
  if (options.codec.kind == CodecKind::kTopK) return std::min(1.0, 2 * options.codec.ratio);
  return 0.1;
}

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
  const int initial = options_.initial_peers == 0 ? n : options_.initial_peers;
  if (initial < 1 || initial > n) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gossip initial_peers %d is not in [1, %d]", options_.initial_peers, n));
  }
  if (options_.peer_timeout <= absl::ZeroDuration() || options_.max_steps_ahead < 1) {
    return absl::InvalidArgumentError("gossip peer_timeout and max_steps_ahead must be positive");
  }
  if (auto s = ValidateCodecSpec(options_.codec); !s.ok()) return s;
  choco_ = IsDifferenceCodec(options_.codec.kind);
  if (choco_ && options_.asynchronous) {
    return absl::InvalidArgumentError(absl::StrCat(
        "push-sum gossip cannot use codec ", CodecName(options_.codec),
        ": it mixes whole parameters weighted by mass that arrives at any time, and only "
        "synchronous gossip keeps the public copies that compressed differences need (use "
        "none or fp16, or synchronous gossip)"));
  }
  const double step = options_.consensus_step;
  if (!std::isfinite(step) || step < 0 || step > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gossip consensus_step ", step, " is not in (0, 1] (0: the codec's)"));
  }
  gamma_ = ConsensusStep(options_);
  codec_ = options_.codec.kind == CodecKind::kNone ? nullptr : Codec::Create(options_.codec);
  edges_.clear();
  size_ = size;
  gone_from_.assign(n, kAlive);
  joined_from_.assign(n, kAlive);
  std::fill(joined_from_.begin(), joined_from_.begin() + initial, 0);
  // A joiner opens the connections to every rank below it (gossip_peer.cc): it may send to
  // them at once. Others hear from a joiner before they send to it.
  heard_.assign(n, false);
  for (int r = 0; r < n; ++r)
    heard_[r] = r < initial || (options_.rank >= initial && r < options_.rank);
  entry_step_ = -1;
  welcome_requests_.clear();
  holds_mass_ = true;
  dead_.assign(n, false);
  start_time_ = absl::Now();
  last_heard_.assign(n, start_time_);
  weight_ = 1.0;
  initialized_ = true;
  SYNCLINE_LOG(INFO) << "gossip " << GossipTopologyName(options_.topology)
                     << (options_.asynchronous ? " push-sum" : " synchronous") << ": rank "
                     << options_.rank << " of " << n << ", seed " << options_.seed << ", " << size
                     << " floats, codec " << CodecName(options_.codec);
  if (choco_) {
    SYNCLINE_LOG(INFO) << "gossip: CHOCO compressed differences with consensus step " << gamma_;
  }
  return absl::OkStatus();
}

std::string GossipMixer::Name(int rank) const {
  return absl::StrCat(options_.peer_ids[rank], " (rank ", rank, ")");
}

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
    if (options_.asynchronous) continue;  // shares, merged below
    for (Incoming& in : arrived_) {
      if (in.step < step) {
        models.push_back(std::move(in.values));
      } else if (in.step <= step + options_.max_steps_ahead) {
        early_[in.step].push_back(std::move(in));
      }
    }
    arrived_.clear();
  }
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
  if (models.empty()) {
    SYNCLINE_LOG(WARNING) << "gossip: entered at step " << step
                          << " with no neighbour's model: its own zeros mix in";
    return absl::OkStatus();
  }
  for (size_t k = 0; k < size_; ++k) {
    double sum = 0;
    for (const std::vector<float>& m : models) sum += m[k];
    values[k] = static_cast<float>(sum / models.size());
  }
  SYNCLINE_LOG(INFO) << "gossip: entered at step " << step << " with the mean of " << models.size()
                     << " neighbours' models";
  return absl::OkStatus();
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
  ScopedTime timed(&codec_time_);
  codec_->Encode(values, &block_);
  return Frame::Copy(block_.data(), block_.size());
}

absl::Status GossipMixer::SendValues(int peer, int64_t step, int degree, double weight,
                                     const Frame& payload, uint64_t exchanges,
                                     std::optional<uint32_t> era) {
  const uint32_t generation = era.value_or(era_);
  MessageBuilder b(wire::MsgType::GOSSIP);
  auto h = b.header();
  h.setRole(wire::Role::WORKER);
  h.setRank(options_.rank);
  h.setClock(step);
  h.setWeight(static_cast<float>(weight));
  h.setRangeBegin(static_cast<uint64_t>(degree));
  h.setValueCount(size_);
  h.setCodec(static_cast<uint8_t>(options_.codec.kind));
  h.setRequestId(exchanges);
  // Push-sum: the deaths the sender's weight accounts for, and who died (ranks below 64), so
  // that a receiver that enters the era knows whom not to push to (see the header comment).
  h.setGeneration(generation);
  if (options_.asynchronous) h.setKeysOf(DeadMask());
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
    // Push-sum: the weight the dead peer held, and the shares on their way to it, are gone.
    // Every survivor starts a new era with weight 1 (its model unchanged), unless a share of
    // that era already made it start one.
    if (options_.asynchronous && ++deaths_ > era_ && !left_) EnterEra(deaths_);
  } else if (!dead) {
    SYNCLINE_LOG(INFO) << "gossip peer " << Name(rank) << " leaves from step " << from_step;
  }
}

void GossipMixer::EnterEra(uint32_t era) {
  // A joiner that has held no weight yet brought none that the era's count could include.
  const double weight = holds_mass_ ? 1.0 : 0.0;
  SYNCLINE_LOG(INFO) << "push-sum: weight " << weight_ << " reset to " << weight
                     << " after a peer's death (era " << era << ")";
  era_ = era;
  weight_ = weight;
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

void GossipMixer::SendHeartbeats() {
  for (int r = 0; r < options_.num_peers; ++r) {
    if (!Reachable(r)) continue;
    (void)endpoint_->Send(options_.peer_ids[r],
                          MakeSimple(wire::MsgType::HEARTBEAT, wire::Role::WORKER, options_.rank),
                          absl::Now() + options_.peer_timeout);
  }
}

uint64_t GossipMixer::DeadMask() const {
  uint64_t mask = 0;
  for (int r = 0; r < std::min(options_.num_peers, 64); ++r) {
    if (dead_[r]) mask |= uint64_t{1} << r;
  }
  return mask;
}

void GossipMixer::Leave(int64_t next_step, std::span<const float> values) {
  if (!initialized_) return;
  left_ = true;  // a death heard from now on resets no weight: this node holds none
  // Push-sum: hand this node's weight and mass to the next live peer, so that the nodes still
  // mixing hold all of it and reach the average of everyone's vectors, not of theirs only.
  int heir = -1;
  if (options_.asynchronous && values.size() == size_ && weight_ > 0) {
    for (int k = 1; k < options_.num_peers; ++k) {
      const int r = (options_.rank + k) % options_.num_peers;
      if (!Reachable(r)) continue;
      // Rounded to what the header carries, as every push-sum share.
      const double share = static_cast<float>(weight_);
      if (SendValues(r, std::max<int64_t>(current_step_, 0), 1, share, Encode(values)).ok()) {
        weight_ -= share;
        heir = r;
        break;
      }
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
  // moment, every one that arrives goes on to the heir as it came.
  const absl::Time until = absl::Now() + std::min(options_.peer_timeout, kLeaveLinger);
  while (absl::Now() < until) {
    if (!ReceiveOne(until).ok()) continue;
    for (const Incoming& in : arrived_) {
      (void)SendValues(heir, std::max<int64_t>(current_step_, 0), 1, in.weight, Encode(in.values),
                       0, in.era);
    }
    arrived_.clear();
  }
  skipped_.clear();
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
  out->exchanges = h.getRequestId();
  out->era = h.getGeneration();
  out->dead_mask = h.getKeysOf();
  if (out->era > static_cast<uint32_t>(options_.num_peers)) {
    return absl::InvalidArgumentError(absl::StrCat("push-sum era ", out->era));
  }
  auto kind = CodecKindFromWire(h.getCodec());
  if (!kind.ok()) return kind.status();
  // A difference added as parameters, or parameters added to a copy, would wreck the model.
  if (IsDifferenceCodec(*kind) != choco_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", KindName(*kind), " block where ",
                     choco_ ? "compressed differences (topk, sign1)" : "parameters (none, fp16)",
                     " are exchanged"));
  }
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
  ScopedTime timed(&codec_time_);
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
  heard_[rank] = true;  // its connection is up: this node may send to it
  // Push-sum: a peer declared dead that is alive after all (a timeout too short) is in an era
  // of its own; its shares and reports would add weight, or deaths, that nobody else counts.
  if (options_.asynchronous && dead_[rank] &&
      (h.getType() == wire::MsgType::GOSSIP || h.getType() == wire::MsgType::NODE_DOWN)) {
    return;
  }
  switch (h.getType()) {
    case wire::MsgType::GOSSIP: {
      Incoming in;
      in.rank = rank;
      if (auto s = Decode(message, &in); !s.ok()) {
        SYNCLINE_LOG(WARNING) << "gossip: dropped a bad message from " << Name(rank) << ": " << s;
        return;
      }
      // The sender's dead, before its share counts: the share may be of an era this node
      // has not entered, and entering it means no longer pushing to them.
      for (int r = 0; r < std::min(options_.num_peers, 64); ++r) {
        if ((in.dead_mask >> r & 1) != 0 && !dead_[r] && r != options_.rank) {
          MarkGone(r, current_step_ + 1, true, absl::StrCat("reported by ", Name(rank)));
        }
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
    case wire::MsgType::JOIN:
      // A joiner's hello (heard_ is set); rangeBegin 1: it asks for this node's model, which
      // goes as soon as this node holds its vector (a round, or a push-sum drain).
      if (h.getRangeBegin() == 1 && h.getClock() >= 0 && !dead_[rank]) {
        welcome_requests_.emplace_back(rank, h.getClock());
      }
      return;
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
                              const std::vector<std::span<const float>>& received) {
  if (received.empty()) return;
  double sq = 0;
  const double inv = 1.0 / received.size();
  for (size_t k = 0; k < values.size(); ++k) {
    double mean = 0;
    for (std::span<const float> in : received) mean += in[k];
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
  const Frame payload = choco_ ? Frame() : Encode(values);
  std::map<int, std::vector<float>> delivered;  // CHOCO: decoded blocks that reached each peer
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
    if (!welcome_requests_.empty()) AnswerWelcomes(values);
  };
  while (true) {
    TakeDownPeers(step + 1);
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
      // A joiner not heard from yet is waited for: its hello comes first.
      if (sent.count(r) > 0 || !heard_[r]) continue;
      sent.insert(r);
      std::vector<float> block_value;
      const Frame frame = choco_ ? EncodeDifference(r, values, &block_value) : payload;
      const uint64_t exchanges = choco_ ? static_cast<uint64_t>(edges_[r].exchanges) : 0;
      if (auto s = SendValues(r, step, static_cast<int>(expected.size()), 0.0, frame, exchanges);
          !s.ok()) {
        DeclareDead(r, step + 1, absl::StrCat("send failed: ", s.ToString()));
        changed = true;
        break;
      }
      if (choco_) delivered[r] = std::move(block_value);
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
    // With a coordinator's reports to watch, the wait wakes up to look at them.
    const absl::Time poll =
        take_down_ ? absl::Now() + absl::Milliseconds(100) : absl::InfiniteFuture();
    auto s = ReceiveOne(std::min({deadline, next_beat, poll}));
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

  if (choco_) {
    MixCompressed(step, values, got, delivered);
    return absl::OkStatus();
  }
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
  return absl::OkStatus();
}

Frame GossipMixer::EncodeDifference(int peer, std::span<const float> values,
                                    std::vector<float>* sent) {
  ScopedTime timed(&codec_time_);
  Edge& edge = edges_[peer];
  if (edge.own.empty()) {
    edge.own.assign(size_, 0.0f);
    edge.theirs.assign(size_, 0.0f);
  }
  difference_.resize(size_);
  for (size_t k = 0; k < size_; ++k) difference_[k] = values[k] - edge.own[k];
  codec_->Encode(difference_, &block_);
  sent->assign(size_, 0.0f);
  if (!codec_->DecodeAdd(block_, *sent).ok()) {
    // sign1 of a non-finite difference has a non-finite scale, which no peer would accept:
    // send a zero difference, so that all of it stays in x - own for later.
    SYNCLINE_LOG(WARNING) << "gossip: the difference to " << Name(peer)
                          << "'s copy does not encode (not finite?); sending none this step";
    std::fill(difference_.begin(), difference_.end(), 0.0f);
    codec_->Encode(difference_, &block_);
    sent->assign(size_, 0.0f);
  }
  return Frame::Copy(block_.data(), block_.size());
}

void GossipMixer::MixCompressed(int64_t step, std::span<float> values,
                                const std::map<int, Incoming>& got,
                                const std::map<int, std::vector<float>>& delivered) {
  // The degree counts every neighbour heard from, as in D-PSGD, so that both ends of an edge
  // compute the same weight; an edge whose ends disagree contributes nothing at either end.
  const int degree = static_cast<int>(got.size());
  std::vector<const Edge*> mixed;
  std::vector<double> weights;
  for (const auto& [r, in] : got) {
    auto sent = delivered.find(r);
    if (sent == delivered.end()) continue;  // r did not get this node's block: nor does it mix
    Edge& edge = edges_[r];
    if (in.exchanges != static_cast<uint64_t>(edge.exchanges)) {
      SYNCLINE_LOG(WARNING) << "gossip: the public copies shared with " << Name(r)
                            << " disagree at step " << step << " (" << edge.exchanges
                            << " exchanges here, " << in.exchanges
                            << " there): both ends restart them from zero";
      edge.exchanges = 0;
      std::fill(edge.own.begin(), edge.own.end(), 0.0f);
      std::fill(edge.theirs.begin(), edge.theirs.end(), 0.0f);
      continue;
    }
    for (size_t k = 0; k < size_; ++k) {
      edge.own[k] += sent->second[k];
      edge.theirs[k] += in.values[k];
    }
    ++edge.exchanges;
    mixed.push_back(&edge);
    weights.push_back(gamma_ * MetropolisWeight(degree, in.degree));
  }
  std::vector<std::span<const float>> copies;
  for (const Edge* edge : mixed) copies.push_back(edge->theirs);
  RecordProxy(values, copies);
  for (size_t k = 0; k < size_; ++k) {
    double move = 0;
    for (size_t j = 0; j < mixed.size(); ++j) {
      move += weights[j] * (static_cast<double>(mixed[j]->theirs[k]) - mixed[j]->own[k]);
    }
    values[k] = static_cast<float>(values[k] + move);
  }
  // A peer that is gone from the next step on never exchanges on its edge again.
  for (auto it = edges_.begin(); it != edges_.end();) {
    it = gone_from_[it->first] <= step + 1 ? edges_.erase(it) : std::next(it);
  }
}

std::vector<int64_t> GossipMixer::CopyExchanges() const {
  std::vector<int64_t> exchanges(options_.num_peers, -1);
  for (const auto& [r, edge] : edges_) exchanges[r] = edge.exchanges;
  return exchanges;
}

void GossipMixer::AppendCopies(std::string* out) const {
  for (const auto& [r, edge] : edges_) {
    for (const std::vector<float>* copy : {&edge.own, &edge.theirs}) {
      if (copy->empty()) continue;
      out->append(reinterpret_cast<const char*>(copy->data()), copy->size() * sizeof(float));
    }
  }
}

absl::StatusOr<size_t> GossipMixer::CopyBytes(std::span<const int64_t> exchanges) const {
  if (exchanges.size() != static_cast<size_t>(options_.num_peers)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("public copies for %d gossip peers; this job has %d", exchanges.size(),
                        options_.num_peers));
  }
  size_t edges = 0;
  for (int r = 0; r < options_.num_peers; ++r) {
    if (exchanges[r] < -1 || (r == options_.rank && exchanges[r] != -1)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bad public copy entry %d for rank %d (this node is rank %d)",
                          exchanges[r], r, options_.rank));
    }
    edges += exchanges[r] >= 0;
  }
  return edges * 2 * size_ * sizeof(float);
}

absl::Status GossipMixer::RestoreCopies(std::span<const int64_t> exchanges,
                                        std::string_view bytes) {
  absl::StatusOr<size_t> want = CopyBytes(exchanges);
  if (!want.ok()) return want.status();
  if (*want != bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%d bytes of public copies, expected %d", bytes.size(), *want));
  }
  std::map<int, Edge> edges;
  const char* p = bytes.data();
  for (int r = 0; r < options_.num_peers; ++r) {
    if (exchanges[r] < 0) continue;
    Edge& edge = edges[r];
    edge.exchanges = exchanges[r];
    for (std::vector<float>* copy : {&edge.own, &edge.theirs}) {
      copy->resize(size_);
      std::memcpy(copy->data(), p, size_ * sizeof(float));
      p += size_ * sizeof(float);
    }
  }
  edges_ = std::move(edges);
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

}  // namespace syncline
