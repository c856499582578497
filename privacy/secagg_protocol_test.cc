#include "privacy/secagg_protocol.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/syncline.capnp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

constexpr size_t kLength = 64;

// What a test does to the round: clients that fall silent, and packets changed on the way.
struct Faults {
  // client -> the number of stages it sends requests for before it falls silent (0: it never
  // advertises; 2: it shares keys but never uploads; 3: it uploads, then vanishes).
  std::map<int, int> silent_after;
  // Changes a request before the relay sees it, or an answer before its client does.
  std::function<void(int client, SecAggPacket&)> on_request;
  std::function<void(int client, SecAggPacket&)> on_answer;
  int replay = 0;  // this client's masked input is sent twice
};

struct Outcome {
  absl::Status relay = absl::UnknownError("not run");
  std::vector<uint32_t> sum;
  std::set<int> contributors;
  std::map<int, absl::Status> client_errors;  // the first refusal each client met or made
  std::vector<absl::Status> refusals;         // every error the relay answered
  std::string seen;                           // every byte the relay received
};

// Drives one round among `inputs.size()` clients and the relay in lock step: each stage's
// requests, then (if some client is silent) the stage's deadline, then the answers.
Outcome RunRound(const SecAggParams& p, const std::map<int, std::vector<uint32_t>>& inputs,
                 const Faults& f = {}) {
  Outcome out;
  absl::Time now = absl::UnixEpoch();
  SecAggRelayOptions o{.params = p, .round = 7};
  for (const auto& [c, x] : inputs) o.clients.push_back(c);
  SecAggRelay relay(o, now);
  std::map<int, SecAggClientRound> clients;
  std::map<int, SecAggPacket> pending;
  auto stages_of = [&](int c) {
    auto it = f.silent_after.find(c);
    return it == f.silent_after.end() ? kSecAggStages : it->second;
  };
  for (const auto& [c, x] : inputs) {
    auto r = SecAggClientRound::Create(p, c, 7);
    EXPECT_TRUE(r.ok()) << r.status();
    clients.emplace(c, std::move(*r));
    if (stages_of(c) > 0) pending[c] = clients.at(c).Advertise();
  }
  for (int stage = 0; stage < kSecAggStages && relay.running(); ++stage) {
    for (auto& [c, request] : pending) {
      if (f.on_request) f.on_request(c, request);
      out.seen += request.body;
      out.seen.append(reinterpret_cast<const char*>(request.values.data()),
                      request.values.size() * sizeof(uint32_t));
      const int sends = c == f.replay && request.stage == SecAggStage::kMaskedInput ? 2 : 1;
      for (int i = 0; i < sends; ++i) relay.Handle(c, "peer", 1, request, kLength + 1, now);
    }
    pending.clear();
    if (relay.running() && static_cast<int>(relay.stage()) == stage) {
      relay.OnTime(now + absl::Hours(1));
    }
    now += absl::Hours(2);
    for (SecAggRelay::Answer& a : relay.TakeAnswers()) {
      if (!a.status.ok()) {
        out.refusals.push_back(a.status);
        out.client_errors.emplace(a.client, a.status);
        continue;
      }
      if (f.on_answer) f.on_answer(a.client, a.packet);
      if (stage + 1 >= stages_of(a.client) || stage + 1 == kSecAggStages) continue;
      absl::StatusOr<SecAggPacket> next = clients.at(a.client).Next(a.packet, inputs.at(a.client));
      if (!next.ok()) {
        out.client_errors.emplace(a.client, next.status());
        continue;
      }
      pending[a.client] = std::move(*next);
    }
  }
  out.relay = relay.outcome();
  out.sum = relay.sum();
  out.contributors = relay.contributors();
  return out;
}

std::map<int, std::vector<uint32_t>> RandomInputs(int n, int bits, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<uint32_t> d(0, (1u << bits) - 1);
  std::map<int, std::vector<uint32_t>> inputs;
  for (int c = 1; c <= n; ++c) {
    inputs[c].resize(kLength + 1);
    for (uint32_t& v : inputs[c]) v = d(rng);
  }
  return inputs;
}

std::vector<uint32_t> PlainSum(const std::map<int, std::vector<uint32_t>>& inputs,
                               const std::set<int>& of) {
  std::vector<uint32_t> sum(kLength + 1, 0);
  for (int c : of) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += inputs.at(c)[i];
  }
  return sum;
}

// Rewrites a packet's SecAggMessage.
void Rewrite(SecAggPacket& p, const std::function<void(wire::SecAggMessage::Builder)>& change) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(p.body.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), p.body.data(), p.body.size());
  capnp::FlatArrayMessageReader reader(words);
  capnp::MallocMessageBuilder m;
  m.setRoot(reader.getRoot<wire::SecAggMessage>());
  change(m.getRoot<wire::SecAggMessage>());
  kj::Array<capnp::word> flat = capnp::messageToFlatArray(m);
  p.body.assign(reinterpret_cast<const char*>(flat.asBytes().begin()), flat.asBytes().size());
}

const SecAggParams kParams{.clients = 6, .threshold = 3, .bits = 20};

TEST(SecAggProtocolTest, EveryStageOverMessagesGivesTheExactSum) {
  auto inputs = RandomInputs(6, kParams.bits, 1);
  Outcome out = RunRound(kParams, inputs);
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_THAT(out.contributors, ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
  EXPECT_TRUE(out.client_errors.empty());
}

// Lost before advertising, after sharing keys, after uploading: the round goes on while t
// survive, and the sum is that of the clients whose input reached the server.
TEST(SecAggProtocolTest, ClientsLostAtEachStageAreTolerated) {
  auto inputs = RandomInputs(6, kParams.bits, 2);
  Outcome out = RunRound(kParams, inputs, {.silent_after = {{1, 0}, {2, 2}, {3, 3}}});
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_THAT(out.contributors, ::testing::ElementsAre(3, 4, 5, 6));
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
}

TEST(SecAggProtocolTest, FewerThanTSurvivorsAbortCleanlyAndRevealNothing) {
  auto inputs = RandomInputs(4, kParams.bits, 3);
  SecAggParams p = kParams;
  p.clients = 4;
  Outcome out = RunRound(p, inputs, {.silent_after = {{1, 2}, {2, 2}}});
  EXPECT_EQ(out.relay.code(), absl::StatusCode::kFailedPrecondition) << out.relay;
  EXPECT_THAT(out.relay.message(), HasSubstr("masked input stage"));
  EXPECT_TRUE(out.sum.empty());
  // The two uploaders were told the round ended; neither revealed a share.
  EXPECT_EQ(out.client_errors.size(), 2u);
}

// Bell et al.'s sparse graph over messages: 16 clients of 4 neighbours each, with clients lost
// before advertising, after sharing keys and after uploading; the sum is exact, and the share
// stage costs each client 5 sealed shares instead of 16 (the relay saw fewer bytes).
TEST(SecAggProtocolTest, ASparseGraphRoundGivesTheExactSumWithLosses) {
  SecAggParams p = kParams;
  p.clients = 16;
  p.neighbours = 4;
  auto inputs = RandomInputs(16, p.bits, 9);
  Outcome sparse = RunRound(p, inputs, {.silent_after = {{1, 0}, {5, 2}, {9, 3}}});
  ASSERT_TRUE(sparse.relay.ok()) << sparse.relay;
  EXPECT_EQ(sparse.contributors.size(), 14u);
  EXPECT_FALSE(sparse.contributors.contains(1) || sparse.contributors.contains(5));
  EXPECT_EQ(sparse.sum, PlainSum(inputs, sparse.contributors));
  SecAggParams complete = p;
  complete.neighbours = 0;
  Outcome all = RunRound(complete, inputs, {.silent_after = {{1, 0}, {5, 2}, {9, 3}}});
  ASSERT_TRUE(all.relay.ok()) << all.relay;
  EXPECT_EQ(all.sum, sparse.sum);
  EXPECT_LT(sparse.seen.size(), all.seen.size() * 3 / 4);
}

// The consistency signature covers the graph's seed, so a client shown another key list than
// the others (here, one changed masking key: it derives another graph seed) is caught there:
// the server cannot give clients different neighbour graphs unseen. (Such a server can also
// spoil the sum; what the test shows is that the lie is seen.)
TEST(SecAggProtocolTest, AClientShownAnotherKeyListFailsTheConsistencyStage) {
  auto inputs = RandomInputs(6, kParams.bits, 10);
  Faults f;
  f.on_answer = [](int client, SecAggPacket& p) {
    if (client != 1 || p.stage != SecAggStage::kAdvertise) return;
    Rewrite(p, [](wire::SecAggMessage::Builder m) {
      for (auto k : m.getKeys()) {
        if (k.getClient() == 6) k.getMasking()[0] ^= 1;
      }
    });
  };
  Outcome out = RunRound(kParams, inputs, f);
  ASSERT_TRUE(out.client_errors.contains(1));
  EXPECT_THAT(out.client_errors.at(1).message(),
              HasSubstr("client 1's consistency request of round 7 has a signature that does not "
                        "verify"));
}

// A client takes the server's answers in stage order only: one for a later stage (a server
// skipping the key exchange, say) is refused naming both stages, and nothing follows unmask.
TEST(SecAggProtocolTest, AnAnswerOutOfOrderIsRefused) {
  auto r = SecAggClientRound::Create(kParams, 1, 7);
  ASSERT_TRUE(r.ok()) << r.status();
  auto next = r->Next(SecAggPacket{.stage = SecAggStage::kMaskedInput}, {});
  EXPECT_EQ(next.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(next.status().message(),
              HasSubstr("an answer to the masked input stage, while it waits on the advertise "
                        "stage"));
}

// A canary in client 1's update: no request the server receives holds it, in any coordinate.
TEST(SecAggProtocolTest, ACanaryInAnUpdateNeverReachesTheServer) {
  auto inputs = RandomInputs(6, kParams.bits, 4);
  const uint32_t canary = 0x000C0FFE;
  for (size_t i = 0; i < kLength; i += 2) inputs[1][i] = canary;
  std::string pattern(4, '\0');
  std::memcpy(pattern.data(), &canary, 4);
  // The test itself must be able to see the canary where it is.
  std::string plain(reinterpret_cast<const char*>(inputs[1].data()), inputs[1].size() * 4);
  ASSERT_NE(plain.find(pattern), std::string::npos);
  Outcome out = RunRound(kParams, inputs);
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_GT(out.seen.size(), 6 * kLength * 4);
  EXPECT_EQ(out.seen.find(pattern), std::string::npos);
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
}

TEST(SecAggProtocolTest, ACorruptShareIsRefusedNamingItsSender) {
  auto inputs = RandomInputs(6, kParams.bits, 5);
  Faults f;
  f.on_answer = [](int client, SecAggPacket& p) {
    if (client != 2 || p.stage != SecAggStage::kShareKeys) return;
    Rewrite(p, [](wire::SecAggMessage::Builder m) {
      for (auto s : m.getSealed()) {
        if (s.getFrom() == 4) s.getCiphertext()[30] ^= 1;
      }
    });
  };
  Outcome out = RunRound(kParams, inputs, f);
  ASSERT_TRUE(out.client_errors.contains(2));
  EXPECT_THAT(out.client_errors.at(2).message(), HasSubstr("the shares from client 4"));
  // Client 2 left the round; the others still sum.
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_FALSE(out.contributors.contains(2));
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
}

TEST(SecAggProtocolTest, AReplayedUploadIsRefusedNamingTheClient) {
  auto inputs = RandomInputs(6, kParams.bits, 6);
  Outcome out = RunRound(kParams, inputs, {.replay = 3});
  ASSERT_EQ(out.refusals.size(), 1u);
  EXPECT_EQ(out.refusals[0].code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(out.refusals[0].message(), HasSubstr("client 3"));
  EXPECT_THAT(out.refusals[0].message(), HasSubstr("replay"));
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));  // counted once
}

TEST(SecAggProtocolTest, AWrongModulusOrQuantisationIsRefusedNamingTheClient) {
  auto inputs = RandomInputs(6, kParams.bits, 7);
  Faults f;
  f.on_request = [](int client, SecAggPacket& p) {
    if (p.stage != SecAggStage::kMaskedInput) return;
    if (client == 4) Rewrite(p, [](wire::SecAggMessage::Builder m) { m.setModulusBits(64); });
    if (client == 5) Rewrite(p, [](wire::SecAggMessage::Builder m) { m.setQuantBits(8); });
  };
  Outcome out = RunRound(kParams, inputs, f);
  ASSERT_EQ(out.refusals.size(), 2u);
  EXPECT_THAT(out.refusals[0].message(), HasSubstr("client 4"));
  EXPECT_THAT(out.refusals[0].message(), HasSubstr("2^64"));
  EXPECT_THAT(out.refusals[1].message(), HasSubstr("client 5"));
  EXPECT_THAT(out.refusals[1].message(), HasSubstr("8 bits"));
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_THAT(out.contributors, ::testing::ElementsAre(1, 2, 3, 6));
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
}

// A server that shows one client a forged (or another list's) signature gets no reveal from it.
TEST(SecAggProtocolTest, ABadSurvivorSignatureStopsTheReveal) {
  auto inputs = RandomInputs(6, kParams.bits, 8);
  Faults f;
  f.on_answer = [](int client, SecAggPacket& p) {
    if (client != 1 || p.stage != SecAggStage::kConsistency) return;
    Rewrite(p, [](wire::SecAggMessage::Builder m) {
      for (auto s : m.getSignatures()) {
        if (s.getClient() == 2) s.getSignature()[0] ^= 1;
      }
    });
  };
  Outcome out = RunRound(kParams, inputs, f);
  ASSERT_TRUE(out.client_errors.contains(1));
  EXPECT_THAT(out.client_errors.at(1).message(), HasSubstr("client 2's signature"));
  EXPECT_THAT(out.client_errors.at(1).message(), HasSubstr("refuses to reveal"));
  // The other five reveal: enough for t = 3, and client 1's input is still in the sum.
  ASSERT_TRUE(out.relay.ok()) << out.relay;
  EXPECT_EQ(out.sum, PlainSum(inputs, out.contributors));
}

TEST(SecAggProtocolTest, MalformedMessagesAreRefusedNotCrashed) {
  SecAggRelay relay(SecAggRelayOptions{.params = kParams, .clients = {1, 2, 3}}, absl::Now());
  relay.Handle(1, "peer", 1, SecAggPacket{.body = "garbage!"}, kLength, absl::Now());
  relay.Handle(2, "peer", 2, SecAggPacket{.body = std::string(64, '\xff')}, kLength, absl::Now());
  relay.Handle(9, "peer", 3, SecAggPacket{.body = ""}, kLength, absl::Now());
  auto answers = relay.TakeAnswers();
  ASSERT_EQ(answers.size(), 3u);
  EXPECT_THAT(answers[0].status.message(), HasSubstr("client 1"));
  EXPECT_THAT(answers[1].status.message(), HasSubstr("client 2"));
  EXPECT_THAT(answers[2].status.message(), HasSubstr("client 9 is not in"));
  EXPECT_TRUE(relay.running());
}

}  // namespace
}  // namespace syncline
