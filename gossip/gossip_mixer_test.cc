#include "gossip/gossip_mixer.h"

#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <thread>

#include "core/inproc_transport.h"

namespace syncline {
namespace {

constexpr uint64_t kSeed = 20240611;

// n nodes over one InprocTransport, one thread each; every endpoint exists before any thread
// starts, as after a rendezvous.
class Cluster {
 public:
  Cluster(int n, GossipOptions base) : n_(n) {
    for (int r = 0; r < n; ++r) ids_.push_back("w" + std::to_string(r));
    for (int r = 0; r < n; ++r) {
      endpoints_.push_back(*transport_.CreateEndpoint(ids_[r]));
      GossipOptions o = base;
      o.rank = r;
      o.num_peers = n;
      o.peer_ids = ids_;
      mixers_.push_back(std::make_unique<GossipMixer>(endpoints_.back().get(), o));
    }
  }
  // Runs body(rank, mixer) on one thread per node.
  void Run(const std::function<void(int, GossipMixer&)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) threads.emplace_back([&, r] { body(r, *mixers_[r]); });
    for (auto& t : threads) t.join();
  }
  // Closes node r's endpoint (as when its process dies).
  void Kill(int r) { endpoints_[r].reset(); }
  GossipMixer& mixer(int r) { return *mixers_[r]; }
  Endpoint& endpoint(int r) { return *endpoints_[r]; }

 private:
  const int n_;
  InprocTransport transport_;
  std::vector<std::string> ids_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::unique_ptr<GossipMixer>> mixers_;
};

std::vector<std::vector<float>> RandomVectors(int n, size_t size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::vector<float>> x(n, std::vector<float>(size));
  for (auto& v : x)
    for (float& f : v) f = u(rng);
  return x;
}

std::vector<double> Mean(const std::vector<std::vector<float>>& x) {
  std::vector<double> mean(x[0].size(), 0.0);
  for (const auto& v : x)
    for (size_t k = 0; k < v.size(); ++k) mean[k] += v[k];
  for (double& m : mean) m /= x.size();
  return mean;
}

double MaxError(const std::vector<float>& v, const std::vector<double>& target) {
  double e = 0;
  for (size_t k = 0; k < v.size(); ++k) e = std::max(e, std::abs(v[k] - target[k]));
  return e;
}

GossipOptions Options(GossipTopology t, bool async = false) {
  GossipOptions o;
  o.topology = t;
  o.asynchronous = async;
  o.seed = kSeed;
  o.peer_timeout = absl::Seconds(5);
  return o;
}

// Runs `rounds` synchronous rounds on every node; returns every node's vector after each round
// (history[t][node], history[0] = start).
std::vector<std::vector<std::vector<float>>> MixRounds(int n, GossipOptions options, int rounds,
                                                       std::vector<std::vector<float>> x) {
  Cluster cluster(n, options);
  std::vector<std::vector<std::vector<float>>> history(rounds + 1, x);
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(x[r].size()).ok());
    for (int t = 0; t < rounds; ++t) {
      ASSERT_TRUE(m.MixOnce(t, x[r]).ok());
      history[t + 1][r] = x[r];
    }
    m.Leave(rounds);
  });
  return history;
}

class ConsensusTest : public testing::TestWithParam<GossipTopology> {};

TEST_P(ConsensusTest, ConvergesToTheExactMean) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  const auto x = RandomVectors(8, 16, kSeed);
  const auto mean = Mean(x);
  const auto history = MixRounds(8, Options(GetParam()), 120, x);
  for (int r = 0; r < 8; ++r) EXPECT_LT(MaxError(history.back()[r], mean), 1e-6) << "node " << r;
  EXPECT_LT(ConsensusDistance(history.back()), 1e-6);
  EXPECT_GT(ConsensusDistance(history.front()), 0.5);
}

INSTANTIATE_TEST_SUITE_P(Topologies, ConsensusTest,
                         testing::Values(GossipTopology::kRing, GossipTopology::kExponential,
                                         GossipTopology::kRandom),
                         [](const auto& info) { return GossipTopologyName(info.param); });

// Second-largest eigenvalue modulus of a symmetric doubly stochastic W: the dominant eigenvalue
// of W - 11^T/n, by power iteration.
double Slem(const std::vector<std::vector<double>>& w) {
  const size_t n = w.size();
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(1.0 + i);  // not orthogonal to any mode
  double lambda = 0;
  for (int it = 0; it < 2000; ++it) {
    double mean = 0;
    for (double e : v) mean += e / n;
    std::vector<double> next(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) next[i] += w[i][j] * (v[j] - mean);
    double norm = 0;
    for (double e : next) norm += e * e;
    norm = std::sqrt(norm);
    double old = 0;
    for (double e : v) old += e * e;
    lambda = norm / std::sqrt(old);
    for (size_t i = 0; i < n; ++i) v[i] = next[i] / norm;
  }
  return lambda;
}

double Disagreement(const std::vector<std::vector<float>>& x) {
  const auto mean = Mean(x);
  double sq = 0;
  for (const auto& v : x)
    for (size_t k = 0; k < v.size(); ++k) sq += (v[k] - mean[k]) * (v[k] - mean[k]);
  return std::sqrt(sq);
}

TEST(MixingRateTest, RingShrinksDisagreementBySlemPerRound) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  std::vector<int> members(8);
  for (int i = 0; i < 8; ++i) members[i] = i;
  const double slem = Slem(MixingMatrix(GossipTopology::kRing, members, 0, kSeed));
  EXPECT_NEAR(slem, 1.0 / 3 + 2.0 / 3 * std::cos(2 * M_PI / 8), 1e-9);
  const auto history =
      MixRounds(8, Options(GossipTopology::kRing), 40, RandomVectors(8, 64, kSeed + 1));
  // After a burn-in the disagreement lies in the slowest mode; average the ratio over rounds.
  double log_ratio = 0;
  for (int t = 20; t < 40; ++t) {
    log_ratio += std::log(Disagreement(history[t + 1]) / Disagreement(history[t]));
  }
  const double measured = std::exp(log_ratio / 20);
  std::cerr << "ring of 8: measured per-round shrinkage " << measured << ", SLEM " << slem
            << ", spectral gap " << 1 - slem << "\n";
  EXPECT_NEAR(measured, slem, 0.05 * slem);
}

TEST(MixingRateTest, ExponentialGraphIsExactAfterLog2nRounds) {
  const auto x = RandomVectors(8, 32, kSeed + 2);
  const auto mean = Mean(x);
  const auto history = MixRounds(8, Options(GossipTopology::kExponential), 3, x);
  EXPECT_GT(MaxError(history[2][0], mean), 1e-2) << "two rounds must not be enough";
  for (int r = 0; r < 8; ++r) EXPECT_LT(MaxError(history[3][r], mean), 1e-6) << "node " << r;
}

TEST(MixingRateTest, Fp16ExchangeKeepsTheMeanToHalfPrecisionWithHalfTheBytes) {
  const auto x = RandomVectors(4, 1000, kSeed + 3);
  const auto mean = Mean(x);
  GossipOptions o = Options(GossipTopology::kRing);
  o.codec.kind = CodecKind::kFp16;
  Cluster cluster(4, o);
  auto y = x;
  std::vector<double> bytes(4);
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(y[r].size()).ok());
    for (int t = 0; t < 60; ++t) ASSERT_TRUE(m.MixOnce(t, y[r]).ok());
    bytes[r] = m.TakeBytesPerPeerStep();
    m.Leave(60);
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_LT(MaxError(y[r], mean), 2e-3) << "node " << r;
    EXPECT_GT(bytes[r], 2000);
    EXPECT_LT(bytes[r], 2300) << "fp16 of 1000 floats plus a header";
  }
}

TEST(GossipMixerTest, RefusesSparsifyingCodecsAndBadRanks) {
  InprocTransport transport;
  auto ep = *transport.CreateEndpoint("w0");
  GossipOptions o = Options(GossipTopology::kRing);
  o.num_peers = 2;
  o.peer_ids = {"w0", "w1"};
  o.codec = *ParseCodec("topk:0.1");
  EXPECT_EQ(GossipMixer(ep.get(), o).Init(4).code(), absl::StatusCode::kInvalidArgument);
  o.codec = {};
  o.rank = 2;
  EXPECT_EQ(GossipMixer(ep.get(), o).Init(4).code(), absl::StatusCode::kInvalidArgument);
}

TEST(GossipMixerTest, DropsForgedAndMalformedMessages) {
  Cluster cluster(2, Options(GossipTopology::kRing));
  auto x = RandomVectors(2, 8, kSeed + 4);
  const auto mean = Mean(x);
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(8).ok());
    if (r == 1) {
      // Before its real message w1 sends one of the wrong size and one claiming to be w0.
      for (int claimed : {1, 0}) {
        MessageBuilder b(wire::MsgType::GOSSIP);
        b.header().setRank(claimed);
        b.header().setClock(0);
        b.header().setValueCount(claimed == 1 ? 3 : 8);
        b.AddFrame(Frame::Own(std::vector<float>(claimed == 1 ? 3 : 8, 100.0f)));
        ASSERT_TRUE(cluster.endpoint(1).Send("w0", b.Finish(), absl::InfiniteFuture()).ok());
      }
    }
    ASSERT_TRUE(m.MixOnce(0, x[r]).ok());
    m.Leave(1);
  });
  for (int r = 0; r < 2; ++r) EXPECT_LT(MaxError(x[r], mean), 1e-6) << "node " << r;
}

// A death report (NODE_DOWN) can only take effect from a step not yet mixed: one that claims a
// peer died at step INT64_MIN must not rewrite the steps already done.
TEST(GossipMixerTest, ADeathReportFromThePastTakesEffectFromTheNextStep) {
  Cluster cluster(3, Options(GossipTopology::kRing, /*async=*/true));
  GossipMixer& m = cluster.mixer(0);
  std::vector<float> x(4, 1.0f);
  ASSERT_TRUE(m.Init(x.size()).ok());
  ASSERT_TRUE(m.MixOnce(0, x).ok());
  MessageBuilder b(wire::MsgType::NODE_DOWN);
  b.header().setRole(wire::Role::WORKER);
  b.header().setRank(1);
  b.header().setClock(std::numeric_limits<int64_t>::min());
  auto down = b.header().getBody().initNodeDown();
  down.setRole(wire::Role::WORKER);
  down.setRank(2);
  down.setReason("a report from the past");
  ASSERT_TRUE(cluster.endpoint(1).Send("w0", b.Finish(), absl::InfiniteFuture()).ok());
  ASSERT_TRUE(m.DrainIncoming(x).ok());
  EXPECT_EQ(m.dead_peers(), std::vector<int>{2});
  EXPECT_EQ(m.Members(0), (std::vector<int>{0, 1, 2})) << "step 0 was mixed with w2";
  EXPECT_EQ(m.Members(1), (std::vector<int>{0, 1}));
  m.Leave(1);
}

// Push-sum with seeded random delays and nodes of uneven speed (node r sleeps up to
// (r + 1) * 150 us per round and runs 150 + 10 r rounds).
class PushSumTest : public testing::TestWithParam<GossipTopology> {};

TEST_P(PushSumTest, WeightsSumToNAndEstimatesReachTheAverage) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  constexpr int n = 8;
  auto x = RandomVectors(n, 16, kSeed + 5);
  const auto mean = Mean(x);
  Cluster cluster(n, Options(GetParam(), /*async=*/true));
  std::barrier sync(n);
  std::vector<double> weights(n);
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(16).ok());
    std::mt19937_64 rng(kSeed + r);
    std::uniform_int_distribution<int> delay_us(0, (r + 1) * 150);
    for (int t = 0; t < 150 + 10 * r; ++t) {
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
      ASSERT_TRUE(m.MixOnce(t, x[r]).ok());
    }
    sync.arrive_and_wait();  // every send is done: what is not held is in a mailbox
    ASSERT_TRUE(m.DrainIncoming(x[r]).ok());
    weights[r] = m.weight();
  });
  double total = 0;
  for (double w : weights) total += w;
  EXPECT_NEAR(total, n, 1e-9);
  for (int r = 0; r < n; ++r) {
    EXPECT_LT(MaxError(x[r], mean), 1e-4) << "node " << r << " weight " << weights[r];
    EXPECT_TRUE(cluster.mixer(r).dead_peers().empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Topologies, PushSumTest,
                         testing::Values(GossipTopology::kRing, GossipTopology::kExponential,
                                         GossipTopology::kRandom),
                         [](const auto& info) { return GossipTopologyName(info.param); });

// Node `victim` takes part in `victim_rounds` rounds, then dies: with its endpoint closed
// (sends to it fail) or silent with its endpoint open (only the timeout finds it).
void KillOnePeer(GossipTopology topology, bool close_endpoint) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed << " topology "
                                  << GossipTopologyName(topology) << " close " << close_endpoint);
  constexpr int n = 8, victim = 3, victim_rounds = 5, rounds = 200;
  auto x = RandomVectors(n, 16, kSeed + 6);
  GossipOptions o = Options(topology);
  o.peer_timeout = absl::Milliseconds(300);
  Cluster cluster(n, o);
  const absl::Time start = absl::Now();
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(16).ok());
    for (int t = 0; t < (r == victim ? victim_rounds : rounds); ++t) {
      ASSERT_TRUE(m.MixOnce(t, x[r]).ok());
    }
    if (r == victim && close_endpoint) cluster.Kill(victim);
    if (r != victim) m.Leave(rounds);
  });
  std::vector<std::vector<float>> survivors;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    survivors.push_back(x[r]);
    EXPECT_EQ(cluster.mixer(r).dead_peers(), std::vector<int>{victim}) << "node " << r;
  }
  EXPECT_LT(ConsensusDistance(survivors), 1e-5);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "a death must cost about one timeout";
}

TEST(PeerFailureTest, RingGoesOnWhenAPeerClosesItsEndpoint) {
  KillOnePeer(GossipTopology::kRing, true);
}
TEST(PeerFailureTest, RingGoesOnWhenAPeerFallsSilent) { KillOnePeer(GossipTopology::kRing, false); }
TEST(PeerFailureTest, ExponentialGoesOnWhenAPeerFallsSilent) {
  KillOnePeer(GossipTopology::kExponential, false);
}
TEST(PeerFailureTest, RandomGoesOnWhenAPeerClosesItsEndpoint) {
  KillOnePeer(GossipTopology::kRandom, true);
}

TEST(PeerFailureTest, PushSumSurvivorsReachConsensusWhenAPeerDies) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  constexpr int n = 8, victim = 3;
  auto x = RandomVectors(n, 16, kSeed + 7);
  GossipOptions o = Options(GossipTopology::kExponential, /*async=*/true);
  o.peer_timeout = absl::Milliseconds(300);
  Cluster cluster(n, o);
  std::barrier sync(n);
  cluster.Run([&](int r, GossipMixer& m) {
    ASSERT_TRUE(m.Init(16).ok());
    for (int t = 0; t < (r == victim ? 20 : 300); ++t) {
      if (r != victim) std::this_thread::sleep_for(std::chrono::microseconds(100));
      ASSERT_TRUE(m.MixOnce(t, x[r]).ok());
    }
    if (r == victim) cluster.Kill(victim);
    sync.arrive_and_wait();
    if (r != victim) {
      ASSERT_TRUE(m.DrainIncoming(x[r]).ok());
    }
  });
  std::vector<std::vector<float>> survivors;
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    survivors.push_back(x[r]);
    const auto dead = cluster.mixer(r).dead_peers();
    EXPECT_EQ(dead, std::vector<int>{victim}) << "node " << r;
  }
  EXPECT_LT(ConsensusDistance(survivors), 1e-3);
}

}  // namespace
}  // namespace syncline
