#include "gossip/gossip_peer.h"

#include <algorithm>

#include "core/log.h"
#include "core/peer_rendezvous.h"
#include "gossip/gossip_backend.h"

namespace syncline {

ServerlessBackendFactory MakeGossipBackendFactory() {
  // Gossip averages on the CPU wherever the worker computes: `device` is not used.
  return [](const JobSpec& spec, const ParameterLayout& /*layout*/, const NodeTable& table,
            int rank, Endpoint& endpoint, const std::string& /*device*/,
            PeerRendezvous& rendezvous) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
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
    g.interrupted = [&rendezvous] { return rendezvous.Interrupted(); };
    // Generation 0 meets over the data endpoints; after a rollback the peers meet on endpoints
    // of the generation, found through the coordinator (core/peer_rendezvous.h).
    const uint32_t generation = rendezvous.generation();
    const uint64_t plan_events = generation > 0 ? rendezvous.PlanEvents() : 0;
    for (int w = 0; w < g.num_peers; ++w) {
      g.peer_ids.push_back(PeerEndpointId(w, generation, plan_events));
    }
    std::vector<std::string> addresses(g.num_peers);
    for (const NodeInfo& n : table.nodes) {
      if (n.role == wire::Role::WORKER && n.rank >= 0 && n.rank < g.num_peers) {
        addresses[n.rank] = n.address;
      }
    }
    Endpoint* mine = &endpoint;
    std::unique_ptr<Endpoint> own;
    if (generation > 0) {
      absl::StatusOr<PeerRendezvous::Listening> listening =
          rendezvous.Listen(g.peer_ids[rank], g.peer_ids);
      if (!listening.ok()) return listening.status();
      absl::StatusOr<std::vector<std::string>> traded =
          rendezvous.TradeAddresses(plan_events, listening->address, absl::Now() + g.peer_timeout);
      if (!traded.ok()) return traded.status();
      addresses = *std::move(traded);
      addresses.resize(g.num_peers);
      own = std::move(listening->endpoint);
      mine = own.get();
      // (bench/collective-recovery.sh reads this line: the peers hold the new connections.)
      SYNCLINE_LOG(INFO) << "gossip peers of generation " << generation << " meet at "
                         << listening->address;
    }
    // One connection per pair, opened by the lower rank: two ROUTER sockets that connect to
    // each other under the same routing ids trip ZeroMQ. The higher rank answers over the
    // connection it accepted. A joiner opens the connections to every rank below it instead:
    // the others started before its address was known (they hear from it before they send).
    const bool joiner = rank >= table.num_workers;
    for (int w = 0; w < g.num_peers; ++w) {
      if ((joiner ? w >= rank : w <= rank) || addresses[w].empty()) continue;
      if (auto st = mine->Connect(g.peer_ids[w], addresses[w]); !st.ok()) return st;
    }
    auto backend = std::make_unique<GossipBackend>(mine, g);
    backend->Own(std::shared_ptr<Endpoint>(std::move(own)));
    return backend;
  };
}

}  // namespace syncline
