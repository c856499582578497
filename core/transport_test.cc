#include <gtest/gtest.h>

#include <thread>

#include "core/frame_seal.h"
#include "core/inproc_transport.h"
#include "core/job_key.h"
#include "core/node_table.h"
#include "core/seal.h"
#include "core/tcp_transport.h"
#include "core/zmq_transport.h"

namespace syncline {
namespace {

enum class Kind { kZmq, kCurve, kInproc, kTcp, kSealedTcp };

class TransportTest : public testing::TestWithParam<Kind> {
 protected:
  void SetUp() override {
    if (GetParam() == Kind::kZmq) {
      transport_ = std::make_unique<ZmqTransport>();
    } else if (GetParam() == Kind::kCurve) {
      ZmqOptions options;
      options.key = std::make_shared<const JobKey>(JobKey::Generate());
      transport_ = std::make_unique<ZmqTransport>(options);
      transport_->AllowPeers({"server", "client", "a", "c0", "c1", "c2", "c3"});
    } else if (GetParam() == Kind::kTcp) {
      transport_ = std::make_unique<TcpTransport>();
    } else if (GetParam() == Kind::kSealedTcp) {
      TcpOptions options;
      options.key = std::make_shared<const JobKey>(JobKey::Generate());
      transport_ = std::make_unique<TcpTransport>(options);
    } else {
      transport_ = std::make_unique<InprocTransport>();
    }
  }
  std::string BindAddress() const {
    return GetParam() == Kind::kInproc ? "inproc://x" : "tcp://127.0.0.1:0";
  }
  absl::Time Soon() const { return absl::Now() + absl::Seconds(5); }
  // A sealed plane's handshake takes a round trip that the client completes while it is driven
  // (any Send or Receive): a test that sends from one endpoint and then only drives the other
  // never lets it finish.
  bool HandshakeNeedsBothDriven() const { return GetParam() == Kind::kSealedTcp; }
  std::unique_ptr<Transport> transport_;
};

Message Simple(int table, std::vector<float> values) {
  MessageBuilder b(wire::MsgType::PUSH);
  b.header().setTable(table);
  b.AddFrame(Frame::Own(std::move(values)));
  return b.Finish();
}

TEST_P(TransportTest, RequestAndReplyByRoutingId) {
  if (HandshakeNeedsBothDriven()) GTEST_SKIP() << "drives one endpoint at a time";
  auto server = transport_->CreateEndpoint("server");
  auto client = transport_->CreateEndpoint("client");
  ASSERT_TRUE(server.ok() && client.ok());
  auto address = (*server)->Bind(BindAddress());
  ASSERT_TRUE(address.ok()) << address.status();
  ASSERT_TRUE((*client)->Connect("server", *address).ok());

  std::vector<float> big(1 << 18, 1.25f);  // 1 MiB: the zero-copy path
  ASSERT_TRUE((*client)->Send("server", Simple(3, big), Soon()).ok());
  auto got = (*server)->Receive(Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "client");
  ASSERT_TRUE(got->Parse().ok());
  EXPECT_EQ(got->header().getTable(), 3u);
  auto values = got->payload(0).As<float>();
  ASSERT_TRUE(values.ok());
  ASSERT_EQ(values->size(), big.size());
  EXPECT_EQ((*values)[12345], 1.25f);

  ASSERT_TRUE((*server)->Send("client", Simple(4, {2.0f}), Soon()).ok());
  auto reply = (*client)->Receive(Soon());
  ASSERT_TRUE(reply.ok());
  EXPECT_EQ(reply->peer(), "server");
  EXPECT_GT((*client)->counters().bytes_sent.load(), big.size() * sizeof(float));
}

TEST_P(TransportTest, PreservesOrderBetweenTwoEndpoints) {
  if (HandshakeNeedsBothDriven()) GTEST_SKIP() << "drives one endpoint at a time";
  auto server = transport_->CreateEndpoint("server");
  auto client = transport_->CreateEndpoint("client");
  auto address = (*server)->Bind(BindAddress());
  ASSERT_TRUE((*client)->Connect("server", *address).ok());
  for (int i = 0; i < 500; ++i) ASSERT_TRUE((*client)->Send("server", Simple(i, {}), Soon()).ok());
  for (int i = 0; i < 500; ++i) {
    auto m = (*server)->Receive(Soon());
    ASSERT_TRUE(m.ok());
    ASSERT_TRUE(m->Parse().ok());
    ASSERT_EQ(m->header().getTable(), static_cast<uint32_t>(i));
  }
}

TEST_P(TransportTest, ReceiveTimesOutAndUnknownPeersFail) {
  auto a = transport_->CreateEndpoint("a");
  ASSERT_TRUE(a.ok());
  auto m = (*a)->Receive(absl::Now() + absl::Milliseconds(20));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*a)->Send("nobody", Simple(1, {}), Soon()).code(), absl::StatusCode::kUnavailable);
}

TEST_P(TransportTest, ManyClientsOneServer) {
  auto server = transport_->CreateEndpoint("server");
  auto address = (*server)->Bind(BindAddress());
  constexpr int kClients = 4;
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      auto ep = transport_->CreateEndpoint("c" + std::to_string(c));
      ASSERT_TRUE(ep.ok());
      ASSERT_TRUE((*ep)->Connect("server", *address).ok());
      for (int i = 0; i < 50; ++i) {
        ASSERT_TRUE((*ep)->Send("server", Simple(c, {float(i)}), Soon()).ok());
        auto r = (*ep)->Receive(Soon());
        ASSERT_TRUE(r.ok());
      }
    });
  }
  for (int i = 0; i < kClients * 50; ++i) {
    auto m = (*server)->Receive(Soon());
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_TRUE((*server)->Send(m->peer(), Simple(0, {}), Soon()).ok());
  }
  for (auto& t : threads) t.join();
}

INSTANTIATE_TEST_SUITE_P(Transports, TransportTest,
                         testing::Values(Kind::kZmq, Kind::kCurve, Kind::kInproc, Kind::kTcp,
                                         Kind::kSealedTcp),
                         [](const auto& info) {
                           return info.param == Kind::kZmq         ? std::string("Zmq")
                                  : info.param == Kind::kCurve     ? std::string("Curve")
                                  : info.param == Kind::kTcp       ? std::string("Tcp")
                                  : info.param == Kind::kSealedTcp ? std::string("SealedTcp")
                                                                   : std::string("Inproc");
                         });

// Sends `m`'s frames on a raw ZeroMQ socket, as a process outside Syncline would.
void SendRaw(zmq::socket_t& socket, Message m) {
  for (const Frame& f : m.frames()) {
    zmq::message_t part(f.data(), f.size());
    socket.send(part, &f == &m.frames().back() ? zmq::send_flags::none : zmq::send_flags::sndmore);
  }
}

// CURVE: a job's server, and the strangers that try it.
class CurveTest : public testing::Test {
 protected:
  CurveTest() : key_(std::make_shared<const JobKey>(JobKey::Generate())) {
    ZmqOptions options;
    options.key = key_;
    options.seal_data = false;  // CURVE on the data endpoints too
    job_ = std::make_unique<ZmqTransport>(options);
    server_ = *job_->CreateEndpoint("ps0");
    address_ = *server_->Bind("tcp://127.0.0.1:0");
  }
  // Whether a message from `ep` (connected as `id`) reaches the server within a second.
  bool Reaches(Endpoint& ep) {
    if (!ep.Connect("ps0", address_).ok()) return false;
    (void)ep.Send("ps0", Simple(7, {1.0f}), absl::Now() + absl::Seconds(1));
    auto got = server_->Receive(absl::Now() + absl::Seconds(1));
    return got.ok();
  }
  // A worker of the job sends, and is heard under its own id.
  void JobStillServes() {
    auto w1 = job_->CreateEndpoint("w1");
    ASSERT_TRUE(w1.ok());
    ASSERT_TRUE((*w1)->Connect("ps0", address_).ok());
    ASSERT_TRUE((*w1)->Send("ps0", Simple(8, {2.0f}), absl::Now() + absl::Seconds(5)).ok());
    auto got = server_->Receive(absl::Now() + absl::Seconds(5));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->peer(), "w1");
    ASSERT_TRUE(server_->Send("w1", Simple(9, {}), absl::Now() + absl::Seconds(5)).ok());
    EXPECT_TRUE((*w1)->Receive(absl::Now() + absl::Seconds(5)).ok());
  }
  std::shared_ptr<const JobKey> key_;
  std::unique_ptr<ZmqTransport> job_;
  std::unique_ptr<Endpoint> server_;
  std::string address_;
};

TEST_F(CurveTest, AKeyNotYetAllowedWaitsForTheNodeTable) {
  // The server's transport does not know the job's ids yet: a worker's handshake waits...
  ZmqOptions options;
  options.key = key_;
  options.seal_data = false;  // CURVE on the data endpoints too
  ZmqTransport worker(options);
  auto w0 = worker.CreateEndpoint("w0");
  ASSERT_TRUE((*w0)->Connect("ps0", address_).ok());
  ASSERT_TRUE((*w0)->Send("ps0", Simple(1, {}), absl::Now() + absl::Seconds(5)).ok());
  EXPECT_FALSE(server_->Receive(absl::Now() + absl::Milliseconds(300)).ok());
  // ... and goes through once it does.
  job_->AllowPeers(JobEndpointIds(1, 2));
  auto got = server_->Receive(absl::Now() + absl::Seconds(5));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "w0");
}

TEST_F(CurveTest, APlaintextStrangerIsNotHeard) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  ZmqTransport plain;
  auto stranger = plain.CreateEndpoint("w0");
  EXPECT_FALSE(Reaches(**stranger));
  JobStillServes();
}

TEST_F(CurveTest, AnotherJobsKeyIsRefusedByTheZapHandler) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  ZmqOptions options;
  options.key = std::make_shared<const JobKey>(JobKey::Generate());
  options.seal_data = false;  // CURVE on the data endpoints too
  ZmqTransport other(options);
  // It even knows... nothing: its idea of ps0's public key is wrong too, so the handshake
  // fails before or at the ZAP handler.
  auto stranger = other.CreateEndpoint("w0");
  EXPECT_FALSE(Reaches(**stranger));
  JobStillServes();
}

TEST_F(CurveTest, AStrangerWhoKnowsTheServersPublicKeyIsRefusedByTheZapHandler) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  const JobKey other = JobKey::Generate();
  zmq::context_t context;
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, "w0");
  s.set(zmq::sockopt::curve_serverkey, key_->PublicKeyFor("ps0"));
  s.set(zmq::sockopt::curve_publickey, other.PublicKeyFor("w0"));
  s.set(zmq::sockopt::curve_secretkey, other.SecretKeyFor("w0"));
  s.set(zmq::sockopt::linger, 0);
  s.connect(address_);
  SendRaw(s, Simple(5, {3.0f}));
  EXPECT_FALSE(server_->Receive(absl::Now() + absl::Seconds(1)).ok());
  EXPECT_GE(job_->refused_connections(), 1u);
  JobStillServes();
}

// A second connection under a live node's id is refused even with the node's key: ZeroMQ
// would hand the name over before anything checks the key that connected. Once the first
// connection closes, the node's replacement gets its name.
TEST_F(CurveTest, ANameIsTakenOnlyOnceItsConnectionCloses) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  ZmqOptions options;
  options.key = key_;
  options.seal_data = false;  // CURVE on the data endpoints too
  auto first_life = std::make_unique<ZmqTransport>(options);
  auto old_w1 = *first_life->CreateEndpoint("w1");
  ASSERT_TRUE(old_w1->Connect("ps0", address_).ok());
  ASSERT_TRUE(old_w1->Send("ps0", Simple(1, {}), absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE(server_->Receive(absl::Now() + absl::Seconds(5)).ok());
  ZmqTransport second_life(options);
  auto new_w1 = *second_life.CreateEndpoint("w1");
  ASSERT_TRUE(new_w1->Connect("ps0", address_).ok());
  (void)new_w1->Send("ps0", Simple(2, {}), absl::Now() + absl::Seconds(1));
  EXPECT_FALSE(server_->Receive(absl::Now() + absl::Seconds(1)).ok());
  // Replies still reach the first connection.
  ASSERT_TRUE(server_->Send("w1", Simple(3, {}), absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE(old_w1->Receive(absl::Now() + absl::Seconds(5)).ok());
  old_w1.reset();
  first_life.reset();
  // The node's replacement (a new process: a new connection) is heard once the name is free.
  ZmqTransport replacement(options);
  auto next_w1 = *replacement.CreateEndpoint("w1");
  ASSERT_TRUE(next_w1->Connect("ps0", address_).ok());
  absl::StatusOr<Message> got = absl::DeadlineExceededError("");
  for (int attempt = 0; attempt < 50 && !got.ok(); ++attempt) {
    (void)next_w1->Send("ps0", Simple(4, {}), absl::Now() + absl::Seconds(1));
    got = server_->Receive(absl::Now() + absl::Milliseconds(200));
  }
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "w1");
  ASSERT_TRUE(server_->Send("w1", Simple(5, {}), absl::Now() + absl::Seconds(5)).ok());
  EXPECT_TRUE(next_w1->Receive(absl::Now() + absl::Seconds(5)).ok());
}

TEST_F(CurveTest, AJobKeyHolderCannotSpeakUnderAnotherNodesId) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  // A process with the job's key but w0's id on the wire and w1's key pair: it connects (the
  // key is the job's), yet its messages are dropped, since the key was made for w1.
  ZmqOptions options;
  options.key = key_;
  options.seal_data = false;  // CURVE on the data endpoints too
  ZmqTransport insider(options);
  zmq::context_t context;
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, "w0");
  s.set(zmq::sockopt::curve_serverkey, key_->PublicKeyFor("ps0"));
  s.set(zmq::sockopt::curve_publickey, key_->PublicKeyFor("w1"));
  s.set(zmq::sockopt::curve_secretkey, key_->SecretKeyFor("w1"));
  s.set(zmq::sockopt::linger, 0);
  s.connect(address_);
  SendRaw(s, Simple(5, {3.0f}));
  EXPECT_FALSE(server_->Receive(absl::Now() + absl::Seconds(1)).ok());
  JobStillServes();
}

// Per-node keys (core/job_key.h): w0's key cannot act as w1, on the wire or in a transport.
TEST_F(CurveTest, ANodesOwnKeyCannotSpeakUnderAnotherNodesId) {
  job_->AllowPeers(JobEndpointIds(1, 2));
  const std::string dir = testing::TempDir();
  const std::vector<std::string> nodes = {"ps0", "w0", "w1"};
  ASSERT_TRUE(key_->SaveNodeKey(dir + "/w0.key", "w0", 0, nodes).ok());
  auto w0_key = JobKey::Load(dir + "/w0.key");
  ASSERT_TRUE(w0_key.ok()) << w0_key.status();
  ZmqOptions options;
  options.key = std::make_shared<const JobKey>(*std::move(w0_key));
  options.seal_data = false;  // CURVE on the data endpoints too
  ZmqTransport w0(options);
  // Its transport will not make w1's endpoint...
  auto as_w1 = w0.CreateEndpoint("w1");
  EXPECT_EQ(as_w1.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(as_w1.status().message().find("keys of node w0, not of w1"), std::string::npos)
      << as_w1.status();
  // ... and on the wire, w1's id with w0's key pair is dropped: the key was made for w0.
  zmq::context_t context;
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, "w1");
  s.set(zmq::sockopt::curve_serverkey, options.key->PublicKeyFor("ps0"));
  s.set(zmq::sockopt::curve_publickey, options.key->PublicKeyFor("w0"));
  s.set(zmq::sockopt::curve_secretkey, options.key->SecretKeyFor("w0"));
  s.set(zmq::sockopt::linger, 0);
  s.connect(address_);
  SendRaw(s, Simple(5, {3.0f}));
  EXPECT_FALSE(server_->Receive(absl::Now() + absl::Seconds(1)).ok());
  // It holds the name w1 while it is connected (a second connection under a live name is
  // refused; docs/SECURITY.md says what a squatter can do), and leaves.
  s.close();
  absl::SleepFor(absl::Milliseconds(300));
  // Under its own id, w0 is heard.
  auto own = w0.CreateEndpoint("w0");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_TRUE(Reaches(**own));
  JobStillServes();
}

// A node restarted in place (--max-restarts) gets its next incarnation's control key; the
// coordinator then accepts that key alone, so the holder of the old one cannot take the
// node's identity back.
TEST(NodeKeyTransportTest, OnlyTheReplacementsControlKeyIsAcceptedAfterARestart) {
  auto job = std::make_shared<JobKey>(JobKey::Generate());
  ZmqOptions coordinator_options;
  coordinator_options.key = job;
  ZmqTransport coordinator_transport(coordinator_options);
  auto coordinator = *coordinator_transport.CreateEndpoint(kCoordinatorId);
  const std::string address = *coordinator->Bind("tcp://127.0.0.1:0");
  coordinator_transport.AllowPeers(JobEndpointIds(1, 2));
  const std::string dir = testing::TempDir();
  const std::vector<std::string> nodes = {"ps0", "w0", "w1"};
  // Whether the control endpoint of w1, with the key of `incarnation`, is heard as "w1.ctl".
  auto heard = [&](int incarnation) {
    const std::string path = absl::StrCat(dir, "/w1-", incarnation, ".key");
    EXPECT_TRUE(job->SaveNodeKey(path, "w1", incarnation, nodes).ok());
    ZmqOptions options;
    options.key = std::make_shared<const JobKey>(*JobKey::Load(path, "w1"));
    ZmqTransport transport(options);
    auto control = *transport.CreateEndpoint("w1.ctl");
    EXPECT_TRUE(control->Connect(kCoordinatorId, address).ok());
    (void)control->Send(kCoordinatorId, Simple(1, {}), absl::Now() + absl::Seconds(2));
    auto got = coordinator->Receive(absl::Now() + absl::Seconds(2));
    return got.ok() && got->peer() == "w1.ctl";
  };
  EXPECT_TRUE(heard(0));
  EXPECT_FALSE(heard(1));  // not started by the launcher yet
  // A connection of incarnation 0 that is still open when the restart comes (under another
  // name, so that the replacement's can be made): from then on its messages are dropped.
  ASSERT_TRUE(job->SaveNodeKey(dir + "/w0-0.key", "w0", 0, nodes).ok());
  ZmqOptions old_options;
  old_options.key = std::make_shared<const JobKey>(*JobKey::Load(dir + "/w0-0.key", "w0"));
  ZmqTransport old_transport(old_options);
  auto old_control = *old_transport.CreateEndpoint("w0.ctl");
  ASSERT_TRUE(old_control->Connect(kCoordinatorId, address).ok());
  ASSERT_TRUE(
      old_control->Send(kCoordinatorId, Simple(1, {}), absl::Now() + absl::Seconds(2)).ok());
  ASSERT_TRUE(coordinator->Receive(absl::Now() + absl::Seconds(2)).ok());
  job->SetIncarnation("w0", 1);
  job->SetIncarnation("w1", 1);
  coordinator_transport.AllowPeers(JobEndpointIds(1, 2));
  ASSERT_TRUE(
      old_control->Send(kCoordinatorId, Simple(2, {}), absl::Now() + absl::Seconds(2)).ok());
  EXPECT_FALSE(coordinator->Receive(absl::Now() + absl::Seconds(1)).ok());
  EXPECT_TRUE(heard(1));
  const uint64_t refused = coordinator_transport.refused_connections();
  EXPECT_FALSE(heard(0));
  EXPECT_GT(coordinator_transport.refused_connections(), refused);
}

// A reply to a peer that was connected and is gone fails at once: the grace that lets a new
// peer's handshake finish would only stall a server's one thread, once per reply.
TEST(ZmqTransportTest, ASendToAPeerThatLeftFailsWithoutWaitingForItsHandshake) {
  ZmqOptions options;
  options.unreachable_grace = absl::Seconds(20);
  ZmqTransport transport(options);
  auto server = transport.CreateEndpoint("server");
  ASSERT_TRUE(server.ok());
  auto address = (*server)->Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(address.ok());
  {
    auto client = transport.CreateEndpoint("client");
    ASSERT_TRUE(client.ok());
    ASSERT_TRUE((*client)->Connect("server", *address).ok());
    ASSERT_TRUE((*client)->Send("server", Simple(1, {1.0f}), absl::Now() + absl::Seconds(5)).ok());
    ASSERT_TRUE((*server)->Receive(absl::Now() + absl::Seconds(5)).ok());
  }  // the client closes
  // Until the server has seen the disconnect, the send may still go out; after it, it fails.
  absl::Status sent;
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  absl::Duration slowest;
  while (absl::Now() < give_up) {
    const absl::Time start = absl::Now();
    sent = (*server)->Send("client", Simple(2, {2.0f}), absl::Now() + absl::Seconds(30));
    slowest = std::max(slowest, absl::Now() - start);
    if (!sent.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(sent.code(), absl::StatusCode::kUnavailable) << sent;
  EXPECT_LT(slowest, absl::Seconds(10)) << "a send waited out the handshake grace";
}

// TrySend to a peer that is not reading: once its queue (and the socket buffers) are full it
// says so at once, leaves the message whole, and sends it once the peer has read.
TEST(ZmqTransportTest, TrySendToAFullQueueKeepsTheMessageForLater) {
  ZmqOptions options;
  options.high_water_mark = 4;
  ZmqTransport transport(options);
  auto server = transport.CreateEndpoint("server");
  auto client = transport.CreateEndpoint("client");
  ASSERT_TRUE(server.ok() && client.ok());
  auto address = (*server)->Bind("tcp://127.0.0.1:0");
  ASSERT_TRUE(address.ok());
  ASSERT_TRUE((*client)->Connect("server", *address).ok());
  ASSERT_TRUE((*client)->Send("server", Simple(1, {1.0f}), absl::Now() + absl::Seconds(5)).ok());
  ASSERT_TRUE((*server)->Receive(absl::Now() + absl::Seconds(5)).ok());

  const std::vector<float> block(1 << 16, 0.5f);  // 256 KiB
  int sent = 0;
  absl::Status full;
  Message held = Simple(7, block);
  for (; sent < 2000; ++sent) {
    full = (*server)->TrySend("client", &held);
    if (!full.ok()) break;
    held = Simple(7, block);
  }
  ASSERT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full << " after " << sent;
  EXPECT_EQ(held.ByteSize(), Simple(7, block).ByteSize()) << "the refused message is whole";
  // The client reads what came; the held message then goes, and arrives whole.
  int received = 0;
  absl::Status again = full;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (absl::Now() < give_up) {
    auto m = (*client)->Receive(absl::Now() + absl::Milliseconds(50));
    if (m.ok()) {
      ++received;
      continue;
    }
    if (!again.ok()) again = (*server)->TrySend("client", &held);
    if (again.ok() && received == sent + 1) break;
  }
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(received, sent + 1);
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// The sealed data path of keyed ZeroMQ data endpoints (ZmqOptions::seal_data), and the
// strangers, wrong keys, replays, reorders and flipped bits it refuses.
class SealedZmqTest : public testing::Test {
 protected:
  SealedZmqTest() : key_(std::make_shared<const JobKey>(JobKey::Generate())) {
    job_ = std::make_unique<ZmqTransport>(Keyed(key_));
    job_->AllowPeers(JobEndpointIds(1, 4));
    server_ = *job_->CreateEndpoint("ps0");
    address_ = *server_->Bind("tcp://127.0.0.1:0");
  }
  static ZmqOptions Keyed(std::shared_ptr<const JobKey> key) {
    ZmqOptions options;
    options.key = std::move(key);
    return options;
  }
  static absl::Time Soon() { return absl::Now() + absl::Seconds(5); }
  // The session opens while both ends are driven: the server takes the hello, the client the
  // reply (and sends what waited for it). Neither has a message for the caller meanwhile.
  void Drive(Endpoint& client) {
    EXPECT_TRUE(
        absl::IsDeadlineExceeded(server_->Receive(absl::Now() + absl::Milliseconds(300)).status()));
    EXPECT_TRUE(
        absl::IsDeadlineExceeded(client.Receive(absl::Now() + absl::Milliseconds(300)).status()));
  }
  // A worker of the job sends a request and hears the reply, under its own id.
  void JobStillServes(const std::string& id = "w1") {
    auto w = job_->CreateEndpoint(id);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->Connect("ps0", address_).ok());
    ASSERT_TRUE((*w)->Send("ps0", Simple(8, {2.0f, 3.0f}), Soon()).ok());
    Drive(**w);
    auto got = server_->Receive(Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->peer(), id);
    ASSERT_TRUE(got->Parse().ok());
    EXPECT_EQ(got->header().getTable(), 8);
    ASSERT_TRUE(server_->Send(id, Simple(9, {}), Soon()).ok());
    EXPECT_TRUE((*w)->Receive(Soon()).ok());
  }
  // Nothing reaches the caller of the server's Receive within a short while.
  void ServerHearsNothing() {
    auto got = server_->Receive(absl::Now() + absl::Milliseconds(500));
    EXPECT_TRUE(absl::IsDeadlineExceeded(got.status())) << got.status();
  }
  std::shared_ptr<const JobKey> key_;
  std::unique_ptr<ZmqTransport> job_;
  std::unique_ptr<Endpoint> server_;
  std::string address_;
};

std::vector<float> Floats(size_t n, float seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = seed + static_cast<float>(i % 1000) * 0.5f;
  return v;
}

TEST_F(SealedZmqTest, MessagesOfEverySizeArriveWholeBothWays) {
  auto w0 = job_->CreateEndpoint("w0");
  ASSERT_TRUE((*w0)->Connect("ps0", address_).ok());
  bool first = true;
  for (size_t n : {size_t{0}, size_t{1}, size_t{1024}, size_t{16384}, size_t{16385}, size_t{262144},
                   size_t{300000}}) {
    MessageBuilder b(wire::MsgType::PUSH);
    b.header().setTable(static_cast<int>(n % 1000));
    std::vector<float> values = Floats(n, 1.0f);
    b.AddFrame(Frame::Borrow(std::span<const float>(values)));
    b.AddFrame(Frame::Own(std::vector<uint64_t>{n, 7}));
    ASSERT_TRUE((*w0)->Send("ps0", b.Finish(), Soon()).ok()) << n;
    if (first) Drive(**w0);
    first = false;
    auto got = server_->Receive(Soon());
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->peer(), "w0");
    ASSERT_EQ(got->payload_count(), 2u);
    ASSERT_TRUE(got->Parse().ok());
    EXPECT_EQ(got->header().getTable(), static_cast<int>(n % 1000));
    auto floats = got->payload(0).As<float>();
    ASSERT_TRUE(floats.ok());
    EXPECT_TRUE(std::equal(floats->begin(), floats->end(), values.begin(), values.end())) << n;
    // The answer travels under the server's side of the session.
    Message answer = Simple(1, Floats(n, 2.0f));
    ASSERT_TRUE(server_->TrySend("w0", &answer).ok());
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{1024}, size_t{16384}, size_t{16385}, size_t{262144},
                   size_t{300000}}) {
    auto back = (*w0)->Receive(Soon());
    ASSERT_TRUE(back.ok()) << back.status();
    auto floats = back->payload(0).As<float>();
    ASSERT_TRUE(floats.ok());
    const std::vector<float> want = Floats(n, 2.0f);
    EXPECT_TRUE(std::equal(floats->begin(), floats->end(), want.begin(), want.end())) << n;
  }
  EXPECT_EQ(job_->refused_messages(), 0u) << job_->last_refusal();
}

TEST_F(SealedZmqTest, APlaintextStrangerIsRefusedAndNamed) {
  ZmqTransport plain;
  auto stranger = plain.CreateEndpoint("w2");
  ASSERT_TRUE((*stranger)->Connect("ps0", address_).ok());
  ASSERT_TRUE((*stranger)->Send("ps0", Simple(5, {3.0f}), Soon()).ok());
  ServerHearsNothing();
  EXPECT_GE(job_->refused_messages(), 1u);
  EXPECT_NE(job_->last_refusal().find("'w2'"), std::string::npos) << job_->last_refusal();
  JobStillServes();
}

TEST_F(SealedZmqTest, AnotherJobsKeyIsRefusedBothWays) {
  ZmqTransport other(Keyed(std::make_shared<const JobKey>(JobKey::Generate())));
  auto stranger = other.CreateEndpoint("w2");
  ASSERT_TRUE((*stranger)->Connect("ps0", address_).ok());
  // The server's answer to its hello does not prove other's key: the client refuses it...
  ASSERT_TRUE((*stranger)->Send("ps0", Simple(5, {3.0f}), Soon()).ok());
  Drive(**stranger);
  absl::Status sent = (*stranger)->Send("ps0", Simple(5, {3.0f}), Soon());
  EXPECT_TRUE(absl::IsPermissionDenied(sent)) << sent;
  EXPECT_NE(sent.message().find("ps0"), std::string::npos) << sent;
  EXPECT_GE(other.refused_messages(), 1u);
  // ... and nothing of it reaches the server's caller.
  ServerHearsNothing();
  JobStillServes();
}

// A client written by hand, to send what a Syncline endpoint never would.
class HandClient {
 public:
  HandClient(const JobKey& key, const std::string& id, const std::string& address)
      : key_(key), id_(id), socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::routing_id, id);
    socket_.set(zmq::sockopt::linger, 0);
    socket_.set(zmq::sockopt::rcvtimeo, 5000);
    socket_.connect(address);
  }
  // The handshake's hello, then (once the server took it) its reply: true when the server's
  // proof verifies.
  void Hello() {
    std::string hello = "SLH1";
    hello.push_back(static_cast<char>(offered_));
    hello.append(reinterpret_cast<const char*>(nc_.data()), nc_.size());
    socket_.send(zmq::buffer(hello));
  }
  // The whole handshake, with `server` driven while it takes the hello.
  bool OpenWith(Endpoint& server) {
    Hello();
    if (!absl::IsDeadlineExceeded(server.Receive(absl::Now() + absl::Milliseconds(300)).status())) {
      return false;
    }
    return Open();
  }
  bool Open() {
    const SealNonce nc = nc_;
    const uint8_t offered = offered_;
    zmq::message_t reply;
    if (!socket_.recv(reply) || reply.size() != 69) return false;
    const auto* r = static_cast<const unsigned char*>(reply.data());
    SealNonce ns;
    std::memcpy(ns.data(), r + 5, ns.size());
    const SealKey pair = PairKey(key_, id_, "ps0");
    if (!SameProof(ServerProof(pair, offered, r[4], nc, ns), r + 37)) return false;
    channel_ = std::make_unique<SealedChannel>(static_cast<SealCipher>(r[4]), pair, nc, ns, true);
    return true;
  }
  // Seals a message as an endpoint would: its frame list, then each frame.
  std::vector<std::vector<std::byte>> Seal(Message m) {
    std::vector<uint64_t> meta = {m.frames().size()};
    for (const Frame& f : m.frames()) meta.push_back(f.size());
    std::vector<std::vector<std::byte>> out;
    auto seal = [&](const void* data, size_t n) {
      out.emplace_back(SealedFrameBytes(n));
      SealFrame(*channel_, static_cast<const std::byte*>(data), n, out.back().data());
    };
    seal(meta.data(), meta.size() * sizeof(uint64_t));
    std::memcpy(out[0].data(), "SLD1", 4);
    for (const Frame& f : m.frames()) seal(f.data(), f.size());
    return out;
  }
  void Send(const std::vector<std::vector<std::byte>>& parts) {
    for (size_t i = 0; i < parts.size(); ++i) {
      socket_.send(zmq::buffer(parts[i].data(), parts[i].size()),
                   i + 1 < parts.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }

 private:
  const JobKey& key_;
  std::string id_;
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::unique_ptr<SealedChannel> channel_;
  const SealNonce nc_ = FreshSealNonce();
  const uint8_t offered_ = LocalSealCiphers();
};

TEST_F(SealedZmqTest, AHandClientOfTheJobIsHeard) {
  HandClient w2(*key_, "w2", address_);
  ASSERT_TRUE(w2.OpenWith(*server_));
  w2.Send(w2.Seal(Simple(4, {1.0f})));
  auto got = server_->Receive(Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "w2");
}

// Per-node keys: w0's own key opens a session as w0, and none as w2 (it cannot compute the
// pair key of w2 and ps0, so the server's proof never verifies, and nothing it seals opens).
TEST_F(SealedZmqTest, ANodesOwnKeyOpensSessionsAsItselfOnly) {
  const std::string path = testing::TempDir() + "/sealed-w0.key";
  ASSERT_TRUE(key_->SaveNodeKey(path, "w0", 0, {"ps0", "w0", "w1", "w2", "w3"}).ok());
  auto w0_key = JobKey::Load(path, "w0");
  ASSERT_TRUE(w0_key.ok()) << w0_key.status();
  HandClient as_w2(*w0_key, "w2", address_);
  EXPECT_FALSE(as_w2.OpenWith(*server_));
  HandClient w0(*w0_key, "w0", address_);
  ASSERT_TRUE(w0.OpenWith(*server_));
  w0.Send(w0.Seal(Simple(4, {1.0f})));
  auto got = server_->Receive(Soon());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->peer(), "w0");
  JobStillServes();
}

TEST_F(SealedZmqTest, AReplayedMessageIsRefusedAndNamed) {
  HandClient w2(*key_, "w2", address_);
  ASSERT_TRUE(w2.OpenWith(*server_));
  const auto first = w2.Seal(Simple(4, {1.0f}));
  w2.Send(first);
  ASSERT_TRUE(server_->Receive(Soon()).ok());
  w2.Send(first);
  ServerHearsNothing();
  EXPECT_EQ(job_->refused_messages(), 1u);
  EXPECT_NE(job_->last_refusal().find("'w2'"), std::string::npos) << job_->last_refusal();
  JobStillServes();
}

TEST_F(SealedZmqTest, AReorderedMessageIsRefused) {
  HandClient w2(*key_, "w2", address_);
  ASSERT_TRUE(w2.OpenWith(*server_));
  const auto first = w2.Seal(Simple(4, {1.0f}));
  const auto second = w2.Seal(Simple(5, {2.0f}));
  w2.Send(second);
  w2.Send(first);
  ServerHearsNothing();
  EXPECT_EQ(job_->refused_messages(), 2u) << job_->last_refusal();
  JobStillServes();
}

TEST_F(SealedZmqTest, AFlippedBitAnywhereIsRefused) {
  for (int where = 0; where < 4; ++where) {
    HandClient w2(*key_, "w2", address_);
    ASSERT_TRUE(w2.OpenWith(*server_));
    auto parts = w2.Seal(Simple(4, Floats(20000, 1.0f)));
    // The frame list, the header, a payload's first and its last segment's tag.
    std::vector<std::byte>& part = parts[std::min<size_t>(where, 2)];
    const size_t at = where == 3 ? part.size() - 1 : kSealedFramePrefix + 3;
    part[at] ^= std::byte{0x10};
    w2.Send(parts);
    ServerHearsNothing();
    EXPECT_EQ(job_->refused_messages(), static_cast<uint64_t>(where + 1));
    EXPECT_NE(job_->last_refusal().find("'w2'"), std::string::npos) << job_->last_refusal();
  }
  JobStillServes();
}

TEST_F(SealedZmqTest, DataWithoutASessionIsRefused) {
  // A stranger who copies the layout but has no session (nor key).
  zmq::context_t context;
  zmq::socket_t s(context, zmq::socket_type::dealer);
  s.set(zmq::sockopt::routing_id, "w3");
  s.set(zmq::sockopt::linger, 0);
  s.connect(address_);
  std::vector<std::byte> fake(SealedFrameBytes(16));
  std::memcpy(fake.data(), "SLD1", 4);
  s.send(zmq::buffer(fake.data(), fake.size()), zmq::send_flags::sndmore);
  s.send(zmq::buffer(fake.data(), fake.size()));
  ServerHearsNothing();
  EXPECT_NE(job_->last_refusal().find("'w3'"), std::string::npos) << job_->last_refusal();
  JobStillServes();
}

// A server that restarts at its address is met with a fresh session (a recovered PS job).
TEST_F(SealedZmqTest, AClientMeetsARestartedServerWithAFreshSession) {
  ZmqTransport worker(Keyed(key_));
  auto w0 = worker.CreateEndpoint("w0");
  ASSERT_TRUE((*w0)->Connect("ps0", address_).ok());
  ASSERT_TRUE((*w0)->Send("ps0", Simple(1, {}), Soon()).ok());
  Drive(**w0);
  ASSERT_TRUE(server_->Receive(Soon()).ok());
  server_.reset();
  job_.reset();
  ZmqTransport second_life(Keyed(key_));
  std::unique_ptr<Endpoint> again = *second_life.CreateEndpoint("ps0");
  absl::StatusOr<std::string> bound = absl::UnavailableError("");
  for (int attempt = 0; attempt < 50 && !bound.ok(); ++attempt) {
    bound = again->Bind(address_);
    if (!bound.ok()) absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(bound.ok()) << bound.status();
  absl::Status heard = absl::DeadlineExceededError("");
  // The client sees the connection break and come back; its next send opens a new session.
  for (int attempt = 0; attempt < 50 && !heard.ok(); ++attempt) {
    (void)(*w0)->Send("ps0", Simple(2, {}), Soon());
    heard = again->Receive(absl::Now() + absl::Milliseconds(200)).status();
    if (!heard.ok()) (void)(*w0)->Receive(absl::Now() + absl::Milliseconds(100));
  }
  EXPECT_TRUE(heard.ok()) << heard;
  EXPECT_EQ(second_life.refused_messages(), 0u) << second_life.last_refusal();
}

}  // namespace
}  // namespace syncline
