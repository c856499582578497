// The device models against the CPU models, on two executors: the host's (device/host_executor.h),
// which checks the GPU kernels' index arithmetic and step order on any machine, and CUDA's
// (gpu_model.h), whose tests skip, saying why, where the build has no CUDA or the machine no
// GPU. scripts/gpu-check.sh runs them under compute-sanitizer.
#include "device/device_model.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "data/criteo.h"
#include "device/cuda_model.h"
#include "device/host_executor.h"
#include "device/placement.h"
#include "gtest/gtest.h"
#include "job/options.h"
#include "models/metrics.h"
#include "models/model.h"

namespace syncline {
namespace {

using device_step::HostExecutor;

// n examples of 1..max_features features among `features` ids, values in (0, 1], labels in
// [0, classes).
Dataset RandomData(uint64_t seed, int n, int features, int max_features, int classes) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> id(0, features - 1), count(1, max_features),
      label(0, classes - 1);
  std::uniform_real_distribution<float> value(0.05f, 1.0f);
  Dataset d;
  d.num_features = features;
  d.row_offsets.push_back(0);
  for (int i = 0; i < n; ++i) {
    std::vector<uint64_t> ids;
    for (int k = count(rng); k > 0; --k) ids.push_back(id(rng));
    // Repeats within an example are allowed: each adds its own term.
    for (const uint64_t x : ids) {
      d.ids.push_back(x);
      d.values.push_back(value(rng));
    }
    d.row_offsets.push_back(d.ids.size());
    d.labels.push_back(static_cast<float>(label(rng)));
  }
  return d;
}

// n Criteo-layout examples (13 dense values in [0, 2), then 26 categorical ids below
// `features`), labels 0/1.
Dataset RandomCriteo(uint64_t seed, int n, int features) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> id(0, features - 1), label(0, 1);
  std::uniform_real_distribution<float> value(0.0f, 2.0f);
  Dataset d;
  d.num_features = features;
  d.row_offsets.push_back(0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < kCriteoDenseFields; ++j) {
      d.ids.push_back(j);
      d.values.push_back(value(rng));
    }
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      d.ids.push_back(id(rng));
      d.values.push_back(1.0f);
    }
    d.row_offsets.push_back(d.ids.size());
    d.labels.push_back(static_cast<float>(label(rng)));
  }
  return d;
}

// Data for `model`: Criteo-layout for ctr, else RandomData.
Dataset DataFor(const Model& model, uint64_t seed, int n, int features, int max_features) {
  if (model.name() == "ctr") return RandomCriteo(seed, n, features);
  return RandomData(seed, n, features, max_features, model.num_classes());
}

std::vector<float> Uniform(uint64_t seed, size_t n, float scale) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

enum class Where { kHost, kCuda };

struct Pair {
  std::unique_ptr<Model> cpu;
  std::unique_ptr<Model> device;
  std::string skip;  // why there is no device model here
};

Pair Make(Where where, const std::string& name, const ModelOptions& options) {
  Pair p;
  auto cpu = Model::Create(name, options);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  p.cpu = std::move(*cpu);
  if (where == Where::kHost) {
    auto reference = Model::Create(name, options);
    device_step::Shape shape;
    EXPECT_TRUE(DeviceShapeOf(**reference, options, &shape));
    p.device = std::make_unique<DeviceModel<HostExecutor>>(std::move(*reference), std::move(shape),
                                                           HostExecutor{});
    return p;
  }
  if (!CudaModelsBuilt()) {
    p.skip = "this build has no CUDA";
  } else if (ProbeDevices().gpus == 0) {
    p.skip = "no CUDA device is visible";
  } else if (auto gpu = CreateCudaModel(name, options, 0); !gpu.ok()) {
    ADD_FAILURE() << gpu.status();
    p.skip = std::string(gpu.status().message());
  } else {
    p.device = std::move(*gpu);
  }
  return p;
}

void ExpectNear(const std::vector<float>& want, const std::vector<float>& got, double rel,
                const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  double scale = 0;
  for (const float x : want) scale = std::max(scale, std::fabs(static_cast<double>(x)));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(want[i], got[i], rel * std::max(scale, 1e-3)) << what << " [" << i << "]";
  }
}

// One step's loss and gradients, ADDED to gradients that start at `start`.
struct Step {
  double loss;
  std::vector<float> rows, dense;
};
Step RunStep(const Model& model, const Dataset& data, absl::Span<const uint32_t> examples,
             const std::vector<uint64_t>& keys, const std::vector<float>& rows,
             const std::vector<float>& bias, float start = 0) {
  Step s{0, std::vector<float>(rows.size(), start), std::vector<float>(bias.size(), start)};
  s.loss = model.LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(s.rows),
                                 absl::MakeSpan(s.dense));
  return s;
}

// Step `step` (75 examples from 75 * step, rows and bias from `seed`) of a model keeping its
// row gradients for an encoder, and of `plain`: the first hands back zero row gradients and
// the rest as the second does. Returns the second's step, and the batch's keys in *keys.
Step RunKeptStep(const Pair& m, const Pair& plain, const Dataset& data, int step, uint64_t seed,
                 std::vector<uint64_t>* keys) {
  std::vector<uint32_t> batch(75);
  std::iota(batch.begin(), batch.end(), static_cast<uint32_t>(75 * step));
  *keys = m.cpu->BatchKeys(data, batch);
  const std::vector<float> rows = Uniform(seed + step, keys->size() * m.cpu->row_dim(), 0.3f);
  const std::vector<float> bias = Uniform(seed + 10 + step, m.cpu->bias_dim(), 0.3f);
  const Step kept = RunStep(*m.device, data, batch, *keys, rows, bias);
  Step down = RunStep(*plain.device, data, batch, *keys, rows, bias);
  EXPECT_EQ(kept.rows, std::vector<float>(rows.size(), 0.0f));
  EXPECT_EQ(kept.dense, down.dense);
  EXPECT_EQ(kept.loss, down.loss);
  return down;
}

// Once the model stops encoding, the row gradients come back to the caller again: those of
// `plain` (the same model, never encoding).
void ExpectRowsHandedBackOnceStopped(const Pair& m, const Pair& plain, const Dataset& data) {
  m.device->StopEncoding();
  const std::vector<uint64_t> keys = m.cpu->BatchKeys(data, {1, 2, 3});
  const std::vector<float> rows = Uniform(70, keys.size() * m.cpu->row_dim(), 0.3f);
  const std::vector<float> bias = Uniform(71, m.cpu->bias_dim(), 0.3f);
  EXPECT_EQ(RunStep(*m.device, data, {1, 2, 3}, keys, rows, bias).rows,
            RunStep(*plain.device, data, {1, 2, 3}, keys, rows, bias).rows);
}

struct Case {
  std::string name;
  ModelOptions options;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }
void PrintTo(Where where, std::ostream* os) { *os << (where == Where::kHost ? "host" : "cuda"); }

class DeviceModelTest : public testing::TestWithParam<std::tuple<Case, Where>> {
 protected:
  const Case& c() const { return std::get<0>(GetParam()); }
  // The case's CPU model and its device model (none where Pair::skip says why).
  Pair MakeModels() const { return Make(std::get<1>(GetParam()), c().name, c().options); }
};

#define SKIP_WITHOUT_DEVICE(m) \
  if ((m).device == nullptr) GTEST_SKIP() << (m).skip

TEST_P(DeviceModelTest, LossGradientsAndScoresMatchTheCpuModel) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  const Dataset data = DataFor(*m.cpu, 7, 600, 300, 12);
  std::vector<uint32_t> examples(data.size());
  std::iota(examples.begin(), examples.end(), 0u);
  // Keys: the batch's unique ids less every fifth (a feature the servers never saw: a zero row,
  // no gradient), plus ids no example has.
  std::vector<uint64_t> keys;
  const std::vector<uint64_t> all = m.cpu->BatchKeys(data, examples);
  for (size_t i = 0; i < all.size(); ++i) {
    if (i % 5 != 3) keys.push_back(all[i]);
  }
  keys.push_back(1000);
  keys.push_back(1001);
  const std::vector<float> rows = Uniform(11, keys.size() * m.cpu->row_dim(), 0.3f);
  const std::vector<float> bias = Uniform(13, m.cpu->bias_dim(), 0.3f);

  // Gradients are ADDED: start both from the same non-zero values.
  const Step cpu = RunStep(*m.cpu, data, examples, keys, rows, bias, 0.5f);
  const Step dev = RunStep(*m.device, data, examples, keys, rows, bias, 0.5f);
  EXPECT_NEAR(dev.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  ExpectNear(cpu.rows, dev.rows, 1e-4, "row gradients");
  ExpectNear(cpu.dense, dev.dense, 1e-4, "dense gradients");
  // The rows of absent and unused keys get exactly what they had.
  for (size_t k = keys.size() - 2; k < keys.size(); ++k) {
    for (int j = 0; j < m.cpu->row_dim(); ++j) {
      EXPECT_EQ(dev.rows[k * m.cpu->row_dim() + j], 0.5f);
    }
  }

  std::vector<float> cpu_scores, dev_scores;
  m.cpu->Predict(data, examples, keys, rows, bias, &cpu_scores);
  m.device->Predict(data, examples, keys, rows, bias, &dev_scores);
  ExpectNear(cpu_scores, dev_scores, 1e-5, "scores");

  // A batch of a few examples after a large one (buffers are reused, not shrunk) and an empty
  // batch.
  const std::vector<uint32_t> few = {3, 1, 4};
  const Step cpu_few = RunStep(*m.cpu, data, few, keys, rows, bias);
  const Step dev_few = RunStep(*m.device, data, few, keys, rows, bias);
  EXPECT_NEAR(dev_few.loss, cpu_few.loss, 1e-5);
  ExpectNear(cpu_few.rows, dev_few.rows, 1e-4, "few: row gradients");
  ExpectNear(cpu_few.dense, dev_few.dense, 1e-4, "few: dense gradients");
  const Step none = RunStep(*m.device, data, {}, keys, rows, bias);
  EXPECT_EQ(none.loss, 0.0);
  EXPECT_EQ(none.rows, std::vector<float>(rows.size()));
  EXPECT_EQ(none.dense, std::vector<float>(bias.size()));
}

// Rows with many times kPiece features (a field of few values): their sums span several pieces.
TEST_P(DeviceModelTest, HotRowsSumOverSeveralPieces) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  const Dataset data = DataFor(*m.cpu, 5, 900, 3, 4);
  std::vector<uint32_t> examples(data.size());
  std::iota(examples.begin(), examples.end(), 0u);
  const std::vector<uint64_t> keys = m.cpu->BatchKeys(data, examples);
  ASSERT_LE(keys.size(), 16u);  // hundreds of features a row
  const std::vector<float> rows = Uniform(3, keys.size() * m.cpu->row_dim(), 0.3f);
  const std::vector<float> bias = Uniform(4, m.cpu->bias_dim(), 0.3f);
  const Step cpu = RunStep(*m.cpu, data, examples, keys, rows, bias);
  const Step dev = RunStep(*m.device, data, examples, keys, rows, bias);
  EXPECT_NEAR(dev.loss, cpu.loss, 1e-5 * std::fabs(cpu.loss));
  ExpectNear(cpu.rows, dev.rows, 1e-4, "row gradients");
  ExpectNear(cpu.dense, dev.dense, 1e-4, "dense gradients");
}

TEST_P(DeviceModelTest, BatchKeysAreTheUniqueIds) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  const Dataset data = DataFor(*m.cpu, 3, 200, 5000, 20);
  const std::vector<uint32_t> some = {0, 17, 5, 199, 42, 42};
  EXPECT_EQ(m.device->BatchKeys(data, some), m.cpu->BatchKeys(data, some));
  EXPECT_TRUE(m.device->BatchKeys(data, {}).empty());
}

// The acceptance in miniature: 100 steps of SGD from the same start with the CPU and
// the device steps stay within 1e-4 relative in every step's loss and in the final parameters.
TEST_P(DeviceModelTest, OneHundredStepsOfSgdAgreeWithTheCpuModel) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  const Dataset data = DataFor(*m.cpu, 21, 1000, 200, 10);
  std::vector<uint64_t> keys(200);
  std::iota(keys.begin(), keys.end(), 0u);
  struct Params {
    std::vector<float> rows, bias;
  };
  Params cpu{Uniform(5, keys.size() * m.cpu->row_dim(), 0.05f),
             Uniform(6, m.cpu->bias_dim(), 0.1f)};
  Params dev = cpu;
  auto step = [&](const Model& model, const std::vector<uint32_t>& batch, Params* p) {
    std::vector<float> gr(p->rows.size()), gb(p->bias.size());
    const double loss = model.LossAndGradient(data, batch, keys, p->rows, p->bias,
                                              absl::MakeSpan(gr), absl::MakeSpan(gb));
    const float lr = 0.05f / batch.size();
    for (size_t i = 0; i < gr.size(); ++i) p->rows[i] -= lr * gr[i];
    for (size_t i = 0; i < gb.size(); ++i) p->bias[i] -= lr * gb[i];
    return loss;
  };
  for (int s = 0; s < 100; ++s) {
    std::vector<uint32_t> batch(50);
    std::iota(batch.begin(), batch.end(), static_cast<uint32_t>((s * 50) % 1000));
    const double a = step(*m.cpu, batch, &cpu);
    const double b = step(*m.device, batch, &dev);
    ASSERT_NEAR(b, a, 1e-4 * std::fabs(a)) << "step " << s;
  }
  ExpectNear(cpu.rows, dev.rows, 1e-4, "final rows");
  ExpectNear(cpu.bias, dev.bias, 1e-4, "final dense table");
}

// BSP with two device workers takes the sum of their gradients: it must be the gradient of one
// worker with the union batch, to 1e-5.
TEST_P(DeviceModelTest, TwoHalvesOfABatchSumToTheWholeBatch) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  const Dataset data = DataFor(*m.cpu, 9, 512, 400, 15);
  std::vector<uint32_t> all(data.size()), first(all.begin(), all.begin()), second;
  std::iota(all.begin(), all.end(), 0u);
  first.assign(all.begin(), all.begin() + 256);
  second.assign(all.begin() + 256, all.end());
  const std::vector<uint64_t> keys = m.cpu->BatchKeys(data, all);
  const std::vector<float> rows = Uniform(1, keys.size() * m.cpu->row_dim(), 0.2f);
  const std::vector<float> bias = Uniform(2, m.cpu->bias_dim(), 0.2f);
  std::vector<float> whole_rows(rows.size()), whole_bias(bias.size());
  std::vector<float> halves_rows(rows.size()), halves_bias(bias.size());
  const double whole = m.device->LossAndGradient(
      data, all, keys, rows, bias, absl::MakeSpan(whole_rows), absl::MakeSpan(whole_bias));
  double halves = 0;
  for (const auto& half : {first, second}) {
    halves += m.device->LossAndGradient(data, half, keys, rows, bias, absl::MakeSpan(halves_rows),
                                        absl::MakeSpan(halves_bias));
  }
  EXPECT_NEAR(halves, whole, 1e-5 * std::fabs(whole));
  ExpectNear(whole_rows, halves_rows, 1e-5, "row gradients");
  ExpectNear(whole_bias, halves_bias, 1e-5, "dense gradients");
}

// A test set evaluated a chunk at a time on the device: its loss, accuracy and AUC are the
// host's metrics of the same scores, and the CPU model's to its rounding.
TEST_P(DeviceModelTest, EvaluationOnTheDeviceMatchesTheHostMetrics) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  Dataset data = DataFor(*m.cpu, 17, 700, 300, 12);
  if (m.cpu->binary()) {
    data.labels[4] = 0.7f;  // > 0.5: positive
  } else {
    data.labels[4] = 99;   // no class: wrong, with probability 0
    data.labels[5] = NAN;  // likewise
  }
  std::vector<uint32_t> all(data.size());
  std::iota(all.begin(), all.end(), 0u);
  const std::vector<uint64_t> keys = m.cpu->BatchKeys(data, all);
  const std::vector<float> rows = Uniform(8, keys.size() * m.cpu->row_dim(), 0.4f);
  const std::vector<float> bias = Uniform(9, m.cpu->bias_dim(), 0.4f);
  // Uneven chunks, one of a single example.
  const std::vector<std::vector<uint32_t>> chunks = {
      {all.begin(), all.begin() + 300}, {300}, {all.begin() + 301, all.end()}};
  auto evaluate = [&](const Model& model) {
    std::unique_ptr<ModelEvaluator> evaluator = model.NewEvaluator();
    for (const auto& chunk : chunks) evaluator->Add(data, chunk, keys, rows, bias);
    return evaluator->Finish();
  };
  const Evaluation dev = evaluate(*m.device);
  const Evaluation cpu = evaluate(*m.cpu);

  // The host's metrics of the device model's own scores: the same to the sums' rounding.
  std::vector<float> scores, chunk_scores;
  for (const auto& chunk : chunks) {
    m.device->Predict(data, chunk, keys, rows, bias, &chunk_scores);
    scores.insert(scores.end(), chunk_scores.begin(), chunk_scores.end());
  }
  const Evaluation host = m.cpu->binary()
                              ? EvaluateBinary(scores, data.labels)
                              : EvaluateClasses(scores, data.labels, m.cpu->num_classes());
  EXPECT_EQ(dev.examples, data.size());
  EXPECT_NEAR(dev.loss, host.loss, 1e-12 * host.loss);
  EXPECT_EQ(dev.accuracy, host.accuracy);
  EXPECT_NEAR(dev.auc, host.auc, 1e-12);
  if (m.cpu->binary()) {
    EXPECT_GT(dev.auc, 0.0);
  } else {
    EXPECT_EQ(dev.auc, -1.0);
  }
  // The CPU model's evaluation: its scores differ by float rounding.
  EXPECT_EQ(cpu.examples, dev.examples);
  EXPECT_NEAR(dev.loss, cpu.loss, 1e-5 * cpu.loss);
  EXPECT_NEAR(dev.accuracy, cpu.accuracy, 2.0 / data.size());
  EXPECT_NEAR(dev.auc, cpu.auc, 1e-3);

  const Evaluation none = m.device->NewEvaluator()->Finish();
  EXPECT_EQ(none.examples, 0u);
  EXPECT_EQ(none.auc, -1.0);
  EXPECT_EQ(none.accuracy, -1.0);
}

// A compressing all-reduce's row gradients encoded where the model computed them: the blocks
// (and the residual) are those of the downloaded gradient scattered by key and encoded by the
// CPU's ErrorFeedback, step after step; the rows the model hands back carry nothing.
TEST_P(DeviceModelTest, RowGradientsEncodedOnTheDeviceAreTheCpuPathsBlocks) {
  for (const std::string codec_name : {"topk:0.05", "sign1:64"}) {
    SCOPED_TRACE(codec_name);
    Pair m = MakeModels();
    SKIP_WITHOUT_DEVICE(m);
    Pair plain = MakeModels();
    const CodecSpec codec = *ParseCodec(codec_name);
    const int dim = m.cpu->row_dim();
    const Dataset data = DataFor(*m.cpu, 23, 300, 150, 10);
    const size_t floats = 160 * static_cast<size_t>(dim);  // 10 rows no example has
    // Two parts, as two parameter servers' shards, the second of whole rows and the rest, and
    // an empty third (a shard without rows).
    const size_t split = 70 * static_cast<size_t>(dim);
    GradientEncoder* encoder = m.device->EncodeGradients(
        GradientCompression{.codec = codec,
                            .floats = floats,
                            .parts = {{0, split}, {split, floats}, {floats, floats}}});
    ASSERT_NE(encoder, nullptr);
    const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
    ErrorFeedback feedback[2];
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE(step);
      std::vector<uint64_t> keys;
      const Step down = RunKeptStep(m, plain, data, step, 30, &keys);
      std::vector<float> dense(floats, 0.0f);
      for (size_t k = 0; k < keys.size(); ++k) {
        for (int j = 0; j < dim; ++j) dense[keys[k] * dim + j] += down.rows[k * dim + j];
      }
      for (size_t part = 0; part < 2; ++part) {
        std::vector<std::byte> want, got;
        const size_t begin = part == 0 ? 0 : split, end = part == 0 ? split : floats;
        feedback[part].Compress(*cpu_codec,
                                std::span<const float>(dense.data() + begin, end - begin), &want);
        ASSERT_TRUE(encoder->Compress(part, &got).ok());
        ASSERT_EQ(got, want) << "part " << part;
      }
    }
    for (size_t part = 0; part < 2; ++part) {
      EXPECT_EQ(*encoder->Residual(part), std::vector<float>(feedback[part].residual().begin(),
                                                             feedback[part].residual().end()));
    }
    // A restored residual is the one the next block starts from; a wrong size, or a part that
    // is not there, is refused.
    const size_t second = floats - split;
    ASSERT_TRUE(encoder->SetResidual(1, std::vector<float>(second, 0.25f)).ok());
    EXPECT_EQ(*encoder->Residual(1), std::vector<float>(second, 0.25f));
    EXPECT_EQ(encoder->SetResidual(1, std::vector<float>(3)).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(encoder->Compress(3, nullptr).code(), absl::StatusCode::kInvalidArgument);
    // The empty part holds nothing, drains nothing and encodes nothing.
    EXPECT_TRUE(encoder->Residual(2)->empty());
    EXPECT_TRUE(encoder->SetResidual(2, {}).ok());
    std::vector<float> none = {1.0f};
    ASSERT_TRUE(encoder->Drain(2, &none).ok());
    EXPECT_TRUE(none.empty());
    EXPECT_EQ(encoder->Compress(2, nullptr).code(), absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(encoder->SetResidual(1, {}).ok());
    EXPECT_TRUE(encoder->Residual(1)->empty());
    ExpectRowsHandedBackOnceStopped(m, plain, data);
  }
}

// Sparse rows kept for a row encoder (parameter servers' embedding tables under top-K or
// sign1): each shard's push, made on the device from the step's kept row gradients and the
// residual rows there, is the CPU path's (SparseErrorFeedback over the gradients handed back)
// to the byte, flushes past the capacity and the final drain included; the row gradients the
// model hands back are zero.
TEST_P(DeviceModelTest, SparseRowsEncodedOnTheDeviceAreTheCpuPathsPushes) {
  for (const std::string codec_name : {"topk:0.05", "sign1:64"}) {
    SCOPED_TRACE(codec_name);
    Pair m = MakeModels();
    SKIP_WITHOUT_DEVICE(m);
    Pair plain = MakeModels();
    const CodecSpec codec = *ParseCodec(codec_name);
    const auto dim = static_cast<uint32_t>(m.cpu->row_dim());
    constexpr size_t kCapacity = 40;
    RowGradientEncoder* encoder = m.device->EncodeRows(
        RowCompression{.codec = codec, .dim = dim, .shards = 2, .residual_rows = kCapacity});
    ASSERT_NE(encoder, nullptr);
    EXPECT_EQ(m.device->EncodeRows(RowCompression{.codec = codec, .dim = dim + 1, .shards = 2}),
              nullptr)
        << "rows of another width";
    encoder = m.device->EncodeRows(
        RowCompression{.codec = codec, .dim = dim, .shards = 2, .residual_rows = kCapacity});
    ASSERT_NE(encoder, nullptr);
    const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
    std::vector<SparseErrorFeedback> cpu;
    for (int s = 0; s < 2; ++s) cpu.emplace_back(dim, kCapacity);
    // ctr's batches draw 26 ids an example: from enough of them that a batch leaves some out.
    const Dataset data = DataFor(*m.cpu, 29, 300, m.cpu->name() == "ctr" ? 5000 : 150, 10);
    for (int step = 0; step < 4; ++step) {
      SCOPED_TRACE(step);
      std::vector<uint64_t> keys;
      const Step down = RunKeptStep(m, plain, data, step, 50, &keys);
      // Two shards: even and odd keys.
      for (size_t s = 0; s < 2; ++s) {
        std::vector<uint64_t> shard_keys;
        std::vector<uint32_t> positions;
        std::vector<float> grads;
        for (size_t k = 0; k < keys.size(); ++k) {
          if (keys[k] % 2 != s) continue;
          shard_keys.push_back(keys[k]);
          positions.push_back(static_cast<uint32_t>(k));
          grads.insert(grads.end(), down.rows.begin() + k * dim, down.rows.begin() + (k + 1) * dim);
        }
        SparsePush want, got;
        cpu[s].Compress(*cpu_codec, shard_keys, grads, &want, 75.0f);
        ASSERT_TRUE(encoder->Compress(s, shard_keys, positions, 75.0f, &got).ok());
        EXPECT_EQ(got.keys, want.keys) << "shard " << s;
        EXPECT_EQ(got.kind, want.kind);
        EXPECT_EQ(got.block, want.block);
        EXPECT_EQ(got.held, want.held);
        EXPECT_EQ(got.spread, want.spread);
        EXPECT_EQ(got.flushed_keys, want.flushed_keys);
        EXPECT_EQ(got.flushed_values, want.flushed_values);
      }
    }
    const RowGradientEncoder::Counts counts = encoder->counts();
    EXPECT_EQ(counts.held, cpu[0].residuals().size() + cpu[1].residuals().size());
    EXPECT_EQ(counts.flushed, cpu[0].rows_flushed() + cpu[1].rows_flushed());
    EXPECT_GT(counts.flushed, 0u) << "the capacity must have been reached; held " << counts.held;
    // The residual rows, as a checkpoint takes them, and their restore.
    RowTable table(dim, 0);
    uint64_t pushes = 0;
    ASSERT_TRUE(encoder->CopyResiduals(1, &table, &pushes).ok());
    EXPECT_EQ(pushes, cpu[1].pushes());
    EXPECT_EQ(table.size(), cpu[1].residuals().size());
    ASSERT_TRUE(encoder->SetResiduals(0, table, pushes).ok());
    RowTable again(dim, 0);
    ASSERT_TRUE(encoder->CopyResiduals(0, &again, &pushes).ok());
    EXPECT_EQ(again.size(), table.size());
    ASSERT_TRUE(encoder->SetResiduals(0, cpu[0].residuals(), cpu[0].pushes()).ok());
    // The end of training: every residual row sent whole.
    for (size_t s = 0; s < 2; ++s) {
      SparsePush want, got;
      cpu[s].Drain(&want, 75.0f);
      ASSERT_TRUE(encoder->Drain(s, 75.0f, &got).ok());
      EXPECT_EQ(got.flushed_keys, want.flushed_keys);
      EXPECT_EQ(got.flushed_values, want.flushed_values);
      EXPECT_EQ(got.flushed_held, want.flushed_held);
      EXPECT_EQ(got.flushed_spread, want.flushed_spread);
    }
    EXPECT_EQ(encoder->counts().held, 0u);
    SparsePush none;
    EXPECT_EQ(encoder->Drain(2, 1.0f, &none).code(), absl::StatusCode::kInvalidArgument);
    // A position beyond the step's rows is refused.
    EXPECT_EQ(
        encoder->Compress(0, std::vector<uint64_t>{0}, std::vector<uint32_t>{100000}, 1.0f, &none)
            .code(),
        absl::StatusCode::kInvalidArgument);
    ExpectRowsHandedBackOnceStopped(m, plain, data);
  }
}

// The dense table kept for an encoder: its gradients summed over two steps, then drained whole
// with the residual of a block between them, are the CPU path's; the dense gradients the model
// hands back are zero.
TEST_P(DeviceModelTest, DenseTableKeptOnTheDeviceIsEncodedAndDrainedAsOnTheCpu) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  Pair plain = MakeModels();
  const CodecSpec codec = *ParseCodec("topk:0.1");
  const size_t floats = static_cast<size_t>(m.cpu->bias_dim());
  if (floats < 2) GTEST_SKIP() << "a dense table of one float has no two parts";
  const size_t split = floats / 2;
  EXPECT_EQ(m.device->EncodeGradients(GradientCompression{
                .table = GradientTable::kDense, .codec = codec, .floats = floats + 1}),
            nullptr)
      << "a dense table of another size";
  GradientEncoder* encoder =
      m.device->EncodeGradients(GradientCompression{.table = GradientTable::kDense,
                                                    .codec = codec,
                                                    .floats = floats,
                                                    .parts = {{0, split}, {split, floats}}});
  ASSERT_NE(encoder, nullptr);
  const Dataset data = DataFor(*m.cpu, 31, 200, 100, 8);
  const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
  ErrorFeedback feedback;  // part 0's
  std::vector<float> summed(floats, 0.0f);
  for (int step = 0; step < 2; ++step) {
    std::vector<uint32_t> batch(100);
    std::iota(batch.begin(), batch.end(), static_cast<uint32_t>(100 * step));
    const std::vector<uint64_t> keys = m.cpu->BatchKeys(data, batch);
    const std::vector<float> rows = Uniform(50 + step, keys.size() * m.cpu->row_dim(), 0.3f);
    const std::vector<float> bias = Uniform(60 + step, floats, 0.3f);
    const Step kept = RunStep(*m.device, data, batch, keys, rows, bias);
    const Step down = RunStep(*plain.device, data, batch, keys, rows, bias);
    EXPECT_EQ(kept.dense, std::vector<float>(floats, 0.0f));
    EXPECT_EQ(kept.rows, down.rows);
    if (step == 0) {
      // Part 0 encoded after the first step; part 1 keeps summing.
      std::vector<std::byte> want, got;
      feedback.Compress(*cpu_codec, std::span<const float>(down.dense.data(), split), &want);
      ASSERT_TRUE(encoder->Compress(0, &got).ok());
      EXPECT_EQ(got, want);
    } else {
      for (size_t i = 0; i < split; ++i) summed[i] = down.dense[i] + feedback.residual()[i];
    }
    for (size_t i = split; i < floats; ++i) summed[i] += down.dense[i];
  }
  std::vector<float> drained0, drained1;
  ASSERT_TRUE(encoder->Drain(0, &drained0).ok());
  ASSERT_TRUE(encoder->Drain(1, &drained1).ok());
  drained0.insert(drained0.end(), drained1.begin(), drained1.end());
  EXPECT_EQ(drained0, summed);
  // Drained: nothing is held any more.
  EXPECT_TRUE(encoder->Residual(0)->empty());
  ASSERT_TRUE(encoder->Drain(0, &drained1).ok());
  EXPECT_EQ(drained1, std::vector<float>(split, 0.0f));
}

// A batch announced before a step is packed and uploaded during it, and the next step on that
// batch computes what it computes unstaged; a step on another batch drops the staged one.
TEST_P(DeviceModelTest, AStagedBatchComputesAsAnUnstagedOne) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  Pair plain = MakeModels();
  const Dataset data = DataFor(*m.cpu, 41, 300, 120, 9);
  std::vector<std::vector<uint32_t>> batches(3);
  for (uint32_t i = 0; i < 300; ++i) batches[i % 3].push_back(i);
  std::vector<std::vector<uint64_t>> keys;
  for (const auto& b : batches) keys.push_back(m.cpu->BatchKeys(data, b));
  auto step = [&](const Model& model, int b) {
    const std::vector<float> rows = Uniform(80 + b, keys[b].size() * m.cpu->row_dim(), 0.3f);
    const std::vector<float> bias = Uniform(90 + b, m.cpu->bias_dim(), 0.3f);
    return RunStep(model, data, batches[b], keys[b], rows, bias);
  };
  ASSERT_TRUE(m.device->WantsPrefetch());
  // 0, then 1 (staged during 0), then 0 although 2 was announced (staged 2 dropped).
  m.device->Prefetch(data, batches[1], keys[1]);
  const Step a = step(*m.device, 0);
  m.device->Prefetch(data, batches[2], keys[2]);
  const Step b = step(*m.device, 1);
  const Step c = step(*m.device, 0);
  for (const auto& [got, want] :
       {std::pair{a, step(*plain.device, 0)}, std::pair{b, step(*plain.device, 1)},
        std::pair{c, step(*plain.device, 0)}}) {
    EXPECT_EQ(got.loss, want.loss);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_EQ(got.dense, want.dense);
  }
  using HostModel = DeviceModel<HostExecutor>;
  if (const auto* host = dynamic_cast<const HostModel*>(m.device.get())) {
    EXPECT_EQ(host->prefetched(), 1);
  }
}

// A dataset kept on the device (Model::KeepData): each batch's features gathered there from
// its example indices give the bits of the batch packed on the host, for BatchKeys, a step and
// a staged step, with examples out of order, repeated, and without features; a ctr model keeps
// nothing; once forgotten, the data is packed again.
TEST_P(DeviceModelTest, AKeptDatasetComputesAsPackedBatches) {
  Pair m = MakeModels();
  SKIP_WITHOUT_DEVICE(m);
  Pair plain = MakeModels();
  Dataset data = DataFor(*m.cpu, 43, 300, 120, 9);
  if (m.cpu->name() == "ctr") {
    EXPECT_FALSE(m.device->KeepData(&data)) << "ctr's partitions are streamed";
    return;
  }
  // Examples 300 and 301 have no features.
  for (int i = 0; i < 2; ++i) {
    data.row_offsets.push_back(data.row_offsets.back());
    data.labels.push_back(1.0f);
  }
  ASSERT_TRUE(m.device->KeepData(&data));
  std::mt19937_64 rng(44);
  std::vector<std::vector<uint32_t>> batches(3);
  for (uint32_t i = 0; i < 302; ++i) batches[rng() % 3].push_back(i);
  std::shuffle(batches[1].begin(), batches[1].end(), rng);
  batches[2].push_back(batches[2].front());  // an example twice
  batches.push_back({300, 5, 301});
  auto step = [&](const Model& model, int b, const std::vector<uint64_t>& keys) {
    const std::vector<float> rows = Uniform(80 + b, keys.size() * m.cpu->row_dim(), 0.3f);
    const std::vector<float> bias = Uniform(90 + b, m.cpu->bias_dim(), 0.3f);
    return RunStep(model, data, batches[b], keys, rows, bias);
  };
  auto expect_same = [&](const Step& got, const Step& want) {
    EXPECT_EQ(got.loss, want.loss);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_EQ(got.dense, want.dense);
  };
  for (int b = 0; b < 4; ++b) {
    SCOPED_TRACE(b);
    const std::vector<uint64_t> keys = m.device->BatchKeys(data, batches[b]);
    ASSERT_EQ(keys, plain.device->BatchKeys(data, batches[b]));
    expect_same(step(*m.device, b, keys), step(*plain.device, b, keys));
  }
  // Staged during the step before: batch 1 during batch 0's step.
  const std::vector<uint64_t> keys0 = m.device->BatchKeys(data, batches[0]);
  const std::vector<uint64_t> keys1 = m.device->BatchKeys(data, batches[1]);
  m.device->Prefetch(data, batches[1], keys1);
  expect_same(step(*m.device, 0, keys0), step(*plain.device, 0, keys0));
  expect_same(step(*m.device, 1, keys1), step(*plain.device, 1, keys1));
  using HostModel = DeviceModel<HostExecutor>;
  const auto* host = dynamic_cast<const HostModel*>(m.device.get());
  if (host != nullptr) {
    EXPECT_EQ(host->prefetched(), 1);
    EXPECT_EQ(host->batches_gathered(), 6);  // 4 steps, then a staged one and one more
  }
  // Forgotten: the same data is packed again (and a change to it is seen).
  EXPECT_FALSE(m.device->KeepData(nullptr));
  data.values[0] += 1.0f;
  const std::vector<uint64_t> keys = m.device->BatchKeys(data, batches[0]);
  expect_same(step(*m.device, 0, keys), step(*plain.device, 0, keys));
  if (host != nullptr) {
    EXPECT_EQ(host->batches_gathered(), 6);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Models, DeviceModelTest,
    testing::Combine(testing::Values(Case{"logreg", ModelOptions{.num_classes = 2}},
                                     Case{"softmax", ModelOptions{.num_classes = 5}},
                                     Case{"mlp", ModelOptions{.num_classes = 4, .hidden = {16}}},
                                     Case{"mlp",
                                          ModelOptions{.num_classes = 3, .hidden = {24, 8, 5}}},
                                     Case{"ctr", ModelOptions{.embedding_dim = 4, .hidden = {8}}},
                                     Case{"ctr", ModelOptions{.embedding_dim = 9}}),
                     testing::Values(Where::kHost, Where::kCuda)),
    [](const testing::TestParamInfo<std::tuple<Case, Where>>& info) {
      return absl::StrCat(std::get<1>(info.param) == Where::kHost ? "Host_" : "Cuda_",
                          std::get<0>(info.param).name, "_", info.index);
    });

// The scatter's two shapes (one column a thread, or kScatterColumns) give the same bits, each
// row's sum of its features' terms (to rounding: a hot row's sum is its pieces' sums): hot rows of
// several pieces, rows of one feature, a key no feature has, a feature no key has, widths below, at
// and past the columns.
TEST(DeviceStepKernelTest, ScatterSumsTheSameBitsWithOneColumnOrSeveralAThread) {
  HostExecutor e;
  std::mt19937_64 rng(21);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const size_t n = 700, per_example = 5;
  device_step::HostBatch<HostExecutor> host;
  host.Reserve(n, n * per_example, /*ctr=*/false);
  for (size_t i = 0; i < n; ++i) {
    host.offsets.data()[i] = static_cast<uint32_t>(i * per_example);
    host.labels.data()[i] = 0;
    for (size_t f = 0; f < per_example; ++f) {
      // Field 0: 3 hot ids (over 128 features each); the others: ids from 0..4999; id 9999 is
      // not among the keys.
      const uint64_t id = f == 0 ? rng() % 3 : f == 4 && i % 50 == 0 ? 9999 : 10 + rng() % 5000;
      host.ids.data()[i * per_example + f] = id;
      host.values.data()[i * per_example + f] = u(rng);
    }
  }
  host.offsets.data()[n] = static_cast<uint32_t>(n * per_example);
  std::vector<uint64_t> keys = {0, 1, 2, 7};  // 7: no feature
  for (size_t j = 0; j < n * per_example; ++j) {
    const uint64_t id = host.ids.data()[j];
    if (id >= 10 && id != 9999) keys.push_back(id);
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  device_step::SparseBatch<HostExecutor> batch;
  batch.Upload(e, host, keys.data(), keys.size());
  e.Fence();
  batch.Index(e);
  EXPECT_EQ(batch.ScatterColumns(16), 1) << "a small batch: one column a thread";
  for (const int dim : {1, 3, 4, 5, 16, 17}) {
    SCOPED_TRACE(dim);
    std::vector<float> dout(n * dim);
    for (float& x : dout) x = u(rng);
    // Each row's sum in the order of its features.
    std::vector<float> want(keys.size() * dim, 0.0f);
    for (size_t j = 0; j < n * per_example; ++j) {
      const auto at = std::lower_bound(keys.begin(), keys.end(), host.ids.data()[j]);
      if (at == keys.end() || *at != host.ids.data()[j]) continue;
      const size_t row = at - keys.begin(), example = j / per_example;
      for (int k = 0; k < dim; ++k) {
        want[row * dim + k] += host.values.data()[j] * dout[example * dim + k];
      }
    }
    std::vector<float> got[2];
    for (const int columns : {1, device_step::kScatterColumns}) {
      batch.set_scatter_columns(columns);
      HostExecutor::Array<float> grads;
      grads.Reserve(keys.size() * dim);
      batch.Scatter(e, dout.data(), dim, grads.data());
      got[columns == 1 ? 0 : 1].assign(grads.data(), grads.data() + keys.size() * dim);
    }
    EXPECT_EQ(got[0], got[1]);
    // Hot rows add their pieces' partial sums: the same terms, grouped by 128.
    ExpectNear(want, got[0], 1e-5, "scatter");
  }
}

TEST(DeviceStepKernelTest, ColumnSumsSpanSeveralChunksInOrder) {
  HostExecutor e;
  const size_t n = 3 * device_step::kColumnChunk + 7;
  const int cols = 3;
  std::vector<float> src(n * cols);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i % 11) - 5;
  HostExecutor::Array<float> tmp;
  std::vector<float> out(cols, -1.0f);
  device_step::ColumnSums(e, src.data(), n, cols, tmp, out.data());
  for (int k = 0; k < cols; ++k) {
    double want = 0;
    for (size_t r = 0; r < n; ++r) want += src[r * cols + k];
    EXPECT_FLOAT_EQ(out[k], static_cast<float>(want)) << k;
  }
  device_step::ColumnSums(e, src.data(), 0, cols, tmp, out.data());
  EXPECT_EQ(out, std::vector<float>(cols, 0.0f));
}

TEST(DeviceStepKernelTest, BitsForCoversTheLimit) {
  EXPECT_EQ(device_step::BitsFor(0), 1);
  EXPECT_EQ(device_step::BitsFor(1), 1);
  EXPECT_EQ(device_step::BitsFor(2), 2);
  EXPECT_EQ(device_step::BitsFor(255), 8);
  EXPECT_EQ(device_step::BitsFor(256), 9);
  EXPECT_EQ(device_step::BitsFor(uint64_t{1} << 40), 32);
}

// The device's AUC against BinaryAuc over scores full of ties, NaNs and both zeros, added in
// many uneven batches (so that the kept scores grow, and the sums take several levels).
TEST(DeviceStepKernelTest, DeviceAucRanksTiesNansAndZerosAsTheHost) {
  std::mt19937_64 rng(77);
  const size_t n = 70001;  // > kColumnChunk^2: three levels of chunk sums
  std::vector<float> scores(n), labels(n);
  std::vector<int32_t> classes(n);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = rng();
    scores[i] = r % 97 == 0   ? NAN
                : r % 89 == 0 ? -0.0f
                : r % 83 == 0 ? 0.0f
                              : static_cast<float>(r % 50) / 49;  // heavy ties, 0 and 1 too
    labels[i] = (rng() % 3 == 0) ? 1.0f : 0.0f;
    classes[i] = labels[i] > 0.5f ? 1 : 0;
  }
  HostExecutor e;
  device_step::DeviceEvaluation<HostExecutor> sums(2, true);
  size_t at = 0;
  for (size_t batch = 1; at < n; batch = batch * 3 + 1) {
    const size_t take = std::min(batch, n - at);
    sums.Add(e, scores.data() + at, classes.data() + at, take);
    at += take;
  }
  const Evaluation host = EvaluateBinary(scores, labels);
  EXPECT_EQ(sums.count(), n);
  EXPECT_NEAR(sums.Auc(e), host.auc, 1e-12);
  // A NaN score makes the loss NaN on both sides; the hits count it wrong on both.
  EXPECT_TRUE(std::isnan(sums.loss_sum()) && std::isnan(host.loss));
  EXPECT_EQ(static_cast<double>(sums.hits()) / n, host.accuracy);

  // One class only: 0.5, as BinaryAuc.
  device_step::DeviceEvaluation<HostExecutor> negatives(2, true);
  std::vector<int32_t> zeros(100, 0);
  negatives.Add(e, scores.data(), zeros.data(), zeros.size());
  EXPECT_EQ(negatives.Auc(e), 0.5);
}

}  // namespace
}  // namespace syncline
