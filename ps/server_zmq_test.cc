// The server over ZeroMQ. Apart from ps_test, which scripts/tsan.sh runs: ThreadSanitizer
// cannot see libzmq's own synchronization (it is not built with it) and would report the
// hand-over of every message to ZeroMQ's I/O thread.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <thread>

#include "absl/time/clock.h"
#include "core/heap_reuse.h"
#include "core/zmq_transport.h"
#include "ps/server.h"
#include "ps/server_test_requests.h"

namespace syncline {
namespace {

using testing_util::Declare;
using testing_util::SparsePull;
using testing_util::SparseTable;

// Sanitizers keep freed memory (ASan's quarantine holds up to 256 MiB of it): what a test
// measures of resident memory there is theirs, not the code's.
constexpr bool kSanitized = SYNCLINE_SANITIZER_HEAP;

uint64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
}

// Over ZeroMQ, whose queue to a peer holds 100,000 messages: a worker that sends large pulls
// and never reads the replies must not make the server hold more than --reply-backlog of them
// (the audit saw 20 MB grow to 445 MB with a limit of 16 MiB).
TEST(ParameterServerTest, UnreadRepliesOverZeroMqStayWithinTheBacklogLimit) {
  constexpr uint64_t kLimit = uint64_t{16} << 20;
  constexpr uint32_t kDim = 1024;
  ZmqTransport server_transport;
  auto server_ep = server_transport.CreateEndpoint("ps0");
  ASSERT_TRUE(server_ep.ok());
  auto address = (*server_ep)->Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(address.ok());
  // The worker's own queue takes one message: it stops reading the socket at once.
  ZmqOptions client_options;
  client_options.high_water_mark = 1;
  ZmqTransport client_transport(client_options);
  auto worker = client_transport.CreateEndpoint("w0");
  ASSERT_TRUE(worker.ok());
  ASSERT_TRUE((*worker)->Connect("ps0", *address).ok());
  ServerOptions o;
  o.num_workers = 1;
  o.staleness = -1;
  o.max_reply_backlog_bytes = kLimit;
  ParameterServer server(server_ep->get(), o);
  TableConfig table = SparseTable();
  table.num_keys = 1024;
  table.dim = kDim;
  std::vector<uint64_t> keys(1024);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  constexpr int kPulls = 100;  // 4 MiB of reply each
  std::thread serve([&server] {
    const absl::Time deadline = absl::Now() + absl::Seconds(120);
    while (server.stats().requests < kPulls + 1 && absl::Now() < deadline) {
      ASSERT_TRUE(server.ServeUntil(absl::Now() + absl::Milliseconds(20)).ok());
    }
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE((*worker)->Send("ps0", Declare(0, table), deadline).ok());
  // The first pull's reply makes the table's rows; RSS is measured from there.
  ASSERT_TRUE((*worker)->Send("ps0", SparsePull(0, 2, keys, 0), deadline).ok());
  absl::SleepFor(absl::Milliseconds(500));
  const uint64_t before = ResidentBytes();
  for (int i = 1; i < kPulls; ++i) {
    ASSERT_TRUE((*worker)->Send("ps0", SparsePull(0, 2 + i, keys, 0), deadline).ok());
  }
  serve.join();
  const uint64_t after = ResidentBytes();
  std::cout << "resident " << (before >> 20) << " MiB before the unread pulls, " << (after >> 20)
            << " MiB after\n";
  EXPECT_EQ(server.stats().requests, uint64_t{kPulls + 1});
  EXPECT_GT(server.stats().replies_dropped, 0u);
  // At most the limit plus one reply waits in the transport.
  EXPECT_LE((*server_ep)->QueuedBytes("w0"), kLimit + (uint64_t{4} << 20) + 4096);
  // 100 unread replies are 400 MiB; the bound is 20 MiB, and the rest is margin.
  if (!kSanitized) {
    EXPECT_LT(after, before + (uint64_t{128} << 20))
        << "resident " << (before >> 20) << " MiB before, " << (after >> 20) << " MiB after";
  }
}

}  // namespace
}  // namespace syncline
