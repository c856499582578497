#include "worker/slowness.h"

#include <gtest/gtest.h>

#include <optional>

#include "job/options.h"

namespace syncline {
namespace {

TEST(SlownessTest, ParsesAndRejectsFlags) {
  EXPECT_EQ(*ParseStraggler("1:3"), std::make_pair(1, 3.0));
  EXPECT_EQ(*ParseJitter("0.1:5"), std::make_pair(0.1, 5.0));
  EXPECT_EQ(*ParseDelay("2:20"), std::make_pair(2, 20.0));
  for (const char* bad : {"", "1", "1:", ":3", "-1:3", "1:0.5", "x:3", "1:3:4"}) {
    EXPECT_FALSE(ParseStraggler(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseJitter("1.5:2").ok());
  EXPECT_FALSE(ParseJitter("0.1:0").ok());
  EXPECT_FALSE(ParseDelay("0:-5").ok());
  EXPECT_NE(ParseJitter("oops").status().message().find("--jitter"), std::string::npos);
}

TEST(SlownessTest, FlagsApplyToTheWorkersTheyName) {
  JobSpec::Slowness spec{.straggler_rank = 1,
                         .straggler_factor = 3,
                         .jitter_probability = 0.1,
                         .jitter_factor = 5,
                         .delay_rank = 1,
                         .delay_ms = 20,
                         .min_step_ms = 10};
  std::optional<SlownessOptions> w1 = SlownessForWorker(spec, 1, 7);
  EXPECT_EQ(w1->factor, 3);
  EXPECT_EQ(w1->delay, absl::Milliseconds(20));
  EXPECT_EQ(w1->min_step, absl::Milliseconds(10));
  EXPECT_EQ(w1->jitter_probability, 0.1);
  std::optional<SlownessOptions> w0 = SlownessForWorker(spec, 0, 7);
  EXPECT_EQ(w0->factor, 1);
  EXPECT_EQ(w0->delay, absl::ZeroDuration());
  EXPECT_EQ(w0->jitter_factor, 5);
  EXPECT_NE(w0->seed, w1->seed);
  EXPECT_FALSE(SlownessInjector(SlownessForWorker(JobSpec::Slowness{}, 0, 1)).active());
}

TEST(SlownessTest, StepTimeFollowsFactorFloorAndJitter) {
  SlownessInjector straggler({.factor = 3, .min_step = absl::Milliseconds(10)});
  EXPECT_EQ(straggler.StepTime(absl::Milliseconds(2)), absl::Milliseconds(30));
  EXPECT_EQ(straggler.StepTime(absl::Milliseconds(20)), absl::Milliseconds(60));

  const uint64_t seed = 5;
  SlownessInjector jitter({.jitter_probability = 0.1, .jitter_factor = 5, .seed = seed});
  int slow = 0;
  for (int i = 0; i < 10000; ++i) {
    const absl::Duration t = jitter.StepTime(absl::Milliseconds(1));
    ASSERT_TRUE(t == absl::Milliseconds(1) || t == absl::Milliseconds(5));
    slow += t == absl::Milliseconds(5);
  }
  EXPECT_NEAR(slow / 10000.0, 0.1, 0.02) << "seed " << seed;
  // Same seed, same sequence.
  SlownessInjector a({.jitter_probability = 0.5, .jitter_factor = 2, .seed = 9});
  SlownessInjector b({.jitter_probability = 0.5, .jitter_factor = 2, .seed = 9});
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(a.StepTime(absl::Milliseconds(1)), b.StepTime(absl::Milliseconds(1)));
  }
  EXPECT_FALSE(SlownessInjector({}).active());
}

}  // namespace
}  // namespace syncline
