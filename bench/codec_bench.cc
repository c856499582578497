// syncline-bench-codec: encode and decode throughput of the gradient codecs (compression/), in
// GB/s of float32 input, each beside memcpy bandwidth measured in the same run; top-K
// selection (exact and sampled threshold) beside std::nth_element and one streaming read of
// the same data; and, when a CUDA device is present, the CUDA kernels beside a
// device-to-device cudaMemcpy.
//
// Every figure is the best of several turns (the first, untimed, warms caches and pages).
// The gradient is N(0, 1) noise from a fixed, printed seed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/codec.h"
#include "compression/cpu_kernels.h"
#include "compression/topk_select.h"
#include "core/command_line.h"
#if defined(SYNCLINE_HAVE_CUDA)
#include "compression/codec_cuda.h"
#include "job/options.h"
#endif

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kMiB = size_t{1} << 20;

struct Settings {
  std::vector<size_t> sizes_mib = {1, 4, 16, 64, 256};
  std::vector<std::string> codecs = {"none", "fp16", "sign1", "topk:0.01"};
  int repeat = 7;         // timed turns per figure, at most
  double budget_s = 1.5;  // per figure: stop repeating after this much time
  uint64_t seed = 20240601;
};

// The best time of up to `repeat` turns of f, after one untimed turn.
double BestSeconds(const Settings& s, const std::function<void()>& f) {
  f();
  double best = std::numeric_limits<double>::infinity();
  const Clock::time_point start = Clock::now();
  for (int r = 0; r < s.repeat; ++r) {
    const Clock::time_point t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
    if (r >= 1 && std::chrono::duration<double>(Clock::now() - start).count() > s.budget_s) {
      break;
    }
  }
  return best;
}

double GBps(size_t bytes, double seconds) { return static_cast<double>(bytes) / seconds / 1e9; }

std::vector<float> Gradient(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

// One streaming read: eight independent sums, so that the loop is bound by memory, not by
// the latency of one chain of additions.
float StreamingSum(const std::vector<float>& v) {
  float lanes[8] = {};
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    for (size_t j = 0; j < 8; ++j) lanes[j] += v[i + j];
  }
  for (; i < v.size(); ++i) lanes[0] += v[i];
  float sum = 0;
  for (const float x : lanes) sum += x;
  return sum;
}

volatile float g_sink;  // keeps measured results alive

void CodecTable(const Settings& s) {
  absl::PrintF(
      "\n## CPU codecs (%s kernels), GB/s of float32 input\n\n"
      "| size | memcpy | codec | block/input | encode | enc/memcpy | decode-add | dec/memcpy |\n"
      "| ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
      compression_internal::BestKernels().name);
  for (const size_t mib : s.sizes_mib) {
    const size_t bytes = mib * kMiB;
    const size_t n = bytes / sizeof(float);
    const std::vector<float> g = Gradient(n, s.seed);
    std::vector<float> copy(n), out(n, 0.0f);
    const double memcpy_gbps =
        GBps(bytes, BestSeconds(s, [&] { std::memcpy(copy.data(), g.data(), bytes); }));
    for (const std::string& text : s.codecs) {
      std::unique_ptr<Codec> codec = Codec::Create(*ParseCodec(text));
      std::vector<std::byte> block;
      const double encode = GBps(bytes, BestSeconds(s, [&] { codec->Encode(g, &block); }));
      const double decode =
          GBps(bytes, BestSeconds(s, [&] { codec->DecodeAdd(block, out).IgnoreError(); }));
      absl::PrintF("| %d MiB | %.2f | %s | %.4f | %.2f | %.2f | %.2f | %.2f |\n", mib, memcpy_gbps,
                   text.c_str(), static_cast<double>(block.size()) / static_cast<double>(bytes),
                   encode, encode / memcpy_gbps, decode, decode / memcpy_gbps);
      std::fflush(stdout);
    }
  }
}

void SelectionTable(const Settings& s, double ratio) {
  absl::PrintF(
      "\n## Top-K selection (k = %g n), GB/s of float32 input\n\n"
      "| size | memcpy | sum (1 read) | std::nth_element | exact | sampled | sampled/memcpy | "
      "sampled/sum | sampled passes |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
      ratio);
  for (const size_t mib : s.sizes_mib) {
    const size_t bytes = mib * kMiB;
    const size_t n = bytes / sizeof(float);
    const size_t k = TopKCount(ratio, n);
    const std::vector<float> g = Gradient(n, s.seed);
    std::vector<float> scratch(n);
    std::vector<uint64_t> indices;
    const double memcpy_gbps =
        GBps(bytes, BestSeconds(s, [&] { std::memcpy(scratch.data(), g.data(), bytes); }));
    const double sum = GBps(bytes, BestSeconds(s, [&] { g_sink = StreamingSum(g); }));
    // nth_element permutes its input: each turn starts from a fresh copy, which is not timed.
    double nth_best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < std::max(2, s.repeat / 2); ++r) {
      std::memcpy(scratch.data(), g.data(), bytes);
      const Clock::time_point t0 = Clock::now();
      std::nth_element(scratch.begin(), scratch.begin() + (k - 1), scratch.end(),
                       [](float a, float b) { return std::fabs(a) > std::fabs(b); });
      nth_best = std::min(nth_best, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    const double exact = GBps(bytes, BestSeconds(s, [&] {
                                compression_internal::SelectTopK(
                                    g, k, compression_internal::TopKMethod::kExact, &indices);
                              }));
    compression_internal::TopKTrace trace;
    const double sampled =
        GBps(bytes, BestSeconds(s, [&] {
               compression_internal::SelectTopK(g, k, compression_internal::TopKMethod::kSampled,
                                                &indices, &trace);
             }));
    absl::PrintF("| %d MiB | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %d%s |\n", mib,
                 memcpy_gbps, sum, GBps(bytes, nth_best), exact, sampled, sampled / memcpy_gbps,
                 sampled / sum, trace.passes, trace.used_exact ? " (fell back)" : "");
    std::fflush(stdout);
  }
}

#if defined(SYNCLINE_HAVE_CUDA)
void CudaTable(const Settings& s) {
  if (!CudaAvailable()) {
    absl::PrintF("\n## CUDA kernels: skipped (no CUDA device)\n");
    return;
  }
  absl::PrintF(
      "\n## CUDA kernels (device-resident data; launch and wait included), GB/s of float32 "
      "input\n\n"
      "| size | D2D memcpy | codec | encode | enc/memcpy | decode-add | dec/memcpy |\n"
      "| ---: | ---: | --- | ---: | ---: | ---: | ---: |\n");
  for (const size_t mib : s.sizes_mib) {
    const size_t bytes = mib * kMiB;
    const size_t n = bytes / sizeof(float);
    const std::vector<float> g = Gradient(n, s.seed);
    for (const std::string& text : s.codecs) {
      absl::StatusOr<std::unique_ptr<CudaCodec>> codec = CudaCodec::Create(*ParseCodec(text), n);
      if (!codec.ok()) {
        absl::PrintF("| %d MiB | | %s | %s |\n", mib, text.c_str(),
                     codec.status().ToString().c_str());
        continue;
      }
      CudaCodec& c = **codec;
      if (absl::Status st = c.UploadInput(g); !st.ok()) {
        absl::PrintF("| %d MiB | | %s | %s |\n", mib, text.c_str(), st.ToString().c_str());
        continue;
      }
      const double copy = GBps(bytes, c.TimeDeviceCopy(n, s.repeat + 3).value_or(NAN));
      absl::Status status;
      const double encode =
          GBps(bytes, BestSeconds(s, [&] { status.Update(c.EncodeOnDevice(n)); }));
      const double decode =
          GBps(bytes, BestSeconds(s, [&] { status.Update(c.DecodeAddOnDevice(n)); }));
      absl::PrintF("| %d MiB | %.1f | %s | %.1f | %.2f | %.1f | %.2f |%s\n", mib, copy,
                   text.c_str(), encode, encode / copy, decode, decode / copy,
                   status.ok() ? "" : absl::StrCat(" ", status.ToString()).c_str());
      std::fflush(stdout);
    }
  }
}
#endif

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-codec: gradient codec throughput against memcpy, top-K selection "
      "against std::nth_element, CUDA kernels against cudaMemcpy, measured in one run.");
  Settings s;
  bool quick = false;
  std::string part = "all";
  app.add_flag("--quick", quick, "two small sizes, two turns each: a smoke run of seconds");
  app.add_option("--size-mib", s.sizes_mib, "gradient sizes in MiB (default: 1 4 16 64 256)")
      ->check(CLI::Range(size_t{1}, size_t{4096}));
  app.add_option("--codec", s.codecs, "codecs (default: none fp16 sign1 topk:0.01)");
  app.add_option("--repeat", s.repeat, "timed turns per figure; the best is reported")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  app.add_option("--budget", s.budget_s, "seconds per figure after which turns stop")
      ->check(CLI::Range(0.0, 600.0))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the gradient")->capture_default_str();
  app.add_option("--part", part, "what to measure: all, codecs, select or cuda")
      ->check(CLI::IsMember({"all", "codecs", "select", "cuda"}))
      ->capture_default_str();
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-codec")) return *exit_code;
  for (const std::string& text : s.codecs) {
    if (absl::StatusOr<CodecSpec> spec = ParseCodec(text); !spec.ok()) {
      std::cerr << "syncline-bench-codec: " << spec.status().message() << "\n";
      return 2;
    }
  }
  if (quick) {
    s.sizes_mib = {1, 4};
    s.repeat = 2;
    s.budget_s = 0.2;
  }
  absl::PrintF("# syncline-bench-codec (seed %d)\n", s.seed);
  if (part == "all" || part == "codecs") CodecTable(s);
  if (part == "all" || part == "select") SelectionTable(s, 0.01);
#if defined(SYNCLINE_HAVE_CUDA)
  if (part == "all" || part == "cuda") CudaTable(s);
#else
  if (part == "all" || part == "cuda") absl::PrintF("\n## CUDA kernels: not built\n");
#endif
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
