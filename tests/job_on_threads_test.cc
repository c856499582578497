// A whole job on threads over the in-process transport ends with the very parameters of the
// same job run as real processes by syncline-launch: the node classes are the product.
#include "testing/job_on_threads.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "launch/job_config.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::RunResult;
using testing_util::TempDir;

TEST(JobOnThreadsTest, BspParametersEqualThoseOfTheSameJobAsProcesses) {
  const std::string out = TempDir("job_on_threads");
  const std::string procs = out + "/processes", threads = out + "/threads";
  RunResult launched =
      RunProcess({SYNCLINE_LAUNCH_BIN, "--servers", "2", "--workers", "2", "--sync", "bsp",
                  "--gen-rows", "3000", "--gen-test-rows", "600", "--epochs", "2", "--batch-size",
                  "64", "--seed", "7", "--out", procs},
                 absl::Seconds(120));
  ASSERT_EQ(launched.exit_code, 0) << launched.output;

  JobConfig config;
  config.servers = 2;
  config.workers = 2;
  config.epochs = 2;
  config.batch_size = 64;
  config.seed = 7;
  config.train = procs + "/data/train.libsvm";
  config.test = procs + "/data/test.libsvm";
  config.out = threads;
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  std::filesystem::create_directories(threads);
  ThreadedJobResult result = RunJobOnThreads(*spec);
  ASSERT_TRUE(result.status.ok()) << result.status;
  for (const NodeExit& e : result.servers) EXPECT_TRUE(e.status.ok()) << e.status;
  for (const NodeExit& e : result.workers) EXPECT_TRUE(e.status.ok()) << e.status;
  ASSERT_TRUE(result.evaluation.has_value());
  EXPECT_EQ(result.evaluation->examples, 600u);

  const std::string from_processes = ReadFile(procs + "/params.tsv");
  ASSERT_FALSE(from_processes.empty());
  EXPECT_TRUE(ReadFile(threads + "/params.tsv") == from_processes)
      << "the threaded job's parameters differ from the processes' (" << procs << "/params.tsv, "
      << threads << "/params.tsv)";
  std::filesystem::remove_all(out);
}

}  // namespace
}  // namespace syncline
