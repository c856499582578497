#include "gossip/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace syncline {
namespace {

constexpr GossipTopology kAll[] = {GossipTopology::kRing, GossipTopology::kExponential,
                                   GossipTopology::kRandom};

std::vector<int> Ranks(int n) {
  std::vector<int> r(n);
  for (int i = 0; i < n; ++i) r[i] = i;
  return r;
}

TEST(TopologyTest, ParsesGossipModes) {
  EXPECT_EQ(*ParseGossipMode("gossip:ring"), std::make_pair(GossipTopology::kRing, false));
  EXPECT_EQ(*ParseGossipMode("gossip:exp"), std::make_pair(GossipTopology::kExponential, false));
  EXPECT_EQ(*ParseGossipMode("gossip:random"), std::make_pair(GossipTopology::kRandom, false));
  EXPECT_EQ(*ParseGossipMode("gossip:ring:async"), std::make_pair(GossipTopology::kRing, true));
  EXPECT_EQ(*ParseGossipMode("gossip-async:exp"),
            std::make_pair(GossipTopology::kExponential, true));
  for (const char* bad : {"gossip:star", "bsp", "gossip:", "gossip:ring:sync", "gossip-async:"}) {
    auto r = ParseGossipMode(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(std::string(r.status().message()).find(bad), std::string::npos) << r.status();
  }
}

TEST(TopologyTest, SyncGraphsAreSymmetricAndMixingMatricesDoublyStochastic) {
  for (GossipTopology t : kAll) {
    for (int n = 1; n <= 9; ++n) {
      const std::vector<int> members = Ranks(n);
      for (int64_t step = 0; step < 12; ++step) {
        for (int i = 0; i < n; ++i) {
          for (int j : SyncNeighbours(t, members, i, step, 42)) {
            ASSERT_NE(i, j);
            auto back = SyncNeighbours(t, members, j, step, 42);
            ASSERT_NE(std::find(back.begin(), back.end(), i), back.end())
                << GossipTopologyName(t) << " n=" << n << " step " << step;
          }
        }
        auto w = MixingMatrix(t, members, step, 42);
        for (int i = 0; i < n; ++i) {
          double row = 0, col = 0;
          for (int j = 0; j < n; ++j) {
            row += w[i][j];
            col += w[j][i];
            EXPECT_GE(w[i][j], 0);
          }
          EXPECT_NEAR(row, 1, 1e-12);
          EXPECT_NEAR(col, 1, 1e-12);
        }
      }
    }
  }
}

TEST(TopologyTest, RandomMatchingIsPerfectAndChangesWithTheStep) {
  const std::vector<int> members = Ranks(8);
  int changed = 0;
  for (int64_t step = 0; step < 20; ++step) {
    for (int i = 0; i < 8; ++i) {
      ASSERT_EQ(SyncNeighbours(GossipTopology::kRandom, members, i, step, 7).size(), 1u);
    }
    changed += SyncNeighbours(GossipTopology::kRandom, members, 0, step, 7) !=
               SyncNeighbours(GossipTopology::kRandom, members, 0, step + 1, 7);
  }
  EXPECT_GT(changed, 10);
}

TEST(TopologyTest, ExponentialPairsAtDistancesOneTwoFour) {
  const std::vector<int> members = Ranks(8);
  EXPECT_EQ(SyncNeighbours(GossipTopology::kExponential, members, 5, 0, 1), std::vector<int>{4});
  EXPECT_EQ(SyncNeighbours(GossipTopology::kExponential, members, 5, 1, 1), std::vector<int>{7});
  EXPECT_EQ(SyncNeighbours(GossipTopology::kExponential, members, 5, 2, 1), std::vector<int>{1});
  EXPECT_EQ(SyncNeighbours(GossipTopology::kExponential, members, 5, 3, 1), std::vector<int>{4});
  EXPECT_EQ(PushSumOutPeers(GossipTopology::kExponential, members, 5, 2, 1), std::vector<int>{1});
  EXPECT_EQ(PushSumInPeers(GossipTopology::kExponential, members, 0), (std::vector<int>{7, 6, 4}));
}

TEST(TopologyTest, GraphsSkipRanksThatAreGone) {
  const std::vector<int> members = {0, 1, 2, 4, 5};  // 3 is gone
  EXPECT_EQ(SyncNeighbours(GossipTopology::kRing, members, 2, 0, 1), (std::vector<int>{1, 4}));
  EXPECT_EQ(SyncNeighbours(GossipTopology::kRing, members, 4, 0, 1), (std::vector<int>{2, 5}));
  for (int64_t step = 0; step < 10; ++step) {
    for (int r : members) {
      for (int p : PushSumOutPeers(GossipTopology::kRandom, members, r, step, 3)) {
        EXPECT_NE(p, r);
        EXPECT_NE(p, 3);
      }
    }
  }
}

TEST(TopologyTest, ConsensusDistanceOfTwoPoints) {
  EXPECT_DOUBLE_EQ(ConsensusDistance({{0, 0}, {3, 4}}), 2.5);
  EXPECT_DOUBLE_EQ(ConsensusDistance({{1, 2}, {1, 2}}), 0);
}

}  // namespace
}  // namespace syncline
