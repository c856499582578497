#include "worker/device.h"

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
    EXPECT_EQ(ChooseDevice(kAuto, "mlp", probe)->device, "cpu");
  }
  EXPECT_THAT(ChooseDevice(kAuto, "mlp", DeviceProbe{})->reason, HasSubstr("no CUDA"));
  EXPECT_THAT(ChooseDevice(kAuto, "mlp", DeviceProbe{.cuda_built = true})->reason,
              HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(ChooseDevice(kAuto, "mlp", DeviceProbe{.cuda_built = true, .gpus = 1})->reason,
              HasSubstr("the mlp model has no GPU kernels yet"));
}

TEST(DeviceTest, CudaIsRefusedNamingWhatIsMissing) {
  auto no_build = ChooseDevice(kCuda0, "mlp", DeviceProbe{});
  EXPECT_TRUE(absl::IsFailedPrecondition(no_build.status()));
  EXPECT_THAT(Message(no_build), HasSubstr("--device=cuda:0: this build has no CUDA"));
  EXPECT_THAT(Message(ChooseDevice(kCuda0, "mlp", DeviceProbe{.cuda_built = true})),
              HasSubstr("no CUDA device is visible"));
  EXPECT_THAT(Message(ChooseDevice(kCuda2, "ctr", DeviceProbe{.cuda_built = true, .gpus = 2})),
              HasSubstr("cuda:2 is not visible (2 CUDA devices)"));
  EXPECT_THAT(Message(ChooseDevice(kCuda0, "ctr", DeviceProbe{.cuda_built = true, .gpus = 2})),
              HasSubstr("the ctr model has no GPU kernels yet"));
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
