#include "core/message.h"

#include <gtest/gtest.h>

#include <random>

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
    // Half the time give it a plausible segment table so that deeper checks run.
    if (i % 2 == 0) words[0] = (static_cast<uint64_t>(words.size() - 1) << 32);
    Message m;
    m.frames().push_back(Frame::Own(std::move(words)));
    if (m.Parse().ok()) {
      ++accepted;
      // Reading the fields of an accepted header must be safe too.
      (void)m.header().getType();
      (void)m.header().getRequestId();
    }
  }
  SUCCEED() << accepted << " random headers parsed";
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
