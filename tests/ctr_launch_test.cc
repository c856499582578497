// End-to-end tests of the ctr model on Criteo-format data: syncline-gen criteo, then real
// syncline-launch, syncline-ps and syncline-worker processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "device/cuda_model.h"
#include "device/placement.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

using testing_util::JsonNumber;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;
const std::string kGen = SYNCLINE_GEN_BIN;

struct CtrRun {
  double auc = 0;
  double bytes_pushed = 0;
  std::string output;
};

// `model` trained on 30k generated Criteo rows with strong pairwise terms: its test AUC and
// the bytes its workers pushed.
CtrRun TrainAndTest(const std::string& data, const std::string& model,
                    const std::string& compress = "none", const std::string& device = "cpu",
                    const std::string& compress_pull = "none") {
  const std::string out = TempDir("ctr_" + model + "_" + compress + "_" + device);
  std::vector<std::string> args = {kLaunch,
                                   "--servers",
                                   "1",
                                   "--workers",
                                   "2",
                                   "--model",
                                   model,
                                   "--format",
                                   "criteo",
                                   "--train",
                                   data + "/train.txt",
                                   "--test",
                                   data + "/test.txt",
                                   "--epochs",
                                   "2",
                                   "--lr",
                                   "0.05",
                                   "--embedding-dim",
                                   "4",
                                   "--hidden",
                                   "16",
                                   "--compress",
                                   compress,
                                   "--device",
                                   device,
                                   "--compress-pull",
                                   compress_pull,
                                   "--out",
                                   out};
  auto r = RunProcess(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_NE(summary.find("\"model\": \"" + model + "\""), std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "test_examples").value_or(0), 5000) << summary;
  return {JsonNumber(summary, "test_auc").value_or(0),
          JsonNumber(summary, "bytes_pushed").value_or(0), r.output};
}

TEST(CtrLaunchTest, CtrLearnsTheInteractionsThatLogregMisses) {
  const std::string data = TempDir("ctr_data");
  // A .txt name: --format criteo, not the .tsv extension, makes these Criteo files.
  auto gen = RunProcess({kGen, "criteo", "--rows", "30000", "--test-rows", "5000", "--seed", "2",
                         "--interaction", "2", "--out", data + "/train.txt", "--test-out",
                         data + "/test.txt"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const CtrRun ctr = TrainAndTest(data, "ctr");
  const CtrRun logreg = TrainAndTest(data, "logreg");
  // Measured 0.70 and 0.61 (BSP runs are deterministic).
  EXPECT_GT(ctr.auc, 0.67);
  EXPECT_GT(ctr.auc - logreg.auc, 0.05) << "logreg " << logreg.auc;
  // Sparse row gradients (and the dense layers, with error feedback) pushed as fp16: fewer
  // bytes, the same model up to rounding (measured AUC 0.7106 against 0.6999).
  const CtrRun half = TrainAndTest(data, "ctr", "fp16");
  EXPECT_NEAR(half.auc, ctr.auc, 0.02);
  EXPECT_LT(half.bytes_pushed, 0.8 * ctr.bytes_pushed) << "plain " << ctr.bytes_pushed;
  std::cerr << "ctr bytes pushed: " << ctr.bytes_pushed << " plain, " << half.bytes_pushed
            << " fp16; AUC " << ctr.auc << " / " << half.auc << "\n";
}

// GPU workers compressing their embedding rows with top-K and a residual per row keep the rows'
// gradients and the residual rows on the device (only what is sent comes down), and train
// what CPU workers train with the same codec: the same pushes from the same gradients, which
// the two devices compute to rounding. Their pulls are compressed (fp16 deltas) and decoded on
// the device too, against the copy of the pulled rows kept there.
TEST(CtrLaunchTest, GpuWorkersEncodeTheirEmbeddingRowsOnTheDevice) {
  if (!CudaModelsBuilt() || ProbeDevices().gpus == 0) {
    GTEST_SKIP() << (CudaModelsBuilt() ? "no CUDA device is visible" : "this build has no CUDA");
  }
  const std::string data = TempDir("ctr_gpu_rows_data");
  auto gen = RunProcess({kGen, "criteo", "--rows", "30000", "--test-rows", "5000", "--seed", "2",
                         "--interaction", "2", "--out", data + "/train.txt", "--test-out",
                         data + "/test.txt"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const CtrRun cpu = TrainAndTest(data, "ctr", "topk:0.1", "cpu", "fp16");
  EXPECT_EQ(cpu.output.find("sparse row gradients are encoded on"), std::string::npos)
      << cpu.output;
  EXPECT_EQ(cpu.output.find("compressed pulls are decoded on"), std::string::npos) << cpu.output;
  const CtrRun gpu = TrainAndTest(data, "ctr", "topk:0.1", "cuda", "fp16");
  EXPECT_NE(gpu.output.find("sparse row gradients are encoded on cuda:0 (topk:0.1"),
            std::string::npos)
      << gpu.output;
  EXPECT_NE(gpu.output.find("compressed pulls are decoded on cuda:0 (fp16"), std::string::npos)
      << gpu.output;
  EXPECT_NEAR(gpu.auc, cpu.auc, 0.02);
  EXPECT_NEAR(gpu.bytes_pushed, cpu.bytes_pushed, 0.1 * cpu.bytes_pushed);
  std::cerr << "ctr topk:0.1 AUC " << cpu.auc << " (cpu) / " << gpu.auc << " (cuda); bytes pushed "
            << cpu.bytes_pushed << " / " << gpu.bytes_pushed << "\n";
}

// The (worker, clock) -> training loss rows of a run's metrics.csv, sorted: the wall-clock
// column and the step times after world_size differ between runs, the losses must not.
std::vector<std::string> LossRows(const std::string& metrics) {
  std::vector<std::string> rows;
  std::istringstream in(metrics);
  std::string line;
  std::getline(in, line);  // header: wall_seconds,worker,clock,epoch,train_loss,...,world_size,...
  while (std::getline(in, line)) {
    const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
    rows.push_back(absl::StrJoin(f.begin() + 1, f.begin() + std::min<size_t>(f.size(), 9), ","));
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

// BSP through real processes is deterministic for the ctr model too: its dense layers run on
// OpenBLAS with one thread, and the data is parsed ahead on another thread, neither of which
// may change a bit. Two 2-server 2-worker runs give the same loss at every reported clock and
// the same test loss.
TEST(CtrLaunchTest, BspRunsOfTheCtrModelRepeatExactly) {
  const std::string data = TempDir("ctr_repeat_data");
  auto gen = RunProcess({kGen, "criteo", "--rows", "6000", "--test-rows", "1000", "--seed", "4",
                         "--out", data + "/train.tsv", "--test-out", data + "/test.tsv"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  std::string metrics[2], summary[2];
  for (int run = 0; run < 2; ++run) {
    const std::string out = TempDir("ctr_repeat_" + std::to_string(run));
    auto r = RunProcess({kLaunch, "--servers", "2", "--workers", "2", "--model", "ctr", "--train",
                         data + "/train.tsv", "--test", data + "/test.tsv", "--batch-size", "300",
                         "--log-every", "1", "--lr", "0.05", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    metrics[run] = ReadFile(out + "/metrics.csv");
    summary[run] = ReadFile(out + "/summary.json");
  }
  const std::vector<std::string> a = LossRows(metrics[0]), b = LossRows(metrics[1]);
  EXPECT_EQ(a.size(), 20u);  // 3000 examples per worker, batches of 300, a row per clock
  EXPECT_EQ(a, b);
  for (const char* key : {"train_loss", "test_loss", "test_auc"}) {
    EXPECT_EQ(JsonNumber(summary[0], key), JsonNumber(summary[1], key)) << key;
  }
}

// --read-ahead on sends a step's pull before the previous step's push: with one ASP worker
// every read but the first then misses exactly one update, which the server reports as the
// staleness it served. Off, the worker sees its own updates. Both train the same data.
TEST(CtrLaunchTest, ReadAheadMakesEachAspReadOneUpdateStale) {
  const std::string data = TempDir("read_ahead_data");
  auto gen = RunProcess({kGen, "criteo", "--rows", "4000", "--test-rows", "500", "--seed", "3",
                         "--out", data + "/train.tsv", "--test-out", data + "/test.tsv"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  for (const std::string mode : {"on", "off"}) {
    SCOPED_TRACE(mode);
    const std::string out = TempDir("read_ahead_" + mode);
    auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--sync", "asp",
                         "--read-ahead", mode, "--model", "ctr", "--train", data + "/train.tsv",
                         "--test", data + "/test.tsv", "--batch-size", "100", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string summary = ReadFile(out + "/summary.json");
    EXPECT_EQ(JsonNumber(summary, "examples").value_or(0), 4000) << summary;
    const double stale = JsonNumber(summary, "mean_staleness_served").value_or(-1);
    if (mode == "on") {
      // 40 steps: the first read is fresh, the other 39 one update behind (plus the test pass's
      // reads, which are fresh).
      EXPECT_GT(stale, 0.5) << summary;
      EXPECT_LE(JsonNumber(summary, "max_staleness_served").value_or(-1), 1) << summary;
    } else {
      EXPECT_EQ(stale, 0) << summary;
    }
  }
}

// --sync hybrid: the embeddings on the servers (ASP or SSP), the dense layers replicated and
// all-reduced every step. With one worker it is the model of --sync bsp (nothing to average,
// the same initial dense layers, the same update rule and weighting); with three workers of
// unequal partitions under ASP and SSP(1) it trains, and every worker ends with the same
// dense layers (worker 0 evaluates them).
TEST(CtrLaunchTest, HybridTrainsEmbeddingsOnServersAndAllReducesTheDenseLayers) {
  const std::string data = TempDir("hybrid_data");
  auto gen = RunProcess({kGen, "criteo", "--rows", "20000", "--test-rows", "4000", "--seed", "5",
                         "--interaction", "2", "--out", data + "/train.tsv", "--test-out",
                         data + "/test.tsv"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  const auto run = [&](const std::string& name, std::vector<std::string> job) {
    const std::string out = TempDir("hybrid_" + name);
    std::vector<std::string> argv = {kLaunch,
                                     "--model",
                                     "ctr",
                                     "--train",
                                     data + "/train.tsv",
                                     "--test",
                                     data + "/test.tsv",
                                     "--lr",
                                     "0.05",
                                     "--epochs",
                                     "2",
                                     "--embedding-dim",
                                     "4",
                                     "--hidden",
                                     "16",
                                     "--out",
                                     out};
    argv.insert(argv.end(), job.begin(), job.end());
    auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return out;
  };
  // The dense layers' checksum each hybrid worker logs when it finishes.
  const auto dense_crc = [](const std::string& out, int worker) {
    const std::string log = ReadFile(out + "/logs/w" + std::to_string(worker) + ".log");
    const size_t at = log.find("all-reduced steps: ");
    const size_t crc = log.find("crc32c ", at);
    return at == std::string::npos || crc == std::string::npos ? std::string("none")
                                                               : log.substr(crc + 7, 8);
  };
  const std::string bsp =
      ReadFile(run("bsp1", {"--servers", "2", "--workers", "1"}) + "/summary.json");
  const std::string hybrid = ReadFile(
      run("one", {"--servers", "2", "--workers", "1", "--sync", "hybrid"}) + "/summary.json");
  EXPECT_NE(hybrid.find("\"sync\": \"hybrid:asp\""), std::string::npos) << hybrid;
  for (const char* key : {"train_loss", "test_loss", "test_auc"}) {
    const double a = JsonNumber(bsp, key).value_or(-1), b = JsonNumber(hybrid, key).value_or(-2);
    EXPECT_NEAR(a, b, 1e-6 * std::abs(a)) << key;
  }
  for (const char* sync : {"hybrid:asp", "hybrid:ssp:1"}) {
    SCOPED_TRACE(sync);
    const std::string out =
        run(sync + 7, {"--servers", "2", "--workers", "3", "--sync", sync, "--batch-size", "200"});
    const std::string three = ReadFile(out + "/summary.json");
    EXPECT_NE(dense_crc(out, 0), "none");
    EXPECT_EQ(dense_crc(out, 1), dense_crc(out, 0));
    EXPECT_EQ(dense_crc(out, 2), dense_crc(out, 0));
    // The embeddings' ASP and SSP updates land in arrival order, so runs differ: measured AUC
    // 0.68 to 0.72 over 4 runs of each (0.649 once on a loaded machine); --sync bsp 0.699 and
    // asp 0.685 here, logreg about 0.61. The one-worker run above checks the dense path
    // exactly; this floor, that three workers train.
    EXPECT_GT(JsonNumber(three, "test_auc").value_or(0), 0.63) << three;
    EXPECT_EQ(JsonNumber(three, "examples").value_or(0), 2 * 20000) << three;
  }
}

TEST(CtrLaunchTest, BadCriteoInputGetsAClearMessageAndExitCode2) {
  const std::string dir = TempDir("ctr_bad");
  {
    std::ofstream bad(dir + "/bad.tsv");
    bad << "1" << std::string(39, '\t') << "\n";  // Valid: every feature empty.
    bad << "1" << std::string(12, '\t') << "\tx" << std::string(26, '\t') << "\n";
  }
  auto malformed =
      RunProcess({kLaunch, "--model", "ctr", "--train", dir + "/bad.tsv", "--out", dir + "/run"});
  EXPECT_EQ(malformed.exit_code, 2) << malformed.output;
  EXPECT_NE(malformed.output.find("bad.tsv:2: integer feature I13 is not an integer"),
            std::string::npos)
      << malformed.output;

  auto not_criteo = RunProcess({kLaunch, "--model", "ctr", "--format", "libsvm"});
  EXPECT_EQ(not_criteo.exit_code, 2) << not_criteo.output;
  EXPECT_NE(not_criteo.output.find("needs Criteo data"), std::string::npos) << not_criteo.output;

  auto hidden = RunProcess({kLaunch, "--model", "ctr", "--hidden", "0"});
  EXPECT_EQ(hidden.exit_code, 2) << hidden.output;
  EXPECT_NE(hidden.output.find("--hidden=0"), std::string::npos) << hidden.output;
}

}  // namespace
}  // namespace syncline
