#include "programs/worker_backends.h"

#include "gossip/gossip_peer.h"

namespace syncline {

ServerlessBackendFactory MakeServerlessBackendFactory(CollectivePlane plane) {
  return [gossip = MakeGossipBackendFactory(), allreduce = MakeAllReduceBackendFactory(plane)](
             const JobSpec& spec, const ParameterLayout& layout, const NodeTable& table, int rank,
             Endpoint& endpoint, const std::string& device,
             PeerRendezvous& rendezvous) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    return spec.sync.allreduce()
               ? allreduce(spec, layout, table, rank, endpoint, device, rendezvous)
               : gossip(spec, layout, table, rank, endpoint, device, rendezvous);
  };
}

}  // namespace syncline
