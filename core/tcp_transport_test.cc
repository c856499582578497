#include "core/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/net.h"

namespace syncline {
namespace {

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

Message Numbered(uint32_t table, std::vector<float> values = {}) {
  MessageBuilder b(wire::MsgType::PUSH);
  b.header().setTable(table);
  b.AddFrame(Frame::Own(std::move(values)));
  return b.Finish();
}

// A plain TCP client, as a process outside Syncline would open.
int RawConnect(const std::string& address) {
  auto hp = ParseTcpAddress(address);
  EXPECT_TRUE(hp.ok());
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(hp->port);
  inet_pton(AF_INET, hp->host.c_str(), &a.sin_addr);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

std::string Hello(const std::string& id) {
  std::string h = "SYNCLTCP";
  const uint16_t version = 1, size = id.size();
  h.append(reinterpret_cast<const char*>(&version), 2);
  h.append(reinterpret_cast<const char*>(&size), 2);
  return h + id;
}

// Waits (bounded) until `transport` has rejected `n` connections, pumping `ep`.
bool RejectedWithin(TcpTransport& transport, Endpoint& ep, uint64_t n) {
  for (int i = 0; i < 200 && transport.rejected_connections() < n; ++i) {
    (void)ep.Receive(absl::Now() + absl::Milliseconds(10));
  }
  return transport.rejected_connections() >= n;
}

// An endpoint moves bytes only while its owner calls it: receives on `to` while `from` is
// driven too, so that what `from` queued goes out.
absl::StatusOr<Message> ReceiveWhilePumping(Endpoint& to, Endpoint& from) {
  std::atomic<bool> done{false};
  std::thread pump([&] {
    for (int i = 0; i < 1000 && !done; ++i) (void)from.Receive(absl::Now() + absl::Milliseconds(5));
  });
  absl::StatusOr<Message> got = to.Receive(Soon());
  done = true;
  pump.join();
  return got;
}

// Both sides send far more than the kernel buffers before either receives: Send must not
// block on a peer that is itself blocked sending, and a borrowed buffer overwritten at once
// after Send must still arrive as it was.
TEST(TcpTransportTest, TwoPeersSendEachOtherLargeBuffersBeforeReceiving) {
  TcpTransport transport;
  auto a = *transport.CreateEndpoint("a");
  auto b = *transport.CreateEndpoint("b");
  const std::string at_a = *a->Bind("tcp://127.0.0.1:0");
  const std::string at_b = *b->Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(a->Connect("b", at_b).ok());
  ASSERT_TRUE(b->Connect("a", at_a).ok());
  constexpr int kMessages = 4;
  constexpr size_t kFloats = size_t{2} << 20;  // 8 MiB each
  auto side = [&](Endpoint* me, const std::string& peer, float base) {
    std::vector<float> buffer(kFloats);
    for (int i = 0; i < kMessages; ++i) {
      std::fill(buffer.begin(), buffer.end(), base + i);
      MessageBuilder m(wire::MsgType::PUSH);
      m.header().setTable(i);
      m.AddFrame(Frame::Borrow(std::span<const float>(buffer)));
      ASSERT_TRUE(me->Send(peer, m.Finish(), Soon()).ok());
      std::fill(buffer.begin(), buffer.end(), -1.0f);  // lent no longer
    }
    const float other = base == 100 ? 200 : 100;
    for (int i = 0; i < kMessages; ++i) {
      auto got = me->Receive(Soon());
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->peer(), peer);
      ASSERT_TRUE(got->Parse().ok());
      EXPECT_EQ(got->header().getTable(), static_cast<uint32_t>(i));
      auto values = got->payload(0).As<float>();
      ASSERT_TRUE(values.ok());
      ASSERT_EQ(values->size(), kFloats);
      EXPECT_EQ((*values)[0], other + i);
      EXPECT_EQ((*values)[kFloats - 1], other + i);
    }
  };
  std::thread ta(side, a.get(), "b", 100.0f);
  std::thread tb(side, b.get(), "a", 200.0f);
  ta.join();
  tb.join();
  EXPECT_EQ(a->counters().messages_received.load(), kMessages);
}

TEST(TcpTransportTest, MessagesSentBeforeThePeerListensWaitForIt) {
  TcpTransport transport;
  std::string address;
  {
    auto probe = *transport.CreateEndpoint("server");
    address = *probe->Bind("tcp://127.0.0.1:0");  // a free port, closed again
  }
  auto client = *transport.CreateEndpoint("client");
  ASSERT_TRUE(client->Connect("server", address).ok());
  ASSERT_TRUE(client->Send("server", Numbered(7), Soon()).ok());
  EXPECT_FALSE(client->Receive(absl::Now() + absl::Milliseconds(60)).ok());  // refused, retried
  auto server = *transport.CreateEndpoint("server");
  ASSERT_TRUE(server->Bind(address).ok());
  auto got = ReceiveWhilePumping(*server, *client);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->Parse().ok());
  EXPECT_EQ(got->header().getTable(), 7u);
}

// A peer that goes away: the next send names the broken connection, and once the peer is back
// at its address the one after reaches it.
TEST(TcpTransportTest, ALostPeerIsNamedAndAReturningOneIsReachedAgain) {
  TcpTransport transport;
  auto server = *transport.CreateEndpoint("server");
  const std::string address = *server->Bind("tcp://127.0.0.1:0");
  auto client = *transport.CreateEndpoint("client");
  ASSERT_TRUE(client->Connect("server", address).ok());
  ASSERT_TRUE(client->Send("server", Numbered(1), Soon()).ok());
  ASSERT_TRUE(server->Receive(Soon()).ok());
  server.reset();
  // The client learns of the close when it next reads.
  EXPECT_FALSE(client->Receive(absl::Now() + absl::Milliseconds(100)).ok());
  absl::Status lost = client->Send("server", Numbered(2), Soon());
  EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
  EXPECT_NE(lost.message().find("server"), std::string::npos) << lost;
  EXPECT_NE(lost.message().find("closed"), std::string::npos) << lost;

  server = *transport.CreateEndpoint("server");
  ASSERT_TRUE(server->Bind(address).ok());
  ASSERT_TRUE(client->Send("server", Numbered(3), Soon()).ok());
  auto got = ReceiveWhilePumping(*server, *client);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->Parse().ok());
  EXPECT_EQ(got->header().getTable(), 3u);
}

// Strangers and malformed streams are closed and counted; the endpoint goes on serving.
TEST(TcpTransportTest, HostileConnectionsAreClosedAndTheEndpointKeepsServing) {
  TcpTransport transport;
  transport.AllowPeers({"server", "client"});
  auto server = *transport.CreateEndpoint("server");
  const std::string address = *server->Bind("tcp://127.0.0.1:0");
  struct Case {
    std::string bytes;
    const char* what;
  };
  std::string huge = Hello("client");
  const uint32_t one = 1;
  const uint64_t terabyte = uint64_t{1} << 40;
  huge.append(reinterpret_cast<const char*>(&one), 4);
  huge.append(reinterpret_cast<const char*>(&terabyte), 8);
  std::string many = Hello("client");
  const uint32_t frames = 100000;
  many.append(reinterpret_cast<const char*>(&frames), 4);
  std::string version = Hello("client");
  version[8] = 9;
  const std::vector<Case> cases = {
      {"GET / HTTP/1.0\r\n\r\n", "not a hello"},
      {Hello("mallory"), "an id the job does not have"},
      {version, "another protocol version"},
      {huge, "a message of a terabyte"},
      {many, "100000 frames"},
  };
  uint64_t rejected = 0;
  for (const Case& c : cases) {
    const int fd = RawConnect(address);
    ASSERT_EQ(write(fd, c.bytes.data(), c.bytes.size()), static_cast<ssize_t>(c.bytes.size()));
    EXPECT_TRUE(RejectedWithin(transport, *server, ++rejected)) << c.what;
    close(fd);
  }
  auto client = *transport.CreateEndpoint("client");
  ASSERT_TRUE(client->Connect("server", address).ok());
  ASSERT_TRUE(client->Send("server", Numbered(5, {1, 2, 3}), Soon()).ok());
  auto got = server->Receive(Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "client");
  ASSERT_TRUE(server->Send("client", Numbered(6), Soon()).ok());
  EXPECT_TRUE(client->Receive(Soon()).ok());
  EXPECT_EQ(transport.rejected_connections(), cases.size());
}

// A job bounds its plane's messages by its model (TcpOptions::max_message_bytes). A peer of
// the job that announces more, here just past the bound and then far past it (allocating
// a terabyte would end the test by bad_alloc), is refused by name before anything is
// allocated, while another peer's messages up to the bound keep arriving.
TEST(TcpTransportTest, AMessageOverTheJobsBoundIsRefusedNamingPeerSizeAndBound) {
  constexpr uint64_t kBound = 64 * 1024;
  TcpTransport transport(TcpOptions{.max_message_bytes = kBound});
  transport.AllowPeers({"server", "w1", "w2"});
  auto server = *transport.CreateEndpoint("server");
  const std::string address = *server->Bind("tcp://127.0.0.1:0");
  auto w1 = *transport.CreateEndpoint("w1");
  ASSERT_TRUE(w1->Connect("server", address).ok());
  // Header and values together stay under the bound.
  const std::vector<float> fits(kBound / sizeof(float) - 256, 1.5f);
  auto delivered = [&](uint32_t table) {
    if (!w1->Send("server", Numbered(table, fits), Soon()).ok()) return false;
    absl::StatusOr<Message> got = server->Receive(Soon());
    return got.ok() && got->Parse().ok() && got->header().getTable() == table &&
           got->payload(0).size() == fits.size() * sizeof(float);
  };
  ASSERT_TRUE(delivered(1));
  uint64_t rejected = 0;
  for (const uint64_t announced : {kBound + 1, uint64_t{1} << 40}) {
    // Two frames whose lengths add up past the bound, each under it on its own but the last.
    std::string preamble = Hello("w2");
    const uint32_t frames = 2;
    const uint64_t first = 16, second = announced - first;
    preamble.append(reinterpret_cast<const char*>(&frames), 4);
    preamble.append(reinterpret_cast<const char*>(&first), 8);
    preamble.append(reinterpret_cast<const char*>(&second), 8);
    const int fd = RawConnect(address);
    ASSERT_EQ(write(fd, preamble.data(), preamble.size()), static_cast<ssize_t>(preamble.size()));
    ASSERT_TRUE(RejectedWithin(transport, *server, ++rejected)) << announced;
    const std::string why = transport.last_rejection();
    EXPECT_NE(why.find("w2"), std::string::npos) << why;
    EXPECT_NE(why.find(absl::StrCat(announced, " bytes")), std::string::npos) << why;
    EXPECT_NE(why.find(absl::StrCat(kBound, " bytes")), std::string::npos) << why;
    // The connection is closed: the peer reads the end of the stream.
    char byte;
    EXPECT_EQ(read(fd, &byte, 1), 0);
    close(fd);
    EXPECT_TRUE(delivered(2 + static_cast<uint32_t>(rejected)));
  }
  EXPECT_EQ(transport.rejected_connections(), 2u);
}

TEST(TcpTransportTest, BadAddressesAndIdsAreRefused) {
  TcpTransport transport;
  EXPECT_FALSE(transport.CreateEndpoint("").ok());
  EXPECT_FALSE(transport.CreateEndpoint(std::string(300, 'x')).ok());
  auto ep = *transport.CreateEndpoint("a");
  EXPECT_EQ(ep->Bind("udp://1.2.3.4:5").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ep->Connect("b", "tcp://127.0.0.1").code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(ep->Bind("tcp://127.0.0.1:0").ok());
  EXPECT_EQ(ep->Bind("tcp://127.0.0.1:0").status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace syncline
