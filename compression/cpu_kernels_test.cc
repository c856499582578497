#include "compression/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "compression/half.h"
#include "compression/wire.h"

namespace syncline::compression_internal {
namespace {

std::vector<float> RandomGradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(HalfTest, KnownConversions) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);   // largest half
  EXPECT_EQ(FloatToHalf(65519.99f), 0x7bff);  // below the halfway point
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);   // the tie rounds to even: infinity
  EXPECT_EQ(FloatToHalf(1e9f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-INFINITY), 0xfc00);
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::quiet_NaN()) & 0x7e00, 0x7e00);
  EXPECT_EQ(FloatToHalf(1.0f + 0x1p-11f), 0x3c00);      // tie to even (down)
  EXPECT_EQ(FloatToHalf(1.0f + 3 * 0x1p-11f), 0x3c02);  // tie to even (up)
  EXPECT_EQ(FloatToHalf(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalf(0x1p-14f - 0x1p-26f), 0x0400);  // rounds up into the normals
  EXPECT_EQ(FloatToHalf(0x1p-24f), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(0x1p-25f), 0x0000);             // tie to even: zero
  EXPECT_EQ(FloatToHalf(1.5f * 0x1p-25f), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * 0x1p-25f), 0x0002);  // 1.5 units: tie to even
  EXPECT_EQ(FloatToHalf(-5 * 0x1p-24f), 0x8005);
  EXPECT_EQ(FloatToHalf(1e-30f), 0x0000);
  EXPECT_EQ(HalfToFloat(0x0001), 0x1p-24f);
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7c01)));
}

TEST(HalfTest, EveryHalfSurvivesARoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const bool signalling_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0 && !(h & 0x200);
    const uint16_t expected = static_cast<uint16_t>(signalling_nan ? (h | 0x200) : h);
    ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), expected) << std::hex << h;
  }
}

// Floats spread over every exponent, plus the neighbourhoods of every half's rounding edges.
std::vector<float> ConversionProbes() {
  std::vector<float> probes;
  for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 4093) {
    probes.push_back(BitsToFloat(static_cast<uint32_t>(bits)));
  }
  for (uint32_t h = 0; h < 0x10000; h += 7) {
    const uint32_t f = FloatBits(HalfToFloat(static_cast<uint16_t>(h)));
    for (const uint32_t delta : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u}) {
      probes.push_back(BitsToFloat(f + delta));
      probes.push_back(BitsToFloat(f - delta));
    }
  }
  return probes;
}

class Avx2KernelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Avx2Kernels() == nullptr) GTEST_SKIP() << "no AVX2 and F16C on this CPU";
  }
  const CpuKernels& portable = PortableKernels();
  const CpuKernels& avx2 = *Avx2Kernels();
};

TEST_F(Avx2KernelsTest, HalfConversionsMatchF16C) {
  const std::vector<float> probes = ConversionProbes();
  std::vector<std::byte> a(2 * probes.size()), b(2 * probes.size());
  portable.float_to_half(probes.data(), probes.size(), a.data());
  avx2.float_to_half(probes.data(), probes.size(), b.data());
  for (size_t i = 0; i < probes.size(); ++i) {
    ASSERT_EQ(std::memcmp(a.data() + 2 * i, b.data() + 2 * i, 2), 0)
        << std::hex << FloatBits(probes[i]);
  }
  std::vector<std::byte> halves(2 * 0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) std::memcpy(halves.data() + 2 * h, &h, 2);
  std::vector<float> x(0x10000, 0.0f), y(0x10000, 0.0f);
  portable.half_add(halves.data(), 0x10000, 1.0f, x.data());
  avx2.half_add(halves.data(), 0x10000, 1.0f, y.data());
  for (uint32_t h = 0; h < 0x10000; ++h) ASSERT_EQ(FloatBits(x[h]), FloatBits(y[h])) << h;
}

TEST_F(Avx2KernelsTest, DenseAddMatches) {
  const std::vector<float> g = RandomGradient(1027, 1);
  std::vector<float> x = RandomGradient(1027, 2), y = x;
  portable.float_add(reinterpret_cast<const std::byte*>(g.data()), g.size(), -0.75f, x.data());
  avx2.float_add(reinterpret_cast<const std::byte*>(g.data()), g.size(), -0.75f, y.data());
  EXPECT_EQ(x, y);
}

// The scale of a chunk in the order codec.h defines, written out plainly.
float ReferenceScale(const float* v, size_t len) {
  float lanes[32] = {};
  for (size_t i = 0; i < len; ++i) lanes[i % 32] = lanes[i % 32] + std::fabs(v[i]);
  for (size_t h = 16; h > 0; h /= 2) {
    for (size_t j = 0; j < h; ++j) lanes[j] = lanes[j] + lanes[j + h];
  }
  return lanes[0] / static_cast<float>(len);
}

TEST(Sign1KernelTest, BothVersionsGiveTheSameBitsAsTheReference) {
  std::vector<const CpuKernels*> versions = {&PortableKernels()};
  if (Avx2Kernels() != nullptr) versions.push_back(Avx2Kernels());
  for (const size_t n : {1, 7, 31, 32, 33, 100, 1000, 70001}) {
    std::vector<float> v = RandomGradient(n, n);
    for (size_t i = 0; i < n; i += 13) v[i] *= 1e6f;  // make the summation order matter
    for (const size_t spec_chunk : {1, 3, 8, 31, 32, 64, 100, 512, 16384, 20000}) {
      const size_t chunk = Sign1Chunk(static_cast<uint32_t>(spec_chunk), n);
      const size_t chunks = (n + chunk - 1) / chunk;
      for (const CpuKernels* k : versions) {
        std::vector<std::byte> scales(4 * chunks), bits((n + 7) / 8, std::byte{0xff});
        k->sign1_encode(v.data(), n, chunk, scales.data(), bits.data());
        for (size_t c = 0; c < chunks; ++c) {
          const float expected =
              ReferenceScale(v.data() + c * chunk, std::min(chunk, n - c * chunk));
          ASSERT_EQ(FloatBits(LoadF32(scales.data() + 4 * c)), FloatBits(expected))
              << k->name << " n=" << n << " chunk=" << chunk << " c=" << c;
        }
        for (size_t i = 0; i < bits.size() * 8; ++i) {
          const uint32_t bit = (static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1;
          ASSERT_EQ(bit, i < n ? FloatBits(v[i]) >> 31 : 0u) << k->name << " n=" << n << " i=" << i;
        }
        std::vector<float> out(n, 1.0f);
        k->sign1_decode_add(scales.data(), chunk, bits.data(), n, 2.0f, out.data());
        for (size_t i = 0; i < n; ++i) {
          const float s = 2.0f * LoadF32(scales.data() + 4 * (i / chunk));
          ASSERT_EQ(out[i], 1.0f + (std::signbit(v[i]) ? -s : s)) << k->name << " i=" << i;
        }
      }
    }
  }
}

TEST(SelectKernelTest, BothVersionsFindTheSameCandidates) {
  std::vector<const CpuKernels*> versions = {&PortableKernels()};
  if (Avx2Kernels() != nullptr) versions.push_back(Avx2Kernels());
  std::vector<float> v = RandomGradient(10007, 9);
  v[17] = NAN;
  v[18] = -INFINITY;
  for (const float t : {0.0f, 0.5f, 2.0f, 3.5f, INFINITY}) {
    const uint32_t threshold = MagnitudeKey(t);
    std::vector<uint64_t> expected;
    for (size_t i = 0; i < v.size(); ++i) {
      if (MagnitudeKey(v[i]) >= threshold) expected.push_back(i);
    }
    for (const CpuKernels* k : versions) {
      std::vector<uint64_t> cand(v.size());
      std::vector<uint32_t> keys(v.size());
      const size_t count =
          k->select_at_least(v.data(), v.size(), threshold, cand.data(), keys.data(), cand.size());
      cand.resize(count);
      EXPECT_EQ(cand, expected) << k->name << " t=" << t;
      for (size_t j = 0; j < count; ++j) ASSERT_EQ(keys[j], MagnitudeKey(v[cand[j]]));
      if (!expected.empty()) {
        EXPECT_EQ(k->select_at_least(v.data(), v.size(), threshold, cand.data(), keys.data(),
                                     expected.size() - 1),
                  kTooMany);
      }
    }
  }
}

}  // namespace
}  // namespace syncline::compression_internal
