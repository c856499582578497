#include "consistency/clock_table.h"

#include <gtest/gtest.h>

namespace syncline {
namespace {

TEST(ClockTableTest, MinClockFollowsTheSlowestActiveWorker) {
  ClockTable t(3);
  EXPECT_EQ(t.MinClock(), 0);
  ASSERT_TRUE(t.Advance(0, 2).ok());
  ASSERT_TRUE(t.Advance(1, 1).ok());
  EXPECT_EQ(t.MinClock(), 0);
  ASSERT_TRUE(t.Advance(2, 3).ok());
  EXPECT_EQ(t.MinClock(), 1);
  ASSERT_TRUE(t.Finish(1).ok());
  EXPECT_EQ(t.MinClock(), 2);
  ASSERT_TRUE(t.Finish(0).ok());
  ASSERT_TRUE(t.Finish(2).ok());
  EXPECT_EQ(t.MinClock(), kAllFinished);
}

TEST(ClockTableTest, RejectsBadUpdates) {
  ClockTable t(2);
  ASSERT_TRUE(t.Advance(0, 3).ok());
  EXPECT_EQ(t.Advance(0, 2).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Advance(5, 1).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Advance(-1, 1).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(t.Finish(1).ok());
  EXPECT_EQ(t.Advance(1, 4).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StalenessGateTest, BspServesOnlyFreshReads) {
  StalenessGate bsp(0);
  EXPECT_TRUE(bsp.CanRead(3, 3));
  EXPECT_FALSE(bsp.CanRead(4, 3));
  EXPECT_TRUE(bsp.CanRead(-1, 0));  // ungated
  EXPECT_TRUE(bsp.CanRead(100, kAllFinished));
}

// Slots past the first workers stay out of the set until they join, once, at their clock.
TEST(ClockTableTest, AJoinableSlotEntersTheSetOnceAtItsClock) {
  ClockTable t(2, 1);
  EXPECT_EQ(t.num_workers(), 3);
  ASSERT_TRUE(t.Advance(0, 7).ok());
  ASSERT_TRUE(t.Advance(1, 9).ok());
  EXPECT_EQ(t.MinClock(), 7);  // the joinable slot does not hold the others back
  EXPECT_TRUE(t.joinable(2));
  EXPECT_FALSE(t.joinable(1));
  EXPECT_FALSE(t.Advance(2, 1).ok());  // not in the set yet
  ASSERT_TRUE(t.Join(2, 5).ok());
  EXPECT_EQ(t.MinClock(), 5);
  EXPECT_FALSE(t.joinable(2));
  EXPECT_FALSE(t.Join(2, 5).ok());  // once
  EXPECT_FALSE(t.Join(0, 5).ok());  // a first worker never joins
  ASSERT_TRUE(t.Advance(2, 8).ok());
  EXPECT_EQ(t.MinClock(), 7);
  ASSERT_TRUE(t.Finish(2).ok());
  EXPECT_FALSE(t.Join(2, 9).ok());  // a joiner that left does not come back
  EXPECT_EQ(t.MinClock(), 7);
  EXPECT_FALSE(ClockTable(1, 1).Join(1, -1).ok());
}

TEST(StalenessGateTest, SspAllowsBoundedLag) {
  StalenessGate ssp(3);
  EXPECT_TRUE(ssp.CanRead(5, 2));
  EXPECT_FALSE(ssp.CanRead(6, 2));
  EXPECT_EQ(ssp.RequiredMinClock(6), 3);
  EXPECT_EQ(StalenessGate::StalenessOf(5, 2), 3);
  EXPECT_EQ(StalenessGate::StalenessOf(1, 2), 0);
}

TEST(StalenessGateTest, AspNeverWaits) {
  StalenessGate asp(-1);
  EXPECT_TRUE(asp.CanRead(1000, 0));
}

TEST(StalenessHistogramTest, CountsMaxAndMean) {
  StalenessHistogram h;
  h.Record(0);
  h.Record(2);
  h.Record(1000);
  EXPECT_EQ(h.counts()[0], 1u);
  EXPECT_EQ(h.counts()[2], 1u);
  EXPECT_EQ(h.counts()[StalenessHistogram::kBuckets - 1], 1u);
  EXPECT_EQ(h.max(), 1000);
  EXPECT_DOUBLE_EQ(h.mean(), 334.0);
}

}  // namespace
}  // namespace syncline
