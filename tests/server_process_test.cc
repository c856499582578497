// A real syncline-ps process under a flood of malformed messages keeps serving.
#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <zmq.hpp>

#include "client/kv_client.h"
#include "core/control_client.h"
#include "core/coordinator.h"
#include "core/zmq_transport.h"
#include "job/node_join.h"
#include "launch/process_group.h"

namespace syncline {
namespace {

class StatsObserver : public CoordinatorObserver {
 public:
  void OnServerStats(int server, wire::ServerStats::Reader s) override {
    rejected = s.getRejected();
    requests = s.getRequests();
  }
  uint64_t rejected = 0, requests = 0;
};

absl::Time Soon() { return absl::Now() + absl::Seconds(20); }

TEST(ServerProcessTest, KeepsServingThroughAFloodOfMalformedMessages) {
  ZmqTransport transport;
  StatsObserver observer;
  JobSpec spec;
  spec.servers = 1;
  spec.workers = 1;
  spec.sync.kind = SyncKind::kAsp;
  spec.embedding.dir.clear();  // sparse rows in memory
  CoordinatorOptions options = CoordinatorOptionsFor(spec);
  options.heartbeat_interval = absl::Milliseconds(100);
  options.heartbeat_timeout = absl::Seconds(5);
  auto coordinator = Coordinator::Create(transport, "tcp://127.0.0.1:0", options, &observer);
  ASSERT_TRUE(coordinator.ok());
  absl::Status job;
  std::thread run([&] { job = (*coordinator)->Run(); });

  std::string server_log;
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    server_log.append(line.data(), line.size());
    server_log += '\n';
  });
  ASSERT_TRUE(
      group
          .Start(ProcessSpec{
              "ps0", {SYNCLINE_PS_BIN, "--coordinator", (*coordinator)->address(), "--rank", "0"}})
          .ok());

  // This test plays worker 0.
  auto control = ControlClient::Connect(
      transport, ControlOptions{(*coordinator)->address(), wire::Role::WORKER, 0, ""});
  ASSERT_TRUE(control.ok()) << control.status();
  const NodeInfo* server = (*control)->table().Servers()[0];
  auto endpoint = transport.CreateEndpoint("w0");
  ASSERT_TRUE(endpoint.ok());
  ASSERT_TRUE((*endpoint)->Connect(server->id, server->address).ok());
  KVClient client(endpoint->get(), KVClientOptions{.rank = 0, .server_ids = {server->id}});
  (*control)->ReportReady();
  ASSERT_TRUE((*control)->WaitForStart(Soon()).ok());
  TableConfig table;
  table.id = 1;
  table.dense = false;
  table.num_keys = 1000;
  table.dim = 4;
  ASSERT_TRUE(client.DeclareTable(table, Soon()).ok());

  // 1. Random bytes from a stranger, as one to four frames.
  const uint64_t seed = 424242;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  zmq::context_t context;
  zmq::socket_t stranger(context, zmq::socket_type::dealer);
  stranger.set(zmq::sockopt::routing_id, "stranger");
  stranger.set(zmq::sockopt::linger, 0);
  stranger.connect(server->address);
  constexpr int kGarbage = 500;
  for (int i = 0; i < kGarbage; ++i) {
    const int frames = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < frames; ++f) {
      std::string junk(rng() % 200, '\0');
      for (char& c : junk) c = static_cast<char>(rng());
      stranger.send(zmq::buffer(junk),
                    f + 1 < frames ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
  }
  // 2. Well-formed headers with bad contents from the real worker id.
  std::vector<Message> bad;
  auto request = [](wire::MsgType type, uint32_t t) {
    MessageBuilder b(type);
    b.header().setRole(wire::Role::WORKER);
    b.header().setRank(0);
    b.header().setRequestId(1000 + t);
    b.header().setTable(t);
    return b;
  };
  {
    auto b = request(wire::MsgType::PULL, 7);  // unknown table
    b.header().setKeyCount(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{1}));
    bad.push_back(b.Finish());
  }
  {
    auto b = request(wire::MsgType::PULL, 1);  // key out of range
    b.header().setKeyCount(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{5000}));
    bad.push_back(b.Finish());
  }
  {
    auto b = request(wire::MsgType::PUSH, 1);  // wrong value length
    b.header().setKeyCount(1);
    b.header().setValueCount(3);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{5}));
    b.AddFrame(Frame::Own(std::vector<float>{1, 2, 3}));
    bad.push_back(b.Finish());
  }
  {
    auto b = request(wire::MsgType::PUSH, 1);  // truncated keys frame
    b.header().setKeyCount(2);
    b.AddFrame(Frame::Copy("1234567", 7));
    bad.push_back(b.Finish());
  }
  const int kBad = static_cast<int>(bad.size());
  for (Message& m : bad) ASSERT_TRUE((*endpoint)->Send(server->id, std::move(m), Soon()).ok());
  int errors = 0;
  for (int i = 0; i < kBad; ++i) {
    auto reply = (*endpoint)->Receive(Soon());
    ASSERT_TRUE(reply.ok()) << reply.status();
    ASSERT_TRUE(reply->Parse().ok());
    if (reply->header().getType() == wire::MsgType::ERROR) ++errors;
  }
  EXPECT_EQ(errors, kBad);

  // 2b. An impostor under the live worker's id: its connection is refused while the worker's
  // is alive, so neither its push lands nor does it take the worker's replies.
  {
    zmq::socket_t impostor(context, zmq::socket_type::dealer);
    impostor.set(zmq::sockopt::routing_id, "w0");
    impostor.set(zmq::sockopt::linger, 0);
    impostor.connect(server->address);
    auto b = request(wire::MsgType::PUSH, 1);
    b.header().setKeyCount(2);
    b.header().setValueCount(8);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{5, 6}));
    b.AddFrame(Frame::Own(std::vector<float>(8, 100.0f)));
    Message m = b.Finish();
    for (size_t f = 0; f < m.frames().size(); ++f) {
      impostor.send(zmq::buffer(m.frames()[f].data(), m.frames()[f].size()),
                    f + 1 < m.frames().size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    }
    absl::SleepFor(absl::Milliseconds(300));
  }

  // 3. The server still serves real requests, to the real worker.
  std::vector<uint64_t> keys = {5, 6};
  std::vector<float> grads(8, 1.0f), out(8);
  auto push = client.Push(1, keys, grads, 0, 1.0f);
  ASSERT_TRUE(push.ok());
  ASSERT_TRUE(client.Wait(*push, Soon()).ok());
  auto pull = client.Pull(1, keys, out, 0);
  ASSERT_TRUE(pull.ok());
  ASSERT_TRUE(client.Wait(*pull, Soon()).ok());
  EXPECT_FLOAT_EQ(out[0], -0.1f);  // one SGD step at the default learning rate: not the impostor's

  // 4. A clean end of the job: the server reports what it rejected and exits 0.
  ASSERT_TRUE(client.Finish(Soon()).ok());
  MessageBuilder done(wire::MsgType::WORKER_DONE);
  done.header().getBody().initWorkerStats();
  (*control)->Send(done.Finish());
  auto command = (*control)->WaitForCommand(Soon());
  ASSERT_TRUE(command.ok());
  EXPECT_EQ(*command, Command::kShutdown);
  run.join();
  EXPECT_TRUE(job.ok()) << job;
  std::vector<ExitEvent> exited;
  const absl::Time deadline = Soon();
  while (exited.empty() && absl::Now() < deadline) {
    (void)group.Poll(absl::Milliseconds(100), &exited);
  }
  ASSERT_EQ(exited.size(), 1u) << server_log;
  EXPECT_EQ(exited[0].exit_code, 0) << server_log;
  EXPECT_EQ(observer.rejected, static_cast<uint64_t>(kGarbage + kBad)) << server_log;
  EXPECT_NE(server_log.find("rejected a request"), std::string::npos);
}

}  // namespace
}  // namespace syncline
