#include "gossip/topology.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace syncline {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A small counter-based generator, identical on every node and platform (std::shuffle and the
// standard distributions are not).
class StepRng {
 public:
  StepRng(uint64_t seed, int64_t step, uint64_t stream)
      : state_(SplitMix64(seed ^ SplitMix64(static_cast<uint64_t>(step) ^ SplitMix64(stream)))) {}
  // Uniform in [0, bound), bound > 0 (the modulo bias is negligible for node counts).
  uint64_t Below(uint64_t bound) {
    state_ = SplitMix64(state_);
    return state_ % bound;
  }

 private:
  uint64_t state_;
};

int PositionOf(std::span<const int> members, int self) {
  auto it = std::lower_bound(members.begin(), members.end(), self);
  return (it != members.end() && *it == self) ? static_cast<int>(it - members.begin()) : -1;
}

// Rounds of the exponential graph's period: ceil(log2 m), at least 1.
int ExpRounds(int m) {
  int rounds = 0;
  while ((1 << rounds) < m) ++rounds;
  return std::max(rounds, 1);
}

std::vector<int> RingNeighbours(std::span<const int> members, int p) {
  const int m = static_cast<int>(members.size());
  if (m == 1) return {};
  if (m == 2) return {members[1 - p]};
  return {members[(p + m - 1) % m], members[(p + 1) % m]};
}

}  // namespace

std::vector<int> SyncNeighbours(GossipTopology topology, std::span<const int> members, int self,
                                int64_t step, uint64_t seed) {
  const int p = PositionOf(members, self);
  const int m = static_cast<int>(members.size());
  if (p < 0 || m < 2) return {};
  switch (topology) {
    case GossipTopology::kRing:
      return RingNeighbours(members, p);
    case GossipTopology::kExponential: {
      const int q = p ^ (1 << (step % ExpRounds(m)));
      if (q < m) return {members[q]};
      return {};
    }
    case GossipTopology::kRandom: {
      std::vector<int> order(m);
      for (int i = 0; i < m; ++i) order[i] = i;
      StepRng rng(seed, step, 0);
      for (int i = m - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
      for (int i = 0; i + 1 < m; i += 2) {
        if (order[i] == p) return {members[order[i + 1]]};
        if (order[i + 1] == p) return {members[order[i]]};
      }
      return {};
    }
  }
  return {};
}

std::vector<int> PushSumOutPeers(GossipTopology topology, std::span<const int> members, int self,
                                 int64_t step, uint64_t seed) {
  const int p = PositionOf(members, self);
  const int m = static_cast<int>(members.size());
  if (p < 0 || m < 2) return {};
  switch (topology) {
    case GossipTopology::kRing:
      return RingNeighbours(members, p);
    case GossipTopology::kExponential:
      return {members[(p + (1 << (step % ExpRounds(m)))) % m]};
    case GossipTopology::kRandom: {
      StepRng rng(seed, step, 1 + static_cast<uint64_t>(self));
      const int q = static_cast<int>(rng.Below(m - 1));
      return {members[q >= p ? q + 1 : q]};
    }
  }
  return {};
}

std::vector<int> PushSumInPeers(GossipTopology topology, std::span<const int> members, int self) {
  const int p = PositionOf(members, self);
  const int m = static_cast<int>(members.size());
  if (p < 0 || m < 2) return {};
  switch (topology) {
    case GossipTopology::kRing:
      return RingNeighbours(members, p);
    case GossipTopology::kExponential: {
      std::vector<int> in;
      for (int k = 0; k < ExpRounds(m); ++k) {
        const int r = members[((p - (1 << k)) % m + m) % m];
        if (std::find(in.begin(), in.end(), r) == in.end()) in.push_back(r);
      }
      return in;
    }
    case GossipTopology::kRandom:
      return {};
  }
  return {};
}

std::vector<std::vector<double>> MixingMatrix(GossipTopology topology, std::span<const int> members,
                                              int64_t step, uint64_t seed) {
  const size_t m = members.size();
  std::vector<std::vector<int>> neighbours(m);
  for (size_t i = 0; i < m; ++i) {
    neighbours[i] = SyncNeighbours(topology, members, members[i], step, seed);
  }
  std::vector<std::vector<double>> w(m, std::vector<double>(m, 0.0));
  for (size_t i = 0; i < m; ++i) {
    double sum = 0;
    for (int r : neighbours[i]) {
      const int j = PositionOf(members, r);
      const double wij = MetropolisWeight(static_cast<int>(neighbours[i].size()),
                                          static_cast<int>(neighbours[j].size()));
      w[i][j] = wij;
      sum += wij;
    }
    w[i][i] = 1.0 - sum;
  }
  return w;
}

double ConsensusDistance(const std::vector<std::vector<float>>& nodes) {
  if (nodes.empty()) return 0;
  const size_t size = nodes[0].size();
  std::vector<double> mean(size, 0.0);
  for (const auto& x : nodes) {
    for (size_t k = 0; k < size; ++k) mean[k] += x[k];
  }
  for (double& m : mean) m /= nodes.size();
  double total = 0;
  for (const auto& x : nodes) {
    double sq = 0;
    for (size_t k = 0; k < size; ++k) sq += (x[k] - mean[k]) * (x[k] - mean[k]);
    total += std::sqrt(sq);
  }
  return total / nodes.size();
}

}  // namespace syncline
