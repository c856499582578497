#include "worker/secagg_channel.h"

#include <vector>

#include "absl/strings/str_format.h"

namespace syncline {

absl::StatusOr<SecAggPacket> KvSecAggChannel::Exchange(int64_t round, const SecAggPacket& request,
                                                       absl::Time deadline) {
  std::vector<Frame> frames;
  frames.push_back(Frame::Borrow(request.body.data(), request.body.size()));
  if (!request.values.empty()) frames.push_back(Frame::Borrow(std::span(request.values)));
  absl::StatusOr<Message> reply =
      client_->Call(0, wire::MsgType::SEC_AGG, static_cast<uint32_t>(request.stage), round,
                    std::move(frames), deadline);
  if (!reply.ok()) return reply.status();
  auto h = reply->header();
  if (h.getTable() != static_cast<uint32_t>(request.stage) || h.getClock() != round ||
      reply->payload_count() != 1) {
    return absl::DataLossError(absl::StrFormat(
        "the server answered round %d's %s stage with stage %d of round %d and %d frames", round,
        SecAggStageName(request.stage), h.getTable(), h.getClock(), reply->payload_count()));
  }
  const Frame& body = reply->payload(0);
  return SecAggPacket{.stage = request.stage,
                      .body = std::string(reinterpret_cast<const char*>(body.data()), body.size())};
}

}  // namespace syncline
