#include "ps/update_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace syncline {
namespace {

TEST(UpdatePoolTest, RunsEveryTaskOnceInEveryRound) {
  for (const int threads : {1, 2, 4}) {
    UpdatePool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    for (size_t tasks : {size_t{0}, size_t{1}, size_t{3}, size_t{8}, size_t{100}}) {
      for (int round = 0; round < 50; ++round) {
        std::vector<std::atomic<int>> calls(tasks);
        pool.Run(tasks, [&](size_t i) { calls[i].fetch_add(1); });
        for (size_t i = 0; i < tasks; ++i) {
          ASSERT_EQ(calls[i].load(), 1) << threads << " threads, task " << i << " of " << tasks;
        }
      }
    }
  }
}

TEST(UpdatePoolTest, AThrowingTaskIsRethrownAndThePoolGoesOn) {
  UpdatePool pool(3);
  for (int round = 0; round < 20; ++round) {
    std::atomic<int> calls{0};
    EXPECT_THROW(pool.Run(16,
                          [&](size_t i) {
                            calls.fetch_add(1);
                            if (i == 5) throw std::runtime_error("task 5");
                          }),
                 std::runtime_error);
    EXPECT_GE(calls.load(), 1);
    EXPECT_LE(calls.load(), 16);
    std::atomic<int> after{0};
    pool.Run(16, [&](size_t) { after.fetch_add(1); });
    EXPECT_EQ(after.load(), 16);
  }
}

}  // namespace
}  // namespace syncline
