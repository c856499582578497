#include "gossip/gossip_peer.h"

#include <algorithm>

#include "gossip/gossip_backend.h"

namespace syncline {

GossipBackendFactory MakeGossipBackendFactory() {
  return [](const JobSpec& spec, const NodeTable& table, int rank,
            Endpoint& endpoint) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    GossipOptions g;
    g.topology = spec.sync.topology;
    g.asynchronous = spec.sync.asynchronous;
    g.rank = rank;
    g.num_peers = table.num_workers;
    g.seed = spec.seed;
    g.peer_timeout = absl::Seconds(std::min(spec.timeouts.request_s, spec.timeouts.peer_s));
    g.optimizer.kind = spec.training.optimizer;
    g.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
    g.optimizer.l2 = static_cast<float>(spec.training.l2);
    g.codec = spec.training.codec;
    g.consensus_step = spec.sync.consensus_step;
    for (int w = 0; w < table.num_workers; ++w) {
      g.peer_ids.push_back(DataEndpointId(wire::Role::WORKER, w));
    }
    // One connection per pair, opened by the lower rank: two ROUTER sockets that connect to
    // each other under the same routing ids trip ZeroMQ. The higher rank answers over the
    // connection it accepted.
    for (const NodeInfo& n : table.nodes) {
      if (n.role != wire::Role::WORKER || n.rank <= rank) continue;
      if (auto st = endpoint.Connect(n.id, n.address); !st.ok()) return st;
    }
    return std::make_unique<GossipBackend>(&endpoint, g);
  };
}

}  // namespace syncline
