#include "privacy/secure_aggregation.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "privacy/distributed_dp.h"
#include "privacy/dp_mechanism.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

// A round among n clients in process: keys advertised, shares sealed and delivered through a
// "server" that only forwards.
// With p.neighbours > 0 the clients pair along the round's Harary graph (`graph`).
struct Round {
  SecAggParams params;
  std::vector<SecAggClient> clients;  // index i + 1
  std::map<int, SecAggKey> encryption, masking;
  SecAggGraph graph;
  std::map<int, size_t> sent;  // client -> the sealed shares it sent

  explicit Round(SecAggParams p) : params(p) {
    std::set<int> all;
    for (int i = 1; i <= p.clients; ++i) {
      auto c = SecAggClient::Create(p, i);
      EXPECT_TRUE(c.ok()) << c.status();
      clients.push_back(std::move(*c));
      encryption[i] = clients.back().encryption_public_key();
      masking[i] = clients.back().masking_public_key();
      all.insert(i);
    }
    graph = SecAggHararyGraph(all, p.neighbours, SecAggGraphSeed(3, masking));
    std::map<int, std::vector<SecAggSealedShares>> inbox;
    for (SecAggClient& c : clients) {
      auto sealed = c.ShareKeys(encryption, masking, graph);
      sent[c.index()] = sealed.ok() ? sealed->size() : 0;
      EXPECT_TRUE(sealed.ok()) << sealed.status();
      for (SecAggSealedShares& s : *sealed) inbox[s.to].push_back(std::move(s));
    }
    for (SecAggClient& c : clients) {
      EXPECT_TRUE(c.ReceiveShares(inbox[c.index()]).ok());
    }
  }
  SecAggClient& client(int i) { return clients[i - 1]; }
};

std::vector<uint32_t> RandomInput(std::mt19937& rng, size_t length, int bits) {
  std::uniform_int_distribution<uint32_t> d(0, (1u << bits) - 1);
  std::vector<uint32_t> x(length);
  for (uint32_t& v : x) v = d(rng);
  return x;
}

// Every client uploads: the server's unmasked sum is exactly the sum of the inputs, mod 2^32.
TEST(SecureAggregationTest, TheUnmaskedSumIsExact) {
  Round round({.clients = 5, .threshold = 3, .bits = 16});
  std::mt19937 rng(1);
  SecAggServer server(round.params, 100, round.masking);
  std::vector<uint32_t> want(100, 0);
  for (int i = 1; i <= 5; ++i) {
    const std::vector<uint32_t> x = RandomInput(rng, 100, 16);
    for (size_t k = 0; k < x.size(); ++k) want[k] += x[k];
    auto y = round.client(i).MaskInput(x);
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_NE(*y, x);
    ASSERT_TRUE(server.AddMaskedInput(i, *y).ok());
  }
  std::vector<SecAggReveal> reveals;
  for (int i = 1; i <= 5; ++i) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  auto sum = server.Unmask(reveals);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, want);
}

// Any t of the n shares rebuild the secret; fewer are refused.
TEST(SecureAggregationTest, EveryThresholdSubsetOfSharesRebuildsTheSecret) {
  SecAggKey secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(7 * i + 3);
  const int n = 6, t = 3;
  const std::vector<ShamirShare> shares = ShamirSplit(secret, n, t);
  int subsets = 0;
  for (int mask = 0; mask < (1 << n); ++mask) {
    if (__builtin_popcount(mask) != t) continue;
    std::vector<ShamirShare> chosen;
    for (int i = 0; i < n; ++i) {
      if (mask & (1 << i)) chosen.push_back(shares[i]);
    }
    auto rebuilt = ShamirCombine(chosen, t);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_EQ(*rebuilt, secret) << mask;
    ++subsets;
  }
  EXPECT_EQ(subsets, 20);
  const std::vector<ShamirShare> two(shares.begin(), shares.begin() + 2);
  EXPECT_EQ(ShamirCombine(two, t).status().code(), absl::StatusCode::kFailedPrecondition);
  // t - 1 shares with a wrong guess of t give another value, not the secret.
  auto wrong = ShamirCombine(two, 2);
  ASSERT_TRUE(wrong.ok());
  EXPECT_NE(*wrong, secret);
}

// Clients that drop after sharing keys (before uploading) are tolerated while t survive: the
// server rebuilds their masking keys and the sum of the survivors' inputs comes out exact.
// Dropping while the reveal is running (a survivor that never reveals) is tolerated too.
TEST(SecureAggregationTest, DropoutsAreToleratedWhileTSurvive) {
  Round round({.clients = 6, .threshold = 3, .bits = 12});
  std::mt19937 rng(2);
  SecAggServer server(round.params, 50, round.masking);
  std::vector<uint32_t> want(50, 0);
  for (int i : {1, 3, 4, 6}) {  // 2 and 5 drop before uploading
    const std::vector<uint32_t> x = RandomInput(rng, 50, 12);
    for (size_t k = 0; k < x.size(); ++k) want[k] += x[k];
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(x)).ok());
  }
  // 6 uploads and then drops before revealing: three reveals remain.
  std::vector<SecAggReveal> reveals;
  for (int i : {1, 3, 4}) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  auto sum = server.Unmask(reveals);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, want);
}

// A corrupt self-mask share no longer gives a wrong sum: the seed it rebuilds does not match
// its owner's commitment. With more than t reveals the server finds t good shares, unmasks
// the exact sum and names the revealer of the bad one; with exactly t it refuses, naming the
// survivor and the revealers.
TEST(SecureAggregationTest, ACorruptSelfMaskShareIsCaughtByTheCommitment) {
  Round round({.clients = 5, .threshold = 3, .bits = 12});
  std::map<int, SecAggKey> commitments;
  for (int i = 1; i <= 5; ++i) commitments[i] = round.client(i).self_mask_commitment();
  std::mt19937 rng(9);
  SecAggServer server(round.params, 40, round.masking, commitments);
  SecAggServer unchecked(round.params, 40, round.masking);  // no commitments
  std::vector<uint32_t> want(40, 0);
  for (int i = 1; i <= 5; ++i) {
    const std::vector<uint32_t> x = RandomInput(rng, 40, 12);
    for (size_t k = 0; k < x.size(); ++k) want[k] += x[k];
    const std::vector<uint32_t> y = *round.client(i).MaskInput(x);
    ASSERT_TRUE(server.AddMaskedInput(i, y).ok());
    ASSERT_TRUE(unchecked.AddMaskedInput(i, y).ok());
  }
  std::vector<SecAggReveal> reveals;
  for (int i = 1; i <= 5; ++i) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  // Client 2 (among the first t, whose shares are tried first) lies about client 4's seed.
  reveals[1].self_mask_shares.at(4).y[7] ^= 0x5a;
  std::set<int> corrupt;
  auto sum = server.Unmask(reveals, &corrupt);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, want);
  EXPECT_EQ(corrupt, std::set<int>({2}));
  // Without the commitment check the same share gives a wrong sum, silently.
  auto wrong = unchecked.Unmask(reveals);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_NE(*wrong, want);
  const std::vector<SecAggReveal> first_three(reveals.begin(), reveals.begin() + 3);
  auto refused = server.Unmask(first_three, &corrupt);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(),
              HasSubstr("self-mask shares of client 4 revealed by clients 1, 2, 3 do not rebuild "
                        "the seed it committed to"));
}

// The neighbour graph (Bell et al. 2020): k-regular, symmetric, each neighbourhood holding its
// client, connected, fixed by its seed; complete (empty) from k = n - 1 on; and the circle's
// order is uniform: over 4,000 seeds each of the 10 pairs of 5 clients is joined in half the
// graphs of degree 2 (a binomial's 4.5 sigma is 0.036).
TEST(SecureAggregationTest, TheNeighbourGraphIsARandomHararyGraph) {
  for (int n : {5, 10, 50, 255}) {
    std::set<int> clients;
    for (int c = 1; c <= n; ++c) clients.insert(c * 3);  // numbers need not be dense
    for (int k : {2, 4, 8}) {
      SecAggKey seed{};
      seed[0] = static_cast<uint8_t>(n);
      seed[1] = static_cast<uint8_t>(k);
      const SecAggGraph g = SecAggHararyGraph(clients, k, seed);
      if (k >= n - 1) {
        EXPECT_TRUE(g.empty()) << n << " " << k;
        continue;
      }
      ASSERT_EQ(g.size(), clients.size());
      for (const auto& [u, closed] : g) {
        EXPECT_EQ(closed.size(), static_cast<size_t>(k + 1)) << u;
        EXPECT_TRUE(closed.contains(u));
        for (int v : closed) EXPECT_TRUE(g.at(v).contains(u)) << u << " " << v;
      }
      std::set<int> reached = {*clients.begin()}, frontier = reached;
      while (!frontier.empty()) {
        std::set<int> next;
        for (int u : frontier) {
          for (int v : g.at(u)) {
            if (reached.insert(v).second) next.insert(v);
          }
        }
        frontier = next;
      }
      EXPECT_EQ(reached, clients) << n << " " << k;
      EXPECT_EQ(SecAggHararyGraph(clients, k, seed), g);
      SecAggKey other = seed;
      other[31] ^= 1;
      if (n >= 10) {
        EXPECT_NE(SecAggHararyGraph(clients, k, other), g);
      }
    }
  }
  // Over 4,000 seeds the 12 distinct 5-cycles on 5 clients (degree 2) come up alike: a
  // chi-square test with 11 degrees of freedom (0.1% critical value 31.26).
  const std::set<int> five = {1, 2, 3, 4, 5};
  EXPECT_TRUE(SecAggNeighbours({}, 1, 5));
  std::map<SecAggGraph, int> drawn;
  constexpr int kSeeds = 4000;
  for (int r = 0; r < kSeeds; ++r) {
    ++drawn[SecAggHararyGraph(five, 2, SecAggGraphSeed(r, {{1, SecAggKey{}}}))];
  }
  ASSERT_EQ(drawn.size(), 12u);
  double chi2 = 0;
  const double expected = kSeeds / 12.0;
  for (const auto& [graph, count] : drawn) {
    chi2 += (count - expected) * (count - expected) / expected;
  }
  EXPECT_LT(chi2, 31.26);
  // The seed covers the round and every advertised key.
  std::map<int, SecAggKey> keys = {{1, SecAggKey{}}, {2, SecAggKey{}}};
  const SecAggKey seed = SecAggGraphSeed(1, keys);
  EXPECT_NE(SecAggGraphSeed(2, keys), seed);
  keys[2][0] = 1;
  EXPECT_NE(SecAggGraphSeed(1, keys), seed);
}

// With k neighbours a client seals k + 1 shares (not n), its reveal names only neighbours, and
// the unmasked sum is still exact when clients drop after sharing keys and after uploading.
TEST(SecureAggregationTest, ASparseGraphGivesTheExactSumUnderDropouts) {
  Round round({.clients = 12, .threshold = 3, .bits = 12, .neighbours = 4});
  ASSERT_EQ(round.graph.size(), 12u);
  for (const auto& [c, n] : round.sent) EXPECT_EQ(n, 5u) << c;
  std::mt19937 rng(5);
  SecAggServer server(round.params, 40, round.masking, {}, round.graph);
  // Two clients drop after sharing keys, and only if no neighbourhood loses more than 2 of 5.
  std::set<int> dropped;
  for (int u = 1; u <= 12 && dropped.size() < 2; ++u) {
    if (std::none_of(dropped.begin(), dropped.end(),
                     [&](int d) { return SecAggNeighbours(round.graph, u, d); })) {
      dropped.insert(u);
    }
  }
  ASSERT_EQ(dropped.size(), 2u);
  std::vector<uint32_t> want(40, 0);
  for (int i = 1; i <= 12; ++i) {
    if (dropped.contains(i)) continue;
    const std::vector<uint32_t> x = RandomInput(rng, 40, 12);
    for (size_t k = 0; k < x.size(); ++k) want[k] += x[k];
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(x)).ok());
  }
  std::vector<SecAggReveal> reveals;
  for (int i = 1; i <= 12; ++i) {
    if (dropped.contains(i)) continue;
    auto r = round.client(i).Reveal(server.survivors(), round.graph);
    ASSERT_TRUE(r.ok()) << r.status();
    for (const auto& [peer, share] : r->self_mask_shares) {
      EXPECT_TRUE(SecAggNeighbours(round.graph, i, peer)) << i << " " << peer;
    }
    EXPECT_EQ(r->self_mask_shares.size() + r->key_shares.size(), 5u);
    reveals.push_back(std::move(*r));
  }
  auto sum = server.Unmask(reveals);
  ASSERT_TRUE(sum.ok()) << sum.status();
  EXPECT_EQ(*sum, want);
  // Against the complete graph's server (every client a neighbour) the same reveals miss
  // shares: the graph is what the server must unmask with.
  SecAggServer complete(round.params, 40, round.masking);
  for (int i = 1; i <= 12; ++i) {
    if (!dropped.contains(i)) {
      ASSERT_TRUE(complete.AddMaskedInput(i, *round.client(i).MaskInput(want)).ok());
    }
  }
  EXPECT_THAT(complete.Unmask(reveals).status().message(), HasSubstr("reveal has no"));
}

// A client whose neighbourhood is lost reveals nothing, and the server cannot unmask a round
// in which a survivor has fewer than t revealers among its neighbours; a share relayed from
// outside the neighbourhood is refused.
TEST(SecureAggregationTest, ASparseRoundWithALostNeighbourhoodAborts) {
  Round round({.clients = 8, .threshold = 2, .bits = 8, .neighbours = 2});
  const int u = 1;
  std::vector<int> lost;
  for (int v : round.graph.at(u)) {
    if (v != u) lost.push_back(v);
  }
  ASSERT_EQ(lost.size(), 2u);
  SecAggServer server(round.params, 6, round.masking, {}, round.graph);
  std::mt19937 rng(6);
  for (int i = 1; i <= 8; ++i) {
    if (i == lost[0] || i == lost[1]) continue;
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(RandomInput(rng, 6, 8))).ok());
  }
  auto refused = round.client(u).Reveal(server.survivors());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("1 clients of its neighbourhood survive the round, fewer than the "
                        "threshold 2"));
  std::vector<SecAggReveal> reveals;
  for (int i = 1; i <= 8; ++i) {
    if (i == u || i == lost[0] || i == lost[1]) continue;
    auto r = round.client(i).Reveal(server.survivors());
    if (r.ok()) reveals.push_back(std::move(*r));
  }
  auto sum = server.Unmask(reveals);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition) << sum.status();
  EXPECT_THAT(sum.status().message(), HasSubstr("the round is aborted"));
  // A share from a client outside u's neighbourhood (sealed as if the graph were complete).
  int stranger = 0;
  for (int i = 1; i <= 8 && stranger == 0; ++i) {
    if (!SecAggNeighbours(round.graph, u, i)) stranger = i;
  }
  ASSERT_NE(stranger, 0);
  auto sealed = round.client(stranger).ShareKeys(round.encryption, round.masking);
  ASSERT_TRUE(sealed.ok()) << sealed.status();
  std::vector<SecAggSealedShares> for_u;
  for (SecAggSealedShares& s : *sealed) {
    if (s.to == u) for_u.push_back(std::move(s));
  }
  ASSERT_EQ(for_u.size(), 1u);
  EXPECT_THAT(round.client(u).ReceiveShares(for_u).message(),
              HasSubstr("come from outside its neighbourhood"));
}

// Survivors that fall into pieces of the graph (two clients apart on a cycle lost after sharing
// keys) would let the server unmask each piece's sum: no client reveals, the server refuses,
// and SecAggPieces counts the pieces.
TEST(SecureAggregationTest, SurvivorsInPiecesOfTheGraphRevealNothing) {
  Round round({.clients = 12, .threshold = 2, .bits = 8, .neighbours = 2});
  std::vector<int> circle = {1};  // the cycle's order, from client 1
  while (circle.size() < 12) {
    for (int v : round.graph.at(circle.back())) {
      if (v != circle.back() && (circle.size() < 2 || v != circle[circle.size() - 2])) {
        circle.push_back(v);
        break;
      }
    }
  }
  const std::set<int> lost = {circle[3], circle[8]};
  std::set<int> survivors;
  for (int i = 1; i <= 12; ++i) {
    if (!lost.contains(i)) survivors.insert(i);
  }
  EXPECT_EQ(SecAggPieces(round.graph, survivors), 2);
  EXPECT_EQ(SecAggPieces(round.graph, {circle[0], circle[1], circle[2]}), 1);
  EXPECT_EQ(SecAggPieces({}, survivors), 1);
  SecAggServer server(round.params, 6, round.masking, {}, round.graph);
  std::mt19937 rng(7);
  for (int i : survivors) {
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(RandomInput(rng, 6, 8))).ok());
  }
  auto refused = round.client(circle[0]).Reveal(server.survivors(), round.graph);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("fall into 2 pieces"));
  std::vector<SecAggReveal> reveals;
  for (int i : survivors) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  auto sum = server.Unmask(reveals);
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sum.status().message(), HasSubstr("fall into 2 pieces"));
}

// Below t the round aborts cleanly: clients reveal nothing, the server unmasks nothing.
TEST(SecureAggregationTest, FewerThanTSurvivorsAbortTheRound) {
  Round round({.clients = 5, .threshold = 4, .bits = 8});
  std::mt19937 rng(3);
  SecAggServer server(round.params, 10, round.masking);
  for (int i : {1, 2, 3}) {
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(RandomInput(rng, 10, 8))).ok());
  }
  auto reveal = round.client(1).Reveal(server.survivors());
  EXPECT_EQ(reveal.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(reveal.status().message(), HasSubstr("fewer than the threshold 4"));
  auto sum = server.Unmask({});
  EXPECT_EQ(sum.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(sum.status().message(), HasSubstr("aborted"));
}

// A client asked for a peer's self-mask share after giving its masking-key share (or the
// reverse) refuses: with both, the server could unmask that peer's input alone.
TEST(SecureAggregationTest, AClientNeverRevealsBothSharesOfOnePeer) {
  Round round({.clients = 4, .threshold = 2, .bits = 8});
  ASSERT_TRUE(round.client(1).Reveal({1, 2, 3}).ok());  // 4 dropped: its key share
  auto second = round.client(1).Reveal({1, 2, 3, 4});   // now 4 "survived"
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(second.status().message(), HasSubstr("refuses to reveal a share of client 4"));
  // The same set again is fine (a repeated request).
  EXPECT_TRUE(round.client(1).Reveal({1, 2, 3}).ok());
  // And a server handed a reveal that holds both kinds for a peer refuses it, naming it.
  SecAggServer server(round.params, 4, round.masking);
  std::mt19937 rng(4);
  for (int i : {1, 2, 3}) {
    ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(RandomInput(rng, 4, 8))).ok());
  }
  SecAggReveal forged = *round.client(2).Reveal({1, 2, 3});
  forged.key_shares[1] = forged.self_mask_shares[1];
  SecAggReveal honest = *round.client(3).Reveal({1, 2, 3});
  const std::vector<SecAggReveal> reveals = {forged, honest};
  EXPECT_THAT(server.Unmask(reveals).status().message(),
              HasSubstr("client 2 revealed both shares of client 1"));
}

// A masked input looks uniform: a chi-square test over 16 bins of one client's masked zeros
// (10^5 values; the 0.1% critical value of chi-square with 15 degrees of freedom is 37.7).
TEST(SecureAggregationTest, MaskedInputsAreUniform) {
  Round round({.clients = 3, .threshold = 2, .bits = 8});
  const std::vector<uint32_t> zeros(100000, 0);
  auto y = round.client(2).MaskInput(zeros);
  ASSERT_TRUE(y.ok());
  std::vector<double> bins(16, 0);
  for (uint32_t v : *y) ++bins[v >> 28];
  const double expected = zeros.size() / 16.0;
  double chi2 = 0;
  for (double b : bins) chi2 += (b - expected) * (b - expected) / expected;
  EXPECT_LT(chi2, 37.7);
}

// A canary input (a recognisable byte pattern) never appears in what the server receives: not
// in any upload, not in any sealed share, not in the reveals.
TEST(SecureAggregationTest, ACanaryNeverReachesTheServer) {
  const SecAggParams p{.clients = 2, .threshold = 2, .bits = 31};  // 2 (2^31 - 1) fits 2^32
  Round round(p);
  const std::vector<uint32_t> canary(64, 0x5ca1ab1e & 0x7fffffff);
  std::vector<uint32_t> other(64, 1);
  SecAggServer server(p, 64, round.masking);
  auto y1 = round.client(1).MaskInput(canary);
  auto y2 = round.client(2).MaskInput(other);
  ASSERT_TRUE(y1.ok() && y2.ok());
  ASSERT_TRUE(server.AddMaskedInput(1, *y1).ok());
  ASSERT_TRUE(server.AddMaskedInput(2, *y2).ok());
  std::vector<uint8_t> seen;
  auto record = [&](const void* data, size_t n) {
    const uint8_t* b = static_cast<const uint8_t*>(data);
    seen.insert(seen.end(), b, b + n);
  };
  record(y1->data(), y1->size() * 4);
  record(y2->data(), y2->size() * 4);
  for (SecAggClient& c : round.clients) {
    std::vector<SecAggSealedShares> again =
        *c.ShareKeys(round.encryption, round.masking);  // what it would send
    for (const SecAggSealedShares& s : again) record(s.ciphertext.data(), s.ciphertext.size());
  }
  const uint32_t word = canary[0];
  uint8_t pattern[8];
  std::memcpy(pattern, &word, 4);
  std::memcpy(pattern + 4, &word, 4);
  EXPECT_EQ(std::search(seen.begin(), seen.end(), pattern, pattern + 8), seen.end());
}

// What the server refuses, naming the client: a replayed upload, a wrong length, an unknown
// client; a client refuses corrupted shares naming their sender; parameters whose sum would not
// fit the modulus are refused; corrupted key shares are caught when they rebuild.
TEST(SecureAggregationTest, BadMessagesAreRefusedNamingTheClient) {
  Round round({.clients = 4, .threshold = 3, .bits = 8});
  SecAggServer server(round.params, 8, round.masking);
  const std::vector<uint32_t> x(8, 3);
  ASSERT_TRUE(server.AddMaskedInput(1, *round.client(1).MaskInput(x)).ok());
  EXPECT_THAT(server.AddMaskedInput(1, *round.client(1).MaskInput(x)).message(),
              HasSubstr("client 1 uploaded a masked input twice"));
  EXPECT_THAT(server.AddMaskedInput(2, std::vector<uint32_t>(7, 0)).message(),
              HasSubstr("client 2 uploaded 7 values, the round has 8"));
  EXPECT_THAT(server.AddMaskedInput(9, x).message(), HasSubstr("client 9 did not share keys"));

  auto sealed = round.client(2).ShareKeys(round.encryption, round.masking);
  ASSERT_TRUE(sealed.ok());
  SecAggSealedShares to3 = (*sealed)[2];
  ASSERT_EQ(to3.to, 3);
  to3.ciphertext[30] ^= 1;
  EXPECT_THAT(round.client(3).ReceiveShares({&to3, 1}).message(),
              HasSubstr("the shares from client 2 do not decrypt"));

  EXPECT_THAT(CheckSecAggParams({.clients = 3, .threshold = 2, .bits = 31}).message(),
              HasSubstr("does not fit the modulus 2^32"));
  EXPECT_TRUE(CheckSecAggParams({.clients = 2, .threshold = 2, .bits = 31}).ok());
  EXPECT_FALSE(CheckSecAggParams({.clients = 4, .threshold = 5, .bits = 8}).ok());

  // 4 drops; 1, 2, 3 upload; client 2's key share of client 4 is corrupted.
  for (int i : {2, 3}) ASSERT_TRUE(server.AddMaskedInput(i, *round.client(i).MaskInput(x)).ok());
  std::vector<SecAggReveal> reveals;
  for (int i : {1, 2, 3}) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  reveals[1].key_shares[4].y[5] ^= 0x40;  // (X25519 ignores a few bits of byte 0)
  EXPECT_THAT(server.Unmask(reveals).status().message(),
              HasSubstr("dropped client 4's masking key do not rebuild it"));
}

// Quantisation: n clipped inputs decode to their sum within n half-steps.
TEST(SecureAggregationTest, QuantisedSumsDecode) {
  const SecAggParams p{.clients = 3, .threshold = 2, .bits = 16, .clip = 2};
  const std::vector<std::vector<float>> xs = {
      {0.5f, -1.0f, 3.0f}, {1.5f, 0.25f, -0.1f}, {-2.0f, 0.0f, 1.0f}};
  std::vector<uint32_t> sum(3, 0);
  for (const auto& x : xs) {
    DpRandom rounding(DpKeyFromSeed(2), DpStream::kRounding, {0});
    const std::vector<uint32_t> q = SecAggQuantise(x, p, rounding);
    for (size_t i = 0; i < 3; ++i) sum[i] += q[i];
  }
  const std::vector<float> decoded = SecAggDecodeSum(sum, 3, p);
  const double step = 2 * p.clip / (std::ldexp(1.0, p.bits) - 1);
  const std::vector<float> want = {0.0f, -0.75f, 2.0f + -0.1f + 1.0f};  // 3.0 clipped to 2
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(decoded[i], want[i], 3 * step + 1e-6) << i;
}

// Distributed DP through the masking: the sum the server unmasks differs from the exact sum
// of the clients' clipped updates by noise only: mean 0 and the standard deviation of k
// clients' shares (within 3% over 20,000 coordinates), nothing systematic from the rounding.
TEST(SecureAggregationTest, TheNoisySumDiffersFromTheExactSumByNoiseOnly) {
  Round round({.clients = 4, .threshold = 3, .bits = 16});
  constexpr size_t kLength = 20000;
  const DistributedDpParams dp{.clip = 2, .noise_multiplier = 0.5, .clients = 4, .threshold = 3};
  auto codec = DistributedDpCodec::Create(dp, kLength);
  ASSERT_TRUE(codec.ok()) << codec.status();
  std::mt19937 rng(3);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  SecAggServer server(round.params, kLength, round.masking);
  std::vector<double> exact(kLength, 0);
  for (int i = 1; i <= 4; ++i) {
    std::vector<float> x(kLength);
    for (float& v : x) v = gauss(rng);
    ClipToNorm({std::span<float>(x)}, dp.clip);
    for (size_t k = 0; k < kLength; ++k) exact[k] += x[k];
    DpRandom noise(DpKeyFromSeed(4), DpStream::kClientNoise, {static_cast<uint64_t>(i), 0});
    auto share = codec->Encode(x, noise);
    ASSERT_TRUE(share.ok()) << share.status();
    auto y = round.client(i).MaskInput(*share);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_TRUE(server.AddMaskedInput(i, *y).ok());
  }
  std::vector<SecAggReveal> reveals;
  for (int i = 1; i <= 4; ++i) reveals.push_back(*round.client(i).Reveal(server.survivors()));
  auto sum = server.Unmask(reveals);
  ASSERT_TRUE(sum.ok()) << sum.status();
  const std::vector<float> noisy = codec->DecodeSum(*sum);
  double mean = 0, squares = 0;
  for (size_t k = 0; k < kLength; ++k) {
    const double residual = noisy[k] - exact[k];
    mean += residual;
    squares += residual * residual;
  }
  mean /= kLength;
  const double stddev = std::sqrt(squares / kLength - mean * mean);
  const double want = codec->SumStddev(4);
  EXPECT_NEAR(want, dp.noise_multiplier * dp.clip * std::sqrt(4.0 / 3), 0.01 * want);
  EXPECT_NEAR(stddev / want, 1, 0.03);
  EXPECT_NEAR(mean, 0, 5 * want / std::sqrt(kLength));
}

// Stochastic rounding is unbiased: over many draws the quantised value's mean is the clipped
// value itself, not the nearest level (which rounding to nearest would give every time).
TEST(SecureAggregationTest, StochasticRoundingIsUnbiased) {
  const SecAggParams p{.clients = 2, .threshold = 2, .bits = 4, .clip = 1};
  const double levels = 15;
  // Between levels: 0.3 of a step above level 9, and -0.8 of the way... any fraction.
  const std::vector<float> x = {0.24f, -0.77f, 0.9f};
  constexpr int kDraws = 200000;
  std::vector<double> mean(x.size(), 0);
  DpRandom rounding(DpKeyFromSeed(5), DpStream::kRounding, {1});
  for (int draw = 0; draw < kDraws; ++draw) {
    const std::vector<uint32_t> q = SecAggQuantise(x, p, rounding);
    for (size_t i = 0; i < x.size(); ++i) mean[i] += q[i];
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = (x[i] + p.clip) / (2 * p.clip) * levels;
    const double fraction = want - std::floor(want);
    // 5 standard errors of a Bernoulli(fraction) mean.
    const double tolerance = 5 * std::sqrt(fraction * (1 - fraction) / kDraws);
    EXPECT_NEAR(mean[i] / kDraws, want, tolerance) << i;
    EXPECT_GT(std::fabs(want - std::round(want)), 10 * tolerance) << "the test needs a fraction";
  }
}

}  // namespace
}  // namespace syncline
