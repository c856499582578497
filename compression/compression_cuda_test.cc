// The CUDA codecs against the CPU reference: the same bytes from Encode, the same floats from
// DecodeAdd, the same refusals. Skipped without a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "compression/codec.h"
#include "compression/codec_cuda.h"
#include "job/options.h"

namespace syncline {
namespace {

class CudaCodecTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!CudaAvailable()) GTEST_SKIP() << "no CUDA device";
  }
};

constexpr uint64_t kSeed = 1234;

std::vector<float> Values(const std::string& kind, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (kind == "ties") {
      v[i] = static_cast<float>(static_cast<int>(rng() % 5) - 2);
    } else if (kind == "specials" && rng() % 40 == 0) {
      const float specials[] = {INFINITY, -INFINITY, NAN, -0.0f, 1e-30f, 70000.0f, 0x1p-25f};
      v[i] = specials[rng() % 7];
    } else {
      v[i] = normal(rng) * (i % 97 == 0 ? 1000.0f : 1.0f);
    }
  }
  return v;
}

// A NaN in a sign1 chunk makes its scale NaN, whose payload the GPU does not keep (it returns
// the canonical NaN). No decoder accepts such a block, so only "NaN" has to agree.
void CanonicalizeNanScales(std::vector<std::byte>* block) {
  uint32_t chunks;
  std::memcpy(&chunks, block->data() + 4, 4);
  for (uint32_t c = 0; c < chunks; ++c) {
    float scale;
    std::memcpy(&scale, block->data() + 8 + 4 * c, 4);
    if (std::isnan(scale)) std::memcpy(block->data() + 8 + 4 * c, "\xff\xff\xff\x7f", 4);
  }
}

TEST_F(CudaCodecTest, EncodeGivesTheCpuBytes) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  for (const std::string text :
       {"none", "fp16", "sign1", "sign1:100", "sign1:1", "topk:0.01", "topk:0.5", "topk:1"}) {
    const CodecSpec spec = *ParseCodec(text);
    std::unique_ptr<Codec> cpu = Codec::Create(spec);
    for (const size_t n : {size_t{1}, size_t{100}, size_t{1000}, size_t{65539}, size_t{1} << 20}) {
      for (const std::string kind : {"normal", "ties", "specials"}) {
        const std::vector<float> v = Values(kind, n, kSeed + n);
        std::vector<std::byte> expected, got;
        cpu->Encode(v, &expected);
        absl::Status status = CudaEncode(spec, v, &got);
        ASSERT_TRUE(status.ok()) << status;
        if (spec.kind == CodecKind::kSign1) {
          CanonicalizeNanScales(&expected);
          CanonicalizeNanScales(&got);
        }
        ASSERT_EQ(got.size(), expected.size()) << text << " n=" << n << " " << kind;
        ASSERT_TRUE(std::memcmp(got.data(), expected.data(), got.size()) == 0)
            << text << " n=" << n << " " << kind;
      }
    }
  }
}

// The selection runs on the device from start to end; several tiles, many ties at the cut
// and a repeated use of one codec (its state must start afresh) against the CPU's bytes.
// Small enough for compute-sanitizer's racecheck.
TEST_F(CudaCodecTest, TopKSelectionOnTheDeviceAcrossTilesAndTies) {
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  const size_t n = 3 * 4096 + 77;
  for (const std::string text : {"topk:0.01", "topk:0.3"}) {
    const CodecSpec spec = *ParseCodec(text);
    std::unique_ptr<Codec> cpu = Codec::Create(spec);
    absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(spec, n);
    ASSERT_TRUE(codec.ok()) << codec.status();
    for (const std::string kind : {"ties", "normal", "ties"}) {
      const std::vector<float> v = Values(kind, n, kSeed);
      std::vector<std::byte> expected, got;
      cpu->Encode(v, &expected);
      ASSERT_TRUE((*codec)->UploadInput(v).ok());
      ASSERT_TRUE((*codec)->EncodeOnDevice(n).ok());
      absl::Status status = (*codec)->DownloadBlock(&got);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(got, expected) << text << " " << kind;
    }
  }
}

TEST_F(CudaCodecTest, DecodeAddGivesTheCpuFloats) {
  for (const std::string text : {"none", "fp16", "sign1", "sign1:100", "topk:0.01"}) {
    const CodecSpec spec = *ParseCodec(text);
    std::unique_ptr<Codec> cpu = Codec::Create(spec);
    for (const size_t n : {size_t{1}, size_t{1000}, size_t{65539}}) {
      const std::vector<float> v = Values("normal", n, kSeed);
      std::vector<std::byte> block;
      cpu->Encode(v, &block);
      std::vector<float> expected = Values("normal", n, kSeed + 1), got = expected;
      ASSERT_TRUE(cpu->DecodeAdd(block, expected, -0.3f).ok());
      absl::Status status = CudaDecodeAdd(spec, block, got, -0.3f);
      ASSERT_TRUE(status.ok()) << status;
      ASSERT_EQ(got, expected) << text << " n=" << n;
    }
  }
}

TEST_F(CudaCodecTest, RefusesWhatTheCpuRefusesAndLeavesOutAlone) {
  const CodecSpec spec = *ParseCodec("topk:0.1");
  std::unique_ptr<Codec> cpu = Codec::Create(spec);
  std::vector<std::byte> block;
  cpu->Encode(Values("normal", 100, kSeed), &block);
  std::memcpy(block.data() + 4 + 4 * 9, block.data() + 4 + 4 * 8, 4);  // a repeated index
  std::vector<float> out(100, 2.0f);
  absl::Status status = CudaDecodeAdd(spec, block, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, std::vector<float>(100, 2.0f));
}

TEST_F(CudaCodecTest, DeviceStepsRoundTrip) {
  const size_t n = 1 << 16;
  absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(*ParseCodec("sign1"), n);
  ASSERT_TRUE(codec.ok()) << codec.status();
  const std::vector<float> v = Values("normal", n, kSeed);
  ASSERT_TRUE((*codec)->UploadInput(v).ok());
  ASSERT_TRUE((*codec)->EncodeOnDevice(n).ok());
  ASSERT_TRUE((*codec)->UploadOutput(std::vector<float>(n, 0.0f)).ok());
  ASSERT_TRUE((*codec)->DecodeAddOnDevice(n).ok());
  std::vector<float> out(n);
  ASSERT_TRUE((*codec)->DownloadOutput(out).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(std::signbit(out[i]), std::signbit(v[i])) << i;
  EXPECT_EQ((*codec)->DecodeAddOnDevice(n - 1).code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<double> copy = (*codec)->TimeDeviceCopy(n, 3);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_GT(*copy, 0);
}

TEST(CudaCodecWithoutDeviceTest, CreateFailsCleanlyOrWorks) {
  absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(CodecSpec{}, 16);
  if (CudaAvailable()) {
    EXPECT_TRUE(codec.ok()) << codec.status();
  } else {
    EXPECT_EQ(codec.status().code(), absl::StatusCode::kFailedPrecondition);
  }
  EXPECT_EQ(CudaCodec::Create(CodecSpec{CodecKind::kTopK, 2.0}, 16).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace syncline
