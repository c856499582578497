#include "ps/server.h"

#include <capnp/message.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <limits>
#include <mutex>
#include <random>

#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "compression/wire.h"
#include "core/inproc_transport.h"
#include "optim/optimizer.h"
#include "privacy/secagg_protocol.h"
#include "ps/server_test_requests.h"

namespace syncline {

using testing_util::Clock;
using testing_util::Declare;
using testing_util::Request;
using testing_util::SparsePull;
using testing_util::SparsePush;
using testing_util::SparseTable;

namespace {

using ::testing::HasSubstr;

// Drives one server from the test thread: requests go in through real endpoints, the server
// handles what is queued, replies come back to the fake workers.
class ServerHarness {
 public:
  // Every endpoint's queue holds `mailbox_capacity` messages.
  explicit ServerHarness(ServerOptions options, size_t mailbox_capacity = 100000)
      : transport_(mailbox_capacity) {
    server_ep_ = *transport_.CreateEndpoint("ps0");
    for (int w = 0; w < std::max(options.num_workers, options.max_workers); ++w) {
      workers_.push_back(*transport_.CreateEndpoint("w" + std::to_string(w)));
    }
    server_ = std::make_unique<ParameterServer>(server_ep_.get(), options);
  }

  void Send(int worker, Message m) {
    ASSERT_TRUE(workers_[worker]->Send("ps0", std::move(m), Deadline()).ok());
  }
  void Serve() { ASSERT_TRUE(server_->ServeUntil(absl::Now() + absl::Milliseconds(5)).ok()); }
  // The next reply to `worker`, or nullopt if none is waiting.
  std::optional<Message> Reply(int worker) {
    auto m = workers_[worker]->Receive(absl::Now() + absl::Milliseconds(5));
    if (!m.ok()) return std::nullopt;
    EXPECT_TRUE(m->Parse().ok());
    return std::move(*m);
  }
  ParameterServer& server() { return *server_; }
  Endpoint& worker_endpoint(int w) { return *workers_[w]; }
  static absl::Time Deadline() { return absl::Now() + absl::Seconds(5); }

 private:
  InprocTransport transport_;
  std::unique_ptr<Endpoint> server_ep_;
  std::vector<std::unique_ptr<Endpoint>> workers_;
  std::unique_ptr<ParameterServer> server_;
};

std::vector<float> ValuesOf(Message& reply) {
  EXPECT_EQ(reply.header().getType(), wire::MsgType::REPLY) << reply.header().getMessage().cStr();
  auto v = reply.payload(0).As<float>();
  return std::vector<float>(v->begin(), v->end());
}

// After a rollback (in-place recovery) a server is made at the job's new generation: what a
// worker sent on the timeline undone carries the old one and is dropped unanswered, so that it
// never reaches the restored model; a request of the current generation is served, and an
// error about it carries that generation (a worker ignores errors of another).
TEST(ParameterServerTest, RequestsOfAnotherGenerationAreDroppedUnanswered) {
  ServerHarness h(
      {.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1, .generation = 2});
  auto declare = [](uint32_t generation) {
    MessageBuilder b = Request(wire::MsgType::DECLARE_TABLE, 0, 1);
    b.header().setGeneration(generation);
    SparseTable().ToWire(b.header().getBody().initTable());
    return b.Finish();
  };
  auto push = [](uint32_t generation) {
    MessageBuilder b = Request(wire::MsgType::PUSH, 0, 2);
    b.header().setGeneration(generation);
    b.header().setKeyCount(1);
    b.header().setValueCount(2);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{5}));
    b.AddFrame(Frame::Own(std::vector<float>{100, 100}));
    return b.Finish();
  };
  auto pull = [](uint32_t generation, uint64_t id, uint32_t table) {
    MessageBuilder b = Request(wire::MsgType::PULL, 0, id, table);
    b.header().setGeneration(generation);
    b.header().setKeyCount(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{5}));
    return b.Finish();
  };
  h.Send(0, declare(1));  // the undone timeline's
  h.Serve();
  EXPECT_FALSE(h.Reply(0).has_value());
  EXPECT_EQ(h.server().stats().stale_dropped, 1u);
  h.Send(0, declare(2));
  h.Serve();
  auto declared = h.Reply(0);
  ASSERT_TRUE(declared.has_value());
  EXPECT_EQ(declared->header().getType(), wire::MsgType::REPLY);
  // The old timeline's push never lands: a pull of the current one sees the initial rows.
  h.Send(0, push(1));
  h.Send(0, pull(2, 3, 1));
  h.Serve();
  auto pulled = h.Reply(0);
  ASSERT_TRUE(pulled.has_value());
  EXPECT_EQ(pulled->header().getRequestId(), 3u);
  for (float v : ValuesOf(*pulled)) EXPECT_LT(std::abs(v), 1.0f);
  EXPECT_EQ(h.server().stats().stale_dropped, 2u);
  // An error about a current request carries its generation (a worker ignores others').
  h.Send(0, pull(2, 4, 99));
  h.Serve();
  auto error = h.Reply(0);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->header().getType(), wire::MsgType::ERROR);
  EXPECT_EQ(error->header().getGeneration(), 2u);
}

TEST(ParameterServerTest, BspAppliesTheMeanOfAllWorkersOnceEveryWorkerFinishedTheClock) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 0});
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);

  // Worker 0: 2 examples with gradient sum (2, 4) on key 5; worker 1: 6 examples, (6, 8).
  h.Send(0, SparsePush(0, 2, {5}, {2, 4}, 0, 2));
  h.Send(1, SparsePush(1, 2, {5}, {6, 8}, 0, 6));
  h.Send(0, Clock(0, 1, 2));
  h.Send(0, SparsePull(0, 3, {5}, 1));
  h.Serve();
  ASSERT_TRUE(h.Reply(0).has_value());  // push ack
  EXPECT_FALSE(h.Reply(0).has_value()) << "pull at clock 1 must wait for worker 1";
  EXPECT_EQ(h.server().parked_pulls(), 1u);

  h.Send(1, Clock(1, 1, 6));
  h.Serve();
  ASSERT_TRUE(h.Reply(1).has_value());  // push ack
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  // w = 0 - lr * (2+6, 4+8) / (2+6 examples) = (-1, -1.5)
  EXPECT_EQ(ValuesOf(*reply), (std::vector<float>{-1.0f, -1.5f}));
  EXPECT_EQ(h.server().stats().staleness.max(), 0);
}

TEST(ParameterServerTest, SspParksOnlyReadsBeyondTheBound) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 1});
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, Clock(0, 1, 1));
  h.Send(0, SparsePull(0, 2, {7}, 1));  // 1 ahead of worker 1: allowed
  h.Send(0, Clock(0, 2, 1));
  h.Send(0, SparsePull(0, 3, {7}, 2));  // 2 ahead: parked
  h.Serve();
  ASSERT_TRUE(h.Reply(0).has_value());  // declare
  auto first = h.Reply(0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->header().getRequestId(), 2u);
  EXPECT_FALSE(h.Reply(0).has_value());
  h.Send(1, Clock(1, 1, 1));
  h.Serve();
  auto second = h.Reply(0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->header().getRequestId(), 3u);
  EXPECT_EQ(h.server().stats().staleness.max(), 1);
}

TEST(ParameterServerTest, AspAppliesEachPushAtOnce) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = -1});
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, SparsePush(0, 2, {5}, {2, 4}, 0, 2));
  h.Send(0, SparsePull(0, 3, {5}, 10));
  h.Serve();
  (void)h.Reply(0);
  (void)h.Reply(0);
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(ValuesOf(*reply), (std::vector<float>{-1.0f, -2.0f}));
}

TEST(ParameterServerTest, DensePullRepliesKeepTheirValuesAfterLaterPushes) {
  // The replies reference the table (no copy); a push must not change a reply already given,
  // and a pull after a push sees it although the push was answered before its update.
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  TableConfig c;
  c.id = 3;
  c.dense = true;
  c.num_keys = 4;
  c.optimizer.learning_rate = 1.0f;
  h.Send(0, Declare(0, c));
  auto pull = [&](uint64_t id) {
    auto b = Request(wire::MsgType::PULL, 0, id, 3);
    b.header().setRangeBegin(0);
    b.header().setRangeEnd(4);
    h.Send(0, b.Finish());
  };
  pull(2);
  {
    auto b = Request(wire::MsgType::PUSH, 0, 3, 3);
    b.header().setRangeBegin(0);
    b.header().setRangeEnd(4);
    b.header().setValueCount(4);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<float>{1, 2, 3, 4}));
    h.Send(0, b.Finish());
  }
  pull(4);
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  auto before = h.Reply(0);
  ASSERT_TRUE(before.has_value());
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // push
  auto after = h.Reply(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(ValuesOf(*before), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(ValuesOf(*after), (std::vector<float>{-1, -2, -3, -4}));
  // The push is answered before its update runs, and only once.
  EXPECT_FALSE(h.Reply(0).has_value());
}

TEST(ParameterServerTest, MalformedRequestsGetErrorsAndTheServerKeepsServing) {
  ServerHarness h({.rank = 0, .num_servers = 2, .num_workers = 1, .staleness = -1});
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  (void)h.Reply(0);

  // A key owned by this shard (shard 0 of 2) and one that is not.
  uint64_t mine = 0, other = 0;
  while (SparseShardOf(mine, 2) != 0) ++mine;
  while (SparseShardOf(other, 2) != 1) ++other;

  std::vector<Message> bad;
  bad.push_back(SparsePush(0, 11, {mine}, {1.0f}, 0, 1));  // wrong value length
  bad.push_back(SparsePull(0, 12, {5000}, 0));             // key out of range
  bad.push_back(SparsePull(0, 13, {other}, 0));            // key of another shard
  {
    auto b = Request(wire::MsgType::PULL, 0, 14, /*table=*/99);  // unknown table
    b.header().setKeyCount(1);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{mine}));
    bad.push_back(b.Finish());
  }
  {
    auto b = Request(wire::MsgType::PULL, 0, 15);  // key count disagrees
    b.header().setKeyCount(3);
    b.AddFrame(Frame::Own(std::vector<uint64_t>{mine}));
    bad.push_back(b.Finish());
  }
  {
    auto b = Request(wire::MsgType::PULL, 0, 16);  // truncated keys frame
    b.header().setKeyCount(1);
    b.AddFrame(Frame::Copy("abc", 3));
    bad.push_back(b.Finish());
  }
  {
    auto b = Request(wire::MsgType::PULL, 3, 17);  // rank outside the job
    bad.push_back(b.Finish());
  }
  for (Message& m : bad) h.Send(0, std::move(m));
  // Random garbage, seeded.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    Message m;
    std::vector<uint8_t> junk(rng() % 100);
    for (auto& b : junk) b = static_cast<uint8_t>(rng());
    m.frames().push_back(Frame::Own(std::move(junk)));
    if (i % 3 == 0) m.frames().push_back(Frame::Copy("zz", 2));
    h.Send(0, std::move(m));
  }
  h.Serve();
  int errors = 0;
  while (auto r = h.Reply(0)) {
    EXPECT_EQ(r->header().getType(), wire::MsgType::ERROR);
    ++errors;
  }
  EXPECT_EQ(errors, 7 + 200);
  EXPECT_EQ(h.server().stats().rejected, 207u);

  // Still serving.
  h.Send(0, SparsePull(0, 20, {mine}, 0));
  h.Serve();
  auto ok = h.Reply(0);
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ValuesOf(*ok), (std::vector<float>{0.0f, 0.0f}));
}

Message EncodedPush(int worker, uint64_t id, uint64_t begin, uint64_t end, const CodecSpec& spec,
                    std::span<const float> gradient) {
  std::vector<std::byte> block;
  Codec::Create(spec)->Encode(gradient, &block);
  auto b = Request(wire::MsgType::PUSH, worker, id, /*table=*/3);
  b.header().setRangeBegin(begin);
  b.header().setRangeEnd(end);
  b.header().setValueCount(end - begin);
  b.header().setCodec(static_cast<uint8_t>(spec.kind));
  b.header().setWeight(1);
  b.AddFrame(Frame::Own(std::move(block)));
  return b.Finish();
}

TEST(ParameterServerTest, CompressedPushesAreDecodedAndBadBlocksRejected) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  TableConfig c;
  c.id = 3;
  c.dense = true;
  c.num_keys = 1000;
  c.optimizer.learning_rate = 1.0f;
  h.Send(0, Declare(0, c));
  std::vector<float> g(1000, 0.0f);
  g[10] = 5.0f;
  g[999] = -7.0f;
  g[500] = 0.001f;
  CodecSpec topk;
  topk.kind = CodecKind::kTopK;
  topk.ratio = 0.002;  // keeps the 2 largest
  h.Send(0, EncodedPush(0, 2, 0, 1000, topk, g));
  // A block for 1000 entries claimed to hold 999.
  Message wrong = EncodedPush(0, 3, 0, 999, topk, g);
  h.Send(0, std::move(wrong));
  {
    auto b = Request(wire::MsgType::PUSH, 0, 4, 3);  // garbage block
    b.header().setRangeBegin(0);
    b.header().setRangeEnd(1000);
    b.header().setValueCount(1000);
    b.header().setCodec(static_cast<uint8_t>(CodecKind::kSign1));
    b.header().setWeight(1);
    b.AddFrame(Frame::Copy("not a block", 11));
    h.Send(0, b.Finish());
  }
  {
    auto b = Request(wire::MsgType::PULL, 0, 5, 3);
    b.header().setRangeBegin(0);
    b.header().setRangeEnd(1000);
    h.Send(0, b.Finish());
  }
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // push
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::ERROR);
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::ERROR);
  auto pulled = h.Reply(0);
  ASSERT_TRUE(pulled.has_value());
  std::vector<float> w = ValuesOf(*pulled);
  EXPECT_FLOAT_EQ(w[10], -5.0f);
  EXPECT_FLOAT_EQ(w[999], 7.0f);
  EXPECT_FLOAT_EQ(w[500], 0.0f);  // not among the top 2: left for error feedback
}

// Sparse rows take fp16 pushes (values rounded to half precision), not top-K or sign1.
TEST(ParameterServerTest, SparsePushesTakeHalfPrecision) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  h.Send(0, Declare(0, SparseTable()));
  const std::vector<float> grads = {0.1f, -2.0f, 3.0f, 65504.0f};  // keys 5 and 9, dim 2
  std::vector<std::byte> block;
  Codec::Create(CodecSpec{.kind = CodecKind::kFp16})->Encode(grads, &block);
  auto b = Request(wire::MsgType::PUSH, 0, 2);
  b.header().setKeyCount(2);
  b.header().setValueCount(grads.size());
  b.header().setWeight(1);
  b.header().setCodec(static_cast<uint8_t>(CodecKind::kFp16));
  b.AddFrame(Frame::Own(std::vector<uint64_t>{5, 9}));
  b.AddFrame(Frame::Own(std::move(block)));
  h.Send(0, b.Finish());
  h.Send(0, SparsePull(0, 5, {5, 9}, 10));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // fp16 push
  auto pulled = h.Reply(0);
  ASSERT_TRUE(pulled.has_value());
  // lr 1, SGD: w = -g, with g as half precision rounds it (0.1 is not exact in binary16).
  const std::vector<float> w = ValuesOf(*pulled);
  ASSERT_EQ(w.size(), 4u);
  EXPECT_NE(w[0], -0.1f);
  EXPECT_NEAR(w[0], -0.1f, 0.1f / 1024);
  EXPECT_EQ(w[1], 2.0f);
  EXPECT_EQ(w[2], -3.0f);
  EXPECT_EQ(w[3], -65504.0f);
}

// A compressed sparse push: compact keys and a block of `kind` over their rows.
Message CompactPush(uint64_t id, const std::vector<uint64_t>& keys, CodecKind kind,
                    std::vector<std::byte> block, uint32_t dim = 2) {
  std::vector<std::byte> coded;
  EncodeKeys(keys, &coded);
  auto b = Request(wire::MsgType::PUSH, 0, id);
  b.header().setKeyCount(keys.size());
  b.header().setKeyCoding(1);
  b.header().setValueCount(keys.size() * dim);
  b.header().setWeight(1);
  b.header().setCodec(static_cast<uint8_t>(kind));
  b.AddFrame(Frame::Own(std::move(coded)));
  b.AddFrame(Frame::Own(std::move(block)));
  return b.Finish();
}

TEST(ParameterServerTest, SparsePushesTakeCompactKeysAndEveryCodecAndRefuseMalformedOnes) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  h.Send(0, Declare(0, SparseTable()));
  // top-K of keys 5 and 900's rows: one entry, index 3 (key 900, second float) = 4.
  std::vector<std::byte> topk(12);
  compression_internal::StoreU32(topk.data(), 1);
  compression_internal::StoreU32(topk.data() + 4, 3);
  compression_internal::StoreF32(topk.data() + 8, 4.0f);
  h.Send(0, CompactPush(2, {5, 900}, CodecKind::kTopK, topk));
  // sign1 of key 7's row: +-mean|g|.
  std::vector<std::byte> sign1;
  Codec::Create(CodecSpec{.kind = CodecKind::kSign1})->Encode(std::vector<float>{1, -3}, &sign1);
  h.Send(0, CompactPush(3, {7}, CodecKind::kSign1, sign1));
  // float32 rows with compact keys.
  const std::vector<float> raw = {0.5f, 0.25f};
  h.Send(0,
         CompactPush(4, {11}, CodecKind::kNone,
                     std::vector<std::byte>(reinterpret_cast<const std::byte*>(raw.data()),
                                            reinterpret_cast<const std::byte*>(raw.data()) + 8)));
  // Malformed: a topk index beyond the rows, a short sign1 block, keys that do not decode,
  // compact keys out of the table's range, an unknown key coding.
  std::vector<std::byte> bad_topk = topk;
  compression_internal::StoreU32(bad_topk.data() + 4, 4);
  h.Send(0, CompactPush(5, {5, 900}, CodecKind::kTopK, bad_topk));
  h.Send(0, CompactPush(6, {7}, CodecKind::kSign1,
                        std::vector<std::byte>(sign1.begin(), sign1.end() - 1)));
  {
    auto b = Request(wire::MsgType::PUSH, 0, 7);
    b.header().setKeyCount(3);
    b.header().setKeyCoding(1);
    b.header().setValueCount(6);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<std::byte>{std::byte{0x80}}));
    b.AddFrame(Frame::Own(std::vector<float>(6)));
    h.Send(0, b.Finish());
  }
  h.Send(0, CompactPush(8, {5000}, CodecKind::kSign1, sign1));
  {
    auto b = Request(wire::MsgType::PUSH, 0, 9);
    b.header().setKeyCount(1);
    b.header().setKeyCoding(3);
    b.header().setValueCount(2);
    b.header().setWeight(1);
    b.AddFrame(Frame::Own(std::vector<std::byte>{std::byte{7}}));
    b.AddFrame(Frame::Own(std::vector<float>(2)));
    h.Send(0, b.Finish());
  }
  h.Send(0, SparsePull(0, 10, {5, 7, 11, 900}, 10));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  for (int accepted = 0; accepted < 3; ++accepted) {
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header().getType(), wire::MsgType::REPLY)
        << reply->header().getMessage().cStr();
  }
  for (const char* why : {"index", "sign1", "cannot hold", "out of range", "key coding"}) {
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);
    EXPECT_THAT(std::string(reply->header().getMessage().cStr()), HasSubstr(why));
  }
  auto pulled = h.Reply(0);
  ASSERT_TRUE(pulled.has_value());
  // SGD at lr 1: w = -g. Nothing of the refused pushes was applied.
  EXPECT_EQ(ValuesOf(*pulled), (std::vector<float>{0, 0, -2, 2, -0.5f, -0.25f, 0, -4}));
}

// A row that error feedback held back for several pushes arrives with its held count and
// spread, and is applied as that many steps: under Adagrad the same as the pushes would have
// been. Held counts that do not fit are refused, naming them, and nothing is applied.
TEST(ParameterServerTest, HeldRowsAreAppliedAsTheirPushesAndMalformedCountsAreRefused) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  TableConfig table = SparseTable();
  table.optimizer.kind = OptimizerKind::kAdagrad;
  h.Send(0, Declare(0, table));
  const auto held_push = [](uint64_t id, std::vector<uint64_t> keys, std::vector<float> values,
                            std::vector<std::byte> counts, uint8_t coding = 1) {
    Message m = CompactPush(
        id, keys, CodecKind::kNone,
        std::vector<std::byte>(reinterpret_cast<const std::byte*>(values.data()),
                               reinterpret_cast<const std::byte*>(values.data() + values.size())));
    MessageBuilder b(wire::MsgType::PUSH);
    b.header().setRole(wire::Role::WORKER);
    b.header().setRequestId(id);
    b.header().setTable(1);
    b.header().setKeyCount(keys.size());
    b.header().setKeyCoding(1);
    b.header().setValueCount(values.size());
    b.header().setWeight(1);
    b.header().setHeldCoding(coding);
    b.AddFrame(m.payload(0));
    b.AddFrame(m.payload(1));
    if (!counts.empty()) b.AddFrame(Frame::Own(std::move(counts)));
    return b.Finish();
  };
  // Key 5: three pushes of (2, -4) sent as one sum; key 9 sent after one push.
  std::vector<std::byte> counts;
  ASSERT_TRUE(EncodeHeld(std::vector<uint16_t>{3, 1}, std::vector<float>{1, 1}, &counts));
  h.Send(0, held_push(2, {5, 9}, {6, -12, 1, 1}, counts));
  // Refused: no counts frame, a count beyond the bound, an unknown coding, counts for a
  // sparse push without them.
  h.Send(0, held_push(3, {5}, {1, 1}, {}));
  h.Send(0, held_push(4, {5}, {1, 1}, {std::byte{0x80}, std::byte{0x10}, std::byte{0}}));
  h.Send(0, held_push(5, {5}, {1, 1}, {std::byte{0}}, 2));
  h.Send(0, held_push(6, {5, 9}, {1, 1, 1, 1}, {std::byte{0}}));
  h.Send(0, SparsePull(0, 7, {5, 9}, 10));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  for (const char* why : {"held counts", "more than the 1024", "held counts", "cannot hold"}) {
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);
    EXPECT_THAT(std::string(reply->header().getMessage().cStr()), HasSubstr(why));
  }
  auto pulled = h.Reply(0);
  ASSERT_TRUE(pulled.has_value());
  // The reference: the pushes one by one (rows start at 0: SparseTable's init_scale).
  std::vector<float> w5 = {0, 0}, h5 = {0, 0}, w9 = {0, 0}, h9 = {0, 0};
  const std::vector<float> g5 = {2, -4}, g9 = {1, 1};
  for (int i = 1; i <= 3; ++i)
    ApplyUpdate(table.optimizer, w5.data(), h5.data(), g5.data(), 1, 2, i);
  ApplyUpdate(table.optimizer, w9.data(), h9.data(), g9.data(), 1, 2, 1);
  const std::vector<float> got = ValuesOf(*pulled);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_NEAR(got[0], w5[0], 1e-6);
  EXPECT_NEAR(got[1], w5[1], 1e-6);
  EXPECT_EQ(got[2], w9[0]);
  EXPECT_EQ(got[3], w9[1]);
}

// A compressed pull (--compress-pull topk:0.5): new rows come whole, then deltas against the
// worker's copy, the rest held back until later pulls; the copy stays within its rows.
TEST(ParameterServerTest, CompressedPullsSendNewRowsWholeThenDeltas) {
  ServerOptions options{.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1};
  options.pull_codec = CodecSpec{.kind = CodecKind::kTopK, .ratio = 0.5};
  options.pull_copy_rows = 2;
  ServerHarness h(options);
  h.Send(0, Declare(0, SparseTable()));
  auto pull = [](uint64_t id, std::vector<uint64_t> keys, CodecKind kind = CodecKind::kTopK) {
    std::vector<std::byte> coded;
    EncodeKeys(keys, &coded);
    auto b = Request(wire::MsgType::PULL, 0, id);
    b.header().setKeyCount(keys.size());
    b.header().setKeyCoding(1);
    b.header().setPullCodec(static_cast<uint8_t>(kind));
    b.header().setClock(10);
    b.AddFrame(Frame::Own(std::move(coded)));
    return b.Finish();
  };
  h.Send(0, SparsePush(0, 2, {5, 9}, {1, 2, 3, 4}, 0, 1));
  h.Send(0, pull(3, {5, 9}));
  h.Send(0, SparsePush(0, 4, {5, 9}, {-1, 0, 0, -8}, 0, 1));  // w5 = (0, -2), w9 = (-3, 4)
  h.Send(0, pull(5, {5, 9}));
  h.Send(0, pull(6, {20}));              // a third row: the copy drops its oldest
  h.Send(0, SparsePull(0, 7, {5}, 10));  // an uncompressed pull is still served
  h.Send(0, pull(8, {5}, CodecKind::kSign1));
  // A push that reuses pull 5's keys {5, 9}; then ones naming a pull the server does not hold,
  // with the wrong key count, and a pull that tries it.
  auto reuse = [](uint64_t id, uint64_t of, uint64_t count, wire::MsgType type) {
    auto b = Request(type, 0, id);
    b.header().setKeyCount(count);
    b.header().setKeyCoding(2);
    b.header().setKeysOf(of);
    b.header().setValueCount(count * 2);
    b.header().setWeight(1);
    b.AddFrame(Frame());
    b.AddFrame(Frame::Own(std::vector<float>(count * 2, 1.0f)));
    return b.Finish();
  };
  h.Send(0, reuse(9, 5, 2, wire::MsgType::PUSH));
  h.Send(0, reuse(10, 4, 2, wire::MsgType::PUSH));
  h.Send(0, reuse(11, 5, 3, wire::MsgType::PUSH));
  h.Send(0, reuse(12, 5, 2, wire::MsgType::PULL));
  h.Send(0, SparsePull(0, 13, {5, 9}, 10));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // declare
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // push
  RowTable copy(2, 0);
  auto decode = [&](Message& reply, const std::vector<uint64_t>& keys) {
    EXPECT_EQ(reply.header().getType(), wire::MsgType::REPLY) << reply.header().getMessage().cStr();
    EXPECT_EQ(reply.payload_count(), 3u);
    std::vector<uint64_t> evicted;
    const Frame& e = reply.payload(2);
    EXPECT_TRUE(DecodeKeys(std::span<const std::byte>(e.data(), e.size()),
                           reply.header().getKeyCount(), &evicted)
                    .ok());
    std::vector<float> out(keys.size() * 2);
    const Frame& f = reply.payload(0);
    const Frame& b = reply.payload(1);
    EXPECT_TRUE(DecodePull(CodecKind::kTopK, keys, std::span<const std::byte>(f.data(), f.size()),
                           std::span<const std::byte>(b.data(), b.size()), evicted, &copy, out)
                    .ok());
    return std::make_pair(out, evicted);
  };
  auto first = h.Reply(0);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->payload(0).size(), 4 * sizeof(float));  // both rows new: sent whole
  EXPECT_EQ(decode(*first, {5, 9}).first, (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // push
  auto second = h.Reply(0);
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->payload(0).size(), 0u);
  // Deltas (1, 0, 0, 8): top-2 sends 8 and then 1.
  EXPECT_EQ(decode(*second, {5, 9}).first, (std::vector<float>{0, -2, -3, 4}));
  auto third = h.Reply(0);
  ASSERT_TRUE(third.has_value());
  const auto [rows, evicted] = decode(*third, {20});
  EXPECT_EQ(rows, (std::vector<float>{0, 0}));
  EXPECT_EQ(evicted, (std::vector<uint64_t>{5}));
  EXPECT_FALSE(copy.Contains(5));
  auto plain = h.Reply(0);
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(ValuesOf(*plain), (std::vector<float>{0, -2}));
  auto refused = h.Reply(0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->header().getType(), wire::MsgType::ERROR);
  EXPECT_THAT(std::string(refused->header().getMessage().cStr()), HasSubstr("--compress-pull"));
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);  // the push reusing keys
  for (const char* why : {"not among w0's last 4 pulls", "says 3", "only a push"}) {
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);
    EXPECT_THAT(std::string(reply->header().getMessage().cStr()), HasSubstr(why));
  }
  auto after = h.Reply(0);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(ValuesOf(*after), (std::vector<float>{-1, -3, -4, 3}));  // (0, -2, -3, 4) - 1
}

// A worker lost under BSP in the middle of clock 1: what it pushed for clock 1 is dropped (its
// batch goes to another worker), what it finished (clock 0) stays, and the others go on.
TEST(ParameterServerTest, UnderBspALostWorkersUnfinishedClockIsDropped) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 0});
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, SparsePush(0, 2, {5}, {2, 4}, 0, 2));
  h.Send(1, SparsePush(1, 2, {5}, {6, 8}, 0, 6));
  h.Send(0, Clock(0, 1, 2));
  h.Send(1, Clock(1, 1, 6));
  // Clock 1: w1 pushes and is lost before it finishes the clock.
  h.Send(0, SparsePush(0, 3, {5}, {1, 1}, 1, 1));
  h.Send(1, SparsePush(1, 3, {5}, {100, 100}, 1, 1));
  h.Send(0, Clock(0, 2, 1));
  h.Send(0, SparsePull(0, 4, {5}, 2));
  h.Serve();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(h.Reply(0).has_value());  // declare and two acks
  EXPECT_FALSE(h.Reply(0).has_value()) << "the pull of clock 2 waits for w1";
  h.server().RemoveWorker(1);
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  // Clock 0: -(8, 12) / 8 = (-1, -1.5); clock 1: w0's (1, 1) over its 1 example only.
  EXPECT_EQ(ValuesOf(*reply), (std::vector<float>{-2.0f, -2.5f}));
  EXPECT_EQ(h.server().stats().examples_trained, 9.0);
}

TEST(ParameterServerTest, ConflictingDeclarationIsRefused) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  TableConfig c = SparseTable();
  h.Send(0, Declare(0, c));
  h.Send(0, Declare(0, c));  // identical: fine
  c.dim = 3;
  h.Send(0, Declare(0, c));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  auto conflict = h.Reply(0);
  EXPECT_EQ(conflict->header().getType(), wire::MsgType::ERROR);
  EXPECT_EQ(StatusFromHeader(conflict->header()).code(), absl::StatusCode::kFailedPrecondition);
}

// Until it joins, a joiner's slot holds nobody back; once it has (at its first clock), a BSP
// read past that clock waits for the joiner's CLOCK like for any worker's.
TEST(ParameterServerTest, AJoinerEntersTheBspClockSetAtItsFirstClock) {
  ServerHarness h(
      {.rank = 0, .num_servers = 1, .num_workers = 1, .max_workers = 2, .staleness = 0});
  auto replied = [&](uint64_t id) {
    h.Serve();
    while (auto r = h.Reply(0)) {
      if (r->header().getRequestId() == id) return true;
    }
    return false;
  };
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, Clock(0, 1, 1));
  h.Send(0, Clock(0, 2, 1));
  h.Send(0, SparsePull(0, 10, {1}, 2));
  EXPECT_TRUE(replied(10));  // w1 has not joined: w0 alone is the clock set
  ASSERT_TRUE(h.server().AddWorker(1, 2).ok());
  EXPECT_FALSE(h.server().AddWorker(1, 2).ok());  // once
  EXPECT_FALSE(h.server().AddWorker(0, 2).ok());  // a first worker never joins
  h.Send(0, Clock(0, 3, 1));
  h.Send(0, SparsePull(0, 11, {1}, 3));
  EXPECT_FALSE(replied(11));  // waits for w1 to finish its first iteration
  h.Send(1, Declare(1, SparseTable()));
  h.Send(1, Clock(1, 3, 1));
  EXPECT_TRUE(replied(11));
}

TEST(ParameterServerTest, FinishedWorkersDoNotHoldOthersBack) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 0});
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, Clock(0, 1, 1));
  h.Send(0, SparsePull(0, 2, {1}, 1));
  h.Serve();
  (void)h.Reply(0);
  EXPECT_FALSE(h.Reply(0).has_value());
  h.server().RemoveWorker(1);
  auto released = h.Reply(0);
  ASSERT_TRUE(released.has_value());
  EXPECT_EQ(released->header().getRequestId(), 2u);
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// Time-based checkpoints: a requested clock ahead of the workers is taken when they all reach
// it; one they have passed is reported missed; one they are at is taken at once.
TEST(ParameterServerTest, RequestedCheckpointsAreTakenAtTheirClockOrReportedMissed) {
  const std::string root = testing::TempDir() + "requested_ckpt_" + std::to_string(getpid());
  std::filesystem::remove_all(root);
  std::mutex mu;
  std::vector<std::pair<int64_t, absl::StatusCode>> reports;
  ServerOptions options{.num_workers = 2, .staleness = 0};
  options.checkpoint_root = root;
  options.on_checkpoint = [&](int64_t clock, const absl::Status& s) {
    std::lock_guard lock(mu);
    reports.emplace_back(clock, s.code());
  };
  {
    ServerHarness h(options);
    TableConfig c;
    c.id = 1;
    c.dense = false;
    c.dim = 2;
    h.Send(0, Declare(0, c));
    h.Serve();
    h.server().RequestCheckpoint(2);  // ahead
    for (int64_t clock = 1; clock <= 3; ++clock) {
      h.Send(0, Clock(0, clock, 1));
      h.Send(1, Clock(1, clock, 1));
      h.Serve();
      if (clock == 2) h.server().RequestCheckpoint(1);  // passed: missed
      if (clock == 3) h.server().RequestCheckpoint(3);  // just reached: taken now
    }
    h.server().RequestCheckpoint(7);
    h.Send(0, Message(Request(wire::MsgType::FINISH, 0, 9).Finish()));
    h.Send(1, Message(Request(wire::MsgType::FINISH, 1, 9).Finish()));
    h.Serve();  // every worker finished: 7 can never be reached
    h.server().WaitForCheckpoints();
  }
  std::sort(reports.begin(), reports.end());
  const std::vector<std::pair<int64_t, absl::StatusCode>> expected = {
      {1, absl::StatusCode::kFailedPrecondition},
      {2, absl::StatusCode::kOk},
      {3, absl::StatusCode::kOk},
      {7, absl::StatusCode::kFailedPrecondition}};
  EXPECT_EQ(reports, expected);
  EXPECT_TRUE(std::filesystem::exists(CheckpointDir(root, 2) + "/ps0.receipt"));
  EXPECT_TRUE(std::filesystem::exists(CheckpointDir(root, 3) + "/ps0.receipt"));
  std::filesystem::remove_all(root);
}

TEST(ParameterServerTest, RefusesNonFinitePushesNamingTableAndSenderAndKeepsTheTable) {
  for (int64_t staleness : {int64_t{0}, int64_t{-1}}) {
    SCOPED_TRACE(staleness == 0 ? "bsp" : "asp");
    ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = staleness});
    h.Send(0, Declare(0, SparseTable()));
    h.Serve();
    ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      h.Send(0, SparsePush(0, 2, {5, 6}, {1, 2, bad, 4}, 0, 1));
      h.Serve();
      auto reply = h.Reply(0);
      ASSERT_TRUE(reply.has_value());
      EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);
      const std::string message = reply->header().getMessage().cStr();
      EXPECT_NE(message.find("table 1: push from w0 holds a non-finite value"), std::string::npos)
          << message;
      EXPECT_NE(message.find("index 2"), std::string::npos) << message;
    }
    h.Send(0, Clock(0, 1, 1));
    h.Send(0, SparsePull(0, 3, {5, 6}, 1));
    h.Serve();
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(ValuesOf(*reply), (std::vector<float>{0, 0, 0, 0})) << "a refused push changed rows";
    EXPECT_EQ(h.server().stats().rejected, 3u);
  }
}

TEST(ParameterServerTest, AClockThatJumpsIsRefusedAndTheServerGoesOn) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  const absl::Time start = absl::Now();
  h.Send(0, Clock(0, int64_t{1} << 62, 1));
  h.Serve();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2)) << "the server walked the jumped clocks";
  auto error = h.Reply(0);
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->header().getType(), wire::MsgType::ERROR);
  EXPECT_NE(std::string(error->header().getMessage().cStr()).find("one iteration at a time"),
            std::string::npos);
  h.Send(0, Clock(0, 1, 1));
  h.Send(0, SparsePull(0, 3, {5}, 1));
  h.Serve();
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header().getType(), wire::MsgType::REPLY);
}

TEST(ParameterServerTest, ADenseSpecWhoseSizeWrapsAroundIsRefused) {
  TableConfig c;
  c.id = 9;
  c.dense = true;
  c.num_keys = (uint64_t{1} << 48) + 1;  // times 2^16 wraps to 2^16 in 64 bits
  c.dim = 1 << 16;
  capnp::MallocMessageBuilder message;
  auto spec = message.initRoot<wire::TableSpec>();
  c.ToWire(spec);
  absl::StatusOr<TableConfig> back = TableConfig::FromWire(spec.asReader());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("a dense table needs 1 to 2^34 values"),
            std::string::npos);

  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1});
  h.Send(0, Declare(0, c));
  h.Serve();
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);

  // A shard numbers its rows in 32 bits: a bound above that would let them alias.
  TableConfig many = SparseTable();
  many.max_rows = uint64_t{1} << 33;
  auto sparse = message.initRoot<wire::TableSpec>();
  many.ToWire(sparse);
  back = TableConfig::FromWire(sparse.asReader());
  ASSERT_FALSE(back.ok());
  EXPECT_NE(back.status().message().find("above a shard's limit"), std::string::npos);
}

TEST(ParameterServerTest, APullWhoseReplyWouldExceedTheLimitIsRefusedNamingIt) {
  ServerOptions options{.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1};
  options.max_reply_bytes = 1 << 20;
  ServerHarness h(options);
  TableConfig wide = SparseTable();
  wide.dim = 1 << 16;  // 256 KiB a row: a pull of 8 bytes a key asks for 32768 times that
  h.Send(0, Declare(0, wide));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  h.Send(0, SparsePull(0, 2, {1, 2, 3, 4, 5}, 0));
  h.Serve();
  auto refused = h.Reply(0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->header().getType(), wire::MsgType::ERROR);
  EXPECT_NE(std::string(refused->header().getMessage().cStr()).find("max_reply_bytes"),
            std::string::npos);
  h.Send(0, SparsePull(0, 3, {1, 2}, 0));  // 512 KiB: within the limit
  h.Serve();
  auto answered = h.Reply(0);
  ASSERT_TRUE(answered.has_value());
  EXPECT_EQ(answered->header().getType(), wire::MsgType::REPLY);
}

TEST(ParameterServerTest, ADeclarationOfADenseTableTooLargeForTheShardIsRefusedNamingTheLimit) {
  ServerOptions options{.rank = 0, .num_servers = 2, .num_workers = 1, .staleness = -1};
  options.max_dense_table_bytes = 1 << 20;
  ServerHarness h(options);
  TableConfig big;
  big.id = 4;
  big.dense = true;
  big.num_keys = 1 << 20;  // this shard's half: 2^19 floats and as many Adagrad accumulators
  big.optimizer.kind = OptimizerKind::kAdagrad;
  h.Send(0, Declare(0, big));
  h.Serve();
  auto reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header().getType(), wire::MsgType::ERROR);
  EXPECT_NE(std::string(reply->header().getMessage().cStr()).find("needs 4 MiB"), std::string::npos)
      << reply->header().getMessage().cStr();
  big.num_keys = 1 << 16;
  h.Send(0, Declare(0, big));
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
}

// Declarations are small messages that make a server allocate: the tables together are
// bounded (--max-table-memory), and so are the embedding stores (--max-stores), each a RocksDB
// with its memory and descriptors (the audit's 1,000 declarations took 1.24 GB).
TEST(ParameterServerTest, DeclaredTablesAreBoundedInAllByBytesAndStores) {
  ServerOptions options{.rank = 0, .num_servers = 1, .num_workers = 1, .staleness = -1};
  options.max_table_bytes = 3 << 20;
  const std::string root = testing::TempDir() + "declared_stores_" + std::to_string(getpid());
  std::filesystem::remove_all(root);
  options.embedding.emplace();
  options.embedding->path = root;
  options.max_stores = 3;
  ServerHarness h(options);
  const auto declare = [&h](TableConfig c) {
    h.Send(0, Declare(0, c));
    h.Serve();
    auto reply = h.Reply(0);
    EXPECT_TRUE(reply.has_value());
    return reply.has_value() && reply->header().getType() == wire::MsgType::ERROR
               ? std::string(reply->header().getMessage().cStr())
               : std::string();
  };
  // Declares `count` tables like `c` with ids from `first`, then one more: its error.
  const auto declare_past = [&](TableConfig c, uint32_t first, uint32_t count) {
    for (uint32_t i = 0; i < count; ++i) {
      c.id = first + i;
      EXPECT_EQ(declare(c), "") << c.id;
    }
    c.id = first + count;
    return declare(c);
  };
  TableConfig dense;
  dense.dense = true;
  dense.num_keys = 1 << 18;  // 1 MiB of floats with SGD: each alone is far below the limit
  const std::string too_much = declare_past(dense, 10, 3);
  EXPECT_THAT(too_much, HasSubstr("the tables declared before hold 3 MiB"));
  EXPECT_THAT(too_much, HasSubstr("--max-table-memory"));
  const std::string stores = declare_past(SparseTable(), 20, 3);
  EXPECT_THAT(stores, HasSubstr("3 embedding stores open"));
  EXPECT_THAT(stores, HasSubstr("--max-stores"));
  EXPECT_FALSE(std::filesystem::exists(root + "/table-23"));
  std::filesystem::remove_all(root);
}

TEST(ParameterServerTest, UnderBspAPushForAFarFutureClockIsRefused) {
  ServerHarness h({.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 0});
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  h.Send(0, SparsePush(0, 2, {5}, {1, 1}, 1000, 1));
  h.Serve();
  auto refused = h.Reply(0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->header().getType(), wire::MsgType::ERROR);
  EXPECT_NE(std::string(refused->header().getMessage().cStr()).find("has finished only 0"),
            std::string::npos);
  h.Send(0, SparsePush(0, 3, {5}, {1, 1}, 0, 1));  // the iteration in progress
  h.Serve();
  EXPECT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
}

// A worker that stops reading its replies fills its queue; the server keeps its further
// replies in a backlog instead of waiting on the queue (which used to stall the one server
// thread up to 10 s per reply), serves the other workers at once, and delivers the backlog in
// order once the worker reads again.
// An ASP server of two workers that have declared SparseTable(), with mailboxes of `capacity`
// messages and the given backlog limit.
std::unique_ptr<ServerHarness> AspPairWithSmallMailboxes(size_t capacity, uint64_t backlog_bytes) {
  ServerOptions o;
  o.num_workers = 2;
  o.staleness = -1;
  o.max_reply_backlog_bytes = backlog_bytes;
  auto h = std::make_unique<ServerHarness>(o, capacity);
  for (int w = 0; w < 2; ++w) {
    h->Send(w, Declare(w, SparseTable()));
    h->Serve();
    EXPECT_TRUE(h->Reply(w).has_value());
  }
  return h;
}

TEST(ParameterServerTest, APeerThatStopsReadingNeitherStallsTheServerNorLosesItsReplies) {
  auto harness = AspPairWithSmallMailboxes(4, ServerOptions().max_reply_backlog_bytes);
  ServerHarness& h = *harness;
  // Twelve pulls of w1, four at a time (the server's own queue holds four), none read.
  for (uint64_t i = 0; i < 12; ++i) {
    h.Send(1, SparsePull(1, 100 + i, {i}, 0));
    if (i % 4 == 3) h.Serve();
  }
  EXPECT_EQ(h.server().stats().replies_backlogged, 8u);  // w1's queue took four
  for (uint64_t i = 0; i < 5; ++i) {
    const absl::Time start = absl::Now();
    h.Send(0, SparsePull(0, 200 + i, {1}, 0));
    h.Serve();
    std::optional<Message> reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value()) << "w0's pull " << i;
    EXPECT_EQ(reply->header().getRequestId(), 200 + i);
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  }
  for (uint64_t i = 0; i < 12; ++i) {
    h.Serve();  // the backlog moves as the queue empties
    std::optional<Message> reply = h.Reply(1);
    ASSERT_TRUE(reply.has_value()) << "w1's reply " << i;
    EXPECT_EQ(reply->header().getRequestId(), 100 + i);
    EXPECT_EQ(ValuesOf(*reply).size(), 2u);
  }
  EXPECT_EQ(h.server().stats().replies_dropped, 0u);
}

// Past the backlog's byte limit the stuck worker's replies are dropped, counted, and the
// server goes on serving the others.
TEST(ParameterServerTest, ABacklogPastItsLimitIsDroppedAndTheServerGoesOn) {
  auto harness = AspPairWithSmallMailboxes(2, /*backlog_bytes=*/1);
  ServerHarness& h = *harness;
  for (uint64_t i = 0; i < 6; ++i) {
    h.Send(1, SparsePull(1, 100 + i, {i}, 0));
    if (i % 2 == 1) h.Serve();
  }
  EXPECT_EQ(h.server().stats().replies_dropped, 4u);
  h.Send(0, SparsePull(0, 7, {1}, 0));
  h.Serve();
  std::optional<Message> reply = h.Reply(0);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->header().getRequestId(), 7u);
}

// Parked pulls are weighed, per peer, by their requests and the replies they will need; a
// pull past the limit is refused naming it, and the weight goes when the pulls are answered.
TEST(ParameterServerTest, ParkedPullsAreWeighedPerPeerAndBoundedByBytes) {
  ServerOptions o{.rank = 0, .num_servers = 1, .num_workers = 2, .staleness = 0};
  o.max_parked_bytes_per_peer = 20000;
  ServerHarness h(o);
  h.Send(0, Declare(0, SparseTable()));
  h.Send(0, Clock(0, 1, 1));
  std::vector<uint64_t> many(1000);
  for (uint64_t i = 0; i < many.size(); ++i) many[i] = i;
  h.Send(0, SparsePull(0, 2, many, 1));    // 8 KB of keys and 8 KB of reply: parked
  h.Send(0, SparsePull(0, 3, many, 1));    // another 16 KB: over the 20 KB
  h.Send(0, SparsePull(0, 4, {5, 6}, 1));  // small enough to wait too
  h.Serve();
  ASSERT_TRUE(h.Reply(0).has_value());  // declare
  auto refused = h.Reply(0);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->header().getRequestId(), 3u);
  EXPECT_EQ(refused->header().getType(), wire::MsgType::ERROR);
  const std::string why = refused->header().getMessage().cStr();
  EXPECT_NE(why.find("max_parked_bytes_per_peer"), std::string::npos) << why;
  EXPECT_NE(why.find("--max-parked"), std::string::npos) << why;
  EXPECT_NE(why.find("w0"), std::string::npos) << why;
  EXPECT_FALSE(h.Reply(0).has_value());
  h.Send(1, Clock(1, 1, 1));  // the slowest worker moves: both parked pulls are answered
  h.Serve();
  for (uint64_t id : {2u, 4u}) {
    auto reply = h.Reply(0);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->header().getRequestId(), id);
  }
  // Their weight is gone: the same large pull parks again.
  h.Send(0, Clock(0, 2, 1));
  h.Send(0, SparsePull(0, 5, many, 2));
  h.Serve();
  EXPECT_FALSE(h.Reply(0).has_value());
  h.Send(1, Clock(1, 2, 1));
  h.Serve();
  auto late = h.Reply(0);
  ASSERT_TRUE(late.has_value());
  EXPECT_EQ(late->header().getRequestId(), 5u);
  EXPECT_EQ(ValuesOf(*late).size(), 2000u);
}

// Federated rounds: every client is picked (participation 1). Round 0: w0 answers, w1 pushes
// but never ends the round, and w2 sends nothing; the round closes at its timeout without w1
// and w2, whose push is dropped: the model moves by w0's update alone. w1's late clock is
// acknowledged, counted and ignored, and round 1 waits for all three again.
TEST(ParameterServerTest, AFederatedRoundClosesAtItsTimeoutWithTheClientsThatAnswered) {
  ServerOptions o{.rank = 0, .num_servers = 1, .num_workers = 3, .staleness = 0};
  o.federated =
      ServerOptions::Federated{.participation = 1, .round_timeout = absl::Seconds(1), .seed = 1};
  ServerHarness h(o);
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  // Deltas as the clients send them: n * (w_round - w_local), weight n.
  h.Send(0, SparsePush(0, 2, {5}, {2, 4}, 0, 2));
  h.Send(0, Clock(0, 1, 2));
  h.Send(1, SparsePush(1, 2, {5}, {600, 800}, 0, 6));
  h.Send(2, SparsePull(2, 3, {5}, 1));  // w2 waits for round 1's model
  h.Serve();
  ASSERT_TRUE(h.Reply(0).has_value());   // the push's ack
  ASSERT_TRUE(h.Reply(1).has_value());   // the push's ack
  EXPECT_FALSE(h.Reply(2).has_value());  // parked: round 0 is open
  EXPECT_EQ(h.server().stats().rounds, 0u);
  absl::SleepFor(absl::Milliseconds(1100));
  h.Serve();
  EXPECT_EQ(h.server().stats().rounds, 1u);
  EXPECT_EQ(h.server().stats().rounds_short, 1u);
  EXPECT_EQ(h.server().stats().clients_missing, 2u);
  EXPECT_EQ(h.server().stats().short_rounds, std::vector<int64_t>{0});
  auto model = h.Reply(2);
  ASSERT_TRUE(model.has_value());
  // Only w0's delta: lr 1 * (2, 4) / 2 examples; w1's push went with its round.
  EXPECT_EQ(ValuesOf(*model), (std::vector<float>{-1, -2}));

  // w1's clock for round 0 comes late: acknowledged by silence, counted, nothing changes.
  h.Send(1, Clock(1, 1, 6));
  h.Send(1, SparsePush(1, 4, {5}, {100, 100}, 0, 6));
  h.Serve();
  EXPECT_EQ(h.server().stats().updates_late, 1u);
  EXPECT_EQ(h.server().stats().rejected, 0u);
  ASSERT_TRUE(h.Reply(1).has_value());  // the late push's ack
  // Round 1 waits for every client again: two of three answering leaves it open.
  for (int w : {0, 1}) {
    h.Send(w, SparsePush(w, 5, {5}, {1, 1}, 1, 1));
    h.Send(w, Clock(w, 2, 1));
  }
  h.Serve();
  EXPECT_EQ(h.server().stats().rounds, 1u);
  h.Send(2, SparsePush(2, 6, {5}, {1, 1}, 1, 1));
  h.Send(2, Clock(2, 2, 1));
  h.Serve();
  EXPECT_EQ(h.server().stats().rounds, 2u);
  EXPECT_EQ(h.server().stats().rounds_short, 1u);
  h.Send(0, SparsePull(0, 7, {5}, 2));
  h.Serve();
  std::optional<Message> latest;  // after the push's ack
  while (auto r = h.Reply(0)) latest = std::move(r);
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(ValuesOf(*latest), (std::vector<float>{-2, -3}));
}

// --secure-aggregation through the server: three clients run the five stages as secAgg
// requests; the server answers each stage when all are in, applies the unmasked sum of their
// quantised updates over their summed examples, and closes the round once they clock.
TEST(ParameterServerTest, ASecureAggregationRoundAppliesTheUnmaskedSum) {
  const SecAggParams p{.clients = 3, .threshold = 2, .bits = 20, .clip = 8};
  ServerOptions o{.rank = 0, .num_servers = 1, .num_workers = 3, .staleness = 0};
  o.federated =
      ServerOptions::Federated{.participation = 1, .round_timeout = absl::Seconds(30), .seed = 1};
  o.federated->secagg = p;
  ServerHarness h(o);
  TableConfig dense;  // keys 0 and 1, SGD at lr 1
  dense.id = 3, dense.dense = true, dense.num_keys = 2, dense.optimizer.learning_rate = 1.0f;
  h.Send(0, Declare(0, dense));
  h.Serve();
  ASSERT_EQ(h.Reply(0)->header().getType(), wire::MsgType::REPLY);
  // Updates n * (w_r - w_local) and examples n.
  const std::vector<std::vector<float>> updates = {{1.5f, -2}, {0.25f, 4}, {-3, 0.5f}};
  const std::vector<uint32_t> examples = {2, 3, 5};
  std::vector<SecAggClientRound> clients;
  std::vector<SecAggPacket> requests;
  for (int w = 0; w < 3; ++w) {
    auto r = SecAggClientRound::Create(p, w + 1, 0);
    ASSERT_TRUE(r.ok()) << r.status();
    clients.push_back(std::move(*r));
    requests.push_back(clients.back().Advertise());
  }
  for (int stage = 0; stage < kSecAggStages; ++stage) {
    for (int w = 0; w < 3; ++w) {
      auto b = Request(wire::MsgType::SEC_AGG, w, 10 + stage, static_cast<uint32_t>(stage));
      b.header().setClock(0);
      b.AddFrame(Frame::Copy(requests[w].body.data(), requests[w].body.size()));
      if (!requests[w].values.empty()) {
        b.AddFrame(Frame::Copy(requests[w].values.data(), requests[w].values.size() * 4));
      }
      h.Send(w, b.Finish());
    }
    h.Serve();
    for (int w = 0; w < 3; ++w) {
      auto reply = h.Reply(w);
      ASSERT_TRUE(reply.has_value()) << "stage " << stage << ", w" << w;
      ASSERT_EQ(reply->header().getType(), wire::MsgType::REPLY)
          << reply->header().getMessage().cStr();
      SecAggPacket answer{.stage = static_cast<SecAggStage>(stage)};
      answer.body.assign(reinterpret_cast<const char*>(reply->payload(0).data()),
                         reply->payload(0).size());
      absl::StatusOr<SecAggPacket> next;
      switch (answer.stage) {
        case SecAggStage::kAdvertise:
          next = clients[w].OnKeys(answer);
          break;
        case SecAggStage::kShareKeys: {
          DpRandom rounding(DpKeyFromSeed(1), DpStream::kRounding, {static_cast<uint64_t>(w)});
          std::vector<uint32_t> input = SecAggQuantise(updates[w], p, rounding);
          input.push_back(examples[w]);
          next = clients[w].OnShares(answer, input);
          break;
        }
        case SecAggStage::kMaskedInput:
          next = clients[w].OnSurvivors(answer);
          break;
        case SecAggStage::kConsistency:
          next = clients[w].OnSignatures(answer);
          break;
        case SecAggStage::kUnmask:
          next = SecAggPacket{};
          break;
      }
      ASSERT_TRUE(next.ok()) << next.status();
      requests[w] = std::move(*next);
    }
  }
  EXPECT_EQ(h.server().stats().rounds, 0u);  // open until its clients clock
  for (int w = 0; w < 3; ++w) h.Send(w, Clock(w, 1, 0));
  h.Serve();
  EXPECT_EQ(h.server().stats().rounds, 1u);
  EXPECT_EQ(h.server().stats().rounds_short, 0u);
  EXPECT_EQ(h.server().stats().examples_trained, 10.0);
  auto b = Request(wire::MsgType::PULL, 0, 20, 3);
  b.header().setRangeBegin(0);
  b.header().setRangeEnd(2);
  b.header().setClock(1);
  h.Send(0, b.Finish());
  h.Serve();
  auto model = h.Reply(0);
  ASSERT_TRUE(model.has_value());
  // SGD at lr 1 on the summed update over 10 examples, to the quantisation: 3 clients, each
  // off by less than a step of 2 * 8 / (2^20 - 1) (stochastic rounding).
  const std::vector<float> got = ValuesOf(*model);
  const double step = 16.0 / ((1 << 20) - 1);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_NEAR(got[0], -(1.5 + 0.25 - 3) / 10, 3 * step / 10 + 1e-7);
  EXPECT_NEAR(got[1], -(-2 + 4 + 0.5) / 10, 3 * step / 10 + 1e-7);
}

// Under BSP with the median, one worker's huge update does not move the model.
TEST(ParameterServerTest, BspWithTheMedianIgnoresAnOutlyingWorker) {
  ServerOptions o{.rank = 0, .num_servers = 1, .num_workers = 3, .staleness = 0};
  o.aggregate = AggregateRule{.kind = AggregateKind::kMedian};
  ServerHarness h(o);
  h.Send(0, Declare(0, SparseTable()));
  h.Serve();
  ASSERT_TRUE(h.Reply(0).has_value());
  // Per example: w0 (1, 1), w1 (3, 2), w2 (1000, -1000); key 9 only in w0's and w2's.
  h.Send(0, SparsePush(0, 2, {5, 9}, {2, 2, 4, 4}, 0, 2));
  h.Send(1, SparsePush(1, 2, {5}, {12, 8}, 0, 4));
  h.Send(2, SparsePush(2, 2, {5, 9}, {1000, -1000, 2, 2}, 0, 1));
  for (int w = 0; w < 3; ++w) h.Send(w, Clock(w, 1, w == 0 ? 2 : (w == 1 ? 4 : 1)));
  h.Send(0, SparsePull(0, 3, {5, 9}, 1));
  h.Serve();
  std::optional<Message> latest;
  while (auto r = h.Reply(0)) latest = std::move(r);
  ASSERT_TRUE(latest.has_value());
  // Key 5: median of (1, 3, 1000) and of (1, 2, -1000) = (3, 1). Key 9: median of two
  // updates, (2, 2) and (2, 2): (2, 2).
  EXPECT_EQ(ValuesOf(*latest), (std::vector<float>{-3, -1, -2, -2}));
}

}  // namespace
}  // namespace syncline
