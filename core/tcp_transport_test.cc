#include "core/tcp_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/net.h"
#include "core/seal.h"

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
void SendEachOtherLargeBuffersBeforeReceiving(TcpOptions options) {
  TcpTransport transport(options);
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

TEST(TcpTransportTest, TwoPeersSendEachOtherLargeBuffersBeforeReceiving) {
  SendEachOtherLargeBuffersBeforeReceiving({});
}

// The same over sealed planes, with either cipher: the segments, the queue of what the
// kernel did not take and the handshake under load.
TEST(TcpTransportTest, SealedPeersSendEachOtherLargeBuffersBeforeReceiving) {
  for (bool aes : {true, false}) {
    SCOPED_TRACE(aes ? "AES-256-GCM where available" : "XChaCha20-Poly1305");
    TcpOptions options;
    options.key = std::make_shared<const JobKey>(JobKey::Generate());
    options.seal_with_aes = aes;
    SendEachOtherLargeBuffersBeforeReceiving(options);
  }
}

// Messages of frames at and around the sizes where the sealed plane cuts its segments (a frame
// of 8 KiB or more begins a segment, at most 64 KiB each) arrive bit for bit, with either
// cipher: small frames that share a segment, large ones opened straight into their buffers.
TEST(TcpTransportTest, SealedFramesOfEverySizeArriveIntact) {
  const std::vector<std::vector<size_t>> shapes = {
      {1},    {8191, 8192},        {8192, 1, 8193},    {65535, 65536, 65537},
      {3, 5}, {200000, 7, 131072}, {1, 2, 3, 70000, 4}};
  for (bool aes : {true, false}) {
    SCOPED_TRACE(aes ? "AES-256-GCM where available" : "XChaCha20-Poly1305");
    TcpOptions options;
    options.key = std::make_shared<const JobKey>(JobKey::Generate());
    options.seal_with_aes = aes;
    TcpTransport transport(options);
    auto a = *transport.CreateEndpoint("a");
    auto b = *transport.CreateEndpoint("b");
    ASSERT_TRUE(a->Bind("tcp://127.0.0.1:0").ok());
    const std::string at_b = *b->Bind("tcp://127.0.0.1:0");
    ASSERT_TRUE(a->Connect("b", at_b).ok());
    std::mt19937 rng(static_cast<uint32_t>(aes));
    for (size_t i = 0; i < shapes.size(); ++i) {
      std::vector<std::vector<uint8_t>> sent;
      MessageBuilder m(wire::MsgType::PUSH);
      m.header().setTable(static_cast<uint32_t>(i));
      for (size_t bytes : shapes[i]) {
        sent.emplace_back(bytes);
        for (uint8_t& v : sent.back()) v = static_cast<uint8_t>(rng());
        m.AddFrame(Frame::Copy(sent.back().data(), bytes));
      }
      // Sent while b receives: the first Send waits for the handshake, which needs b driven.
      absl::Status sent_status;
      std::thread sender([&] { sent_status = a->Send("b", m.Finish(), Soon()); });
      auto got = b->Receive(Soon());
      sender.join();
      ASSERT_TRUE(sent_status.ok()) << sent_status;
      ASSERT_TRUE(got.ok()) << got.status();
      ASSERT_TRUE(got->Parse().ok());
      EXPECT_EQ(got->header().getTable(), i);
      ASSERT_EQ(got->frames().size(), sent.size() + 1) << "shape " << i;
      for (size_t f = 0; f < sent.size(); ++f) {
        const Frame& frame = got->payload(f);
        ASSERT_EQ(frame.size(), sent[f].size()) << "shape " << i << " frame " << f;
        EXPECT_EQ(std::memcmp(frame.data(), sent[f].data(), frame.size()), 0)
            << "shape " << i << " frame " << f;
      }
    }
    EXPECT_EQ(transport.rejected_connections(), 0u);
  }
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

namespace syncline {
namespace {

// A hand-driven client of a sealed plane: it speaks the handshake itself and sends segments
// of its own making, as a peer that holds the key (or claims to) but misbehaves would.
class RawSealedClient {
 public:
  RawSealedClient(const std::string& address, const JobKey& key, const std::string& id,
                  const std::string& target)
      : fd_(RawConnect(address)), pair_(PairKey(key, id, target)), nc_(FreshSealNonce()) {
    std::string hello = "SYNCLTCP";
    const uint16_t version = 2, id_size = id.size(), target_size = target.size();
    hello.append(reinterpret_cast<const char*>(&version), 2);
    hello.append(reinterpret_cast<const char*>(&id_size), 2);
    hello += id;
    hello.append(reinterpret_cast<const char*>(&target_size), 2);
    hello += target;
    hello.push_back(static_cast<char>(offered_));
    hello.append(reinterpret_cast<const char*>(nc_.data()), nc_.size());
    Write(hello);
  }
  ~RawSealedClient() { close(fd_); }

  // Reads the server's answer (its endpoint must have been driven meanwhile) and sends the
  // client's proof, or a forged one.
  bool Finish(Endpoint& server, bool forge_proof) {
    (void)server.Receive(absl::Now() + absl::Milliseconds(50));
    unsigned char answer[65];
    size_t got = 0;
    while (got < sizeof(answer)) {
      const ssize_t n = recv(fd_, answer + got, sizeof(answer) - got, 0);
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    const uint8_t chosen = answer[0];
    SealNonce ns;
    std::memcpy(ns.data(), answer + 1, ns.size());
    if (!SameProof(ServerProof(pair_, offered_, chosen, nc_, ns), answer + 33)) return false;
    SealProof proof = ClientProof(pair_, offered_, chosen, nc_, ns);
    if (forge_proof) proof[0] ^= 1;
    Write(std::string(reinterpret_cast<const char*>(proof.data()), proof.size()));
    channel_ = std::make_unique<SealedChannel>(static_cast<SealCipher>(chosen), pair_, nc_, ns,
                                               /*client=*/true);
    return true;
  }

  // The sealed segment of `m` (one message that fits one segment).
  std::string Segment(const Message& m) {
    std::string plain;
    const uint32_t frames = m.frames().size();
    plain.append(reinterpret_cast<const char*>(&frames), 4);
    for (const Frame& f : m.frames()) {
      const uint64_t size = f.size();
      plain.append(reinterpret_cast<const char*>(&size), 8);
    }
    for (const Frame& f : m.frames())
      plain.append(reinterpret_cast<const char*>(f.data()), f.size());
    std::string out(plain.size() + SealedChannel::kOverhead, '\0');
    channel_->Seal(reinterpret_cast<const std::byte*>(plain.data()), plain.size(),
                   reinterpret_cast<std::byte*>(out.data()));
    return out;
  }
  void Write(const std::string& bytes) {
    ASSERT_EQ(write(fd_, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  }

 private:
  const int fd_;
  const SealKey pair_;
  const SealNonce nc_;
  const uint8_t offered_ = LocalSealCiphers();
  std::unique_ptr<SealedChannel> channel_;
};

struct SealedServer {
  SealedServer() {
    TcpOptions options;
    options.key = key;
    transport = std::make_unique<TcpTransport>(options);
    transport->AllowPeers({"server", "client"});
    server = *transport->CreateEndpoint("server");
    address = *server->Bind("tcp://127.0.0.1:0");
  }
  // The next message, or DeadlineExceeded when nothing arrives within 200 ms.
  absl::StatusOr<uint32_t> NextTable() {
    auto got = server->Receive(absl::Now() + absl::Milliseconds(200));
    if (!got.ok()) return got.status();
    if (auto s = got->Parse(); !s.ok()) return s;
    return got->header().getTable();
  }
  std::shared_ptr<const JobKey> key = std::make_shared<const JobKey>(JobKey::Generate());
  std::unique_ptr<TcpTransport> transport;
  std::unique_ptr<Endpoint> server;
  std::string address;
};

// A node without the key (a plaintext plane), and one with another job's key, reach nothing;
// each refusal names who and why, on the side that refused.
TEST(SealedTcpTest, StrangersAndWrongKeysAreRefusedAndNamed) {
  SealedServer s;
  {
    TcpTransport plain;
    auto client = *plain.CreateEndpoint("client");
    ASSERT_TRUE(client->Connect("server", s.address).ok());
    (void)client->Send("server", Numbered(1), Soon());
    EXPECT_TRUE(RejectedWithin(*s.transport, *s.server, 1));
    EXPECT_NE(s.transport->last_rejection().find("plaintext hello (from 'client')"),
              std::string::npos)
        << s.transport->last_rejection();
  }
  {
    TcpOptions options;
    options.key = std::make_shared<const JobKey>(JobKey::Generate());
    TcpTransport other(options);
    auto client = *other.CreateEndpoint("client");
    ASSERT_TRUE(client->Connect("server", s.address).ok());
    std::atomic<bool> done{false};
    std::thread pump([&] {
      while (!done) (void)s.server->Receive(absl::Now() + absl::Milliseconds(5));
    });
    (void)client->Send("server", Numbered(2), Soon());
    // The client checks the server's proof first: the refusal is the client's.
    for (int i = 0; i < 200 && other.rejected_connections() == 0; ++i) {
      (void)client->Receive(absl::Now() + absl::Milliseconds(5));
    }
    done = true;
    pump.join();
    EXPECT_NE(other.last_rejection().find("server at " + s.address +
                                          " failed the sealed handshake: it does not hold this "
                                          "job's key"),
              std::string::npos)
        << other.last_rejection();
    absl::Status lost = client->Send("server", Numbered(3), Soon());
    EXPECT_EQ(lost.code(), absl::StatusCode::kUnavailable) << lost;
    EXPECT_NE(lost.message().find("does not hold this job's key"), std::string::npos) << lost;
  }
  {
    // A client that does not know the key cannot make the client's proof.
    RawSealedClient forger(s.address, *s.key, "client", "server");
    ASSERT_TRUE(forger.Finish(*s.server, /*forge_proof=*/true));
    EXPECT_TRUE(RejectedWithin(*s.transport, *s.server, 2));
    EXPECT_NE(s.transport->last_rejection().find(
                  "'client' failed the sealed handshake: it does not hold this job's key"),
              std::string::npos)
        << s.transport->last_rejection();
  }
  {
    // A stranger's id with the key is refused before anything else.
    RawSealedClient stranger(s.address, *s.key, "mallory", "server");
    EXPECT_TRUE(RejectedWithin(*s.transport, *s.server, 3));
    EXPECT_NE(s.transport->last_rejection().find("'mallory' is not a node of this job"),
              std::string::npos);
  }
  EXPECT_EQ(s.server->counters().messages_received.load(), 0u);
}

// A segment replayed, reordered, with a bit flipped or cut short is refused, named, and
// nothing of it is delivered; the segments before it are.
TEST(SealedTcpTest, ReplayedReorderedFlippedAndCutSegmentsAreRefused) {
  SealedServer s;
  enum Attack { kReplay, kReorder, kFlip, kCut };
  uint64_t rejected = 0;
  for (Attack attack : {kReplay, kReorder, kFlip, kCut}) {
    SCOPED_TRACE(attack);
    RawSealedClient client(s.address, *s.key, "client", "server");
    ASSERT_TRUE(client.Finish(*s.server, /*forge_proof=*/false));
    const std::string first = client.Segment(Numbered(10, {1, 2, 3}));
    const std::string second = client.Segment(Numbered(11, {4, 5, 6}));
    client.Write(first);
    ASSERT_EQ(s.NextTable().value_or(0), 10u);
    std::string bad = attack == kReplay ? first : second;
    if (attack == kReorder) {
      const std::string third = client.Segment(Numbered(12, {7}));
      bad = third;  // sealed as segment 2, sent as segment 1
    }
    if (attack == kFlip) bad[bad.size() / 2] ^= 0x10;
    if (attack == kCut) bad.resize(bad.size() - 1);
    client.Write(bad);
    if (attack == kCut) {
      // The rest never comes: the connection closes inside the segment.
      EXPECT_FALSE(s.NextTable().ok());
      continue;
    }
    ++rejected;
    EXPECT_TRUE(RejectedWithin(*s.transport, *s.server, rejected));
    EXPECT_NE(s.transport->last_rejection().find("sealed segment 1 from client fails "
                                                 "authentication"),
              std::string::npos)
        << s.transport->last_rejection();
    EXPECT_FALSE(s.NextTable().ok());
  }
  EXPECT_EQ(s.server->counters().messages_received.load(), 4u);  // each attack's first
}

}  // namespace
}  // namespace syncline
