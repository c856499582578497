#include "checkpoint/checkpoint_requests.h"

#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(CheckpointRequestsTest, ARequestedClockIsConsumedOnce) {
  CheckpointRequests r;
  r.Request(10);
  EXPECT_FALSE(r.Consume(9));
  EXPECT_TRUE(r.Consume(10));
  EXPECT_FALSE(r.Consume(10));
  EXPECT_TRUE(r.empty());
}

TEST(CheckpointRequestsTest, RequestsBehindTheNodeAreMissedUnlessTaken) {
  CheckpointRequests r;
  r.Request(5);
  r.Request(7);
  r.Request(12);
  r.Taken(7);  // a periodic checkpoint wrote clock 7
  EXPECT_THAT(r.TakeMissedBefore(10), ElementsAre(5));
  EXPECT_THAT(r.TakeMissedBefore(10), IsEmpty());
  EXPECT_THAT(r.TakeMissedBefore(std::numeric_limits<int64_t>::max()), ElementsAre(12));
}

TEST(CheckpointRequestsTest, ATakenClockIsNeitherRequestedNorConsumedAgain) {
  CheckpointRequests r;
  r.Taken(20);
  r.Request(20);
  EXPECT_TRUE(r.WasTaken(20));
  EXPECT_FALSE(r.Consume(20));
  r.Request(30);
  r.Taken(30);
  EXPECT_FALSE(r.Consume(30));
}

TEST(CheckpointRequestsTest, RemembersOnlyTheLatestTakenClocks) {
  CheckpointRequests r;
  for (int64_t c = 0; c < 100; ++c) r.Taken(c);
  EXPECT_FALSE(r.WasTaken(0));
  EXPECT_TRUE(r.WasTaken(99));
  EXPECT_TRUE(r.WasTaken(100 - CheckpointRequests::kKeepTaken));
  EXPECT_FALSE(r.WasTaken(99 - CheckpointRequests::kKeepTaken));
}

}  // namespace
}  // namespace syncline
