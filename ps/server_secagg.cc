// The parameter server's side of --secure-aggregation: it carries the stages of
// privacy/secagg_protocol.h between the round's clients, holds only the running masked sum
// (inside the relay), and applies the unmasked sum of a round as that round's update.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/log.h"
#include "ps/server.h"

namespace syncline {

size_t ParameterServer::SecAggLength() const {
  size_t floats = 0;
  for (const auto& [id, table] : tables_) {
    if (table->config().dense) floats += table->range().size() * table->config().dim;
  }
  return floats + 1;  // and the round's weight
}

absl::Status ParameterServer::HandleSecAgg(Message& message) {
  auto h = message.header();
  if (!options_.federated || !options_.federated->secagg) {
    return absl::FailedPreconditionError(
        "this job has no secure aggregation (--secure-aggregation off)");
  }
  if (secagg_ == nullptr || h.getClock() != round_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "w%d's secure-aggregation request is for round %d; round %d is %s", h.getRank(),
        h.getClock(), round_, secagg_ == nullptr ? "past its protocol" : "open"));
  }
  if (h.getTable() >= static_cast<uint32_t>(kSecAggStages) || message.payload_count() < 1 ||
      message.payload_count() > 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "w%d's secure-aggregation request has stage %d and %d frames; stages are 0..%d with a "
        "message frame and (masked input) a values frame",
        h.getRank(), h.getTable(), message.payload_count(), kSecAggStages - 1));
  }
  SecAggPacket packet{.stage = static_cast<SecAggStage>(h.getTable())};
  const Frame& body = message.payload(0);
  packet.body.assign(reinterpret_cast<const char*>(body.data()), body.size());
  if (message.payload_count() == 2) {
    const Frame& values = message.payload(1);
    if (values.size() % sizeof(uint32_t) != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "w%d's masked input has %d bytes, not whole uint32 values", h.getRank(), values.size()));
    }
    packet.values.resize(values.size() / sizeof(uint32_t));
    if (!packet.values.empty()) std::memcpy(packet.values.data(), values.data(), values.size());
  }
  secagg_->Handle(h.getRank() + 1, message.peer(), h.getRequestId(), packet, SecAggLength(),
                  absl::Now());
  SendSecAggAnswers();
  return absl::OkStatus();
}

void ParameterServer::SecAggOnTime() {
  if (secagg_ == nullptr || !secagg_->running() || absl::Now() < secagg_->deadline()) return;
  secagg_->OnTime(absl::Now());
  SendSecAggAnswers();
}

void ParameterServer::SendSecAggAnswers() {
  for (SecAggRelay::Answer& a : secagg_->TakeAnswers()) {
    if (!a.status.ok()) {
      if (absl::IsInvalidArgument(a.status)) {
        ++stats_.rejected;
        SYNCLINE_LOG(WARNING) << "refused w" << a.client - 1 << ": " << a.status;
      }
      MessageBuilder b(wire::MsgType::ERROR);
      b.header().setRequestId(a.request_id);
      b.header().setGeneration(options_.generation);
      b.header().setStatusCode(static_cast<int32_t>(a.status.code()));
      b.header().setMessage(std::string(a.status.message()));
      Reply(a.peer, b.Finish());
      continue;
    }
    MessageBuilder b(wire::MsgType::REPLY);
    b.header().setRequestId(a.request_id);
    b.header().setClock(round_);
    b.header().setTable(static_cast<uint32_t>(a.packet.stage));
    b.AddFrame(Frame::Own(std::vector<char>(a.packet.body.begin(), a.packet.body.end())));
    Reply(a.peer, b.Finish());
  }
  if (!secagg_->running() && !secagg_finished_) {
    secagg_finished_ = true;
    FinishSecAggRound();
  }
}

void ParameterServer::FinishSecAggRound() {
  const SecAggRelay& relay = *secagg_;
  std::vector<std::string> lost;
  secagg_lost_.clear();
  for (int c : round_clients_) {
    if (!relay.answered().contains(c + 1)) {
      secagg_lost_.push_back(c);
      lost.push_back(absl::StrCat("w", c));
    }
  }
  for (int c : relay.corrupt_shares()) {
    ++stats_.rejected;
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "round %d: w%d revealed self-mask shares that disagree with their owner's commitment; "
        "the sum was rebuilt from the other clients' shares",
        round_, c - 1);
  }
  if (relay.outcome().ok()) {
    const SecAggParams& p = *options_.federated->secagg;
    const std::vector<uint32_t>& sum = relay.sum();
    const std::span<const uint32_t> coordinates(sum.data(), sum.size() - 1);
    std::vector<float> values;
    if (options_.federated->distributed_dp) {
      // The clients' noise is in the sum: the values are signed, scaled integers.
      absl::StatusOr<DistributedDpCodec> codec =
          DistributedDpCodec::Create(*options_.federated->distributed_dp, coordinates.size());
      if (!codec.ok()) {
        SYNCLINE_LOG(ERROR) << "round " << round_ << ": " << codec.status();
        values.assign(coordinates.size(), 0.0f);
      } else {
        values = codec->DecodeSum(coordinates);
      }
    } else {
      values = SecAggDecodeSum(coordinates, relay.contributors().size(), p);
    }
    const double weight = sum.back();  // the clients' examples, summed exactly
    size_t at = 0;
    std::vector<uint32_t> ids;
    for (const auto& [id, table] : tables_) {
      if (table->config().dense) ids.push_back(id);
    }
    std::sort(ids.begin(), ids.end());
    for (uint32_t id : ids) {
      ShardTable& table = *tables_.at(id);
      // Worker -1: the round's sum belongs to no single client, and no client's absence
      // drops it.
      table.AccumulateRange(round_, -1, table.range(), values.data() + at);
      at += table.range().size() * table.config().dim;
    }
    if (weight > 0) {
      clock_weight_[round_] += weight;
      stats_.examples_trained += weight;
    }
    std::vector<std::string> names;
    for (int c : relay.contributors()) names.push_back(absl::StrCat("w", c - 1));
    SYNCLINE_LOG(INFO) << absl::StrFormat(
        "round %d: secure aggregation unmasked the sum of %s (%g examples)%s%s", round_,
        absl::StrJoin(names, ", "), weight,
        relay.graph().empty() ? ""
                              : absl::StrCat("; each client paired with ", p.neighbours,
                                             " neighbours (a random Harary graph)"),
        lost.empty() ? "" : absl::StrCat("; lost ", absl::StrJoin(lost, ", ")));
  } else {
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "round %d has no update: %s%s", round_, relay.outcome().message(),
        lost.empty() ? "" : absl::StrCat("; lost ", absl::StrJoin(lost, ", ")));
  }
  // The clients still in the round clock it next; those lost are not waited for.
  std::vector<int> remaining;
  for (int c : relay.answered()) remaining.push_back(c - 1);
  round_clients_ = std::move(remaining);
  round_deadline_ = absl::Now() + options_.federated->secagg_stage_timeout;
  if (auto s = AdvanceRounds(); !s.ok()) SYNCLINE_LOG(ERROR) << s;
}

}  // namespace syncline
