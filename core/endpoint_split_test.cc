#include "core/endpoint_split.h"

#include <gtest/gtest.h>

#include "core/inproc_transport.h"

namespace syncline {
namespace {

Message Numbered(uint32_t n) {
  MessageBuilder b(wire::MsgType::PUSH);
  b.header().setTable(n);
  return b.Finish();
}

uint32_t NumberOf(Message& m) {
  EXPECT_TRUE(m.Parse().ok());
  return m.header().getTable();
}

// Servers ("ps...") on side 0, workers on side 1: each side receives its own peers' messages in
// the order they came, whichever side was receiving when they arrived.
TEST(EndpointSplitTest, EachSideHearsItsOwnPeersInOrder) {
  InprocTransport transport;
  auto mine = transport.CreateEndpoint("w0");
  auto server = transport.CreateEndpoint("ps0");
  auto worker = transport.CreateEndpoint("w1");
  ASSERT_TRUE(mine.ok() && server.ok() && worker.ok());
  auto address = (*mine)->Bind("inproc://w0");
  ASSERT_TRUE(address.ok());
  ASSERT_TRUE((*server)->Connect("w0", *address).ok());
  ASSERT_TRUE((*worker)->Connect("w0", *address).ok());
  EndpointSplit split(mine->get(),
                      [](const std::string& peer) { return peer.rfind("ps", 0) == 0 ? 0 : 1; });
  const absl::Time soon = absl::Now() + absl::Seconds(5);
  // Interleaved: server 0, 1, 2 and worker 100, 101.
  ASSERT_TRUE((*server)->Send("w0", Numbered(0), soon).ok());
  ASSERT_TRUE((*worker)->Send("w0", Numbered(100), soon).ok());
  ASSERT_TRUE((*server)->Send("w0", Numbered(1), soon).ok());
  ASSERT_TRUE((*worker)->Send("w0", Numbered(101), soon).ok());
  ASSERT_TRUE((*server)->Send("w0", Numbered(2), soon).ok());
  // The worker side first: it passes over the servers' messages and keeps them.
  for (uint32_t want : {100u, 101u}) {
    auto m = split.side(1).Receive(soon);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->peer(), "w1");
    EXPECT_EQ(NumberOf(*m), want);
  }
  for (uint32_t want : {0u, 1u, 2u}) {
    auto m = split.side(0).Receive(soon);
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->peer(), "ps0");
    EXPECT_EQ(NumberOf(*m), want);
  }
  // Nothing left for either: each times out.
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      split.side(0).Receive(absl::Now() + absl::Milliseconds(20)).status()));
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      split.side(1).Receive(absl::Now() + absl::Milliseconds(20)).status()));
  // Sends go through the shared endpoint, under its id.
  ASSERT_TRUE(split.side(1).Send("w1", Numbered(7), soon).ok());
  auto got = (*worker)->Receive(soon);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->peer(), "w0");
  EXPECT_EQ(split.side(0).id(), "w0");
  EXPECT_EQ(split.side(1).counters().messages_sent.load(), 1u);
  EXPECT_EQ(split.side(1).counters().messages_received.load(), 2u);
  EXPECT_EQ(split.dropped(), 0u);
}

}  // namespace
}  // namespace syncline
