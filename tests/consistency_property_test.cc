// Randomised property tests of the consistency models: workers with seeded random speeds and
// delays drive real server shards (in-process transport, one thread per node) and every read is
// checked against an independent record of the workers' clocks.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "client/kv_client.h"
#include "testing/inproc_cluster.h"

namespace syncline {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

TableConfig SparseTable() {
  TableConfig c;
  c.id = 1;
  c.dense = false;
  c.num_keys = 1 << 20;
  c.dim = 1;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

struct Outcome {
  int64_t max_staleness_seen = 0;  // from the independent record
  int64_t max_staleness_reported = 0;
  uint64_t reads = 0;
};

// W workers run `clocks` iterations each: pull (gated), push, random sleep, clock. Worker w's
// true clock is published in clocks[w] after its clock message is sent, and set to "infinite"
// when it finishes. A read for iteration c is legal if, when it returns, every unfinished
// worker's published clock is >= c - s.
Outcome RunRandomJob(uint64_t seed, int servers, int workers, int64_t staleness, int clocks) {
  InprocCluster cluster(servers, workers, staleness);
  std::vector<std::atomic<int64_t>> published(workers);
  for (auto& c : published) c.store(0);
  std::atomic<int64_t> max_seen{0}, max_reported{0};
  std::atomic<uint64_t> reads{0};
  std::vector<std::thread> threads;
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      std::mt19937_64 rng(seed * 31 + w);
      // Uneven speeds: some workers are consistently slower, all are jittery.
      const int base_us = 50 + static_cast<int>(rng() % 400);
      auto ep = cluster.WorkerEndpoint(w);
      KVClientOptions o;
      o.rank = w;
      o.server_ids = cluster.server_ids();
      KVClient client(ep.get(), o);
      ASSERT_TRUE(client.DeclareTable(SparseTable(), Soon()).ok());
      std::vector<uint64_t> keys = {static_cast<uint64_t>(w), 1000, 2000};
      std::vector<float> out(keys.size()), grads(keys.size(), 1.0f);
      for (int64_t c = 0; c < clocks; ++c) {
        auto pull = client.Pull(1, keys, out, c);
        ASSERT_TRUE(pull.ok());
        ASSERT_TRUE(client.Wait(*pull, Soon()).ok()) << "worker " << w << " clock " << c;
        int64_t slowest = std::numeric_limits<int64_t>::max();
        for (int v = 0; v < workers; ++v) slowest = std::min(slowest, published[v].load());
        const int64_t lag = std::max<int64_t>(0, c - slowest);
        int64_t prev = max_seen.load();
        while (lag > prev && !max_seen.compare_exchange_weak(prev, lag)) {
        }
        const int64_t reported = static_cast<int64_t>(client.TakeMeanStaleness());
        prev = max_reported.load();
        while (reported > prev && !max_reported.compare_exchange_weak(prev, reported)) {
        }
        reads.fetch_add(1);
        auto push = client.Push(1, keys, grads, c, 1.0f);
        ASSERT_TRUE(push.ok());
        ASSERT_TRUE(client.Wait(*push, Soon()).ok());
        const int sleep_us = base_us * (rng() % 10 == 0 ? 8 : 1) + static_cast<int>(rng() % 100);
        absl::SleepFor(absl::Microseconds(sleep_us));
        // Published before the server can know it, so the record is never behind the server.
        published[w].store(c + 1);
        ASSERT_TRUE(client.Clock(c + 1, 1).ok());
      }
      published[w].store(std::numeric_limits<int64_t>::max());
      ASSERT_TRUE(client.Finish(Soon()).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < servers; ++s) EXPECT_EQ(cluster.server(s).parked_pulls(), 0u);
  return Outcome{max_seen.load(), max_reported.load(), reads.load()};
}

class StalenessBoundTest : public testing::TestWithParam<int64_t> {};

TEST_P(StalenessBoundTest, NoReadIsServedBeyondTheBoundAndEveryParkedPullIsAnswered) {
  const int64_t s = GetParam();
  for (uint64_t seed : {1, 2, 3}) {
    SCOPED_TRACE(testing::Message() << "seed " << seed << ", staleness " << s);
    const Outcome o = RunRandomJob(seed, 2, 4, s, 40);
    EXPECT_EQ(o.reads, 4u * 40u);  // every pull, parked or not, was answered
    EXPECT_LE(o.max_staleness_seen, s);
    EXPECT_LE(o.max_staleness_reported, s);
  }
}

INSTANTIATE_TEST_SUITE_P(Bounds, StalenessBoundTest, testing::Values(0, 1, 3));

// Worker 1 joins, reads clock 0 and then stalls (alive, never clocking); worker 0 runs up to
// 50 iterations, each read waiting at most 300 ms. Returns the iterations worker 0 finished.
// Worker 0 reads its own writes as long as it runs.
int64_t IterationsBesideAStalledWorker(int64_t staleness) {
  // Requests borrow these buffers and a refused read leaves its pull with the server: they must
  // outlive the cluster's server threads (ThreadSanitizer saw the server read freed keys).
  std::vector<uint64_t> keys = {7};
  std::vector<float> out(1), grad = {1.0f}, other(1);
  InprocCluster cluster(1, 2, staleness);
  auto ep0 = cluster.WorkerEndpoint(0);
  auto ep1 = cluster.WorkerEndpoint(1);
  KVClient client(ep0.get(), KVClientOptions{.rank = 0, .server_ids = cluster.server_ids()});
  KVClient stalled(ep1.get(), KVClientOptions{.rank = 1, .server_ids = cluster.server_ids()});
  EXPECT_TRUE(client.DeclareTable(SparseTable(), Soon()).ok());
  EXPECT_TRUE(stalled.DeclareTable(SparseTable(), Soon()).ok());
  auto first = stalled.Pull(1, keys, other, 0);
  EXPECT_TRUE(first.ok() && stalled.Wait(*first, Soon()).ok());
  for (int64_t c = 0; c < 50; ++c) {
    auto pull = client.Pull(1, keys, out, c);
    EXPECT_TRUE(pull.ok());
    if (!pull.ok() || !client.Wait(*pull, absl::Now() + absl::Milliseconds(300)).ok()) return c;
    EXPECT_FLOAT_EQ(out[0], -static_cast<float>(c));
    auto push = client.Push(1, keys, grad, c, 1.0f);
    EXPECT_TRUE(push.ok() && client.Wait(*push, Soon()).ok());
    EXPECT_TRUE(client.Clock(c + 1, 1).ok());
  }
  return 50;
}

TEST(ConsistencyTest, AspMakesProgressWithAWorkerStalled) {
  // The control: the stalled worker does hold a synchronous job back, so it is in the job...
  EXPECT_EQ(IterationsBesideAStalledWorker(0), 1);
  EXPECT_EQ(IterationsBesideAStalledWorker(2), 3);
  // ...and ASP goes on without it.
  EXPECT_EQ(IterationsBesideAStalledWorker(-1), 50);
}

// Worker 0 runs ahead while worker 1 is stalled at clock 0: under SSP(s) its reads up to
// iteration s are served and the read of iteration s + 1 waits, exactly until worker 1 moves.
void CheckBlocksAt(int64_t s) {
  SCOPED_TRACE(testing::Message() << "staleness " << s);
  InprocCluster cluster(2, 2, s);
  auto ep0 = cluster.WorkerEndpoint(0);
  auto ep1 = cluster.WorkerEndpoint(1);
  KVClient w0(ep0.get(), KVClientOptions{.rank = 0, .server_ids = cluster.server_ids()});
  KVClient w1(ep1.get(), KVClientOptions{.rank = 1, .server_ids = cluster.server_ids()});
  ASSERT_TRUE(w0.DeclareTable(SparseTable(), Soon()).ok());
  ASSERT_TRUE(w1.DeclareTable(SparseTable(), Soon()).ok());
  std::vector<uint64_t> keys = {1, 2, 3, 4};
  std::vector<float> out(keys.size());
  for (int64_t c = 0; c <= s; ++c) {
    auto pull = w0.Pull(1, keys, out, c);
    ASSERT_TRUE(w0.Wait(*pull, absl::Now() + absl::Seconds(2)).ok()) << "clock " << c;
    ASSERT_TRUE(w0.Clock(c + 1, 1).ok());
  }
  auto blocked = w0.Pull(1, keys, out, s + 1);
  ASSERT_TRUE(blocked.ok());
  EXPECT_EQ(w0.Wait(*blocked, absl::Now() + absl::Milliseconds(300)).code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(w1.Clock(1, 1).ok());
  EXPECT_TRUE(w0.Wait(*blocked, absl::Now() + absl::Seconds(5)).ok());
}

TEST(ConsistencyTest, BspAndSspBlockExactlyAtTheBound) {
  CheckBlocksAt(0);
  CheckBlocksAt(2);
}

}  // namespace
}  // namespace syncline
