#include "core/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>
#include <zmq.hpp>

#include "absl/time/clock.h"
#include "core/descriptor_limit.h"
#include "core/job_key.h"
#include "core/net.h"
#include "core/zmq_transport.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

// A raw TCP connection to 127.0.0.1:port that never speaks: an idle stranger.
int ConnectIdle(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server ended the connection (reset or closed it). What it sent before (its
// greeting) is read and ignored.
bool Ended(int fd) {
  char buf[256];
  while (true) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    const ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
  }
}

// Waits until `count(fds)` connections have ended or the deadline passes; returns how many.
int WaitForEnded(const std::vector<int>& fds, int want, absl::Duration within) {
  const absl::Time deadline = absl::Now() + within;
  std::vector<bool> ended(fds.size(), false);
  int n = 0;
  while (true) {
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!ended[i] && Ended(fds[i])) {
        ended[i] = true;
        ++n;
      }
    }
    if (n >= want || absl::Now() >= deadline) return n;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

class ConnectionGuardTest : public testing::Test {
 protected:
  void Listen(ConnectionLimits limits, bool curve = false) {
    ZmqOptions options;
    options.connections = limits;
    if (curve) options.key = std::make_shared<const JobKey>(JobKey::Generate());
    transport_ = std::make_unique<ZmqTransport>(options);
    auto server = transport_->CreateEndpoint("ps0");
    ASSERT_TRUE(server.ok());
    server_ = std::move(*server);
    auto address = server_->Bind("tcp://127.0.0.1:0");
    ASSERT_TRUE(address.ok()) << address.status();
    auto hp = ParseTcpAddress(*address);
    ASSERT_TRUE(hp.ok());
    port_ = hp->port;
  }
  void TearDown() override {
    for (int fd : clients_) close(fd);
    server_.reset();
  }

  std::unique_ptr<ZmqTransport> transport_;
  std::unique_ptr<Endpoint> server_;
  int port_ = 0;
  std::vector<int> clients_;
};

TEST_F(ConnectionGuardTest, IdleConnectionsFromOneAddressAreCutToItsLimit) {
  ConnectionLimits limits;
  limits.max_pending_per_address = 8;
  limits.accepts_per_second = 1e6;  // this test is about the count, not the rate
  limits.handshake_timeout = absl::Seconds(120);
  Listen(limits);
  for (int i = 0; i < 100; ++i) clients_.push_back(ConnectIdle(port_));
  EXPECT_EQ(WaitForEnded(clients_, 92, absl::Seconds(30)), 92);
  // The eight it kept stay until their handshake times out.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(WaitForEnded(clients_, 100, absl::ZeroDuration()), 92);
  EXPECT_EQ(transport_->connection_stats().aborted_pending.load(), 92u);
}

TEST_F(ConnectionGuardTest, AConnectionThatNeverFinishesItsHandshakeIsClosed) {
  ConnectionLimits limits;
  limits.handshake_timeout = absl::Milliseconds(300);
  Listen(limits);
  for (int i = 0; i < 5; ++i) clients_.push_back(ConnectIdle(port_));
  // ZeroMQ's own default would hold them for 30 s.
  EXPECT_EQ(WaitForEnded(clients_, 5, absl::Seconds(20)), 5);
}

TEST_F(ConnectionGuardTest, AnAddressThatReconnectsFasterThanItsRateIsReset) {
  ConnectionLimits limits;
  limits.max_pending_per_address = 5;  // the burst
  limits.accepts_per_second = 0.001;   // and then (almost) nothing
  limits.handshake_timeout = absl::Seconds(120);
  limits.block_time = absl::ZeroDuration();  // the reset alone (blocks: the next test)
  Listen(limits, /*curve=*/true);
  // The burst: five connections that the guard keeps.
  std::vector<int> burst;
  for (int i = 0; i < 5; ++i) burst.push_back(ConnectIdle(port_));
  const ConnectionGuardStats& stats = transport_->connection_stats();
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (stats.accepted.load() < 5 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(stats.accepted.load(), 5u);
  EXPECT_EQ(WaitForEnded(burst, 1, absl::Milliseconds(200)), 0);
  // Once they are gone, nothing is pending from this address, yet its bucket is empty: a new
  // connection (a HELLO flood's next one) is reset before its handshake.
  for (int fd : burst) close(fd);
  absl::SleepFor(absl::Seconds(1));  // ZeroMQ sees them go before the next connection comes
  for (int i = 0; i < 3; ++i) clients_.push_back(ConnectIdle(port_));
  EXPECT_EQ(WaitForEnded(clients_, 3, absl::Seconds(20)), 3);
  EXPECT_EQ(stats.aborted_rate.load(), 3u);
  EXPECT_EQ(stats.aborted_pending.load(), 0u);
}

// Whether a connection to 127.0.0.1:port is established within `within` (a dropped SYN is
// retried by the kernel, and the connect stays in progress).
bool Connects(int port, absl::Duration within) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool up = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  if (!up && errno == EINPROGRESS) {
    pollfd p = {fd, POLLOUT, 0};
    int error = 0;
    socklen_t size = sizeof(error);
    up = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(within))) == 1 &&
         getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
  }
  close(fd);
  return up;
}

// Resetting a connection after ZeroMQ accepted it still costs the node its accept, its
// engine and often the HELLO that came with it: an address over its rate is blocked at the
// listening socket, whose filter drops its SYNs, for block_time.
TEST_F(ConnectionGuardTest, AnAddressOverItsRateIsBlockedAtTheListeningSocket) {
  ConnectionLimits limits;
  limits.max_pending_per_address = 3;
  limits.accepts_per_second = 0.001;
  limits.block_time = absl::Seconds(2);
  Listen(limits, /*curve=*/true);
  for (int i = 0; i < 4; ++i) clients_.push_back(ConnectIdle(port_));
  EXPECT_EQ(WaitForEnded(clients_, 1, absl::Seconds(20)), 1);  // the fourth, over the rate
  const ConnectionGuardStats& stats = transport_->connection_stats();
  EXPECT_EQ(stats.blocked.load(), 1u);
  EXPECT_FALSE(Connects(port_, absl::Milliseconds(500)));
  const uint64_t accepted = stats.accepted.load();
  EXPECT_EQ(stats.accepted.load(), accepted);  // the kernel dropped it: ZeroMQ never saw it
  // The block lifts: a connection reaches ZeroMQ again (the bucket is still empty, so it is
  // reset, and the address blocked once more).
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (stats.accepted.load() == accepted && absl::Now() < deadline) {
    Connects(port_, absl::Milliseconds(200));
  }
  EXPECT_GT(stats.accepted.load(), accepted);
  EXPECT_LT(absl::Now(), deadline);
}

// The flood comes from another process, so that its own descriptors do not count here.
TEST_F(ConnectionGuardTest, AFloodNeverTakesTheDescriptorsKeptForFiles) {
  const int base = OpenDescriptorCount();
  ConnectionLimits limits;
  limits.max_pending_per_address = 1000;
  limits.max_pending = 1000;
  limits.accepts_per_second = 1e6;
  limits.handshake_timeout = absl::Seconds(120);
  limits.descriptor_limit = base + 120;
  limits.descriptor_reserve = 30;
  Listen(limits);
  const int listening = OpenDescriptorCount();
  int sync[2];
  ASSERT_EQ(pipe(sync), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Only system calls here: the parent has threads.
    close(sync[0]);
    for (int i = 0; i < 300; ++i) ConnectIdle(port_);
    char done = 1;
    (void)!write(sync[1], &done, 1);
    pause();
    _exit(0);
  }
  close(sync[1]);
  char done = 0;
  ASSERT_EQ(read(sync[0], &done, 1), 1);
  close(sync[0]);
  // Until the count of descriptors settles (ZeroMQ closes what the guard reset).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  int open = OpenDescriptorCount(), same = 0;
  while (same < 10 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    const int now = OpenDescriptorCount();
    same = now == open ? same + 1 : 0;
    open = now;
  }
  const ConnectionGuardStats& stats = transport_->connection_stats();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  EXPECT_GT(stats.aborted_descriptors.load(), 0u);
  // Without the guard: every one of the 300 connections holds a descriptor here.
  EXPECT_LE(open, limits.descriptor_limit - limits.descriptor_reserve + 1)
      << "base " << base << ", listening " << listening;
}

}  // namespace
}  // namespace syncline
