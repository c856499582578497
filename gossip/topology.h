// Gossip topologies: which peers a worker exchanges parameters with at each step, computed by
// every node from (topology, live members, step, seed) alone, so that no node has to ask.
//
// - Ring: neighbours are the previous and next live ranks.
// - Exponential (Assran et al. 2019, "Stochastic Gradient Push"): a one-peer graph whose peer
//   distance cycles through 1, 2, 4, ... For the synchronous (symmetric) variant node position p
//   pairs with p XOR 2^k, k = step mod ceil(log2 m) among m live members; for m a power of two
//   this reaches the exact average in log2(m) rounds with weights 1/2. For push-sum the out-peer
//   is position (p + 2^k) mod m.
// - Random: a fresh random perfect matching per step (synchronous; with m odd one node sits
//   out), or a random out-peer per step and node (push-sum), drawn from (seed, step).
//
// Synchronous mixing uses Metropolis–Hastings weights w_ij = 1/(1 + max(d_i, d_j)),
// w_ii = 1 - sum_j w_ij, which make the mixing matrix of a symmetric graph doubly stochastic.
//
// Thread-safety: free functions without state.
#ifndef SYNCLINE_GOSSIP_TOPOLOGY_H_
#define SYNCLINE_GOSSIP_TOPOLOGY_H_

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "job/options.h"
#include "syncline/options.h"

namespace syncline {

// GossipTopology is an option type (syncline/options.h); its text form, with
// ParseGossipMode, is in job/options.h.

// The neighbours of `self` in the undirected graph of step `step` among `members` (sorted live
// ranks, containing self). Symmetric: j is a neighbour of i exactly when i is one of j.
std::vector<int> SyncNeighbours(GossipTopology topology, std::span<const int> members, int self,
                                int64_t step, uint64_t seed);

// The peers `self` pushes half (or 1/(d+1)) of its push-sum mass to at step `step`.
std::vector<int> PushSumOutPeers(GossipTopology topology, std::span<const int> members, int self,
                                 int64_t step, uint64_t seed);

// The ranks that push to `self` at some step of the topology's period (ring, exponential);
// empty for random, whose in-peers are not predictable. Push-sum watches these for silence.
std::vector<int> PushSumInPeers(GossipTopology topology, std::span<const int> members, int self);

// Metropolis–Hastings weight of an edge between nodes of degrees d_i and d_j.
inline double MetropolisWeight(int degree_i, int degree_j) {
  return 1.0 / (1.0 + (degree_i > degree_j ? degree_i : degree_j));
}

// The synchronous mixing matrix of step `step` over `members` (row i = members[i]), for tests
// and analysis: W[i][j] = MetropolisWeight for neighbours, W[i][i] = 1 - row sum.
std::vector<std::vector<double>> MixingMatrix(GossipTopology topology, std::span<const int> members,
                                              int64_t step, uint64_t seed);

// The consensus distance of a set of replicas: the mean over nodes of ||x_i - mean_j x_j||
// (L2). Needs every node's vector, so it is for tests and offline analysis; a running node
// reports GossipMixer::TakeConsensusProxy instead.
double ConsensusDistance(const std::vector<std::vector<float>>& nodes);

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_TOPOLOGY_H_
