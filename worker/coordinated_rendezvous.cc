#include "worker/coordinated_rendezvous.h"

#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace syncline {

absl::Status RollingBack(const ControlClient::Rollback& back) {
  return absl::AbortedError(absl::StrFormat(
      "the job is rolling back to checkpoint %d (a node is being replaced)", back.clock));
}

namespace {

class CoordinatedRendezvous final : public PeerRendezvous {
 public:
  CoordinatedRendezvous(ControlClient& control, Transport& transport, const NodeOptions& options,
                        uint32_t generation)
      : control_(control), transport_(transport), options_(options), generation_(generation) {}

  uint32_t generation() const override { return generation_; }

  absl::Status Interrupted() const override {
    if (auto back = control_.PendingRollback()) return RollingBack(*back);
    return control_.health();
  }

  absl::StatusOr<Listening> Listen(const std::string& id,
                                   const std::vector<std::string>& peers) override {
    transport_.AllowPeers(peers);
    absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = transport_.CreateEndpoint(id);
    if (!endpoint.ok()) return endpoint.status();
    absl::StatusOr<std::string> address = BindNodeEndpoint(**endpoint, options_);
    if (!address.ok()) return address.status();
    return Listening{*std::move(endpoint), *std::move(address)};
  }

  uint64_t PlanEvents() const override { return control_.PlanEventsHeard(); }

  absl::StatusOr<std::vector<std::string>> TradeAddresses(uint64_t plan_events,
                                                          const std::string& address,
                                                          absl::Time deadline) override {
    control_.ReportPeerAddress(generation_, plan_events, address);
    return control_.AwaitPeerAddresses(generation_, plan_events, deadline);
  }

 private:
  ControlClient& control_;
  Transport& transport_;
  const NodeOptions& options_;
  const uint32_t generation_;
};

}  // namespace

std::unique_ptr<PeerRendezvous> MakeCoordinatedRendezvous(ControlClient& control,
                                                          Transport& transport,
                                                          const NodeOptions& options,
                                                          uint32_t generation) {
  return std::make_unique<CoordinatedRendezvous>(control, transport, options, generation);
}

}  // namespace syncline
