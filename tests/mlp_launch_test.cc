// End-to-end tests of the mlp model and of --device: real syncline-launch, syncline-ps and
// syncline-worker processes on loopback.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "device/cuda_model.h"
#include "device/placement.h"
#include "launch/process_group.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

using testing_util::JsonNumber;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;
const std::string kGen = SYNCLINE_GEN_BIN;
const std::string kWorker = SYNCLINE_WORKER_BIN;

// 4000 training and 800 test examples of 4 classes over 60 features, 12 per example.
std::string MakeData() {
  const std::string dir = TempDir("mlp_data");
  auto g = RunProcess({kGen, "--out", dir + "/train.libsvm", "--test-out", dir + "/test.libsvm",
                       "--rows", "4000", "--test-rows", "800", "--features", "60", "--nnz", "12",
                       "--classes", "4", "--seed", "5"});
  EXPECT_EQ(g.exit_code, 0) << g.output;
  return dir;
}

// The tests' mlp job on `data`, into `out`: 4 classes, hidden layers 32 and 16, 4 epochs of
// batches of 64.
std::vector<std::string> MlpJob(const std::string& data, const std::string& out) {
  return {"--model",      "mlp",
          "--hidden",     "32,16",
          "--classes",    "4",
          "--train",      data + "/train.libsvm",
          "--test",       data + "/test.libsvm",
          "--epochs",     "4",
          "--batch-size", "64",
          "--out",        out};
}

// Runs the 2-server, 2-worker mlp job of the tests under `sync` into `out` (with `extra`
// flags).
testing_util::RunResult RunMlp(const std::string& data, const std::string& sync,
                               const std::string& out, std::vector<std::string> extra = {}) {
  std::vector<std::string> argv = {kLaunch, "--workers", "2", "--sync", sync};
  for (const std::string& a : testing_util::ServersFlag(sync, 2)) argv.push_back(a);
  argv.insert(argv.end(), extra.begin(), extra.end());
  const std::vector<std::string> job = MlpJob(data, out);
  argv.insert(argv.end(), job.begin(), job.end());
  return RunProcess(argv);
}

// Whether --device auto puts a worker on the GPU here: a CUDA build and a visible GPU.
bool AutoTakesTheGpu() { return CudaModelsBuilt() && ProbeDevices().gpus > 0; }

TEST(MlpLaunchTest, MlpTrainsUnderBspAndReportsAccuracy) {
  const std::string data = MakeData();
  const std::string out = TempDir("mlp_bsp");
  auto r = RunMlp(data, "bsp", out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_NE(summary.find("\"model\": \"mlp\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"hidden\": \"32,16\""), std::string::npos) << summary;
  const std::string device = AutoTakesTheGpu() ? "cuda:0" : "cpu";
  EXPECT_NE(summary.find(absl::StrCat("\"device\": \"", device, "\"")), std::string::npos)
      << summary;
  EXPECT_NE(summary.find("\"device_requested\": \"auto\""), std::string::npos) << summary;
  // Class probabilities, not one score: no AUC.
  EXPECT_EQ(summary.find("test_auc"), std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "test_examples").value_or(0), 800) << summary;
  ASSERT_TRUE(JsonNumber(summary, "test_accuracy").has_value()) << summary;
  // Chance is 0.25, the largest class 0.51; measured 0.769.
  EXPECT_GT(*JsonNumber(summary, "test_accuracy"), 0.65) << summary;
  // The worker says where it computed, and why there (on a CPU: why not on a GPU).
  EXPECT_NE(r.output.find(absl::StrCat("device: ", device, " (--device auto: ")), std::string::npos)
      << r.output;
}

// All-reduce workers start their replicas where the servers start the tables (the mlp's
// hidden units need random starts), so they train BSP's model: the same test loss.
TEST(MlpLaunchTest, AllReduceTrainsTheMlpOfBsp) {
  const std::string data = MakeData();
  const std::string bsp_out = TempDir("mlp_bsp_ref"), allreduce_out = TempDir("mlp_allreduce");
  auto bsp = RunMlp(data, "bsp", bsp_out);
  ASSERT_EQ(bsp.exit_code, 0) << bsp.output;
  auto allreduce = RunMlp(data, "allreduce", allreduce_out);
  ASSERT_EQ(allreduce.exit_code, 0) << allreduce.output;
  const auto a = JsonNumber(ReadFile(bsp_out + "/summary.json"), "test_loss");
  const auto b = JsonNumber(ReadFile(allreduce_out + "/summary.json"), "test_loss");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NEAR(*b, *a, 1e-5 * *a);
  EXPECT_LT(*a, 1.0) << "trained (chance is log 4 = 1.39)";
}

TEST(MlpLaunchTest, CudaWithoutAGpuExitsTwoSayingWhy) {
  auto bad = RunProcess({kLaunch, "--device", "gpu:0", "--out", TempDir("mlp_gpu")});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--device=gpu:0: must be auto, cpu, cuda or cuda:N"), std::string::npos)
      << bad.output;
  if (AutoTakesTheGpu()) GTEST_SKIP() << "a GPU is visible and this build has CUDA";
  const std::string data = MakeData();
  auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--model", "mlp", "--classes",
                       "4", "--train", data + "/train.libsvm", "--device", "cuda", "--out",
                       TempDir("mlp_cuda")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // Whichever is missing here (CUDA in the build, a visible GPU, the model's kernels) is named.
  EXPECT_NE(r.output.find("--device=cuda:0: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("use --device cpu or auto"), std::string::npos) << r.output;
}

// One job, two kinds of worker: w0 computes on the CPU (its own --device cpu) and w1 wherever
// --device auto puts it: the GPU of a machine with one and a CUDA build, else the CPU too. The
// job trains the same model either way (servers hold it; the workers only differ in where the
// step runs). Workers of one's own, joined to a launcher with --external-workers.
TEST(MlpLaunchTest, ACpuWorkerAndAnAutoWorkerTrainOneJob) {
  const std::string data = MakeData();
  const std::string out = TempDir("mlp_mixed");
  std::string output;
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    output.append(line.data(), line.size());
    output += '\n';
  });
  std::vector<std::string> launch = {kLaunch,     "--servers", "1",
                                     "--workers", "2",         "--external-workers"};
  const std::vector<std::string> job = MlpJob(data, out);
  launch.insert(launch.end(), job.begin(), job.end());
  ASSERT_TRUE(group.Start(ProcessSpec{"launch", launch}).ok());
  std::vector<ExitEvent> exited;
  std::string address;
  for (int i = 0; i < 300 && address.empty() && exited.empty(); ++i) {
    (void)group.Poll(absl::Milliseconds(100), &exited);
    address = std::string(absl::StripAsciiWhitespace(ReadFile(out + "/coordinator.address")));
  }
  ASSERT_FALSE(address.empty()) << output;
  for (const auto& [rank, device] : {std::pair{"0", "cpu"}, std::pair{"1", "auto"}}) {
    ASSERT_TRUE(group
                    .Start(ProcessSpec{
                        absl::StrCat("w", rank),
                        {kWorker, "--coordinator", address, "--rank", rank, "--device", device}})
                    .ok());
  }
  // The launcher ends the job when both workers are done.
  const absl::Time deadline = absl::Now() + absl::Seconds(180);
  bool launcher_done = false;
  int launcher_code = -1;
  while (!launcher_done && absl::Now() < deadline) {
    (void)group.Poll(absl::Milliseconds(100), &exited);
    for (const ExitEvent& e : exited) {
      if (e.label == "launch") {
        launcher_done = true;
        launcher_code = e.exit_code;
      }
    }
  }
  group.TerminateAll(absl::Seconds(2));
  ASSERT_TRUE(launcher_done) << output;
  ASSERT_EQ(launcher_code, 0) << output;
  EXPECT_NE(output.find("device: cpu (--device cpu"), std::string::npos) << output;
  const bool gpu = CudaModelsBuilt() && ProbeDevices().gpus > 0;
  EXPECT_NE(output.find(gpu ? "device: cuda:0 (--device auto" : "device: cpu (--device auto"),
            std::string::npos)
      << output;
  const std::string summary = ReadFile(out + "/summary.json");
  ASSERT_TRUE(JsonNumber(summary, "test_accuracy").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_accuracy"), 0.65) << summary;
}

// The acceptance at the job level: the same job and seed on GPU workers and on CPU
// workers (BSP, 2 workers, 4 epochs of 32 steps) end at the same test loss, to 1e-4. The GPU
// workers keep their partitions on the device, and say so.
TEST(MlpLaunchTest, GpuWorkersTrainTheCpuWorkersModel) {
  if (!AutoTakesTheGpu()) {
    GTEST_SKIP() << (CudaModelsBuilt() ? "no CUDA device is visible" : "this build has no CUDA");
  }
  const std::string data = MakeData();
  const std::string cpu_out = TempDir("mlp_on_cpu"), gpu_out = TempDir("mlp_on_gpu");
  auto cpu = RunMlp(data, "bsp", cpu_out, {"--device", "cpu"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  auto gpu = RunMlp(data, "bsp", gpu_out, {"--device", "cuda"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  // The GPU workers keep their partitions on the device (a batch goes up as its indices).
  EXPECT_EQ(cpu.output.find("stay on the model's device"), std::string::npos) << cpu.output;
  EXPECT_NE(gpu.output.find("stay on the model's device"), std::string::npos) << gpu.output;
  const std::string summary = ReadFile(gpu_out + "/summary.json");
  EXPECT_NE(summary.find("\"device\": \"cuda:0\""), std::string::npos) << summary;
  const auto a = JsonNumber(ReadFile(cpu_out + "/summary.json"), "test_loss");
  const auto b = JsonNumber(summary, "test_loss");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NEAR(*b, *a, 1e-4 * *a);
}

// Compressed all-reduce on GPU workers: each keeps its row gradients and their residual on the
// device and encodes them there (only the blocks come down), and trains what CPU workers train
// with the same codec (to rounding: top-K may pick another of two near-equal entries).
TEST(MlpLaunchTest, GpuWorkersEncodeTheirCompressedGradientsOnTheDevice) {
  if (!AutoTakesTheGpu()) {
    GTEST_SKIP() << (CudaModelsBuilt() ? "no CUDA device is visible" : "this build has no CUDA");
  }
  const std::string data = MakeData();
  const std::string cpu_out = TempDir("mlp_topk_cpu"), gpu_out = TempDir("mlp_topk_gpu");
  auto cpu = RunMlp(data, "allreduce", cpu_out, {"--device", "cpu", "--compress", "topk:0.1"});
  ASSERT_EQ(cpu.exit_code, 0) << cpu.output;
  EXPECT_EQ(cpu.output.find("row gradients are encoded on"), std::string::npos) << cpu.output;
  auto gpu = RunMlp(data, "allreduce", gpu_out, {"--device", "cuda", "--compress", "topk:0.1"});
  ASSERT_EQ(gpu.exit_code, 0) << gpu.output;
  EXPECT_NE(gpu.output.find("row gradients are encoded on cuda:0 (topk:0.1"), std::string::npos)
      << gpu.output;
  const auto a = JsonNumber(ReadFile(cpu_out + "/summary.json"), "test_loss");
  const auto b = JsonNumber(ReadFile(gpu_out + "/summary.json"), "test_loss");
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_NEAR(*b, *a, 0.02 * *a);
}

}  // namespace
}  // namespace syncline
