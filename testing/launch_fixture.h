// GeneratedDataTest: a gtest fixture whose test suite shares one synthetic data set, made by
// syncline-gen before the suite's first test: 20k training and 4k test examples over 10k Zipf
// features (seed 11), in a fresh folder named Suite::kDataFolder under the test's temporary
// folder. For the multi-process tests in tests/, whose target defines SYNCLINE_GEN_BIN (the
// generator's path). A suite derives from GeneratedDataTest<itself> so that each suite has its
// own folder; gtest sets a suite up and tears it down on one thread.
#ifndef SYNCLINE_TESTING_LAUNCH_FIXTURE_H_
#define SYNCLINE_TESTING_LAUNCH_FIXTURE_H_

#include <gtest/gtest.h>

#include <string>

#include "testing/test_util.h"

#ifndef SYNCLINE_GEN_BIN
#error "testing/launch_fixture.h needs SYNCLINE_GEN_BIN, the path of syncline-gen"
#endif

namespace syncline::testing_util {

template <typename Suite>
class GeneratedDataTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir(Suite::kDataFolder));
    auto r = RunProcess({SYNCLINE_GEN_BIN, "--out", *dir_ + "/train.libsvm", "--test-out",
                         *dir_ + "/test.libsvm", "--rows", "20000", "--test-rows", "4000",
                         "--features", "10000", "--nnz", "20", "--seed", "11"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  // The data's files, libsvm text.
  static std::string Train() { return *dir_ + "/train.libsvm"; }
  static std::string Test() { return *dir_ + "/test.libsvm"; }

 private:
  static inline std::string* dir_ = nullptr;
};

}  // namespace syncline::testing_util

#endif  // SYNCLINE_TESTING_LAUNCH_FIXTURE_H_
