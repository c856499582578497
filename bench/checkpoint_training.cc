// syncline-bench-checkpoint-training: how much a job slows down while it writes checkpoints.
//
// Runs the same syncline-launch job (by default the ctr model on generated Criteo data, with a
// memory tier smaller than the embedding table so both tiers are captured) alternately without
// checkpoints (the baseline) and with --checkpoint-every N, --repeat times each, and prints the
// median wall time of each, their ratio, the checkpoints written, their size on disk, and the
// time the servers stopped serving for them (capture, plus waiting for the previous write).
// Every job uses the same seed; only the checkpoint flags differ. The jobs' folders live under
// --dir and are removed at the end. Jobs run and summaries are read with the helpers the
// multi-process tests use (tests/test_util.h).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/command_line.h"
#include "testing/test_util.h"

namespace syncline::bench {
namespace {

namespace fs = std::filesystem;
using testing_util::JsonNumber;

struct Settings {
  std::string launch = SYNCLINE_LAUNCH_BIN;
  int rows = 200000;
  int epochs = 2;
  int every = 20;
  std::string memory = "50000rows";
  int repeat = 3;
  std::string dir = "/tmp";
  bool quick = false;
};

struct Run {
  double wall = 0;
  double steps = 0;
  double checkpoints = 0;
  double pause = 0;
  uint64_t bytes_per_checkpoint = 0;
};

uint64_t FolderBytes(const fs::path& dir) {
  uint64_t bytes = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (it->is_regular_file(ec)) bytes += it->file_size(ec);
  }
  return bytes;
}

std::optional<Run> RunJob(const Settings& s, const fs::path& out, bool checkpoints) {
  std::vector<std::string> argv = {s.launch,
                                   "--model",
                                   "ctr",
                                   "--servers",
                                   "2",
                                   "--workers",
                                   "2",
                                   "--gen-rows",
                                   std::to_string(s.rows),
                                   "--gen-test-rows",
                                   "2000",
                                   "--epochs",
                                   std::to_string(s.epochs),
                                   "--lr",
                                   "0.05",
                                   "--embedding-memory",
                                   s.memory,
                                   "--out",
                                   out.string()};
  if (checkpoints) {
    argv.insert(argv.end(),
                {"--checkpoint-every", std::to_string(s.every), "--checkpoint-keep", "2"});
  }
  const testing_util::RunResult run = testing_util::RunProcess(argv, absl::Minutes(10));
  if (run.exit_code != 0) {
    std::cerr << "the job failed:\n" << run.output;
    return std::nullopt;
  }
  std::ifstream in(out / "summary.json");
  std::stringstream json;
  json << in.rdbuf();
  Run r;
  r.wall = JsonNumber(json.str(), "wall_seconds").value_or(0);
  r.steps = JsonNumber(json.str(), "steps").value_or(0);
  r.checkpoints = JsonNumber(json.str(), "checkpoints_written").value_or(0);
  r.pause = JsonNumber(json.str(), "checkpoint_pause_seconds").value_or(0);
  if (checkpoints) {
    // The newest checkpoint's size (older ones are pruned down to two).
    std::vector<fs::path> dirs;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(out / "checkpoints", ec)) dirs.push_back(e.path());
    std::sort(dirs.begin(), dirs.end());
    if (!dirs.empty()) r.bytes_per_checkpoint = FolderBytes(dirs.back());
  }
  return r;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int Main(int argc, char** argv) {
  Settings s;
  CLI::App app(
      "syncline-bench-checkpoint-training: the slowdown of a training job while it writes\n"
      "checkpoints, against the same job without them, measured in the same run.");
  app.add_option("--launch", s.launch, "the syncline-launch binary")->capture_default_str();
  app.add_option("--rows", s.rows, "generated Criteo training rows")->capture_default_str();
  app.add_option("--epochs", s.epochs, "epochs per job")->capture_default_str();
  app.add_option("--every", s.every, "--checkpoint-every of the checkpointing job")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--embedding-memory", s.memory, "memory tier budget of each server")
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "jobs of each kind (medians are reported)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--dir", s.dir, "where the jobs' folders go")->capture_default_str();
  app.add_flag("--quick", s.quick, "a small smoke run (20k rows, one job each)");
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-checkpoint-training")) {
    return *exit_code;
  }
  if (s.quick) {
    s.rows = 20000;
    s.epochs = 1;
    s.repeat = 1;
    s.memory = "5000rows";
  }
  const fs::path root =
      fs::path(s.dir) / absl::StrFormat("syncline_ckpt_training_%d", static_cast<int>(getpid()));
  std::vector<double> plain_wall, ckpt_wall, pauses, counts;
  uint64_t bytes = 0;
  double steps = 0;
  for (int i = 0; i < s.repeat; ++i) {
    // Alternate, so that a slow phase of a shared machine hits both kinds alike.
    for (bool checkpoints : {false, true}) {
      const fs::path out = root / absl::StrFormat("%s%d", checkpoints ? "ckpt" : "plain", i);
      auto r = RunJob(s, out, checkpoints);
      if (!r) return 1;
      (checkpoints ? ckpt_wall : plain_wall).push_back(r->wall);
      steps = r->steps;
      if (checkpoints) {
        pauses.push_back(r->pause);
        counts.push_back(r->checkpoints);
        bytes = r->bytes_per_checkpoint;
      }
      std::cerr << absl::StrFormat("  %s job %d: %.2f s\n", checkpoints ? "checkpointing" : "plain",
                                   i + 1, r->wall);
      std::error_code ec;
      fs::remove_all(out, ec);
    }
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  const double plain = Median(plain_wall), ckpt = Median(ckpt_wall);
  std::cout << absl::StrFormat(
      "ctr, %d rows, %d epochs, 2 servers x 2 workers, %d steps in all, memory tier %s\n", s.rows,
      s.epochs, static_cast<int>(steps), s.memory);
  std::cout << absl::StrFormat("%-34s %10.2f s\n", "without checkpoints (median)", plain);
  // Each checkpointing job ran right after its plain twin: the ratio of a pair is steadier on a
  // shared machine than the ratio of the medians.
  std::vector<double> pair_ratios;
  for (size_t i = 0; i < ckpt_wall.size(); ++i) pair_ratios.push_back(ckpt_wall[i] / plain_wall[i]);
  std::cout << absl::StrFormat("%-34s %10.2f s   ratio %.3f (%+.1f%%)\n",
                               absl::StrFormat("checkpoint every %d steps", s.every), ckpt,
                               ckpt / plain, 100 * (ckpt / plain - 1));
  std::cout << absl::StrFormat("%-34s %10.3f (%+.1f%%)\n", "median ratio of back-to-back pairs",
                               Median(pair_ratios), 100 * (Median(pair_ratios) - 1));
  std::cout << absl::StrFormat("%-34s %10.0f\n", "checkpoints per job", Median(counts));
  std::cout << absl::StrFormat("%-34s %10.1f MB\n", "size of one checkpoint", bytes / 1e6);
  std::cout << absl::StrFormat("%-34s %10.3f s (%.1f%% of the job)\n", "servers' pause (median)",
                               Median(pauses), 100 * Median(pauses) / ckpt);
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
