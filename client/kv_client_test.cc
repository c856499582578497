#include "client/kv_client.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "testing/inproc_cluster.h"

namespace syncline {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

// Servers on their own threads, as in a real job.
class Cluster : public InprocCluster {
 public:
  using InprocCluster::InprocCluster;
  KVClientOptions ClientOptions(int rank) const {
    KVClientOptions o;
    o.rank = rank;
    o.server_ids = server_ids();
    return o;
  }
};

TableConfig Sparse(uint32_t id, uint32_t dim) {
  TableConfig c;
  c.id = id;
  c.dense = false;
  c.dim = dim;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

TableConfig Dense(uint32_t id, uint64_t keys) {
  TableConfig c;
  c.id = id;
  c.dense = true;
  c.num_keys = keys;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

TEST(KVClientTest, SparsePushPullAcrossShards) {
  Cluster cluster(3, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClient client(ep.get(), cluster.ClientOptions(0));
  ASSERT_TRUE(client.DeclareTable(Sparse(1, 2), Soon()).ok());
  std::vector<uint64_t> keys = {3, 99, 12345678901, 7, 42};
  std::vector<float> grads;
  for (size_t i = 0; i < keys.size(); ++i) grads.insert(grads.end(), {float(i), -float(i)});
  auto push = client.Push(1, keys, grads, 0, 1.0f);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE(client.Wait(*push, Soon()).ok());
  std::vector<float> out(keys.size() * 2);
  auto pull = client.Pull(1, keys, out, 0);
  ASSERT_TRUE(pull.ok());
  ASSERT_TRUE(client.Wait(*pull, Soon()).ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(out[2 * i], -float(i)) << "key " << keys[i];
    EXPECT_EQ(out[2 * i + 1], float(i));
  }
}

// Half-precision pushes: half the value bytes; values rounded to binary16, except a server's
// part with a value beyond its range, which goes as float32.
TEST(KVClientTest, HalfPushesRoundOrFallBackToFloats) {
  Cluster cluster(1, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClient client(ep.get(), cluster.ClientOptions(0));
  ASSERT_TRUE(client.DeclareTable(Sparse(1, 2), Soon()).ok());
  const std::vector<uint64_t> keys = {3, 4};
  auto push_and_pull = [&](uint32_t table, const std::vector<float>& grads, bool half) {
    const uint64_t before = client.bytes_pushed();
    auto push = half ? client.PushHalf(table, keys, grads, 0, 1.0f)
                     : client.Push(table, keys, grads, 0, 1.0f);
    EXPECT_TRUE(push.ok() && client.Wait(*push, Soon()).ok());
    std::vector<float> out(4);
    auto pull = client.Pull(table, keys, out, 0);
    EXPECT_TRUE(pull.ok() && client.Wait(*pull, Soon()).ok());
    return std::make_pair(out, client.bytes_pushed() - before);
  };
  const auto [rounded, half_bytes] = push_and_pull(1, {0.1f, 1.0f, -2.5f, 1000.0f}, true);
  EXPECT_NEAR(rounded[0], -0.1f, 0.1f / 1024);
  EXPECT_NE(rounded[0], -0.1f);
  EXPECT_EQ(rounded[3], -1000.0f);
  ASSERT_TRUE(client.DeclareTable(Sparse(2, 2), Soon()).ok());
  const auto [exact, float_bytes] = push_and_pull(2, {0.1f, 1.0f, -2.5f, 1e6f}, true);
  EXPECT_EQ(exact[0], -0.1f);
  EXPECT_EQ(exact[3], -1e6f);
  EXPECT_EQ(float_bytes - half_bytes, 4 * 2u);  // four values, two bytes each
}

TEST(KVClientTest, LargeDenseRangesAreSplitIntoPiecesAndReassembled) {
  Cluster cluster(2, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClientOptions o = cluster.ClientOptions(0);
  o.max_piece_bytes = 4096;  // many pieces per shard
  KVClient client(ep.get(), o);
  constexpr uint64_t kKeys = 100003;
  ASSERT_TRUE(client.DeclareTable(Dense(2, kKeys), Soon()).ok());
  std::vector<float> grads(kKeys), out(kKeys, 7.0f);
  for (uint64_t i = 0; i < kKeys; ++i) grads[i] = static_cast<float>(i % 1000);
  auto t = client.PushPullDense(2, 0, grads, out, 0, 2.0f);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(client.Wait(*t, Soon()).ok());
  for (uint64_t i = 0; i < kKeys; i += 997) ASSERT_EQ(out[i], -static_cast<float>(i % 1000) / 2);
  // A sub-range that straddles the shard boundary.
  std::vector<float> part(10);
  auto p = client.PullDense(2, kKeys / 2 - 5, part, 0);
  ASSERT_TRUE(p.ok());
  ASSERT_TRUE(client.Wait(*p, Soon()).ok());
  EXPECT_EQ(part[5], -static_cast<float>((kKeys / 2) % 1000) / 2);
  EXPECT_GT(client.bytes_pushed(), kKeys * sizeof(float));
}

TEST(KVClientTest, DenseFramesHoldThePulledValuesInKeyOrder) {
  Cluster cluster(2, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClientOptions o = cluster.ClientOptions(0);
  o.max_piece_bytes = 4096;
  KVClient client(ep.get(), o);
  constexpr uint64_t kKeys = 10007;
  ASSERT_TRUE(client.DeclareTable(Dense(2, kKeys), Soon()).ok());
  std::vector<float> grads(kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) grads[i] = static_cast<float>(i % 1000);
  auto concat = [](std::vector<Frame>& frames) {
    std::vector<float> all;
    for (Frame& f : frames) {
      auto v = f.As<float>();
      EXPECT_TRUE(v.ok());
      all.insert(all.end(), v->begin(), v->end());
    }
    return all;
  };
  std::vector<Frame> before, after, part;
  auto t0 = client.PullDenseFrames(2, 0, kKeys, 0, &before);
  ASSERT_TRUE(t0.ok());
  ASSERT_TRUE(client.Wait(*t0, Soon()).ok());
  auto t1 = client.PushPullDenseFrames(2, 0, grads, 0, 2.0f, &after);
  ASSERT_TRUE(t1.ok());
  ASSERT_TRUE(client.Wait(*t1, Soon()).ok());
  EXPECT_GT(after.size(), 2u);                                 // pieces from both servers
  EXPECT_EQ(concat(before), std::vector<float>(kKeys, 0.0f));  // held across the push
  const std::vector<float> got = concat(after);
  ASSERT_EQ(got.size(), kKeys);
  for (uint64_t i = 0; i < kKeys; ++i) ASSERT_EQ(got[i], -static_cast<float>(i % 1000) / 2);
  // A sub-range that straddles the shard boundary.
  auto t2 = client.PullDenseFrames(2, kKeys / 2 - 5, 10, 0, &part);
  ASSERT_TRUE(t2.ok());
  ASSERT_TRUE(client.Wait(*t2, Soon()).ok());
  EXPECT_EQ(concat(part),
            std::vector<float>(got.begin() + kKeys / 2 - 5, got.begin() + kKeys / 2 + 5));
}

TEST(KVClientTest, ServerErrorsNameTheServer) {
  Cluster cluster(1, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClient client(ep.get(), cluster.ClientOptions(0));
  TableConfig c = Sparse(1, 1);
  c.num_keys = 10;
  ASSERT_TRUE(client.DeclareTable(c, Soon()).ok());
  std::vector<uint64_t> keys = {11};
  std::vector<float> out(1);
  auto t = client.Pull(1, keys, out, 0);
  ASSERT_TRUE(t.ok());
  absl::Status s = client.Wait(*t, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("ps0"), std::string::npos) << s;
  EXPECT_NE(s.message().find("out of range"), std::string::npos) << s;
}

TEST(KVClientTest, WaitHasADeadlineAndChecksHealth) {
  Cluster cluster(1, 2, 0);  // BSP with a second worker that never shows up
  auto ep = cluster.WorkerEndpoint(0);
  KVClientOptions o = cluster.ClientOptions(0);
  KVClient client(ep.get(), o);
  ASSERT_TRUE(client.DeclareTable(Sparse(1, 1), Soon()).ok());
  ASSERT_TRUE(client.Clock(1, 1).ok());
  std::vector<uint64_t> keys = {1};
  std::vector<float> out(1);
  auto t = client.Pull(1, keys, out, 1);  // parked: worker 1 is at clock 0
  ASSERT_TRUE(t.ok());
  absl::Status s = client.Wait(*t, absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("ps0"), std::string::npos);

  o.rank = 1;
  o.health = [] { return absl::AbortedError("job aborted"); };
  auto ep2 = cluster.WorkerEndpoint(1);
  KVClient other(ep2.get(), o);
  ASSERT_TRUE(other.DeclareTable(Sparse(1, 1), Soon()).ok());
  auto t2 = other.Pull(1, keys, out, 5);
  ASSERT_TRUE(t2.ok());
  EXPECT_EQ(other.Wait(*t2, Soon()).code(), absl::StatusCode::kAborted);
}

TEST(KVClientTest, RejectsMismatchedArguments) {
  Cluster cluster(1, 1, -1);
  auto ep = cluster.WorkerEndpoint(0);
  KVClient client(ep.get(), cluster.ClientOptions(0));
  ASSERT_TRUE(client.DeclareTable(Sparse(1, 2), Soon()).ok());
  std::vector<uint64_t> keys = {1, 2};
  std::vector<float> wrong(3);
  EXPECT_EQ(client.Push(1, keys, wrong, 0, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.PullDense(1, 0, wrong, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(client.Pull(9, keys, wrong, 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace syncline
