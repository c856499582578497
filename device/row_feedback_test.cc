// DeviceRowFeedback on the host executor (which runs the device's kernels serially, and
// poisons what a kernel reads without its having been written) against the CPU's
// SparseErrorFeedback: the same SparsePush, to the byte, push after push. The CUDA executor's
// runs through the device models' tests (device_model_test.cc), where there is a GPU.
#include "device/row_feedback.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "device/host_executor.h"
#include "gtest/gtest.h"
#include "job/options.h"

namespace syncline {
namespace {

using device_step::HostExecutor;
using Feedback = DeviceRowFeedback<HostExecutor>;

// Floats equal as bits (NaNs included).
std::vector<uint32_t> Bits(const std::vector<float>& v) {
  std::vector<uint32_t> bits(v.size());
  if (!v.empty()) std::memcpy(bits.data(), v.data(), v.size() * sizeof(float));
  return bits;
}

void ExpectSamePush(const SparsePush& want, const SparsePush& got) {
  EXPECT_EQ(got.keys, want.keys);
  EXPECT_EQ(got.kind, want.kind);
  EXPECT_EQ(got.block, want.block);
  EXPECT_EQ(got.held, want.held);
  EXPECT_EQ(Bits(got.spread), Bits(want.spread));
  EXPECT_EQ(got.flushed_keys, want.flushed_keys);
  EXPECT_EQ(Bits(got.flushed_values), Bits(want.flushed_values));
  EXPECT_EQ(got.flushed_held, want.flushed_held);
  EXPECT_EQ(Bits(got.flushed_spread), Bits(want.flushed_spread));
}

// The rows of a table, least recently touched first.
struct Row {
  uint64_t key, stamp;
  uint32_t held;
  float squares;
  std::vector<float> values;
  bool operator==(const Row& o) const {
    return key == o.key && stamp == o.stamp && held == o.held &&
           Bits({squares}) == Bits({o.squares}) && Bits(values) == Bits(o.values);
  }
};
std::vector<Row> RowsOf(const RowTable& table) {
  std::vector<Row> rows;
  table.ForEach([&](uint64_t key, uint64_t stamp, const RowMeta& meta, const float* row) {
    rows.push_back(
        Row{key, stamp, meta.held, meta.squares, std::vector<float>(row, row + table.dim())});
  });
  return rows;
}

// One push: keys drawn from `space`, gradient rows of the step laid out in another order (the
// push's rows are positions into them), some rows zero, some entries extreme.
struct Push {
  std::vector<uint64_t> keys;
  std::vector<uint32_t> positions;
  std::vector<float> step;  // the step's rows: grad_rows * dim
  size_t grad_rows = 0;
  std::vector<float> gradient;  // the push's rows, in key order (the CPU's input)
};

Push MakePush(std::mt19937_64& rng, uint32_t dim, uint64_t space, size_t rows, bool specials) {
  Push p;
  std::uniform_int_distribution<uint64_t> key(0, space - 1);
  std::vector<uint64_t> keys;
  for (size_t i = 0; i < rows; ++i) keys.push_back(key(rng));
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  p.keys = keys;
  // The step holds these rows and as many others, shuffled.
  p.grad_rows = 2 * keys.size() + 1;
  std::vector<uint32_t> slots(p.grad_rows);
  for (uint32_t i = 0; i < slots.size(); ++i) slots[i] = i;
  std::shuffle(slots.begin(), slots.end(), rng);
  p.positions.assign(slots.begin(), slots.begin() + keys.size());
  std::normal_distribution<float> value(0.0f, 1.0f);
  std::uniform_int_distribution<int> kind(0, 49);
  p.step.resize(p.grad_rows * dim);
  for (float& v : p.step) v = value(rng);
  p.gradient.resize(keys.size() * dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    const int k = kind(rng);
    for (uint32_t j = 0; j < dim; ++j) {
      float& v = p.step[size_t{p.positions[i]} * dim + j];
      if (k == 0) v = 0.0f;             // a zero row
      if (k == 1 && j == 0) v = 1e30f;  // squares past FLT_MAX
      if (specials && k == 2 && j == 0) v = std::numeric_limits<float>::infinity();
      if (k == 3) v = j % 2 == 0 ? 0.5f : -0.5f;  // ties
      p.gradient[i * dim + j] = v;
    }
  }
  return p;
}

struct Case {
  std::string codec;
  uint32_t dim;
  size_t capacity;
  float examples;  // 0: a different count each push
  bool specials;   // infinities in the gradients
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.codec << " dim " << c.dim << " capacity " << c.capacity << " examples " << c.examples
      << (c.specials ? " with infinities" : "");
}

class DeviceRowFeedbackTest : public testing::TestWithParam<Case> {};

TEST_P(DeviceRowFeedbackTest, PushesAreTheCpuClasssToTheByte) {
  const Case c = GetParam();
  const uint64_t seed = std::hash<std::string>()(c.codec) ^ (c.dim * 7919 + c.capacity);
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937_64 rng(seed);
  const CodecSpec spec = *ParseCodec(c.codec);
  const std::unique_ptr<Codec> codec = Codec::Create(spec);
  HostExecutor e;
  auto device = Feedback::Create(e, spec, c.dim, c.capacity);
  ASSERT_TRUE(device.ok()) << device.status();
  SparseErrorFeedback cpu(c.dim, c.capacity);
  HostExecutor::Array<float> grads;
  for (int step = 0; step < 40; ++step) {
    SCOPED_TRACE(step);
    // Mostly small pushes, now and then a large one (which may exceed the capacity itself),
    // and an empty one.
    const size_t rows = step == 7 ? 0 : step % 9 == 4 ? 90 : 1 + rng() % 30;
    const Push p = MakePush(rng, c.dim, 200, rows, c.specials);
    const float examples = c.examples != 0 ? c.examples : static_cast<float>(1 + rng() % 64);
    grads.Reserve(p.step.size());
    std::copy(p.step.begin(), p.step.end(), grads.data());
    SparsePush want, got;
    cpu.Compress(*codec, p.keys, p.gradient, &want, examples);
    ASSERT_TRUE(
        (*device)->Compress(p.keys, p.positions, grads.data(), p.grad_rows, &got, examples).ok());
    ExpectSamePush(want, got);
    if (testing::Test::HasFailure()) return;
    ASSERT_EQ((*device)->size(), cpu.residuals().size());
    ASSERT_EQ((*device)->pushes(), cpu.pushes());
    ASSERT_EQ((*device)->rows_flushed(), cpu.rows_flushed());
    if (step % 10 == 3) {
      RowTable copy(c.dim, 0);
      ASSERT_TRUE((*device)->CopyResiduals(&copy).ok());
      ASSERT_EQ(RowsOf(copy), RowsOf(cpu.residuals()));
    }
  }
  // The end of training: a last push, then every residual row sent whole.
  SparsePush want, got;
  const Push p = MakePush(rng, c.dim, 200, 20, c.specials);
  grads.Reserve(p.step.size());
  std::copy(p.step.begin(), p.step.end(), grads.data());
  cpu.Compress(*codec, p.keys, p.gradient, &want, 3.0f);
  ASSERT_TRUE((*device)->Compress(p.keys, p.positions, grads.data(), p.grad_rows, &got, 3.0f).ok());
  cpu.Drain(&want, 3.0f);
  ASSERT_TRUE((*device)->Drain(&got, 3.0f).ok());
  ExpectSamePush(want, got);
  EXPECT_EQ((*device)->size(), 0u);
  EXPECT_EQ((*device)->rows_drained(), cpu.rows_drained());
}

INSTANTIATE_TEST_SUITE_P(
    Codecs, DeviceRowFeedbackTest,
    testing::Values(Case{"topk:0.05", 8, 0, 1.0f, false},   // unbounded
                    Case{"topk:0.1", 8, 40, 0.0f, false},   // flushes, varying examples
                    Case{"topk:0.02", 16, 25, 1.0f, true},  // infinities
                    Case{"topk:0.3", 1, 30, 1.0f, false},   // dim 1: always float32 rows
                    Case{"topk:0.5", 3, 10, 5.0f, false},   // some pushes over the capacity
                    Case{"sign1", 8, 40, 1.0f, false}, Case{"sign1:4", 5, 25, 0.0f, false},
                    Case{"sign1", 8, 30, 1.0f, true}),  // non-finite scales: all of p stays
    [](const testing::TestParamInfo<Case>& info) {
      std::string name = info.param.codec + "_dim" + std::to_string(info.param.dim) + "_cap" +
                         std::to_string(info.param.capacity) + (info.param.specials ? "_inf" : "");
      for (char& ch : name) {
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
      }
      return name;
    });

// A table restored from a checkpoint (the CPU class's, with its recency and metadata) is the
// one the next pushes start from.
TEST(DeviceRowFeedbackRestoreTest, RestoredResidualsContinueAsTheCpuClasss) {
  const CodecSpec spec = *ParseCodec("topk:0.1");
  const std::unique_ptr<Codec> codec = Codec::Create(spec);
  std::mt19937_64 rng(11);
  SparseErrorFeedback cpu(4, 30);
  for (int step = 0; step < 12; ++step) {
    const Push p = MakePush(rng, 4, 100, 15, false);
    SparsePush out;
    cpu.Compress(*codec, p.keys, p.gradient, &out, 2.0f);
  }
  HostExecutor e;
  auto device = Feedback::Create(e, spec, 4, 30);
  ASSERT_TRUE(device.ok());
  ASSERT_TRUE((*device)->SetResiduals(cpu.residuals(), cpu.pushes()).ok());
  RowTable copy(4, 0);
  ASSERT_TRUE((*device)->CopyResiduals(&copy).ok());
  EXPECT_EQ(RowsOf(copy), RowsOf(cpu.residuals()));
  HostExecutor::Array<float> grads;
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE(step);
    const Push p = MakePush(rng, 4, 100, 15, false);
    grads.Reserve(p.step.size());
    std::copy(p.step.begin(), p.step.end(), grads.data());
    SparsePush want, got;
    cpu.Compress(*codec, p.keys, p.gradient, &want, 2.0f);
    ASSERT_TRUE(
        (*device)->Compress(p.keys, p.positions, grads.data(), p.grad_rows, &got, 2.0f).ok());
    ExpectSamePush(want, got);
  }
  EXPECT_EQ((*device)->SetResiduals(RowTable(5, 0), 0).code(), absl::StatusCode::kInvalidArgument);
}

TEST(DeviceRowFeedbackRestoreTest, RefusesBadPushesAndCodecsWithoutChangingAnything) {
  HostExecutor e;
  EXPECT_EQ(Feedback::Create(e, *ParseCodec("fp16"), 4, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Feedback::Create(e, *ParseCodec("topk:0.1"), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto device = Feedback::Create(e, *ParseCodec("topk:0.1"), 2, 0);
  ASSERT_TRUE(device.ok());
  HostExecutor::Array<float> grads;
  grads.Reserve(6);
  std::fill(grads.data(), grads.data() + 6, 1.0f);
  SparsePush out;
  const std::vector<uint64_t> unordered = {5, 3};
  const std::vector<uint32_t> positions = {0, 1};
  EXPECT_EQ((*device)->Compress(unordered, positions, grads.data(), 3, &out).code(),
            absl::StatusCode::kInvalidArgument);
  const std::vector<uint64_t> keys = {3, 5};
  const std::vector<uint32_t> beyond = {0, 3};
  EXPECT_EQ((*device)->Compress(keys, beyond, grads.data(), 3, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*device)->Compress(keys, std::vector<uint32_t>{0}, grads.data(), 3, &out).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*device)->pushes(), 0u);
  EXPECT_EQ((*device)->size(), 0u);
  EXPECT_TRUE((*device)->Compress(keys, positions, grads.data(), 3, &out).ok());
  EXPECT_EQ((*device)->pushes(), 1u);
}

}  // namespace
}  // namespace syncline
