#include "core/log.h"

#include <gtest/gtest.h>

namespace syncline {
namespace {

TEST(ReadableDurationTest, ShowsThreeDigitsOrWholeMinutesAndHours) {
  EXPECT_EQ(ReadableDuration(absl::Microseconds(117254.536)), "117 ms");
  EXPECT_EQ(ReadableDuration(absl::Microseconds(1500)), "1.5 ms");
  EXPECT_EQ(ReadableDuration(absl::Microseconds(250)), "0.25 ms");
  EXPECT_EQ(ReadableDuration(absl::ZeroDuration()), "0 ms");
  EXPECT_EQ(ReadableDuration(absl::Milliseconds(2345)), "2.35 s");
  EXPECT_EQ(ReadableDuration(absl::Seconds(59.99)), "1 min 0 s");
  EXPECT_EQ(ReadableDuration(absl::Seconds(200)), "3 min 20 s");
  EXPECT_EQ(ReadableDuration(absl::Minutes(125)), "2 h 5 min");
  EXPECT_EQ(ReadableDuration(-absl::Milliseconds(5)), "-5 ms");
  EXPECT_EQ(ReadableDuration(absl::InfiniteDuration()), "forever");
}

}  // namespace
}  // namespace syncline
