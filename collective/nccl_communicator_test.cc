// NcclCommunicator with one rank (the machines lent here have one GPU: more ranks cannot run
// here). Skips without a visible GPU; what needs no GPU (refusals) runs everywhere.
#include "collective/nccl_communicator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "compression/half.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(NcclCommunicatorTest, NoSuchDeviceIsRefusedNotCrashed) {
  const int gpus = VisibleCudaDevices();
  EXPECT_GE(gpus, 0);
  EXPECT_EQ(ProbeCudaDevice(gpus, "h").status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ProbeCudaDevice(-1, "h").status().code(), absl::StatusCode::kFailedPrecondition);
  NcclId id{};
  auto made = NcclCommunicator::Create(0, 1, gpus, id);
  EXPECT_EQ(made.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(made.status().message(), HasSubstr("no CUDA device"));
  EXPECT_EQ(NcclCommunicator::Create(1, 1, 0, id).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class OneRankNcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (VisibleCudaDevices() == 0) {
      GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount failed or found none): the one-rank "
                      "NCCL test needs one";
    }
  }
};

TEST_F(OneRankNcclTest, ProbeNamesTheGpu) {
  auto d = ProbeCudaDevice(0, "this-host");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->gpu());
  EXPECT_EQ(d->host, "this-host");
  EXPECT_FALSE(d->pci_bus_id.empty());
  EXPECT_THAT(d->uuid, StartsWith("GPU-"));
  EXPECT_EQ(d->uuid.size(), 4u + 36u);
}

TEST_F(OneRankNcclTest, AllReduceOfOneRankIsTheBufferItself) {
  auto id = NewNcclId();
  ASSERT_TRUE(id.ok()) << id.status();
  auto nccl = NcclCommunicator::Create(0, 1, 0, *id, NcclOptions{.timeout = absl::Seconds(60)});
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->size(), 1);
  EXPECT_STREQ((*nccl)->name(), "nccl");
  std::mt19937 rng(16);
  std::normal_distribution<float> normal;
  // Growing, then shrinking: the device buffer is kept and regrown.
  for (size_t n : {size_t{1}, size_t{7}, size_t{1024}, size_t{65537}, size_t{1} << 20,
                   size_t{1000000}, size_t{3}}) {
    std::vector<float> data(n);
    for (float& v : data) v = normal(rng);
    const std::vector<float> before = data;
    ASSERT_TRUE(
        (*nccl)->AllReduce(std::span<float>(data), Algorithm::kAuto, WireType::kFloat32).ok())
        << n;
    ASSERT_EQ(data, before) << "n = " << n;
  }
  // Half on the wire: each value rounded to half.
  std::vector<float> data = {1.0f, 0.1f, 65504.0f, 1e-8f, -3.14159f};
  std::vector<float> want;
  for (float v : data) {
    want.push_back(compression_internal::HalfToFloat(compression_internal::FloatToHalf(v)));
  }
  ASSERT_TRUE(
      (*nccl)->AllReduce(std::span<float>(data), Algorithm::kRing, WireType::kFloat16).ok());
  EXPECT_EQ(data, want);
  EXPECT_NE(data[1], 0.1f);  // the rounding happened
}

}  // namespace
}  // namespace syncline
