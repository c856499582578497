#include "job/node_join.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/zmq_transport.h"
#include "testing/interfaces.h"

namespace syncline {
namespace {

// A port that refuses connections: bound, never listened on.
class RefusingPort {
 public:
  RefusingPort() : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    address_ = absl::StrCat("tcp://127.0.0.1:", ntohs(addr.sin_port));
  }
  ~RefusingPort() { close(fd_); }
  const std::string& address() const { return address_; }

 private:
  int fd_;
  std::string address_;
};

// Preflight: a worker that cannot reach a server says which, and where, before the job starts,
// rather than failing later as a request that never returns.
TEST(NodeJoinTest, AWorkerNamesTheServerItCannotReach) {
  JobSpec spec;
  spec.servers = 1;
  spec.workers = 1;
  spec.data.train = "unused.libsvm";
  ZmqTransport transport;
  CoordinatorOptions options = CoordinatorOptionsFor(spec);
  options.startup_timeout = absl::Seconds(20);
  auto coordinator = Coordinator::Create(transport, "tcp://127.0.0.1:0", options, nullptr);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  absl::Status result;
  std::thread run([&] { result = (*coordinator)->Run(); });

  // A server that registers an address where nothing listens (a firewall, a wrong interface).
  RefusingPort refusing;
  std::thread server([&] {
    ControlOptions o{(*coordinator)->address(), wire::Role::SERVER, 0, refusing.address()};
    auto c = ControlClient::Connect(transport, o);
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) (void)(*c)->WaitForStart(absl::Now() + absl::Seconds(20));
  });
  NodeOptions node;
  node.coordinator = (*coordinator)->address();
  node.rank = 0;
  auto joined = JoinJob(transport, wire::Role::WORKER, node);
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(joined.status().message().find(
                absl::StrCat("cannot reach ps0: cannot connect to ", refusing.address())),
            std::string::npos)
      << joined.status();
  run.join();
  server.join();
  // The job failed with the worker's words.
  EXPECT_NE(result.message().find("cannot reach ps0"), std::string::npos) << result;
}

TEST(NodeJoinTest, OffLoopbackANodeNeedsTheJobKeyOrInsecure) {
  NodeOptions node;
  node.coordinator = "tcp://10.1.2.3:7000";
  auto plain = NodeTransportOptions(node);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plain.status().message().find("--key-file"), std::string::npos);
  node.insecure = true;
  EXPECT_TRUE(NodeTransportOptions(node).ok());
  node.key_file = "/nonexistent/job.key";
  EXPECT_EQ(NodeTransportOptions(node).status().code(), absl::StatusCode::kNotFound);
  node.coordinator = "tcp://127.0.0.1:7000";
  node.key_file.clear();
  node.insecure = false;
  auto local = NodeTransportOptions(node);
  ASSERT_TRUE(local.ok());
  EXPECT_EQ(local->key, nullptr);
  // The audit: a coordinator on loopback, yet the node listened on 0.0.0.0 in plaintext.
  node.bind = "tcp://0.0.0.0:0";
  auto wildcard = NodeTransportOptions(node);
  EXPECT_EQ(wildcard.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wildcard.status().message().find("--bind tcp://0.0.0.0:0 listens off loopback"),
            std::string::npos)
      << wildcard.status();
  node.insecure = true;
  EXPECT_TRUE(NodeTransportOptions(node).ok());
  node.insecure = false;
  node.bind = "tcp://127.0.0.1:0";
  EXPECT_TRUE(NodeTransportOptions(node).ok());
}

// An --interface off loopback needs the key too, whatever the coordinator's address.
TEST(NodeJoinTest, AnInterfaceOffLoopbackNeedsTheJobKeyOrInsecure) {
  auto off = testing_util::OffLoopbackInterface();
  if (!off) GTEST_SKIP() << "no interface with an IPv4 address off loopback";
  NodeOptions node;
  node.coordinator = "tcp://127.0.0.1:7000";
  node.interface = *off;
  auto plain = NodeTransportOptions(node);
  EXPECT_EQ(plain.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(plain.status().message().find("--interface " + *off), std::string::npos)
      << plain.status();
  node.interface = "lo";
  EXPECT_TRUE(NodeTransportOptions(node).ok());
}

// The environment sets what the flags set (a cluster launcher's script exports them); a bad
// value is named with its variable.
TEST(NodeJoinTest, TheEnvironmentSetsTheStartupTimeoutAndTheRank) {
  setenv("SYNCLINE_STARTUP_TIMEOUT", "7.5", 1);
  setenv("SYNCLINE_RANK", "3", 1);
  NodeOptions node;
  ASSERT_TRUE(NodeOptionsFromEnvironment(&node).ok());
  EXPECT_EQ(node.startup_timeout, absl::Seconds(7.5));
  EXPECT_EQ(node.rank, 3);
  setenv("SYNCLINE_STARTUP_TIMEOUT", "soon", 1);
  const absl::Status bad = NodeOptionsFromEnvironment(&node);
  EXPECT_NE(bad.message().find("SYNCLINE_STARTUP_TIMEOUT='soon'"), std::string::npos) << bad;
  unsetenv("SYNCLINE_STARTUP_TIMEOUT");
  unsetenv("SYNCLINE_RANK");
}

// A mistyped address or interface is named as such, as bad input, before anything else (an
// unparsable coordinator is not "off loopback").
TEST(NodeJoinTest, AMistypedAddressOrInterfaceIsNamed) {
  NodeOptions node;
  for (const char* coordinator : {"foo", "tcp://127.0.0.1:99999"}) {
    node.coordinator = coordinator;
    auto bad = NodeTransportOptions(node);
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
    EXPECT_NE(bad.status().message().find("--coordinator: address"), std::string::npos)
        << bad.status();
  }
  node.coordinator = "tcp://127.0.0.1:7000";
  node.bind = "foo";
  EXPECT_NE(NodeTransportOptions(node).status().message().find("--bind: address 'foo'"),
            std::string::npos);
  node.bind.clear();
  node.interface = "nosuch0";
  EXPECT_NE(NodeTransportOptions(node).status().message().find("--interface: "), std::string::npos);
  node.interface = "lo";
  EXPECT_TRUE(NodeTransportOptions(node).ok());
}

TEST(NodeJoinTest, ChoosesLoopbackForALocalCoordinatorAndTheNamedInterfaceOtherwise) {
  NodeOptions node;
  node.coordinator = "tcp://127.0.0.1:7000";
  EXPECT_EQ(*ChooseBindAddress(node), "tcp://127.0.0.1:0");
  node.interface = "lo";
  EXPECT_EQ(*ChooseBindAddress(node), "tcp://127.0.0.1:0");
  node.interface = "nosuch0";
  EXPECT_FALSE(ChooseBindAddress(node).ok());
  node.bind = "tcp://127.0.0.1:5555";
  EXPECT_EQ(*ChooseBindAddress(node), "tcp://127.0.0.1:5555");
}

}  // namespace
}  // namespace syncline
