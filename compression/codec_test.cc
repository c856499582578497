#include "compression/codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "compression/wire.h"
#include "job/options.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;

std::vector<float> RandomGradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

std::unique_ptr<Codec> MustCreate(const std::string& text) {
  absl::StatusOr<CodecSpec> spec = ParseCodec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  std::unique_ptr<Codec> codec = Codec::Create(*spec);
  EXPECT_NE(codec, nullptr);
  return codec;
}

std::vector<float> Decode(const Codec& codec, std::span<const std::byte> block, size_t n) {
  std::vector<float> out(n, 0.0f);
  absl::Status status = codec.DecodeAdd(block, out);
  EXPECT_TRUE(status.ok()) << status;
  return out;
}

TEST(ParseCodecTest, AcceptsTheGrammarAndNamesItBack) {
  for (const std::string text :
       {"none", "fp16", "sign1", "sign1:64", "sign1:1", "topk:0.01", "topk:1", "topk:0.25"}) {
    absl::StatusOr<CodecSpec> spec = ParseCodec(text);
    ASSERT_TRUE(spec.ok()) << text << ": " << spec.status();
    EXPECT_EQ(CodecName(*spec), text);
  }
  EXPECT_EQ(ParseCodec("topk:0.125")->ratio, 0.125);
  EXPECT_EQ(ParseCodec("sign1:64")->chunk, 64u);
  EXPECT_EQ(ParseCodec("sign1")->chunk, 512u);
  EXPECT_EQ(ParseCodec("fp16")->kind, CodecKind::kFp16);
  // Any valid spec survives a trip through its name, whatever the ratio's digits.
  for (const double ratio : {1e-5, 0.1, 1.0 / 3.0, 0.123456789012345, 0.999}) {
    const CodecSpec spec{CodecKind::kTopK, ratio};
    absl::StatusOr<CodecSpec> back = ParseCodec(CodecName(spec));
    ASSERT_TRUE(back.ok()) << CodecName(spec);
    EXPECT_EQ(*back, spec) << CodecName(spec);
  }
}

TEST(ParseCodecTest, RejectsAnythingElseNamingTheText) {
  for (const std::string text : {"",          "zip",       "topk",     "topk:",    "topk:0",
                                 "topk:-0.1", "topk:1.5",  "topk:nan", "topk:inf", "topk:abc",
                                 "topk:0.1x", "topk: 0.1", "sign1:0",  "sign1:-3", "sign1:16777217",
                                 "sign1:abc", "sign1:",    "none:1",   "fp16:2",   "TOPK:0.1"}) {
    absl::StatusOr<CodecSpec> spec = ParseCodec(text);
    ASSERT_FALSE(spec.ok()) << "accepted \"" << text << "\"";
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr("\"" + text + "\""));
  }
}

TEST(CodecSpecTest, CreateRefusesInvalidSpecsAndUnknownWireBytes) {
  EXPECT_EQ(Codec::Create(CodecSpec{CodecKind::kTopK, 0.0}), nullptr);
  EXPECT_EQ(Codec::Create(CodecSpec{CodecKind::kTopK, 1.5}), nullptr);
  EXPECT_EQ(Codec::Create(CodecSpec{CodecKind::kSign1, 0.01, 0}), nullptr);
  EXPECT_EQ(Codec::Create(CodecSpec{static_cast<CodecKind>(9)}), nullptr);
  for (uint8_t byte = 0; byte <= 3; ++byte) {
    absl::StatusOr<CodecKind> kind = CodecKindFromWire(byte);
    ASSERT_TRUE(kind.ok());
    EXPECT_EQ(static_cast<uint8_t>(*kind), byte);
    EXPECT_NE(Codec::Create(CodecSpec{*kind}), nullptr);
  }
  EXPECT_EQ(CodecKindFromWire(4).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecSpecTest, TopKCountIsTheCeilingOfRatioTimesN) {
  EXPECT_EQ(TopKCount(0.01, 10000), 100u);
  EXPECT_EQ(TopKCount(0.07, 100), 7u);  // 0.07 * 100 is 7.000000000000001 in double
  EXPECT_EQ(TopKCount(0.3, 10), 3u);
  EXPECT_EQ(TopKCount(0.31, 10), 4u);
  EXPECT_EQ(TopKCount(0.01, 50), 1u);
  EXPECT_EQ(TopKCount(1e-9, 5), 1u);
  EXPECT_EQ(TopKCount(1.0, 5), 5u);
  EXPECT_EQ(TopKCount(0.5, 0), 0u);
}

// ValidateBlock accepts what DecodeAdd accepts: an encoder's own block, not a cut one or one
// for fewer entries (top-K: an index out of range), nor sign1's block of a NaN gradient (its
// scale is NaN).
TEST(CodecTest, ValidateBlockAcceptsWhatDecodeAddAccepts) {
  const std::vector<float> values = {0.5f, -2.0f, 0.0f, 3.0f, -1.0f};
  for (const char* name : {"none", "fp16", "topk:0.4", "sign1:2"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = *ParseCodec(name);
    std::vector<std::byte> block;
    Codec::Create(spec)->Encode(values, &block);
    EXPECT_TRUE(ValidateBlock(spec.kind, block, values.size()).ok());
    EXPECT_FALSE(ValidateBlock(spec.kind, block, 2).ok());
    block.pop_back();
    EXPECT_FALSE(ValidateBlock(spec.kind, block, values.size()).ok());
  }
  std::vector<std::byte> nan_block;
  const std::vector<float> nan_values = {1.0f, NAN};
  Codec::Create(*ParseCodec("sign1"))->Encode(nan_values, &nan_block);
  EXPECT_FALSE(ValidateBlock(CodecKind::kSign1, nan_block, 2).ok());
}

TEST(CodecTest, EncodedSizeIsTheBlockSize) {
  for (const std::string text : {"none", "fp16", "topk:0.01", "topk:0.5", "topk:1", "sign1",
                                 "sign1:1", "sign1:7", "sign1:64"}) {
    std::unique_ptr<Codec> codec = MustCreate(text);
    for (const size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 511, 512, 513, 10000}) {
      std::vector<std::byte> block;
      codec->Encode(RandomGradient(n, n), &block);
      EXPECT_EQ(block.size(), codec->EncodedSize(n)) << text << " n=" << n;
      EXPECT_EQ(Decode(*codec, block, n).size(), n);
    }
  }
}

TEST(CodecTest, NoneIsExactAndDecodeAddsScaled) {
  std::unique_ptr<Codec> codec = MustCreate("none");
  const std::vector<float> g = RandomGradient(1001, 1);
  std::vector<std::byte> block;
  codec->Encode(g, &block);
  EXPECT_EQ(Decode(*codec, block, g.size()), g);
  std::vector<float> out(g.size(), 1.0f);
  ASSERT_TRUE(codec->DecodeAdd(block, out, 2.0f).ok());
  for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(out[i], 1.0f + 2.0f * g[i]);
}

TEST(CodecTest, Fp16KeepsHalfPrecision) {
  std::unique_ptr<Codec> codec = MustCreate("fp16");
  std::vector<float> g = RandomGradient(1003, 2);
  g.push_back(0.5f);
  g.push_back(-1000.5f);  // exactly representable
  g.push_back(std::numeric_limits<float>::infinity());
  g.push_back(1e6f);  // overflows to infinity
  std::vector<std::byte> block;
  codec->Encode(g, &block);
  const std::vector<float> out = Decode(*codec, block, g.size());
  for (size_t i = 0; i < 1003; ++i) {
    ASSERT_NEAR(out[i], g[i], std::max(std::fabs(g[i]) * 0x1p-11f, 0x1p-25f)) << i;
  }
  EXPECT_EQ(out[1003], 0.5f);
  EXPECT_EQ(out[1004], -1000.5f);
  EXPECT_EQ(out[1005], std::numeric_limits<float>::infinity());
  EXPECT_EQ(out[1006], std::numeric_limits<float>::infinity());
}

TEST(CodecTest, TopKKeepsExactlyTheKLargest) {
  for (const size_t n : {size_t{10000}, size_t{1} << 18}) {  // the exact and sampled paths
    std::unique_ptr<Codec> codec = MustCreate("topk:0.01");
    const std::vector<float> g = RandomGradient(n, 3);
    std::vector<std::byte> block;
    codec->Encode(g, &block);
    const size_t k = TopKCount(0.01, n);
    ASSERT_EQ(compression_internal::LoadU32(block.data()), k);
    const std::vector<float> out = Decode(*codec, block, n);
    float smallest_kept = INFINITY;
    float largest_dropped = 0;
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (out[i] != 0) {
        ++kept;
        ASSERT_EQ(out[i], g[i]);
        smallest_kept = std::min(smallest_kept, std::fabs(g[i]));
      } else {
        largest_dropped = std::max(largest_dropped, std::fabs(g[i]));
      }
    }
    EXPECT_EQ(kept, k);
    EXPECT_GT(smallest_kept, largest_dropped);
  }
}

TEST(CodecTest, TopKBreaksTiesTowardsLowerIndices) {
  std::unique_ptr<Codec> codec = MustCreate("topk:0.3");
  const std::vector<float> g = {1, -2, 2, 0, 2, -2, 1, 0, 0, 0};  // K = 3 of four |2|s
  std::vector<std::byte> block;
  codec->Encode(g, &block);
  EXPECT_EQ(Decode(*codec, block, g.size()), (std::vector<float>{0, -2, 2, 0, 2, 0, 0, 0, 0, 0}));
}

TEST(CodecTest, Sign1DecodesToPlusMinusTheChunkMean) {
  std::unique_ptr<Codec> codec = MustCreate("sign1:64");
  const size_t n = 1000;  // 15 full chunks and one of 40
  std::vector<float> g = RandomGradient(n, 4);
  g[5] = 0.0f;
  g[6] = -0.0f;
  std::vector<std::byte> block;
  codec->Encode(g, &block);
  const std::vector<float> out = Decode(*codec, block, n);
  for (size_t begin = 0; begin < n; begin += 64) {
    const size_t end = std::min(n, begin + 64);
    double sum = 0;
    for (size_t i = begin; i < end; ++i) sum += std::fabs(g[i]);
    const double mean = sum / static_cast<double>(end - begin);
    for (size_t i = begin; i < end; ++i) {
      ASSERT_NEAR(std::fabs(out[i]), mean, 1e-6 * mean) << i;
      ASSERT_EQ(std::signbit(out[i]), std::signbit(g[i])) << i;
    }
  }
}

// ---- malformed blocks ---------------------------------------------------------------------

// Checks that decoding `block` as n entries fails naming `problem` and leaves `out` alone.
void ExpectRejected(const Codec& codec, const std::vector<std::byte>& block, size_t n,
                    const std::string& problem) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = 0.5f + static_cast<float>(i);
  const std::vector<float> before = out;
  absl::Status status = codec.DecodeAdd(block, out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << problem << ": " << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(problem));
  EXPECT_EQ(out, before) << problem;
}

TEST(MalformedBlockTest, DenseCodecsCheckTheLength) {
  for (const std::string text : {"none", "fp16"}) {
    std::unique_ptr<Codec> codec = MustCreate(text);
    std::vector<std::byte> block;
    codec->Encode(RandomGradient(100, 5), &block);
    ExpectRejected(*codec, block, 101, "expected");
    ExpectRejected(*codec, block, 99, "expected");
    block.pop_back();
    ExpectRejected(*codec, block, 100, "expected");
  }
}

TEST(MalformedBlockTest, TopK) {
  std::unique_ptr<Codec> codec = MustCreate("topk:0.1");
  const size_t n = 100;  // K = 10
  std::vector<std::byte> good;
  codec->Encode(RandomGradient(n, 6), &good);
  auto index = [](std::vector<std::byte>& b, size_t i) { return b.data() + 4 + 4 * i; };
  using compression_internal::LoadU32;
  using compression_internal::StoreU32;

  ExpectRejected(*codec, std::vector<std::byte>(good.begin(), good.end() - 1), n, "bytes");
  ExpectRejected(*codec, std::vector<std::byte>(good.begin(), good.begin() + 3), n, "shorter");
  std::vector<std::byte> b = good;
  StoreU32(b.data(), 11);
  ExpectRejected(*codec, b, n, "expected");
  b = good;
  StoreU32(b.data(), 1000);
  ExpectRejected(*codec, b, n, "K = 1000");
  b = good;
  StoreU32(index(b, 9), n);
  ExpectRejected(*codec, b, n, "out of range");
  b = good;
  const uint32_t i3 = LoadU32(index(b, 3));
  StoreU32(index(b, 3), LoadU32(index(b, 4)));
  StoreU32(index(b, 4), i3);
  ExpectRejected(*codec, b, n, "strictly ascending");
  b = good;
  StoreU32(index(b, 5), LoadU32(index(b, 4)));
  ExpectRejected(*codec, b, n, "strictly ascending");
  // Decoded as fewer entries, the highest index no longer fits.
  ExpectRejected(*codec, good, LoadU32(index(good, 9)), "out of range");
}

TEST(MalformedBlockTest, Sign1) {
  std::unique_ptr<Codec> codec = MustCreate("sign1:64");
  const size_t n = 1001;  // 16 chunks; 126 bytes of bits, the last with 7 padding bits
  std::vector<std::byte> good;
  codec->Encode(RandomGradient(n, 7), &good);
  using compression_internal::StoreF32;
  using compression_internal::StoreU32;

  ExpectRejected(*codec, std::vector<std::byte>(good.begin(), good.end() - 1), n, "bytes");
  ExpectRejected(*codec, std::vector<std::byte>(good.begin(), good.begin() + 7), n, "shorter");
  std::vector<std::byte> b = good;
  StoreU32(b.data(), 0);
  ExpectRejected(*codec, b, n, "chunk size is 0");
  b = good;
  StoreU32(b.data(), 5000);
  ExpectRejected(*codec, b, n, "exceeds n");
  b = good;
  StoreU32(b.data() + 4, 15);
  ExpectRejected(*codec, b, n, "expected 16");
  b = good;
  StoreU32(b.data(), 128);  // a valid chunk size, but then 8 chunks are expected
  ExpectRejected(*codec, b, n, "chunks");
  for (const float bad : {NAN, INFINITY, -1.0f}) {
    b = good;
    StoreF32(b.data() + 8 + 4 * 3, bad);
    ExpectRejected(*codec, b, n, "chunk 3");
  }
  b = good;
  b.back() |= std::byte{0x80};
  ExpectRejected(*codec, b, n, "padding");
  ExpectRejected(*codec, good, n - 1, "expected");  // same chunks, one byte fewer
  ExpectRejected(*codec, good, n + 100, "chunks");
}

}  // namespace
}  // namespace syncline
