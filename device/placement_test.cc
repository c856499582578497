#include "device/placement.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

std::string Message(const absl::StatusOr<DeviceChoice>& choice) {
  return std::string(choice.status().message());
}

const DeviceSpec kAuto{.kind = DeviceKind::kAuto};
const DeviceSpec kCpu{.kind = DeviceKind::kCpu};
const DeviceSpec kCuda0{.kind = DeviceKind::kCuda, .index = 0};
const DeviceSpec kCuda2{.kind = DeviceKind::kCuda, .index = 2};

TEST(DeviceTest, CpuAndAutoComputeOnTheCpuAndSayWhy) {
  for (const DeviceProbe probe : {DeviceProbe{}, DeviceProbe{.cuda_built = true},
                                  DeviceProbe{.cuda_built = true, .gpus = 1}}) {
    EXPECT_EQ(ChooseDevice(kCpu, "mlp", probe)->device, "cpu");
    EXPECT_EQ(ChooseDevice(kCpu, "mlp", probe)->gpu, -1);
    EXPECT_EQ(ChooseDevice(kAuto, "toy", probe)->device, "cpu");
  }
  EXPECT_EQ(ChooseDevice(kAuto, "mlp", DeviceProbe{.cuda_built = true})->device, "cpu");
  EXPECT_THAT(ChooseDevice(kAuto, "mlp", DeviceProbe{})->reason, HasSubstr("no CUDA"));
  EXPECT_THAT(ChooseDevice(kAuto, "mlp", DeviceProbe{.cuda_built = true})->reason,
              HasSubstr("no CUDA device is visible"));
  // Every model of the product has kernels; one that had none would say so.
  EXPECT_THAT(ChooseDevice(kAuto, "toy", DeviceProbe{.cuda_built = true, .gpus = 1})->reason,
              HasSubstr("the toy model has no GPU kernels yet"));
}

TEST(DeviceTest, AutoSpreadsTheRanksOverTheVisibleGpus) {
  const DeviceProbe two{.cuda_built = true, .gpus = 2};
  for (const char* model : {"logreg", "softmax", "mlp", "ctr"}) {
    EXPECT_TRUE(HasGpuKernels(model)) << model;
    auto r0 = ChooseDevice(kAuto, model, two, 0);
    auto r3 = ChooseDevice(kAuto, model, two, 3);
    ASSERT_TRUE(r0.ok() && r3.ok());
    EXPECT_EQ(r0->device, "cuda:0");
    EXPECT_EQ(r0->gpu, 0);
    EXPECT_EQ(r3->device, "cuda:1");
    EXPECT_THAT(r3->reason, HasSubstr("2 CUDA devices visible; rank 3 takes cuda:1"));
  }
  EXPECT_FALSE(HasGpuKernels("toy"));
  auto pinned = ChooseDevice(kCuda2, "mlp", DeviceProbe{.cuda_built = true, .gpus = 3}, 0);
  ASSERT_TRUE(pinned.ok());
  EXPECT_EQ(pinned->device, "cuda:2");
  EXPECT_EQ(pinned->gpu, 2);
}

TEST(DeviceTest, CudaIsRefusedNamingWhatIsMissing) {
  auto no_build = ChooseDevice(kCuda0, "mlp", DeviceProbe{});
  EXPECT_TRUE(absl::IsFailedPrecondition(no_build.status()));
  EXPECT_THAT(Message(no_build), HasSubstr("--device=cuda:0: this build has no CUDA"));
  EXPECT_THAT(Message(ChooseDevice(kCuda0, "mlp", DeviceProbe{.cuda_built = true})),
              HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(Message(ChooseDevice(kCuda2, "ctr", DeviceProbe{.cuda_built = true, .gpus = 2})),
              HasSubstr("cuda:2 is not visible (2 CUDA devices)"));
  EXPECT_THAT(Message(ChooseDevice(kCuda0, "toy", DeviceProbe{.cuda_built = true, .gpus = 2})),
              HasSubstr("the toy model has no GPU kernels yet"));
}

TEST(DeviceTest, TheProbeAgreesWithTheBuild) {
  const DeviceProbe probe = ProbeDevices();
  EXPECT_EQ(probe.cuda_built, SYNCLINE_WORKER_CUDA_BUILD != 0);
  EXPECT_GE(probe.gpus, 0);
  if (!probe.cuda_built) {
    EXPECT_EQ(probe.gpus, 0);
  }
}

}  // namespace
}  // namespace syncline
