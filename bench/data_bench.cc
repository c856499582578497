// syncline-bench-data: how fast a worker's streamed Criteo partition reaches the training loop.
// Examples per second of, in one run over the same file:
//   - the file's bytes read line by line (LineReader): the floor of any reader of it;
//   - CriteoReader::Next on the caller's thread: reading and parsing on one core, the baseline;
//   - PrefetchingSource over it with 1, 2, 4 ... parsing threads, drained as fast as the caller
//     can (a consumer that never waits: the bound a GPU worker meets);
// each with its ratio to the baseline. The file is generated (syncline-gen criteo's model,
// --seed) into a temporary folder unless --train names one.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/command_line.h"
#include "data/criteo.h"
#include "data/line_reader.h"
#include "data/prefetching_source.h"
#include "tools/criteo_gen.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Examples handed out by `source` in one pass of chunks of `batch`; -1 on an error (printed).
int64_t Drain(ExampleSource& source, size_t batch) {
  if (auto s = source.Rewind(); !s.ok()) {
    absl::PrintF("rewind: %s\n", s.ToString());
    return -1;
  }
  int64_t examples = 0;
  while (true) {
    absl::StatusOr<DataSlice> slice = source.Next(batch);
    if (!slice.ok()) {
      absl::PrintF("read: %s\n", slice.status().ToString());
      return -1;
    }
    if (slice->size() == 0) return examples;
    examples += static_cast<int64_t>(slice->size());
  }
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-data: a streamed Criteo partition's examples per second, read and parsed "
      "on the caller's thread (the baseline), then through the read-ahead with 1, 2, 4... "
      "parsing threads, and the file's lines read alone");
  std::string train;
  uint64_t rows = 400000, seed = 7;
  size_t batch = 4096;
  int passes = 3;
  std::vector<int> parsers = {1, 2, 4};
  bool quick = false;
  app.add_option("--train", train, "a Criteo file to read (default: one generated here)");
  app.add_option("--rows", rows, "rows of the generated file")->check(CLI::Range(1u, 100000000u));
  app.add_option("--seed", seed, "seed of the generated file");
  app.add_option("--batch", batch, "examples per chunk (the batch size)")
      ->check(CLI::Range(1u, 1000000u));
  app.add_option("--passes", passes, "passes over the file per figure (the best is kept)")
      ->check(CLI::Range(1, 100));
  app.add_option("--parsers", parsers, "parsing threads to measure")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  app.add_flag("--quick", quick, "a small file, one pass (a smoke run)");
  if (auto code = ParseCommandLine(app, argc, argv, "syncline-bench-data")) return *code;
  if (quick) {
    rows = std::min<uint64_t>(rows, 5000);
    passes = 1;
  }
  std::filesystem::path dir;
  if (train.empty()) {
    dir = std::filesystem::temp_directory_path() /
          absl::StrFormat("syncline-bench-data-%d", static_cast<int>(getpid()));
    std::filesystem::create_directories(dir);
    train = (dir / "train.tsv").string();
    std::ofstream out(train);
    CriteoGenOptions options;
    options.rows = rows;
    options.seed = seed;
    absl::StatusOr<CriteoGenSummary> written = WriteCriteoSynthetic(options, out, nullptr);
    if (!written.ok() || !out.good()) {
      absl::PrintF("writing %s: %s\n", train,
                   written.ok() ? "the stream failed" : written.status().ToString());
      return 1;
    }
  }
  const auto bytes = std::filesystem::file_size(train);
  absl::PrintF(
      "# syncline-bench-data (seed %d)\n\n%s: %d bytes; chunks of %d examples; best of %d "
      "passes; %d hardware threads\n\n",
      seed, train, bytes, batch, passes, std::thread::hardware_concurrency());
  int code = 0;
  {
    // The file's lines, unparsed.
    double best = 0;
    int64_t lines = 0;
    for (int p = 0; p < passes; ++p) {
      absl::StatusOr<std::unique_ptr<LineReader>> in = LineReader::Open(train);
      if (!in.ok()) {
        absl::PrintF("%s\n", in.status().ToString());
        return 1;
      }
      const auto t0 = Clock::now();
      std::string_view line;
      int64_t n = 0;
      while (true) {
        absl::StatusOr<bool> more = (*in)->Next(&line);
        if (!more.ok() || !*more) break;
        n += !line.empty();
      }
      const double rate = static_cast<double>(n) / Seconds(t0);
      if (rate > best) best = rate;
      lines = n;
    }
    absl::PrintF("lines read alone: %d lines, %.0f lines/s (%.0f MB/s)\n\n", lines, best,
                 best * static_cast<double>(bytes) / static_cast<double>(lines) / 1e6);
  }
  absl::PrintF("| reader | parsing threads | examples/s | ratio to the caller's thread |\n");
  absl::PrintF("| --- | ---: | ---: | ---: |\n");
  // The best examples/s of `passes` passes of `source`; -1 on an error (printed).
  auto best_rate = [&](ExampleSource& source) {
    double best = 0;
    for (int p = 0; p < passes; ++p) {
      const auto t0 = Clock::now();
      const int64_t n = Drain(source, batch);
      if (n < 0) return -1.0;
      best = std::max(best, static_cast<double>(n) / Seconds(t0));
    }
    return best;
  };
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open(train, {});
  if (!reader.ok()) {
    absl::PrintF("%s\n", reader.status().ToString());
    return 1;
  }
  const double baseline = best_rate(**reader);
  if (baseline < 0) return 1;
  absl::PrintF("| CriteoReader on the caller's thread | 1 | %.0f | 1.00 |\n", baseline);
  for (const int threads : parsers) {
    reader = CriteoReader::Open(train, {});
    if (!reader.ok()) {
      absl::PrintF("%s\n", reader.status().ToString());
      return 1;
    }
    PrefetchingSource source(std::move(*reader), /*depth=*/4, threads);
    const double best = best_rate(source);
    if (best < 0) {
      code = 1;
      continue;
    }
    absl::PrintF("| PrefetchingSource, read-ahead 4 | %d | %.0f | %.2f |\n", source.parsers(), best,
                 best / baseline);
  }
  if (!dir.empty()) std::filesystem::remove_all(dir);
  return code;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
