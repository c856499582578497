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
// bytes of row gradient each brings down.
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

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "bench/gpu_kernels_bench.h"
#include "compression/codec.h"
#include "core/command_line.h"
#include "worker/device.h"
#include "worker/gpu_model.h"
#include "worker/model.h"

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

CompressedRate MeasureCompressed(const Model& model, GradientEncoder* encoder,
                                 const CodecSpec& codec, const Dataset& data, size_t batch,
                                 double seconds, uint64_t seed) {
  const size_t batches = std::max<size_t>(1, data.size() / batch);
  const size_t dim = static_cast<size_t>(model.row_dim());
  const std::unique_ptr<Codec> cpu_codec = Codec::Create(codec);
  ErrorFeedback feedback;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> init(-0.05f, 0.05f);
  std::vector<float> bias(model.bias_dim()), bias_grad(model.bias_dim()), rows, grads;
  std::vector<float> dense(data.num_features * dim);
  std::vector<std::byte> block;
  for (float& x : bias) x = init(rng);
  double bytes_down = 0;
  auto step = [&](size_t b) {
    std::vector<uint32_t> examples(batch);
    std::iota(examples.begin(), examples.end(), static_cast<uint32_t>((b % batches) * batch));
    const std::vector<uint64_t> keys = model.BatchKeys(data, examples);
    rows.resize(keys.size() * dim);
    for (float& x : rows) x = init(rng);
    grads.assign(rows.size(), 0.0f);
    std::fill(bias_grad.begin(), bias_grad.end(), 0.0f);
    const auto t0 = Clock::now();
    model.LossAndGradient(data, examples, keys, rows, bias, absl::MakeSpan(grads),
                          absl::MakeSpan(bias_grad));
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
  for (size_t b = 0; b < 2; ++b) step(b);
  bytes_down = 0;
  absl::Duration total;
  int steps = 0;
  while (steps < 3 || absl::ToDoubleSeconds(total) < seconds) {
    total += step(steps);
    ++steps;
  }
  return CompressedRate{.ms = absl::ToDoubleMilliseconds(total) / steps,
                        .bytes_down = bytes_down / steps};
}

// The compressed mlp step's table (see the top of the file).
int CompressedSteps(bool gpu, size_t batch, double seconds, uint64_t seed) {
  const ModelOptions options{.num_classes = 10, .hidden = {256, 128}};
  const Dataset data = MakeData(Shape::kPixels, 4 * batch, seed);
  absl::PrintF(
      "\nCompressed step, mlp 256,128 K=10, pixels, batch %d: the step and the error-feedback "
      "encoding of its %d-float row gradient\n\n"
      "| codec | CPU worker ms | GPU, encoded on the CPU ms | GPU, encoded on the device ms | "
      "device/CPU-encoded | row-gradient bytes down, CPU-encoded | on the device |\n"
      "| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      batch, data.num_features * 256);
  for (const char* name : {"topk:0.01", "sign1"}) {
    const CodecSpec codec = *ParseCodec(name);
    auto cpu = Model::Create("mlp", options);
    if (!cpu.ok()) return 1;
    const CompressedRate on_cpu =
        MeasureCompressed(**cpu, nullptr, codec, data, batch, seconds, seed);
    if (!gpu) {
      absl::PrintF("| %s | %.2f | not measured | not measured | | | |\n", name, on_cpu.ms);
      continue;
    }
    auto downloaded = CreateGpuModel("mlp", options, 0);
    auto kept = CreateGpuModel("mlp", options, 0);
    if (!downloaded.ok() || !kept.ok()) return 1;
    const size_t floats = data.num_features * 256;
    GradientEncoder* encoder = (*kept)->EncodeGradients(
        GradientCompression{.codec = codec, .floats = floats, .parts = {{0, floats}}});
    if (encoder == nullptr) {
      absl::PrintF("| %s | %.2f | no device encoder for this codec | | | | |\n", name, on_cpu.ms);
      continue;
    }
    const CompressedRate host =
        MeasureCompressed(**downloaded, nullptr, codec, data, batch, seconds, seed);
    const CompressedRate device =
        MeasureCompressed(**kept, encoder, codec, data, batch, seconds, seed);
    absl::PrintF("| %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f |\n", name, on_cpu.ms, host.ms,
                 device.ms, host.ms / device.ms, host.bytes_down, device.bytes_down);
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
  const bool gpu = GpuModelsBuilt() && probe.gpus > 0;
  absl::PrintF("# syncline-bench-gpu (seed %d)\n\nGPU: %s\n\n", seed,
               !GpuModelsBuilt() ? "not measured (this build has no CUDA)"
               : probe.gpus == 0 ? "not measured (no CUDA device is visible)"
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
      auto made = CreateGpuModel(c.model, c.options, 0);
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
    }
  }
  if (int code = CompressedSteps(gpu, quick ? 256 : 4096, seconds, seed); code != 0) return code;
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
