#include "gossip/gossip_peer.h"

#include <algorithm>

#include "gossip/gossip_backend.h"

namespace syncline {

ServerlessBackendFactory MakeGossipBackendFactory() {
  // Gossip averages on the CPU wherever the worker computes: `device` is not used.
  return [](const JobSpec& spec, const NodeTable& table, int rank, Endpoint& endpoint,
            const std::string& /*device*/) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    GossipOptions g;
    g.topology = spec.sync.topology;
    g.asynchronous = spec.sync.asynchronous;
    g.rank = rank;
    // Ranks from num_workers on are joiners (--max-workers), admitted when they arrive.
    g.num_peers = table.MaxWorkers();
    g.initial_peers = table.num_workers;
    g.seed = spec.seed;
    g.peer_timeout = absl::Seconds(std::min(spec.timeouts.request_s, spec.timeouts.peer_s));
    g.optimizer.kind = spec.training.optimizer;
    g.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
    g.optimizer.l2 = static_cast<float>(spec.training.l2);
    g.codec = spec.training.codec;
    g.consensus_step = spec.sync.consensus_step;
    for (int w = 0; w < g.num_peers; ++w) {
      g.peer_ids.push_back(DataEndpointId(wire::Role::WORKER, w));
    }
    // One connection per pair, opened by the lower rank: two ROUTER sockets that connect to
    // each other under the same routing ids trip ZeroMQ. The higher rank answers over the
    // connection it accepted. A joiner opens the connections to every rank below it instead:
    // the others started before its address was known (they hear from it before they send).
    const bool joiner = rank >= table.num_workers;
    for (const NodeInfo& n : table.nodes) {
      if (n.role != wire::Role::WORKER || (joiner ? n.rank >= rank : n.rank <= rank)) continue;
      if (auto st = endpoint.Connect(n.id, n.address); !st.ok()) return st;
    }
    return std::make_unique<GossipBackend>(&endpoint, g);
  };
}

}  // namespace syncline
