// The coordinator's PeerRendezvous (core/peer_rendezvous.h) for a worker node: a timeline's
// waits for peers end when the coordinator orders a rollback (or the job ends), endpoints are
// bound as the node's data endpoint is, and addresses are traded through the coordinator
// (ControlClient::ReportPeerAddress, AwaitPeerAddresses).
//
// Thread-safety: as PeerRendezvous.
#ifndef SYNCLINE_WORKER_COORDINATED_RENDEZVOUS_H_
#define SYNCLINE_WORKER_COORDINATED_RENDEZVOUS_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "core/control_client.h"
#include "core/peer_rendezvous.h"
#include "core/transport.h"
#include "job/node_join.h"

namespace syncline {

// What stops a wait of the timeline that `back` undoes.
absl::Status RollingBack(const ControlClient::Rollback& back);

// The rendezvous of a worker node of `generation`: interrupted by the coordinator's rollback
// (or the job's end), listening on `transport` as `options` say, trading addresses through the
// coordinator, counting the plan events `control` has heard. `control`, `transport` and
// `options` must outlive it.
std::unique_ptr<PeerRendezvous> MakeCoordinatedRendezvous(ControlClient& control,
                                                          Transport& transport,
                                                          const NodeOptions& options,
                                                          uint32_t generation);

}  // namespace syncline

#endif  // SYNCLINE_WORKER_COORDINATED_RENDEZVOUS_H_
