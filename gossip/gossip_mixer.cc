// GossipMixer's options and state, its messages (encoding, sending, receiving and handling
// them) and the round's dispatch. Membership is in gossip_membership.cc, the mixing algorithms
// in gossip_synchronous.cc (D-PSGD), gossip_choco.cc (CHOCO) and gossip_push_sum.cc.
#include "gossip/gossip_mixer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/scoped_time.h"
#include "job/options.h"

namespace syncline {

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

void GossipMixer::SendHeartbeats() {
  for (int r = 0; r < options_.num_peers; ++r) {
    if (!Reachable(r)) continue;
    (void)endpoint_->Send(options_.peer_ids[r],
                          MakeSimple(wire::MsgType::HEARTBEAT, wire::Role::WORKER, options_.rank),
                          absl::Now() + options_.peer_timeout);
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

}  // namespace syncline
