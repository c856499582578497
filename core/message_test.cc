#include "core/message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "capnp/message.h"
#include "capnp/serialize.h"
#include "kj/string.h"

namespace syncline {
namespace {

TEST(MessageTest, RoundTripsHeaderAndFrames) {
  MessageBuilder b(wire::MsgType::PUSH);
  b.header().setTable(7);
  b.header().setClock(42);
  std::vector<uint64_t> keys = {1, 2, 3};
  b.AddFrame(Frame::Own(std::move(keys)));
  Message m = b.Finish();
  ASSERT_EQ(m.payload_count(), 1u);
  ASSERT_TRUE(m.Parse().ok());
  EXPECT_EQ(m.header().getType(), wire::MsgType::PUSH);
  EXPECT_EQ(m.header().getTable(), 7u);
  EXPECT_EQ(m.header().getClock(), 42);
  auto k = m.payload(0).As<uint64_t>();
  ASSERT_TRUE(k.ok());
  EXPECT_EQ((*k)[2], 3u);
}

TEST(MessageTest, RejectsMissingOrOddHeaders) {
  Message empty;
  EXPECT_EQ(empty.Parse().code(), absl::StatusCode::kInvalidArgument);
  Message odd;
  odd.frames().push_back(Frame::Copy("abc", 3));
  EXPECT_EQ(odd.Parse().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MessageTest, RandomBytesNeverCrashTheParser) {
  const uint64_t seed = 20261129;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  int accepted = 0;
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint64_t> words(1 + rng() % 16);
    for (auto& w : words) w = rng();
    // Half the time give it a plausible segment table so that deeper checks run, and a
    // quarter of the time a plausible root pointer too (a struct right after it).
    if (i % 2 == 0) words[0] = (static_cast<uint64_t>(words.size() - 1) << 32);
    if (i % 4 == 0 && words.size() > 1) {
      words[1] =
          (static_cast<uint64_t>(rng() % 4) << 32) | (static_cast<uint64_t>(rng() % 3) << 48);
    }
    Message m;
    m.frames().push_back(Frame::Own(std::move(words)));
    if (m.Parse().ok()) {
      ++accepted;
      // Reading every field of an accepted header, whatever its body, must be safe too:
      // stringifying walks them all.
      EXPECT_NO_THROW((void)kj::str(m.header())) << "accepted header " << i << " throws";
    }
  }
  // Random words are rarely a valid header; some are (a zero root pointer is an empty struct).
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, 5000);
}

// Every body kind, cut at every length: Parse either refuses the header, or every field of it
// can then be read without an exception (each kind used to be read later without a check).
TEST(MessageTest, AParsedHeaderOfAnyBodyReadsWithoutThrowing) {
  std::vector<Message> bodies;
  auto add = [&](auto fill) {
    MessageBuilder b(wire::MsgType::PROGRESS);
    b.header().setMessage("some text");
    fill(b.header().getBody());
    bodies.push_back(b.Finish());
  };
  add([](auto body) { body.initRegister().setHost("host-name"); });
  add([](auto body) {
    auto t = body.initNodeTable();
    t.initNodes(2)[1].setAddress("tcp://127.0.0.1:1");
    t.initJob().setTrain("/data/train.libsvm");
    t.setVersion("0.1.0");
  });
  add([](auto body) { body.initProgress().setClock(7); });
  add([](auto body) { body.initWorkerStats().setSteps(3); });
  add([](auto body) { body.initEvaluation().setLoss(0.5); });
  add([](auto body) {
    auto s = body.initServerStats();
    s.initStalenessHistogram(4).set(2, 9);
    s.initEmbedding().setRowsInMemory(11);
  });
  add([](auto body) { body.initNodeDown().setReason("gone"); });
  add([](auto body) { body.initTable().setNumKeys(100); });
  int refused = 0, accepted = 0;
  for (Message& full : bodies) {
    ASSERT_TRUE(full.Parse().ok());
    // One segment, so that cutting it cuts the header's tail.
    capnp::MallocMessageBuilder copy;
    copy.setRoot(full.header());
    kj::Array<capnp::word> flat = capnp::messageToFlatArray(copy);
    const auto* head = reinterpret_cast<const std::byte*>(flat.begin());
    const auto* words = reinterpret_cast<const uint32_t*>(head);
    ASSERT_EQ(words[0], 0u) << "one segment";
    const uint32_t segment_words = words[1];
    for (uint32_t cut = 1; cut <= segment_words; ++cut) {
      // The segment table claims `cut` words, and the frame holds just those.
      std::vector<std::byte> bytes(head, head + 8 + cut * 8);
      const uint32_t size = cut;
      std::memcpy(bytes.data() + 4, &size, 4);
      Message m;
      m.frames().push_back(Frame::Copy(bytes.data(), bytes.size()));
      if (!m.Parse().ok()) {
        ++refused;
        continue;
      }
      ++accepted;
      EXPECT_NO_THROW((void)kj::str(m.header()))
          << "body " << static_cast<int>(full.header().getBody().which()) << " cut at " << cut;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(accepted, 0);
}

TEST(MessageTest, ALargeTextReadsTwiceAfterParse) {
  MessageBuilder b(wire::MsgType::ERROR);
  b.header().setMessage(std::string(900 * 1024, 'x'));  // most of the 1 MiB header limit
  Message sent = b.Finish();
  Message m;
  m.frames().push_back(Frame::Copy(sent.frames()[0].data(), sent.frames()[0].size()));
  ASSERT_TRUE(m.Parse().ok());
  EXPECT_NO_THROW({
    EXPECT_EQ(m.header().getMessage().size(), 900u * 1024);
    EXPECT_EQ(m.header().getMessage().size(), 900u * 1024);
  });
}

TEST(MessageTest, TruncatedHeaderIsRejected) {
  MessageBuilder b(wire::MsgType::ERROR);
  b.header().setMessage(std::string(200, 'x'));
  Message full = b.Finish();
  Message cut;
  cut.frames().push_back(Frame::Copy(full.frames()[0].data(), full.frames()[0].size() - 64));
  EXPECT_FALSE(cut.Parse().ok());
}

TEST(MessageTest, MisalignedFramesAreCopiedBeforeTypedAccess) {
  std::vector<std::byte> bytes(1 + 3 * sizeof(float));
  const float values[3] = {1.5f, -2.0f, 3.25f};
  std::memcpy(bytes.data() + 1, values, sizeof(values));
  auto owner = std::make_shared<std::vector<std::byte>>(std::move(bytes));
  Frame f = Frame::Shared(owner, owner->data() + 1, 3 * sizeof(float));
  auto typed = f.As<float>();
  ASSERT_TRUE(typed.ok());
  EXPECT_EQ((*typed)[1], -2.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(typed->data()) % alignof(float), 0u);
  Frame g = Frame::Copy(values, 5);
  EXPECT_FALSE(g.As<float>().ok());
}

TEST(MessageTest, ErrorRepliesCarryTheStatus) {
  MessageBuilder b(wire::MsgType::PULL);
  b.header().setRequestId(9);
  Message req = b.Finish();
  ASSERT_TRUE(req.Parse().ok());
  Message reply = MakeErrorReply(req.header(), absl::NotFoundError("unknown table 3"));
  ASSERT_TRUE(reply.Parse().ok());
  EXPECT_EQ(reply.header().getRequestId(), 9u);
  absl::Status s = StatusFromHeader(reply.header());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "unknown table 3");
  EXPECT_STREQ(MsgTypeName(wire::MsgType::PUSH_PULL), "pushPull");
}

TEST(MessageTest, CheckpointReportsCarryTheirOutcome) {
  Message written = MakeCheckpointed(wire::Role::SERVER, 1, 40, absl::OkStatus());
  ASSERT_TRUE(written.Parse().ok());
  EXPECT_EQ(written.header().getClock(), 40);
  EXPECT_TRUE(StatusFromHeader(written.header()).ok());
  Message missed =
      MakeCheckpointed(wire::Role::WORKER, 0, 40, absl::FailedPreconditionError("passed it"));
  ASSERT_TRUE(missed.Parse().ok());
  absl::Status s = StatusFromHeader(missed.header());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "passed it");
}

}  // namespace
}  // namespace syncline
