// DevicePullCopy on the host executor (which runs the device's kernels serially, holds uploads
// back until a fence and poisons what a kernel reads without its having been written) against
// the CPU's DecodePull: the same rows, to the bit, and the same copy, reply after reply, with a
// server (EncodePull) whose bounded copy evicts rows. The CUDA executor's runs in
// cuda_executor_test.cu, where there is a GPU.
#include "device/pull_copy.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "device/host_executor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/options.h"

namespace syncline {
namespace {

using device_step::HostExecutor;
using testing::HasSubstr;
using Copy = DevicePullCopy<HostExecutor>;

std::vector<uint32_t> Bits(std::span<const float> v) {
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

// Every row of `want` is in `got` with the same bits, and nothing else is.
void ExpectSameCopy(const RowTable& want, const Copy& device) {
  RowTable got(want.dim(), 0);
  ASSERT_TRUE(device.CopyRows(&got).ok());
  ASSERT_EQ(got.size(), want.size());
  want.ForEach([&](uint64_t key, uint64_t, const RowMeta&, const float* row) {
    const float* g = got.Find(key);
    ASSERT_NE(g, nullptr) << key;
    EXPECT_EQ(Bits({g, want.dim()}), Bits({row, want.dim()})) << key;
  });
}

std::span<const std::byte> Bytes(const std::vector<float>& v) {
  return std::as_bytes(std::span<const float>(v));
}

struct Case {
  std::string codec;
  uint32_t dim;
  size_t server_rows;  // the server's copy (0: unbounded)
  bool scattered;      // replies placed among a batch's rows (a shard's)
  friend void PrintTo(const Case& c, std::ostream* os) {
    *os << c.codec << " dim " << c.dim << " server rows " << c.server_rows
        << (c.scattered ? " scattered" : "");
  }
};

class DevicePullCopyTest : public testing::TestWithParam<Case> {};

// 40 pulls of keys drawn from 120 ids, the server's rows moving between them: each reply
// decoded by the CPU and by the device gives the same rows and the same copy.
TEST_P(DevicePullCopyTest, RepliesDecodeToTheCpusRowsAndCopy) {
  const Case& c = GetParam();
  const CodecSpec spec = *ParseCodec(c.codec);
  const uint64_t seed = 20261204;
  SCOPED_TRACE(testing::Message() << c.codec << " dim " << c.dim << " seed " << seed);
  std::mt19937_64 rng(seed);
  std::unique_ptr<Codec> codec = Codec::Create(spec);
  RowTable server(c.dim, c.server_rows), cpu(c.dim, 0);
  HostExecutor e;
  auto made = Copy::Create(e, spec.kind, c.dim);
  ASSERT_TRUE(made.ok()) << made.status();
  Copy& device = **made;
  constexpr uint64_t kIds = 120;
  std::vector<float> current(kIds * c.dim);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : current) v = normal(rng);
  HostExecutor::Array<float> out;
  for (int pull = 0; pull < 40; ++pull) {
    SCOPED_TRACE(pull);
    // The server's rows move (a few a lot), and a pull takes a random subset, ascending.
    for (float& v : current) v += 0.05f * normal(rng);
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < kIds; ++k) {
      if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) keys.push_back(k);
    }
    if (pull == 7) keys.clear();  // an empty pull
    std::vector<float> values;
    for (uint64_t k : keys) {
      values.insert(values.end(), current.begin() + k * c.dim, current.begin() + (k + 1) * c.dim);
    }
    PulledRows reply;
    EncodePull(*codec, keys, values, pull + 1, &server, &reply);
    // The batch: the pull's rows among as many others (a shard's share), or in order.
    const size_t batch_rows = c.scattered ? 2 * keys.size() + 1 : keys.size();
    std::vector<uint32_t> places;
    if (c.scattered) {
      for (size_t i = 0; i < keys.size(); ++i) places.push_back(static_cast<uint32_t>(2 * i + 1));
    }
    std::vector<float> want(keys.size() * c.dim);
    ASSERT_TRUE(DecodePull(spec.kind, keys, Bytes(reply.fresh), reply.block, reply.evicted, &cpu,
                           std::span<float>(want))
                    .ok());
    out.Reserve(batch_rows * c.dim + 1);
    std::fill(out.data(), out.data() + batch_rows * c.dim, -7.0f);  // rows no reply writes
    ASSERT_TRUE(device
                    .Apply(keys, places, Bytes(reply.fresh), reply.block, reply.evicted, out.data(),
                           batch_rows)
                    .ok());
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t place = c.scattered ? places[i] : i;
      EXPECT_EQ(Bits({out.data() + place * c.dim, c.dim}), Bits({want.data() + i * c.dim, c.dim}))
          << "row of key " << keys[i];
    }
    if (c.scattered) {
      for (size_t r = 0; r < batch_rows; r += 2) {
        EXPECT_EQ(out.data()[r * c.dim], -7.0f) << "row " << r << " is no key's";
      }
    }
    EXPECT_EQ(device.size(), cpu.size());
  }
  ExpectSameCopy(cpu, device);
  if (c.server_rows > 0) {
    EXPECT_LE(device.size(), c.server_rows) << "rows were evicted";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, DevicePullCopyTest,
    testing::Values(Case{"fp16", 8, 0, false}, Case{"fp16", 16, 40, true},
                    Case{"topk:0.3", 1, 0, true}, Case{"topk:0.05", 16, 40, false},
                    Case{"sign1", 4, 0, false}, Case{"sign1:16", 16, 50, true}),
    [](const testing::TestParamInfo<Case>& info) {
      std::string name = info.param.codec + "_" + std::to_string(info.param.dim) + "_" +
                         std::to_string(info.param.server_rows) +
                         (info.param.scattered ? "_scattered" : "");
      std::replace_if(
          name.begin(), name.end(), [](char ch) { return ch == ':' || ch == '.'; }, '_');
      return name;
    });

// Replies that do not fit the copy are refused, naming what does not fit, and change nothing:
// the next good reply still decodes to the CPU's rows.
TEST(DevicePullCopyRefusalTest, RepliesThatDoNotFitChangeNothing) {
  const CodecSpec spec = *ParseCodec("fp16");
  constexpr uint32_t kDim = 4;
  std::unique_ptr<Codec> codec = Codec::Create(spec);
  RowTable server(kDim, 0), cpu(kDim, 0);
  HostExecutor e;
  auto made = Copy::Create(e, spec.kind, kDim);
  ASSERT_TRUE(made.ok());
  Copy& device = **made;
  HostExecutor::Array<float> out;
  out.Reserve(64);
  auto pull = [&](const std::vector<uint64_t>& keys, float base, PulledRows* reply) {
    std::vector<float> values;
    for (uint64_t k : keys) {
      for (uint32_t j = 0; j < kDim; ++j) values.push_back(base + k + 0.25f * j);
    }
    EncodePull(*codec, keys, values, 1, &server, reply);
  };
  PulledRows first;
  const std::vector<uint64_t> first_keys = {1, 2, 3};
  pull(first_keys, 1.0f, &first);
  std::vector<float> rows(3 * kDim);
  ASSERT_TRUE(
      DecodePull(spec.kind, first_keys, Bytes(first.fresh), first.block, {}, &cpu, rows).ok());
  ASSERT_TRUE(
      device.Apply(first_keys, {}, Bytes(first.fresh), first.block, {}, out.data(), 3).ok());

  PulledRows second;  // rows 2 and 3 held, 4 new
  pull({2, 3, 4}, 2.0f, &second);
  const std::vector<uint64_t> keys = {2, 3, 4};
  auto refused = [&](std::span<const uint32_t> places, std::span<const std::byte> fresh,
                     std::span<const std::byte> block, std::span<const uint64_t> evicted,
                     size_t out_rows) {
    const absl::Status s = device.Apply(keys, places, fresh, block, evicted, out.data(), out_rows);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  };
  EXPECT_THAT(refused({}, Bytes(second.fresh).subspan(4), second.block, {}, 3),
              HasSubstr("bytes of new rows"));
  EXPECT_THAT(refused({}, Bytes(second.fresh), std::span(second.block).subspan(2), {}, 3),
              HasSubstr("compressed pull:"));
  const std::vector<uint64_t> not_held = {9}, pulled = {3};
  EXPECT_THAT(refused({}, Bytes(second.fresh), second.block, not_held, 3),
              HasSubstr("does not hold"));
  EXPECT_THAT(refused({}, Bytes(second.fresh), second.block, pulled, 3), HasSubstr("is pulling"));
  const std::vector<uint32_t> beyond = {0, 1, 5}, short_places = {0};
  EXPECT_THAT(refused(beyond, Bytes(second.fresh), second.block, {}, 3),
              HasSubstr("goes to row 5 of a batch of 3 rows"));
  EXPECT_THAT(refused(short_places, Bytes(second.fresh), second.block, {}, 3),
              HasSubstr("1 places for the rows of 3 keys"));
  EXPECT_EQ(device.size(), 3u);
  {
    // Every row new (none held): a block is one too many.
    const std::vector<uint64_t> new_keys = {7, 8};
    const std::vector<float> new_rows(2 * kDim, 0.5f);
    const absl::Status s =
        device.Apply(new_keys, {}, Bytes(new_rows), second.block, {}, out.data(), 2);
    EXPECT_THAT(std::string(s.message()), HasSubstr("a delta block for no known rows"));
    EXPECT_EQ(device.size(), 3u);
  }

  // The good reply after them: the CPU's rows and copy.
  ASSERT_TRUE(DecodePull(spec.kind, keys, Bytes(second.fresh), second.block, {}, &cpu, rows).ok());
  ASSERT_TRUE(device.Apply(keys, {}, Bytes(second.fresh), second.block, {}, out.data(), 3).ok());
  EXPECT_EQ(Bits({out.data(), 3 * kDim}), Bits(rows));
  ExpectSameCopy(cpu, device);

  // A reply of no rows still drops the rows the server dropped.
  const std::vector<uint64_t> none, dropped = {1};
  std::vector<float> no_rows;
  ASSERT_TRUE(DecodePull(spec.kind, none, {}, {}, dropped, &cpu, no_rows).ok());
  ASSERT_TRUE(device.Apply(none, {}, {}, {}, dropped, out.data(), 0).ok());
  ExpectSameCopy(cpu, device);
  EXPECT_EQ(device.size(), 3u);  // 2, 3 and 4
  EXPECT_FALSE(Copy::Create(e, CodecKind::kNone, kDim).ok());
}

}  // namespace
}  // namespace syncline
