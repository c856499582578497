// syncline-bench-aggregate: what a server's BSP clock costs once every worker has pushed: the
// workers' sparse pushes summed in rank order (ShardTable::ApplyAggregates) and applied to an
// embedding store through Adagrad, for 1 to 32 workers, in milliseconds a clock.
//
// Each figure is printed beside, measured in the same run on the same pushes,
//   hashed: the same pushes with their keys in decreasing order, which the in-order merge cannot
//           take, so they are summed through the general path's hash map (the same sums to the
//           bit, applied in another row order);
//   apply:  the store's Apply of the clock's distinct rows and their sums alone: the floor that
//           any way of summing the pushes adds to.
// The pushes are Criteo-like: each worker's batch of --examples examples draws --fields ids a
// example from a log-uniform (Zipf, s = 1) distribution over --ids ids, from a fixed, printed
// seed; a push is the batch's distinct ids, increasing, as the client sends them. The workers'
// pushes are the same every clock (the rows exist after the first: the steady state). Every
// figure is the best of --repeat turns of --clocks clocks, after an untimed clock.
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "core/command_line.h"
#include "core/sharding.h"
#include "embeddings/embedding_store.h"
#include "ps/shard_table.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Settings {
  std::vector<int> workers = {1, 2, 4, 8, 16, 32};
  std::vector<uint32_t> dims = {16, 64};
  int examples = 1024;  // per worker per clock
  int fields = 26;
  uint64_t ids = uint64_t{1} << 24;
  int clocks = 8;
  int repeat = 3;
  uint64_t seed = 20261205;
  std::string dir = "/tmp";
};

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::cerr << "syncline-bench-aggregate: " << s << "\n";
    std::exit(1);
  }
}

TableConfig Table(uint32_t dim) {
  TableConfig t;
  t.id = 1;
  t.dense = false;
  t.dim = dim;
  t.init_scale = 0.01f;
  t.optimizer.kind = OptimizerKind::kAdagrad;
  t.optimizer.learning_rate = 0.05f;
  return t;
}

struct Push {
  std::vector<uint64_t> keys;
  std::vector<float> grad;
};

// One worker's push: the distinct ids of a batch, increasing, with random gradients.
Push MakePush(const Settings& s, uint32_t dim, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double log_ids = std::log(static_cast<double>(s.ids));
  Push p;
  p.keys.reserve(static_cast<size_t>(s.examples) * s.fields);
  for (int e = 0; e < s.examples; ++e) {
    for (int f = 0; f < s.fields; ++f) {
      // Rank r in [1, ids] with P(r) about 1/r; ids spread over 64 bits, each field its own.
      const auto rank = static_cast<uint64_t>(std::exp(unit(rng) * log_ids));
      p.keys.push_back(MixKey(rank * 64 + static_cast<uint64_t>(f)));
    }
  }
  std::sort(p.keys.begin(), p.keys.end());
  p.keys.erase(std::unique(p.keys.begin(), p.keys.end()), p.keys.end());
  std::normal_distribution<float> normal(0.0f, 0.01f);
  p.grad.resize(p.keys.size() * dim);
  for (float& g : p.grad) g = normal(rng);
  return p;
}

Push Reversed(const Push& p, uint32_t dim) {
  Push r;
  r.keys.assign(p.keys.rbegin(), p.keys.rend());
  r.grad.resize(p.grad.size());
  const size_t n = p.keys.size();
  for (size_t i = 0; i < n; ++i) {
    std::copy_n(p.grad.data() + (n - 1 - i) * dim, dim, r.grad.data() + i * dim);
  }
  return r;
}

std::unique_ptr<ShardTable> OpenTable(const TableConfig& t, const std::string& path) {
  EmbeddingStoreOptions o;
  o.path = path;
  o.max_memory_rows = 0;
  o.max_memory_bytes = uint64_t{8} << 30;  // every row stays in memory
  o.warn_unflushed = false;
  auto table = ShardTable::Create(t, 0, 1, &o);
  Check(table.status());
  return std::move(*table);
}

// Seconds a clock (best turn): accumulate every push (not timed), then time ApplyAggregates.
double TimeClocks(const Settings& s, ShardTable& table, const std::vector<Push>& pushes,
                  int64_t* clock) {
  auto one_clock = [&] {
    for (size_t w = 0; w < pushes.size(); ++w) {
      table.Accumulate(*clock, static_cast<int>(w), pushes[w].keys, pushes[w].grad.data());
    }
    const Clock::time_point t0 = Clock::now();
    Check(table.ApplyAggregates(*clock + 1, [](int64_t) { return 1.0f / 1024; }));
    ++*clock;
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  one_clock();
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < s.repeat; ++r) {
    double total = 0;
    for (int c = 0; c < s.clocks; ++c) total += one_clock();
    best = std::min(best, total / s.clocks);
  }
  return best;
}

void RunDim(const Settings& s, const std::string& root, uint32_t dim) {
  const TableConfig t = Table(dim);
  const int most = *std::max_element(s.workers.begin(), s.workers.end());
  std::mt19937_64 rng(s.seed ^ dim);
  std::vector<Push> pushes, reversed;
  for (int w = 0; w < most; ++w) {
    pushes.push_back(MakePush(s, dim, rng));
    reversed.push_back(Reversed(pushes.back(), dim));
  }
  for (int workers : s.workers) {
    const std::vector<Push> mine(pushes.begin(), pushes.begin() + workers);
    const std::vector<Push> theirs(reversed.begin(), reversed.begin() + workers);
    const std::string dir = absl::StrFormat("%s/d%d_w%d", root, dim, workers);
    auto merged = OpenTable(t, dir + "_merged");
    auto hashed = OpenTable(t, dir + "_hashed");
    auto floor = OpenTable(t, dir + "_apply");
    // The clock's distinct rows and sums, for the apply-only floor.
    absl::flat_hash_map<uint64_t, uint32_t> index;
    std::vector<uint64_t> keys;
    std::vector<float> sums;
    size_t pushed = 0;
    for (const Push& p : mine) {
      pushed += p.keys.size();
      for (size_t i = 0; i < p.keys.size(); ++i) {
        auto [it, fresh] = index.try_emplace(p.keys[i], static_cast<uint32_t>(keys.size()));
        if (fresh) {
          keys.push_back(p.keys[i]);
          sums.resize(sums.size() + dim, 0.0f);
        }
        for (uint32_t j = 0; j < dim; ++j) sums[it->second * dim + j] += p.grad[i * dim + j];
      }
    }
    int64_t merged_clock = 0, hashed_clock = 0;
    double best_merged = std::numeric_limits<double>::infinity();
    double best_hashed = best_merged, best_apply = best_merged;
    // Two rounds, the three measured in turn in each, so that a burst of load elsewhere on the
    // machine lands on all of them alike.
    for (int round = 0; round < 2; ++round) {
      best_merged = std::min(best_merged, TimeClocks(s, *merged, mine, &merged_clock));
      best_hashed = std::min(best_hashed, TimeClocks(s, *hashed, theirs, &hashed_clock));
      Check(floor->Apply(keys, sums.data(), 1.0f / 1024));
      for (int r = 0; r < s.repeat; ++r) {
        const Clock::time_point t0 = Clock::now();
        for (int c = 0; c < s.clocks; ++c) Check(floor->Apply(keys, sums.data(), 1.0f / 1024));
        best_apply = std::min(best_apply,
                              std::chrono::duration<double>(Clock::now() - t0).count() / s.clocks);
      }
    }
    absl::PrintF("| %3d | %3d | %9d | %9d | %8.3f | %8.3f | %8.3f | %6.2f | %6.2f |\n", dim,
                 workers, pushed, keys.size(), best_merged * 1e3, best_hashed * 1e3,
                 best_apply * 1e3, best_hashed / best_merged, best_apply / best_merged);
  }
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-aggregate: a server's BSP clock (the workers' sparse pushes summed and "
      "applied to an embedding store) in ms, beside the general path's hash map and the store's "
      "apply alone, measured in one run.");
  Settings s;
  bool quick = false;
  app.add_flag("--quick", quick, "small pushes, one turn: a smoke run of seconds");
  app.add_option("--workers", s.workers, "worker counts (default: 1 2 4 8 16 32)")
      ->check(CLI::Range(1, 256));
  app.add_option("--dim", s.dims, "row widths (default: 16 64)")->check(CLI::Range(1u, 1024u));
  app.add_option("--examples", s.examples, "examples a worker's batch")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_option("--fields", s.fields, "ids an example")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--ids", s.ids, "ids the fields draw from")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--clocks", s.clocks, "clocks a timed turn")
      ->check(CLI::Range(1, 10000))
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "timed turns per figure and round; the best is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the ids and gradients")->capture_default_str();
  app.add_option("--dir", s.dir, "where the stores' RocksDB directories are made")
      ->capture_default_str();
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-aggregate"))
    return *exit_code;
  if (quick) {
    s.workers = {1, 3, 12};
    s.dims = {16};
    s.examples = 64;
    s.clocks = 2;
    s.repeat = 1;
  }
  std::string pattern = s.dir + "/syncline_aggregate_bench_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "syncline-bench-aggregate: cannot make a directory under " << s.dir << "\n";
    return 1;
  }
  const std::string root = pattern;
  absl::PrintF(
      "# syncline-bench-aggregate (seed %d; a worker's push: the distinct ids of %d examples x %d "
      "fields over %d ids; Adagrad; dir %s)\n",
      s.seed, s.examples, s.fields, s.ids, root);
  absl::PrintF(
      "| dim | workers | rows pushed | distinct | merged ms | hashed ms | apply ms | "
      "hashed/merged | apply/merged |\n");
  absl::PrintF("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (uint32_t dim : s.dims) RunDim(s, root, dim);
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
