// syncline-bench-gpu: a worker's training step on the CPU against the GPU, for each model with
// device steps at several batch sizes: examples per second of BatchKeys + LossAndGradient (what
// a worker computes per iteration), their ratio, and the GPU step split into finding the
// batch's keys, upload, compute and download. Then, in a CUDA build on a machine with a GPU,
// the step's memory-bound kernels against a device-to-device copy and its matrix products
// against cuBLAS's own best at the same shapes (gpu_kernels_bench.cu).
//
// Data: "sparse" examples have 39 ids drawn from 2^22 with a skew (a few hot ids, like
// Criteo's categorical features); "pixels" examples have each of 784 features with
// probability 1/2, values in (0, 1] (like Fashion-MNIST); "criteo" examples have Criteo's
// layout, 13 log-scaled dense values and 26 skewed ids from 2^20 per field. Rows and the dense
// table are uniform in [-0.05, 0.05]. Every random choice comes from --seed, printed.
//
// Then a compressed step of the mlp (what a worker of a compressing all-reduce or of dense rows
// on parameter servers computes): the step and the error-feedback encoding of its dense row
// gradient, on a CPU worker, on a GPU worker that downloads the gradient and encodes it on the
// CPU, and on a GPU worker that encodes it on the device (Model::EncodeGradients), with the
// bytes of row gradient each brings down. And the same for the ctr model's embedding rows
// pushed to two parameter-server shards with a residual per row (SparseErrorFeedback on the CPU,
// DeviceRowFeedback through Model::EncodeRows on the device): what a ctr worker does per step
// under --compress topk or sign1. And a ctr step whose rows come from compressed pulls
// (--compress-pull): the replies decoded on the CPU (DecodePull) and the rows uploaded whole, or
// the replies uploaded as they came and decoded on the device (Model::DecodePulls), with the
// bytes of rows each sends up.
//
// The GPU rows of the models with sparse batches (not ctr) are measured again with the data kept
// on the GPU (Model::KeepData: a batch goes up as its example indices).
//
// Each figure is the rate over at least --seconds of steps (and 3 steps) after 2 untimed ones.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/gpu_kernels_bench.h"
#include "compression/codec.h"
#include "compression/sparse_rows.h"
#include "core/command_line.h"
#include "device/cuda_model.h"
#include "device/placement.h"
#include "job/options.h"
#include "models/model.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

enum class Shape { kSparse, kPixels, kCriteo };

struct Config {
  std::string label;
  std::string model;
  ModelOptions options;
  Shape shape;
};

Dataset MakeData(Shape shape, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Dataset d;
  d.row_offsets.reserve(n + 1);
  d.row_offsets.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    if (shape == Shape::kCriteo) {
      for (int j = 0; j < 13; ++j) {
        d.ids.push_back(j);
        d.values.push_back(std::log1p(100.0f * u(rng)));
      }
      for (int f = 0; f < 26; ++f) {
        const uint64_t id = static_cast<uint64_t>(std::pow(u(rng), 3.0f) * (1 << 20));
        d.ids.push_back((static_cast<uint64_t>(f) << 20) | id);
        d.values.push_back(1.0f);
      }
      d.labels.push_back(u(rng) < 0.25f ? 1.0f : 0.0f);
    } else if (shape == Shape::kSparse) {
      for (int f = 0; f < 39; ++f) {
        // Skewed: u^3 puts most draws on low ids. One id space per field.
        const uint64_t id = static_cast<uint64_t>(std::pow(u(rng), 3.0f) * (1 << 22));
        d.ids.push_back((static_cast<uint64_t>(f) << 22) | id);
        d.values.push_back(1.0f);
      }
      d.labels.push_back(u(rng) < 0.25f ? 1.0f : 0.0f);
    } else {
      for (int f = 0; f < 784; ++f) {
        if (u(rng) < 0.5f) {
          d.ids.push_back(f);
          d.values.push_back(0.01f + 0.99f * u(rng));
        }
      }
      d.labels.push_back(static_cast<float>(static_cast<int>(u(rng) * 10) % 10));
    }
    d.row_offsets.push_back(d.ids.size());
  }
  d.num_features = shape == Shape::kSparse   ? (uint64_t{39} << 22)
                   : shape == Shape::kCriteo ? (uint64_t{26} << 20)
                                             : 784;
  return d;
}

struct StepRate {
  double examples_per_second = 0;
  // Per step, in milliseconds (the GPU's split; the CPU's is all compute).
  double keys_ms = 0, upload_ms = 0, compute_ms = 0, download_ms = 0;
};

StepRate Measure(const Model& model, const Dataset& data, size_t batch, double seconds,
                 uint64_t seed) {
  const size_t batches = std::max<size_t>(1, data.size() / batch);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> init(-0.05f, 0.05f);
  std::vector<float> bias(model.bias_dim()), bias_grad(model.bias_dim()), rows, grads;
  for (float& x : bias) x = init(rng);
  auto step = [&](size_t b, absl::Duration* keys_time) {
    std::vector<uint32_t> examples(batch);
    std::iota(examples.begin(), examples.end(), static_cast<uint32_t>((b % batches) * batch));
    const auto t0 = Clock::now();
    const std::vector<uint64_t> keys = model.BatchKeys(data, examples);
    *keys_time += absl::FromChrono(Clock::now() - t0);
    rows.resize(keys.size() * model.row_dim());
    for (float& x : rows) x = init(rng);
    grads.assign(rows.size(), 0.0f);
    std::fill(bias_grad.begin(), bias_grad.end(), 0.0f);
    // Filling rows (the pull) is not the step's: it is left out below.
    const auto t1 = Clock::now();
    model.LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(grads),
                          absl::MakeSpan(bias_grad));
    return absl::FromChrono(Clock::now() - t1);
  };
  absl::Duration keys_time, compute_time;
  for (size_t b = 0; b < 2; ++b) step(b, &keys_time);
  keys_time = absl::ZeroDuration();
  (void)model.TakeTransferTimes();
  int steps = 0;
  while (steps < 3 || absl::ToDoubleSeconds(keys_time + compute_time) < seconds) {
    compute_time += step(steps, &keys_time);
    ++steps;
  }
  const TransferTimes copies = model.TakeTransferTimes();
  StepRate r;
  const double total = absl::ToDoubleSeconds(keys_time + compute_time);
  r.examples_per_second = static_cast<double>(batch) * steps / total;
  auto ms = [&](absl::Duration d) { return absl::ToDoubleMilliseconds(d) / steps; };
  r.keys_ms = ms(keys_time);
  r.upload_ms = ms(copies.upload);
  r.download_ms = ms(copies.download);
  r.compute_ms = ms(compute_time - copies.upload - copies.download);
  return r;
}

// A compressed step: the step, then the encoding of its row gradient as one dense block with
// error feedback, by `encoder` (on the model's device) or on the CPU from the gradient the
// model hands back. Milliseconds per step, and the row-gradient bytes that came down.
struct CompressedRate {
  double ms = 0;
  double bytes_down = 0;
};

// Times `step` (b -> its duration; it adds what came down to *bytes_down) after 2 untimed
// steps, for at least `seconds` and 3 steps.
template <class Step>
CompressedRate TimeCompressed(const Step& step, double seconds, double* bytes_down) {
  for (size_t b = 0; b < 2; ++b) step(b);
  *bytes_down = 0;
  absl::Duration total;
  int steps = 0;
  while (steps < 3 || absl::ToDoubleSeconds(total) < seconds) {
    total += step(steps);
    ++steps;
  }
  return CompressedRate{.ms = absl::ToDoubleMilliseconds(total) / steps,
                        .bytes_down = *bytes_down / steps};
}

// The training step of a compressed measurement: Run(b) takes batch b % (data / batch),
// fresh pulled rows, and the model's step, whose gradients it leaves in grads(); the time
// from the step's start is the caller's.
class CompressedStep {
 public:
  CompressedStep(const Model& model, const Dataset& data, size_t batch, uint64_t seed)
      : model_(model),
        data_(data),
        batch_(batch),
        batches_(std::max<size_t>(1, data.size() / batch)),
        rng_(seed),
        bias_(model.bias_dim()),
        bias_grad_(model.bias_dim()) {
    for (float& x : bias_) x = init_(rng_);
  }
  // Batch b's keys; *start is when the step began.
  std::vector<uint64_t> Run(size_t b, Clock::time_point* start) {
    std::vector<uint32_t> examples(batch_);
    std::iota(examples.begin(), examples.end(), static_cast<uint32_t>((b % batches_) * batch_));
    std::vector<uint64_t> keys = model_.BatchKeys(data_, examples);
    rows_.resize(keys.size() * model_.row_dim());
    for (float& x : rows_) x = init_(rng_);
    grads_.assign(rows_.size(), 0.0f);
    std::fill(bias_grad_.begin(), bias_grad_.end(), 0.0f);
    *start = Clock::now();
    model_.LossAndGradient(data_, examples, keys, rows_, bias_, absl::MakeSpan(grads_),
                           absl::MakeSpan(bias_grad_));
    return keys;
  }
  const std::vector<float>& grads() const { return grads_; }

 private:
  const Model& model_;
  const Dataset& data_;
  const size_t batch_, batches_;
  std::mt19937_64 rng_;
  std::uniform_real_distribution<float> init_{-0.05f, 0.05f};
  std::vector<float> bias_, bias_grad_, rows_, grads_;
};

CompressedRate MeasureCompressed(const Model& model, GradientEncoder* encoder,
                                 const CodecSpec& codec, const Dataset& data, size_t batch,
                                 double seconds, uint64_t seed) {
  const size_t dim = static_cast<size_t>(model.row_dim());
  const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
  ErrorFeedback feedback;
  CompressedStep compressed(model, data, batch, seed);
  std::vector<float> dense(data.num_features * dim);
  std::vector<std::byte> block;
  double bytes_down = 0;
  auto step = [&](size_t b) {
    Clock::time_point t0;
    const std::vector<uint64_t> keys = compressed.Run(b, &t0);
    const std::vector<float>& grads = compressed.grads();
    if (encoder != nullptr) {
      if (auto s = encoder->Compress(0, &block); !s.ok()) {
        absl::FPrintF(stderr, "encoding on the device: %s\n", s.ToString());
        std::exit(1);
      }
      bytes_down += static_cast<double>(block.size());
    } else {
      std::fill(dense.begin(), dense.end(), 0.0f);
      for (size_t k = 0; k < keys.size(); ++k) {
        std::copy_n(grads.data() + k * dim, dim, dense.data() + keys[k] * dim);
      }
      feedback.Compress(*cpu_codec, dense, &block);
      bytes_down += static_cast<double>(grads.size() * sizeof(float));
    }
    return absl::FromChrono(Clock::now() - t0);
  };
  return TimeCompressed(step, seconds, &bytes_down);
}

// A compressed ctr step: the step, then its embedding rows' pushes to two shards (even and odd
// keys) with a residual per row, by `encoder` (on the model's device) or on the CPU from the
// row gradients the model hands back. Milliseconds per step, and the bytes that came down for
// the rows: on the device, what the pushes carry (keys excepted, which the host has).
CompressedRate MeasureSparseCompressed(const Model& model, RowGradientEncoder* encoder,
                                       const CodecSpec& codec, const Dataset& data, size_t batch,
                                       double seconds, uint64_t seed) {
  const size_t dim = static_cast<size_t>(model.row_dim());
  const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
  std::vector<SparseErrorFeedback> feedback;
  for (int s = 0; s < 2; ++s) feedback.emplace_back(static_cast<uint32_t>(dim), 1000000);
  CompressedStep compressed(model, data, batch, seed);
  double bytes_down = 0;
  SparsePush push;
  auto step = [&](size_t b) {
    Clock::time_point t0;
    const std::vector<uint64_t> keys = compressed.Run(b, &t0);
    const std::vector<float>& grads = compressed.grads();
    if (encoder == nullptr) bytes_down += static_cast<double>(grads.size() * sizeof(float));
    for (size_t s = 0; s < 2; ++s) {
      std::vector<uint64_t> shard_keys;
      std::vector<uint32_t> positions;
      std::vector<float> shard_grads;
      for (size_t k = 0; k < keys.size(); ++k) {
        if (keys[k] % 2 != s) continue;
        shard_keys.push_back(keys[k]);
        if (encoder != nullptr) {
          positions.push_back(static_cast<uint32_t>(k));
        } else {
          shard_grads.insert(shard_grads.end(), grads.begin() + k * dim,
                             grads.begin() + (k + 1) * dim);
        }
      }
      const auto examples_f = static_cast<float>(batch);
      if (encoder == nullptr) {
        feedback[s].Compress(*cpu_codec, shard_keys, shard_grads, &push, examples_f);
        continue;
      }
      if (auto st = encoder->Compress(s, shard_keys, positions, examples_f, &push); !st.ok()) {
        absl::FPrintF(stderr, "encoding rows on the device: %s\n", st.ToString());
        std::exit(1);
      }
      bytes_down += static_cast<double>(push.block.size() + push.held.size() * 8 +
                                        push.flushed_values.size() * sizeof(float) +
                                        push.flushed_keys.size() * 16);
    }
    return absl::FromChrono(Clock::now() - t0);
  };
  return TimeCompressed(step, seconds, &bytes_down);
}

// The compressed steps' tables (see the top of the file): the mlp's dense row gradient, or
// (sparse) the ctr model's embedding rows with a residual per row.
int CompressedSteps(bool gpu, bool sparse, size_t batch, double seconds, uint64_t seed) {
  const std::string model = sparse ? "ctr" : "mlp";
  const ModelOptions options = sparse ? ModelOptions{.embedding_dim = 16, .hidden = {64}}
                                      : ModelOptions{.num_classes = 10, .hidden = {256, 128}};
  const Dataset data = MakeData(sparse ? Shape::kCriteo : Shape::kPixels, 4 * batch, seed);
  if (sparse) {
    absl::PrintF(
        "\nCompressed sparse rows, ctr D=16 H=64, criteo, batch %d: the step and its embedding "
        "rows' pushes to 2 shards with a residual per row\n\n",
        batch);
  } else {
    absl::PrintF(
        "\nCompressed step, mlp 256,128 K=10, pixels, batch %d: the step and the error-feedback "
        "encoding of its %d-float row gradient\n\n",
        batch, data.num_features * 256);
  }
  absl::PrintF(
      "| codec | CPU worker ms | GPU, encoded on the CPU ms | GPU, encoded on the device ms | "
      "device/CPU-encoded | row-gradient bytes down, CPU-encoded | on the device |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  // The step with its encoding on the CPU (no encoder) or by the model's encoder.
  struct Encoder {
    GradientEncoder* dense = nullptr;
    RowGradientEncoder* rows = nullptr;
  };
  const auto measure = [&](const Model& m, Encoder encoder, const CodecSpec& codec) {
    return sparse ? MeasureSparseCompressed(m, encoder.rows, codec, data, batch, seconds, seed)
                  : MeasureCompressed(m, encoder.dense, codec, data, batch, seconds, seed);
  };
  for (const char* name : {"topk:0.01", "sign1"}) {
    const CodecSpec codec = *ParseCodec(name);
    auto cpu = Model::Create(model, options);
    if (!cpu.ok()) return 1;
    const CompressedRate on_cpu = measure(**cpu, Encoder{}, codec);
    if (!gpu) {
      absl::PrintF("| %s | %.2f | not measured | not measured | | | |\n", name, on_cpu.ms);
      continue;
    }
    auto downloaded = CreateCudaModel(model, options, 0);
    auto kept = CreateCudaModel(model, options, 0);
    if (!downloaded.ok() || !kept.ok()) return 1;
    const size_t floats = data.num_features * 256;
    Encoder encoder;
    if (sparse) {
      encoder.rows = (*kept)->EncodeRows(
          RowCompression{.codec = codec, .dim = 16, .shards = 2, .residual_rows = 1000000});
    } else {
      encoder.dense = (*kept)->EncodeGradients(
          GradientCompression{.codec = codec, .floats = floats, .parts = {{0, floats}}});
    }
    if (encoder.rows == nullptr && encoder.dense == nullptr) {
      absl::PrintF("| %s | %.2f | no device encoder for this codec | | | | |\n", name, on_cpu.ms);
      continue;
    }
    const CompressedRate host = measure(**downloaded, Encoder{}, codec);
    const CompressedRate device = measure(**kept, encoder, codec);
    absl::PrintF("| %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f |\n", name, on_cpu.ms, host.ms,
                 device.ms, host.ms / device.ms, host.bytes_down, device.bytes_down);
  }
  return 0;
}

// A ctr step whose rows come from compressed pulls (--compress-pull) of two shards (even and
// odd keys), each a server's copy (EncodePull, untimed) of rows that move a little between
// steps: the replies decoded on the CPU into the batch's rows, which the step uploads whole,
// or (`decoder`, on the model's device) uploaded as they came and decoded there. Milliseconds
// per step (decoding and step), and the bytes a step sends up for its rows either way: the
// rows whole, or the replies' new rows, delta blocks and 8 bytes a row (slot and place in the
// batch: a shard's reply; the same replies, whichever way they were decoded).
struct PullRate {
  double ms = 0;
  double whole_bytes = 0, reply_bytes = 0;
};
PullRate MeasurePulls(const Model& model, PulledRowDecoder* decoder, const CodecSpec& codec,
                      const Dataset& data, size_t batch, double seconds, uint64_t seed) {
  const uint32_t dim = static_cast<uint32_t>(model.row_dim());
  const std::unique_ptr<Codec> server_codec = Codec::Create(codec);
  std::vector<RowTable> servers, copies;
  for (int s = 0; s < 2; ++s) {
    servers.emplace_back(dim, 0);
    copies.emplace_back(dim, 0);
  }
  absl::flat_hash_map<uint64_t, std::vector<float>> table;  // the servers' current rows
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> init(-0.05f, 0.05f), drift(-1e-3f, 1e-3f);
  const size_t batches = std::max<size_t>(1, data.size() / batch);
  std::vector<float> bias(model.bias_dim()), bias_grad(model.bias_dim()), rows, grads, shard_rows;
  for (float& x : bias) x = init(rng);
  double whole_bytes = 0, reply_bytes = 0;
  uint64_t stamp = 0;
  auto step = [&](size_t b) {
    std::vector<uint32_t> examples(batch);
    std::iota(examples.begin(), examples.end(), static_cast<uint32_t>((b % batches) * batch));
    const std::vector<uint64_t> keys = model.BatchKeys(data, examples);
    rows.assign(keys.size() * dim, 0.0f);
    // The servers' replies (untimed): each shard's keys ascending, with their batch positions.
    std::vector<uint64_t> shard_keys[2];
    std::vector<uint32_t> places[2];
    PulledRows replies[2];
    ++stamp;
    for (size_t s = 0; s < 2; ++s) {
      std::vector<float> values;
      for (size_t k = 0; k < keys.size(); ++k) {
        if (keys[k] % 2 != s) continue;
        shard_keys[s].push_back(keys[k]);
        places[s].push_back(static_cast<uint32_t>(k));
        auto [it, inserted] = table.try_emplace(keys[k], dim);
        for (float& x : it->second) x = inserted ? init(rng) : x + drift(rng);
        values.insert(values.end(), it->second.begin(), it->second.end());
      }
      EncodePull(*server_codec, shard_keys[s], values, stamp, &servers[s], &replies[s]);
    }
    const Clock::time_point t0 = Clock::now();
    if (decoder != nullptr) decoder->BeginRead(std::span<float>(rows));
    for (size_t s = 0; s < 2; ++s) {
      const auto fresh = std::as_bytes(std::span<const float>(replies[s].fresh));
      absl::Status decoded;
      if (decoder != nullptr) {
        decoded = decoder->Decode(shard_keys[s], places[s], fresh, replies[s].block,
                                  replies[s].evicted, rows.data());
      } else {
        shard_rows.resize(shard_keys[s].size() * dim);
        decoded = DecodePull(codec.kind, shard_keys[s], fresh, replies[s].block, replies[s].evicted,
                             &copies[s], std::span<float>(shard_rows));
        for (size_t j = 0; j < places[s].size(); ++j) {
          std::copy_n(shard_rows.begin() + j * dim, dim, rows.begin() + places[s][j] * dim);
        }
      }
      whole_bytes += static_cast<double>(shard_keys[s].size() * dim * sizeof(float));
      reply_bytes +=
          static_cast<double>(fresh.size() + replies[s].block.size() + 8 * shard_keys[s].size());
      if (!decoded.ok()) {
        absl::FPrintF(stderr, "decoding a compressed pull: %s\n", decoded.ToString());
        std::exit(1);
      }
    }
    grads.assign(rows.size(), 0.0f);
    std::fill(bias_grad.begin(), bias_grad.end(), 0.0f);
    model.LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(grads),
                          absl::MakeSpan(bias_grad));
    return absl::FromChrono(Clock::now() - t0);
  };
  double unused = 0;
  const CompressedRate rate = TimeCompressed(step, seconds, &unused);
  // TimeCompressed's untimed steps count here too: per step over all of them.
  const double steps = static_cast<double>(stamp);
  return PullRate{
      .ms = rate.ms, .whole_bytes = whole_bytes / steps, .reply_bytes = reply_bytes / steps};
}

// The compressed pulls' table: a ctr worker's step under --compress-pull, its replies decoded
// on the CPU or on the device.
int CompressedPulls(bool gpu, size_t batch, double seconds, uint64_t seed) {
  const ModelOptions options{.embedding_dim = 16, .hidden = {64}};
  const Dataset data = MakeData(Shape::kCriteo, 4 * batch, seed);
  absl::PrintF(
      "\nCompressed pulls, ctr D=16 H=64, criteo, batch %d: the replies of 2 shards decoded "
      "and the step\n\n"
      "| pull codec | CPU worker ms | GPU, decoded on the CPU ms | GPU, decoded on the device ms "
      "| device/CPU-decoded | row bytes a step, whole | as replies |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      batch);
  for (const char* name : {"fp16", "topk:0.1", "sign1"}) {
    const CodecSpec codec = *ParseCodec(name);
    auto cpu = Model::Create("ctr", options);
    if (!cpu.ok()) return 1;
    const PullRate on_cpu = MeasurePulls(**cpu, nullptr, codec, data, batch, seconds, seed);
    if (!gpu) {
      absl::PrintF("| %s | %.2f | not measured | not measured | | %.0f | %.0f |\n", name, on_cpu.ms,
                   on_cpu.whole_bytes, on_cpu.reply_bytes);
      continue;
    }
    auto host = CreateCudaModel("ctr", options, 0);
    auto kept = CreateCudaModel("ctr", options, 0);
    if (!host.ok() || !kept.ok()) return 1;
    PulledRowDecoder* decoder = (*kept)->DecodePulls(PullDecoding{.codec = codec.kind, .dim = 16});
    if (decoder == nullptr) {
      absl::PrintF("| %s | %.2f | no device decoder for this codec | | | | |\n", name, on_cpu.ms);
      continue;
    }
    const PullRate on_host = MeasurePulls(**host, nullptr, codec, data, batch, seconds, seed);
    const PullRate device = MeasurePulls(**kept, decoder, codec, data, batch, seconds, seed);
    absl::PrintF("| %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f |\n", name, on_cpu.ms, on_host.ms,
                 device.ms, on_host.ms / device.ms, on_host.whole_bytes, device.reply_bytes);
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-gpu: a worker's training step (BatchKeys + LossAndGradient) on the CPU "
      "against the GPU, per model and batch size, with the GPU step's split; then the step's "
      "kernels against a device-to-device copy and its GEMMs against cuBLAS (CUDA builds with "
      "a GPU)");
  std::vector<size_t> batches = {256, 4096, 65536};
  double seconds = 1.0;
  uint64_t seed = 42;
  bool quick = false;
  app.add_option("--batches", batches, "batch sizes")->delimiter(',');
  app.add_option("--seconds", seconds, "time per figure, at least");
  app.add_option("--seed", seed, "seed of the data and the weights");
  app.add_flag("--quick", quick, "one small batch, briefly (a smoke run)");
  if (auto code = ParseCommandLine(app, argc, argv, "syncline-bench-gpu")) return *code;
  if (quick) {
    batches = {256};
    seconds = 0.02;
  }
  const DeviceProbe probe = ProbeDevices();
  const bool gpu = CudaModelsBuilt() && probe.gpus > 0;
  absl::PrintF("# syncline-bench-gpu (seed %d)\n\nGPU: %s\n\n", seed,
               !CudaModelsBuilt() ? "not measured (this build has no CUDA)"
               : probe.gpus == 0  ? "not measured (no CUDA device is visible)"
                                  : "cuda:0");
  const std::vector<Config> configs = {
      {"logreg, sparse", "logreg", ModelOptions{}, Shape::kSparse},
      {"softmax K=10, pixels", "softmax", ModelOptions{.num_classes = 10}, Shape::kPixels},
      {"mlp 256,128 K=10, pixels", "mlp", ModelOptions{.num_classes = 10, .hidden = {256, 128}},
       Shape::kPixels},
      {"ctr D=16 H=64, criteo", "ctr", ModelOptions{.embedding_dim = 16, .hidden = {64}},
       Shape::kCriteo},
  };
  absl::PrintF(
      "| model | batch | CPU examples/s | GPU examples/s | GPU/CPU | GPU keys ms | upload ms | "
      "compute ms | download ms |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Config& c : configs) {
    auto cpu = Model::Create(c.model, c.options);
    if (!cpu.ok()) {
      absl::PrintF("%s: %s\n", c.label, cpu.status().ToString());
      return 1;
    }
    std::unique_ptr<Model> device;
    if (gpu) {
      auto made = CreateCudaModel(c.model, c.options, 0);
      if (!made.ok()) {
        absl::PrintF("%s: %s\n", c.label, made.status().ToString());
        return 1;
      }
      device = std::move(*made);
    }
    for (const size_t batch : batches) {
      // Four batches' worth, so that consecutive steps read different examples.
      const Dataset data = MakeData(c.shape, 4 * batch, seed);
      const StepRate on_cpu = Measure(**cpu, data, batch, seconds, seed);
      if (!device) {
        absl::PrintF("| %s | %d | %.0f | not measured | | | | | |\n", c.label, batch,
                     on_cpu.examples_per_second);
        continue;
      }
      const StepRate on_gpu = Measure(*device, data, batch, seconds, seed);
      absl::PrintF("| %s | %d | %.0f | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f |\n", c.label, batch,
                   on_cpu.examples_per_second, on_gpu.examples_per_second,
                   on_gpu.examples_per_second / on_cpu.examples_per_second, on_gpu.keys_ms,
                   on_gpu.upload_ms, on_gpu.compute_ms, on_gpu.download_ms);
      // The same with the data kept on the GPU (Model::KeepData): a batch goes up as its
      // example indices, and its features are gathered there.
      if (device->KeepData(&data)) {
        const StepRate kept = Measure(*device, data, batch, seconds, seed);
        device->KeepData(nullptr);
        absl::PrintF(
            "| %s, data kept on the GPU | %d | | %.0f | %.2f | %.3f | %.3f | %.3f | %.3f |\n",
            c.label, batch, kept.examples_per_second,
            kept.examples_per_second / on_cpu.examples_per_second, kept.keys_ms, kept.upload_ms,
            kept.compute_ms, kept.download_ms);
      }
    }
  }
  for (const bool sparse : {false, true}) {
    if (int code = CompressedSteps(gpu, sparse, quick ? 256 : 4096, seconds, seed); code != 0) {
      return code;
    }
  }
  if (int code = CompressedPulls(gpu, quick ? 256 : 4096, seconds, seed); code != 0) return code;
#if SYNCLINE_BENCH_GPU_KERNELS
  if (gpu) return RunKernelBenchmarks(quick);
#endif
  absl::PrintF(
      "\nKernels against a device-to-device copy, GEMMs against cuBLAS: not measured "
      "(no GPU here)\n");
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
