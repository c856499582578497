// The CUDA executor's primitives against the host executor's, one by one, so that a first run on
// a GPU says which primitive is wrong before the model tests (device_model_test.cc) say that
// some step is. Every test skips, saying why, where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "device/cuda_executor.cuh"
#include "device/device_step.h"
#include "device/host_executor.h"
#include "device/pull_copy.h"
#include "device/row_feedback.h"
#include "job/options.h"

namespace syncline {
namespace {

using cuda_executor::CudaExecutor;
using device_step::HostExecutor;

class CudaExecutorTest : public testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device is visible";
    }
  }
};

// A device array holding `values`.
template <class T>
CudaExecutor::Array<T> Up(CudaExecutor& e, const std::vector<T>& values) {
  CudaExecutor::Array<T> a;
  a.Reserve(std::max<size_t>(values.size(), 1));
  e.Upload(a.data(), values.data(), values.size());
  e.Fence();
  return a;
}

template <class T>
std::vector<T> Down(CudaExecutor& e, const T* p, size_t n) {
  std::vector<T> out(n);
  e.Download(out.data(), p, n);
  e.Finish();
  return out;
}

// Every float of `a` and `b` the same to the bit (-0 is not +0), NaNs counting as equal
// (their payloads may differ between the CPU and the GPU).
bool SameFloats(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return false;
  }
  return true;
}

TEST_F(CudaExecutorTest, SortsScansAndUniquesAsTheHostExecutor) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(3);
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
    SCOPED_TRACE(n);
    // Slots below 700, some missing (kNoSlot), on the low BitsFor(700) bits or all 32.
    std::vector<uint32_t> slots(n);
    for (uint32_t& s : slots) s = rng() % 10 == 0 ? device_step::kNoSlot : rng() % 700;
    for (const int bits : {device_step::BitsFor(700), 32}) {
      std::vector<uint32_t> sorted(n), order(n);
      h.SortBySlot(slots.data(), sorted.data(), order.data(), n, bits);
      auto d_slots = Up(e, slots);
      CudaExecutor::Array<uint32_t> d_sorted, d_order;
      d_sorted.Reserve(n);
      d_order.Reserve(n);
      e.SortBySlot(d_slots.data(), d_sorted.data(), d_order.data(), n, bits);
      EXPECT_EQ(Down(e, d_sorted.data(), n), sorted) << bits << " bits";
      EXPECT_EQ(Down(e, d_order.data(), n), order) << bits << " bits (stable)";
    }
    std::vector<uint32_t> counts(n), sums(n);
    for (uint32_t& c : counts) c = rng() % 5;
    h.ExclusiveSum(counts.data(), sums.data(), n);
    auto d_counts = Up(e, counts);
    CudaExecutor::Array<uint32_t> d_sums;
    d_sums.Reserve(n);
    e.ExclusiveSum(d_counts.data(), d_sums.data(), n);
    EXPECT_EQ(Down(e, d_sums.data(), n), sums);

    std::vector<uint64_t> ids(n);
    for (uint64_t& id : ids) id = rng() % (n / 2 + 1) + (rng() % 2 == 0 ? 0 : uint64_t{1} << 63);
    std::vector<uint64_t> unique(n);
    const size_t count = h.SortUnique(ids.data(), n, unique.data());
    unique.resize(count);
    auto d_ids = Up(e, ids);
    CudaExecutor::Array<uint64_t> d_unique;
    d_unique.Reserve(n);
    const size_t d_count = e.SortUnique(d_ids.data(), n, d_unique.data());
    ASSERT_EQ(d_count, count);
    EXPECT_EQ(Down(e, d_unique.data(), count), unique);
  }
}

TEST_F(CudaExecutorTest, GemmsAgreeWithTheHostExecutor) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (const auto ta : {Transpose::kNo, Transpose::kYes}) {
    for (const auto tb : {Transpose::kNo, Transpose::kYes}) {
      for (const auto& [m, n, k] : {std::tuple{7, 5, 3}, std::tuple{64, 33, 130},
                                    std::tuple{1, 16, 200}, std::tuple{9, 4, 0}}) {
        SCOPED_TRACE(testing::Message()
                     << "ta " << (ta == Transpose::kYes) << " tb " << (tb == Transpose::kYes) << " "
                     << m << "x" << n << "x" << k);
        const int lda = ta == Transpose::kNo ? k : m;
        const int ldb = tb == Transpose::kNo ? n : k;
        std::vector<float> a(static_cast<size_t>(m) * k + 1), b(static_cast<size_t>(k) * n + 1),
            c(static_cast<size_t>(m) * n);
        for (float& x : a) x = u(rng);
        for (float& x : b) x = u(rng);
        for (float& x : c) x = u(rng);
        std::vector<float> want = c;
        h.Gemm(ta, tb, m, n, k, 0.5f, a.data(), std::max(lda, 1), b.data(), std::max(ldb, 1), 0.25f,
               want.data(), n);
        auto d_a = Up(e, a), d_b = Up(e, b), d_c = Up(e, c);
        e.Gemm(ta, tb, m, n, k, 0.5f, d_a.data(), std::max(lda, 1), d_b.data(), std::max(ldb, 1),
               0.25f, d_c.data(), n);
        const std::vector<float> got = Down(e, d_c.data(), c.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
        }
      }
    }
  }
}

TEST_F(CudaExecutorTest, FencedUploadsCopiesAndZeros) {
  CudaExecutor e(0);
  std::vector<float> values(5000);
  std::iota(values.begin(), values.end(), 0.5f);
  CudaExecutor::Array<float> a, b;
  a.Reserve(values.size());
  b.Reserve(values.size());
  e.Upload(a.data(), values.data(), values.size());
  e.Fence();
  e.ForEach(values.size(), device_step::AddInto{a.data(), a.data()});  // doubles it
  e.Copy(b.data(), a.data(), values.size());
  e.Zero(a.data(), 100);
  std::vector<float> doubled(values.size());
  for (size_t i = 0; i < values.size(); ++i) doubled[i] = 2 * values[i];
  EXPECT_EQ(Down(e, b.data(), values.size()), doubled);
  std::vector<float> zeroed = doubled;
  std::fill(zeroed.begin(), zeroed.begin() + 100, 0.0f);
  EXPECT_EQ(Down(e, a.data(), values.size()), zeroed);
}

// The device's error feedback sends the CPU's bytes and keeps the CPU's residual, step after
// step, for every codec; a sign1 block of a NaN gradient does not decode, and all of p stays.
TEST_F(CudaExecutorTest, FeedbackEncoderSendsTheCpuBytes) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const size_t n = 70001;
  for (const char* name : {"fp16", "topk:0.01", "sign1", "sign1:100"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = *ParseCodec(name);
    auto device = CudaExecutor::FeedbackEncoder::Create(e, spec, n);
    ASSERT_TRUE(device.ok()) << device.status();
    auto host = HostExecutor::FeedbackEncoder::Create(h, spec, n);
    ASSERT_TRUE(host.ok());
    CudaExecutor::Array<float> d_gradient;
    d_gradient.Reserve(n);
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE(step);
      std::vector<float> gradient(n);
      for (float& x : gradient) x = g(rng);
      if (step == 3) gradient[17] = NAN;
      e.Upload(d_gradient.data(), gradient.data(), n);
      e.Finish();
      std::vector<std::byte> want, got;
      ASSERT_TRUE((*host)->Compress(gradient.data(), &want).ok());
      ASSERT_TRUE((*device)->Compress(d_gradient.data(), &got).ok());
      if (spec.kind != CodecKind::kSign1 || step < 3) EXPECT_EQ(got.size(), want.size());
      if (step < 3) EXPECT_TRUE(got == want) << "blocks differ";
      EXPECT_TRUE(SameFloats(*(*device)->Residual(), *(*host)->Residual())) << "residuals differ";
      EXPECT_EQ(Down(e, d_gradient.data(), n), std::vector<float>(n, 0.0f)) << "not zeroed";
    }
    std::vector<float> want, got;
    e.Upload(d_gradient.data(), std::vector<float>(n, 1.0f).data(), n);
    e.Finish();
    std::vector<float> ones(n, 1.0f);
    ASSERT_TRUE((*host)->Drain(ones.data(), &want).ok());
    ASSERT_TRUE((*device)->Drain(d_gradient.data(), &got).ok());
    EXPECT_TRUE(SameFloats(got, want)) << "drained values differ";
    EXPECT_TRUE((*device)->Residual()->empty());
  }
}

// The stable sort by 64-bit key (the residual rows' recency order): ties keep their order.
TEST_F(CudaExecutorTest, SortsBy64BitKeysStablyAsTheHostExecutor) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(5);
  for (const size_t n : {size_t{1}, size_t{1000}, size_t{100003}}) {
    SCOPED_TRACE(n);
    std::vector<uint64_t> keys(n);
    for (uint64_t& k : keys) k = rng() % 50 + (rng() % 3 == 0 ? uint64_t{1} << 40 : 0);
    std::vector<uint32_t> order(n);
    h.SortByKey64(keys.data(), order.data(), n);
    auto d_keys = Up(e, keys);
    CudaExecutor::Array<uint32_t> d_order;
    d_order.Reserve(n);
    e.SortByKey64(d_keys.data(), d_order.data(), n, 41);
    EXPECT_EQ(Down(e, d_order.data(), n), order);
  }
}

// The block codec over device floats: the CPU codec's blocks and decoded floats, for sizes
// that grow past its first capacity, repeat (a top-K graph) and change (kernels enqueued).
TEST_F(CudaExecutorTest, BlockCodecEncodesAndDecodesAsTheHostExecutors) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const char* name : {"topk:0.01", "sign1"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = *ParseCodec(name);
    auto device = CudaExecutor::BlockCodec::Create(e, spec);
    auto host = HostExecutor::BlockCodec::Create(h, spec);
    ASSERT_TRUE(device.ok()) << device.status();
    ASSERT_TRUE(host.ok());
    for (const size_t n : {size_t{1000}, size_t{300000}, size_t{300000}, size_t{777}}) {
      SCOPED_TRACE(n);
      std::vector<float> values(n);
      for (float& x : values) x = g(rng);
      std::copy(values.begin(), values.end(), *(*host)->Input(n));
      e.Upload(*(*device)->Input(n), values.data(), n);
      e.Finish();
      std::vector<std::byte> want, got;
      ASSERT_TRUE((*host)->Encode(n, &want).ok());
      ASSERT_TRUE((*device)->Encode(n, &got).ok());
      EXPECT_TRUE(got == want) << "blocks differ";
      absl::StatusOr<const float*> decoded_host = (*host)->Decode(n);
      absl::StatusOr<const float*> decoded_device = (*device)->Decode(n);
      ASSERT_TRUE(decoded_host.ok() && decoded_device.ok());
      EXPECT_TRUE(SameFloats(Down(e, *decoded_device, n),
                             std::vector<float>(*decoded_host, *decoded_host + n)))
          << "decoded floats differ";
    }
  }
}

// The per-row error feedback of sparse rows on the device makes the CPU class's pushes, to the
// byte: top-K and sign1, a bounded table (flushes), pushes of varying examples, the drain.
TEST_F(CudaExecutorTest, RowFeedbackPushesAreTheCpuClasss) {
  CudaExecutor e(0);
  std::mt19937_64 rng(13);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr uint32_t kDim = 16;
  for (const char* name : {"topk:0.05", "sign1"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = *ParseCodec(name);
    const std::unique_ptr<Codec> codec = Codec::Create(spec);
    auto device = DeviceRowFeedback<CudaExecutor>::Create(e, spec, kDim, 300);
    ASSERT_TRUE(device.ok()) << device.status();
    SparseErrorFeedback cpu(kDim, 300);
    CudaExecutor::Array<float> d_grads;
    for (int step = 0; step < 12; ++step) {
      SCOPED_TRACE(step);
      std::vector<uint64_t> keys;
      for (int i = 0; i < 200; ++i) keys.push_back(rng() % 2000);
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      // The step's rows in reverse order: the push's row i is the step's row m - 1 - i.
      const size_t m = keys.size();
      std::vector<float> gradient(m * kDim), step_rows(m * kDim);
      std::vector<uint32_t> positions(m);
      for (size_t i = 0; i < m; ++i) {
        positions[i] = static_cast<uint32_t>(m - 1 - i);
        for (uint32_t j = 0; j < kDim; ++j) {
          gradient[i * kDim + j] = i % 17 == 0 ? 0.0f : g(rng);
          step_rows[(m - 1 - i) * kDim + j] = gradient[i * kDim + j];
        }
      }
      d_grads.Reserve(m * kDim);
      e.Upload(d_grads.data(), step_rows.data(), m * kDim);
      e.Finish();
      const float examples = static_cast<float>(1 + step % 4);
      SparsePush want, got;
      cpu.Compress(*codec, keys, gradient, &want, examples);
      ASSERT_TRUE((*device)->Compress(keys, positions, d_grads.data(), m, &got, examples).ok());
      EXPECT_EQ(got.keys, want.keys);
      EXPECT_EQ(got.kind, want.kind);
      EXPECT_TRUE(got.block == want.block) << "blocks differ";
      EXPECT_EQ(got.held, want.held);
      EXPECT_TRUE(SameFloats(got.spread, want.spread)) << "spreads differ";
      EXPECT_EQ(got.flushed_keys, want.flushed_keys);
      EXPECT_TRUE(SameFloats(got.flushed_values, want.flushed_values)) << "flushed rows differ";
      ASSERT_EQ((*device)->size(), cpu.residuals().size());
    }
    EXPECT_GT(cpu.rows_flushed(), 0u);
    SparsePush want, got;
    cpu.Drain(&want, 2.0f);
    ASSERT_TRUE((*device)->Drain(&got, 2.0f).ok());
    EXPECT_EQ(got.flushed_keys, want.flushed_keys);
    EXPECT_TRUE(SameFloats(got.flushed_values, want.flushed_values)) << "drained rows differ";
  }
}

// Compressed pulls' replies decoded on the device give DecodePull's rows and copy, to the bit:
// fp16, top-K and sign1 deltas, a server copy bounded so that rows are evicted, the rows placed
// among a batch's (a shard's share).
TEST_F(CudaExecutorTest, PullCopyDecodesTheCpusRows) {
  CudaExecutor e(0);
  std::mt19937_64 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr uint32_t kDim = 16;
  constexpr uint64_t kIds = 30000;  // up to ~7000 held rows a pull: the codec grows
  for (const char* name : {"fp16", "topk:0.05", "sign1"}) {
    SCOPED_TRACE(name);
    const CodecSpec spec = *ParseCodec(name);
    const std::unique_ptr<Codec> codec = Codec::Create(spec);
    auto device = DevicePullCopy<CudaExecutor>::Create(e, spec.kind, kDim);
    ASSERT_TRUE(device.ok()) << device.status();
    RowTable server(kDim, 20000), cpu(kDim, 0);
    std::vector<float> current(kIds * kDim);
    for (float& v : current) v = g(rng);
    CudaExecutor::Array<float> d_out;
    for (int pull = 0; pull < 12; ++pull) {
      SCOPED_TRACE(pull);
      for (float& v : current) v += 0.05f * g(rng);
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < kIds; ++k) {
        if (rng() % 4 == 0) keys.push_back(k);
      }
      std::vector<float> values;
      for (uint64_t k : keys) {
        values.insert(values.end(), current.begin() + k * kDim, current.begin() + (k + 1) * kDim);
      }
      PulledRows reply;
      EncodePull(*codec, keys, values, pull + 1, &server, &reply);
      const size_t m = keys.size();
      std::vector<uint32_t> places(m);
      for (size_t i = 0; i < m; ++i) places[i] = static_cast<uint32_t>(2 * i + 1);
      std::vector<float> want(m * kDim);
      const auto fresh = std::as_bytes(std::span<const float>(reply.fresh));
      ASSERT_TRUE(DecodePull(spec.kind, keys, fresh, reply.block, reply.evicted, &cpu,
                             std::span<float>(want))
                      .ok());
      d_out.Reserve((2 * m + 1) * kDim);
      ASSERT_TRUE(
          (*device)
              ->Apply(keys, places, fresh, reply.block, reply.evicted, d_out.data(), 2 * m + 1)
              .ok());
      std::vector<float> out((2 * m + 1) * kDim);
      e.Download(out.data(), d_out.data(), out.size());
      e.Finish();
      std::vector<float> got(m * kDim);
      for (size_t i = 0; i < m; ++i) {
        std::copy_n(out.begin() + places[i] * kDim, kDim, got.begin() + i * kDim);
      }
      EXPECT_TRUE(SameFloats(got, want)) << "rows differ";
      ASSERT_EQ((*device)->size(), cpu.size());
    }
    RowTable copy(kDim, 0);
    ASSERT_TRUE((*device)->CopyRows(&copy).ok());
    ASSERT_EQ(copy.size(), cpu.size());
    bool same = true;
    cpu.ForEach([&](uint64_t key, uint64_t, const RowMeta&, const float* row) {
      const float* c = copy.Find(key);
      same = same && c != nullptr && std::memcmp(c, row, kDim * sizeof(float)) == 0;
    });
    EXPECT_TRUE(same) << "copies differ";
  }
}

// The AUC, loss and hits of scores full of ties, NaNs and both zeros, in growing batches.
TEST_F(CudaExecutorTest, DeviceEvaluationAsTheHostExecutors) {
  CudaExecutor e(0);
  HostExecutor h;
  std::mt19937_64 rng(11);
  const size_t n = 70001;
  std::vector<float> scores(n);
  std::vector<int32_t> labels(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    scores[i] = r % 97 == 0 ? NAN : r % 89 == 0 ? -0.0f : static_cast<float>(r % 50) / 49;
    labels[i] = rng() % 3 == 0 ? 1 : 0;
  }
  scores[5] = NAN;  // a NaN loss on both sides
  device_step::DeviceEvaluation<CudaExecutor> on_device(2, true);
  device_step::DeviceEvaluation<HostExecutor> on_host(2, true);
  auto d_scores = Up(e, scores);
  size_t at = 0;
  for (size_t batch = 1; at < n; batch = batch * 3 + 1) {
    const size_t take = std::min(batch, n - at);
    on_device.Add(e, d_scores.data() + at, labels.data() + at, take);
    on_host.Add(h, scores.data() + at, labels.data() + at, take);
    at += take;
  }
  EXPECT_EQ(on_device.count(), n);
  EXPECT_EQ(on_device.hits(), on_host.hits());
  EXPECT_TRUE(std::isnan(on_device.loss_sum()) && std::isnan(on_host.loss_sum()));
  EXPECT_EQ(on_device.Auc(e), on_host.Auc(h));  // U is a sum of halves: exact either way

  // Without NaNs the loss sums agree to the rounding of the device's log.
  for (float& x : scores) x = std::isnan(x) ? 0.3f : x;
  device_step::DeviceEvaluation<CudaExecutor> finite_device(2, true);
  device_step::DeviceEvaluation<HostExecutor> finite_host(2, true);
  auto d_finite = Up(e, scores);
  finite_device.Add(e, d_finite.data(), labels.data(), n);
  finite_host.Add(h, scores.data(), labels.data(), n);
  EXPECT_NEAR(finite_device.loss_sum(), finite_host.loss_sum(), 1e-12 * finite_host.loss_sum());
  EXPECT_EQ(finite_device.Auc(e), finite_host.Auc(h));
}

}  // namespace
}  // namespace syncline
