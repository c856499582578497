// syncline-bench-embedding: pull (Read) and push (Apply, SGD) throughput of one EmbeddingStore
// (embeddings/), in rows per second, on two paths:
//   memory: the working set fits the memory tier (every touch is a memory hit);
//   rocksdb: the memory tier holds 1% of the working set, so almost every touch loads a row
//            from RocksDB and evicts one (written back when it changed).
// Each figure is printed beside, measured in the same run on the same ids,
//   map:     an absl::flat_hash_map<uint64_t, std::vector<float>> holding the whole working set
//            (lookup + copy; lookup + the same SGD update);
//   rocksdb: a plain RocksDB instance with the same options holding the raw rows
//            (Get + copy; Get + the same SGD update + Put, without the write-ahead log, as the
//            store's evictions).
// Ids are uniform over the working set from a fixed, printed seed; batches of 256 ids. Every
// figure is the best of a few turns (after an untimed one). RocksDB's files live in a fresh
// directory under --dir, removed at the end; on a machine with free memory they sit in the page
// cache, so the rocksdb path measures RocksDB's lookup and copy costs more than the device.
#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
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
#include "optim/optimizer.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBatch = 256;

struct Settings {
  std::vector<uint32_t> dims = {16, 64};
  uint64_t memory_rows = 200000;    // working set of the memory path
  uint64_t disk_rows = 1000000;     // working set of the rocksdb path
  double disk_budget = 0.01;        // memory tier / working set on the rocksdb path
  uint64_t touches = 1 << 20;       // row touches per timed turn (memory path)
  uint64_t disk_touches = 1 << 18;  // row touches per timed turn (rocksdb path)
  int repeat = 3;
  uint64_t seed = 20240611;
  std::string dir = "/tmp";
};

double BestSeconds(int repeat, const std::function<void()>& f) {
  f();
  double best = std::numeric_limits<double>::infinity();
  for (int r = 0; r < repeat; ++r) {
    const Clock::time_point t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::cerr << "syncline-bench-embedding: " << s << "\n";
    std::exit(1);
  }
}
void Check(const rocksdb::Status& s) {
  if (!s.ok()) {
    std::cerr << "syncline-bench-embedding: RocksDB: " << s.ToString() << "\n";
    std::exit(1);
  }
}

TableConfig Table(uint32_t dim) {
  TableConfig t;
  t.id = 1;
  t.dense = false;
  t.dim = dim;
  t.init_scale = 0.01f;
  t.optimizer.kind = OptimizerKind::kSgd;
  t.optimizer.learning_rate = 0.01f;
  return t;
}

// The plain RocksDB baseline: the same table and cache options as the store.
std::unique_ptr<rocksdb::DB> OpenPlain(const std::string& path, const EmbeddingStoreOptions& o) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.write_buffer_size = o.rocksdb_write_buffer_bytes;
  options.compression = rocksdb::kNoCompression;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(o.rocksdb_block_cache_bytes);
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  rocksdb::DB* db = nullptr;
  Check(rocksdb::DB::Open(options, path, &db));
  return std::unique_ptr<rocksdb::DB>(db);
}

std::string Key(uint64_t id) {
  char key[8];
  for (int i = 0; i < 8; ++i) key[i] = static_cast<char>(id >> (56 - 8 * i));
  return std::string(key, 8);
}

struct Figures {
  double store = 0, map = 0, plain = 0;  // rows per second
};

// One path (memory or rocksdb) at one dim: pull and push figures.
void RunPath(const Settings& s, const std::string& root, uint32_t dim, bool disk,
             std::vector<std::string>* notes) {
  const TableConfig table = Table(dim);
  const uint64_t rows = disk ? s.disk_rows : s.memory_rows;
  const uint64_t touches = disk ? s.disk_touches : s.touches;
  EmbeddingStoreOptions o;
  o.path = absl::StrFormat("%s/store_%d_%s", root, dim, disk ? "disk" : "mem");
  o.max_memory_rows =
      disk ? std::max<uint64_t>(1, static_cast<uint64_t>(rows * s.disk_budget)) : rows;
  auto opened = EmbeddingStore::Open(table, o);
  Check(opened.status());
  EmbeddingStore& store = **opened;
  std::unique_ptr<rocksdb::DB> plain = OpenPlain(o.path + "_plain", o);
  rocksdb::WriteOptions no_wal;
  no_wal.disableWAL = true;
  absl::flat_hash_map<uint64_t, std::vector<float>> map;
  map.reserve(rows);

  // Fill all three with the working set (ids 0..rows-1 scattered over the 64-bit space).
  auto id_of = [](uint64_t i) { return MixKey(i + 1); };
  std::vector<uint64_t> batch(kBatch);
  std::vector<float> values(kBatch * dim), grad(kBatch * dim, 0.5f);
  for (uint64_t i = 0; i < rows; i += kBatch) {
    const size_t n = std::min<uint64_t>(kBatch, rows - i);
    for (size_t k = 0; k < n; ++k) batch[k] = id_of(i + k);
    Check(store.Apply({batch.data(), n}, grad.data(), 1.0f));
    Check(store.Read({batch.data(), n}, values.data()));
    for (size_t k = 0; k < n; ++k) {
      const float* v = values.data() + k * dim;
      map.emplace(batch[k], std::vector<float>(v, v + dim));
      Check(plain->Put(no_wal, Key(batch[k]),
                       rocksdb::Slice(reinterpret_cast<const char*>(v), dim * sizeof(float))));
    }
  }
  Check(store.FlushAll());
  Check(plain->Flush(rocksdb::FlushOptions()));

  std::mt19937_64 rng(s.seed ^ dim ^ (disk ? 0x5a5a : 0));
  std::vector<uint64_t> ids(touches);
  for (uint64_t& id : ids) id = id_of(rng() % rows);
  std::vector<float> out(kBatch * dim);
  const OptimizerConfig& opt = table.optimizer;

  Figures pull, push;
  pull.store = touches / BestSeconds(s.repeat, [&] {
                 for (size_t b = 0; b < touches; b += kBatch)
                   Check(store.Read({&ids[b], kBatch}, out.data()));
               });
  push.store = touches / BestSeconds(s.repeat, [&] {
                 for (size_t b = 0; b < touches; b += kBatch) {
                   Check(store.Apply({&ids[b], kBatch}, grad.data(), 1.0f));
                 }
               });
  pull.map = touches / BestSeconds(s.repeat, [&] {
               for (size_t b = 0; b < touches; b += kBatch) {
                 for (size_t k = 0; k < kBatch; ++k) {
                   std::memcpy(out.data() + k * dim, map.find(ids[b + k])->second.data(),
                               dim * sizeof(float));
                 }
               }
             });
  push.map = touches / BestSeconds(s.repeat, [&] {
               for (size_t b = 0; b < touches; b += kBatch) {
                 for (size_t k = 0; k < kBatch; ++k) {
                   ApplyUpdate(opt, map.find(ids[b + k])->second.data(), nullptr,
                               grad.data() + k * dim, 1.0f, dim, 1);
                 }
               }
             });
  rocksdb::PinnableSlice value;
  pull.plain = touches / BestSeconds(s.repeat, [&] {
                 for (size_t b = 0; b < touches; b += kBatch) {
                   for (size_t k = 0; k < kBatch; ++k) {
                     value.Reset();
                     Check(plain->Get(rocksdb::ReadOptions(), plain->DefaultColumnFamily(),
                                      Key(ids[b + k]), &value));
                     std::memcpy(out.data() + k * dim, value.data(), dim * sizeof(float));
                   }
                 }
               });
  std::vector<float> row(dim);
  push.plain =
      touches / BestSeconds(s.repeat, [&] {
        for (size_t b = 0; b < touches; b += kBatch) {
          for (size_t k = 0; k < kBatch; ++k) {
            const std::string key = Key(ids[b + k]);
            value.Reset();
            Check(plain->Get(rocksdb::ReadOptions(), plain->DefaultColumnFamily(), key, &value));
            std::memcpy(row.data(), value.data(), dim * sizeof(float));
            ApplyUpdate(opt, row.data(), nullptr, grad.data() + k * dim, 1.0f, dim, 1);
            Check(plain->Put(
                no_wal, key,
                rocksdb::Slice(reinterpret_cast<const char*>(row.data()), dim * sizeof(float))));
          }
        }
      });
  const EmbeddingStoreStats st = store.stats();
  for (int op = 0; op < 2; ++op) {
    const Figures& f = op == 0 ? pull : push;
    absl::PrintF("| %3d | %-7s | %-4s | %11d | %11d | %10.0f | %10.0f | %10.0f | %5.2f | %5.2f |\n",
                 dim, disk ? "rocksdb" : "memory", op == 0 ? "pull" : "push", rows,
                 store.memory_capacity_rows(), f.store, f.map, f.plain, f.store / f.map,
                 f.store / f.plain);
  }
  notes->push_back(absl::StrFormat(
      "dim %d, %s path: the store counted %d memory hits, %d disk hits, %d evictions, %d rows "
      "written",
      dim, disk ? "rocksdb" : "memory", st.memory_hits, st.disk_hits, st.evictions,
      st.disk_writes));
  Check(store.FlushAll());
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-embedding: EmbeddingStore pull/push rows/s on the memory and RocksDB paths, "
      "beside a flat_hash_map and plain RocksDB Get/Put, measured in one run.");
  Settings s;
  bool quick = false;
  app.add_flag("--quick", quick, "small working sets, one turn: a smoke run of seconds");
  app.add_option("--dim", s.dims, "row widths (default: 16 64)")
      ->check(CLI::Range(1u, TableConfig::kMaxDim));
  app.add_option("--memory-rows", s.memory_rows, "working set of the memory path")
      ->capture_default_str();
  app.add_option("--disk-rows", s.disk_rows, "working set of the rocksdb path")
      ->capture_default_str();
  app.add_option("--disk-budget", s.disk_budget, "memory tier / working set on the rocksdb path")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "timed turns per figure; the best is reported")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--seed", s.seed, "seed of the ids")->capture_default_str();
  app.add_option("--dir", s.dir, "where the RocksDB directories are made")->capture_default_str();
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-embedding"))
    return *exit_code;
  if (quick) {
    s.dims = {16};
    s.memory_rows = 20000;
    s.disk_rows = 20000;
    s.touches = 1 << 14;
    s.disk_touches = 1 << 12;
    s.repeat = 1;
  }
  std::string pattern = s.dir + "/syncline_embedding_bench_XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    std::cerr << "syncline-bench-embedding: cannot make a directory under " << s.dir << "\n";
    return 1;
  }
  const std::string root = pattern;
  absl::PrintF("# syncline-bench-embedding (seed %d, batches of %d ids, SGD, dir %s)\n", s.seed,
               kBatch, root);
  absl::PrintF(
      "| dim | path    | op   | working set | memory tier | store rows/s | map rows/s | "
      "rocksdb rows/s | store/map | store/rocksdb |\n");
  absl::PrintF("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  std::vector<std::string> notes;
  for (uint32_t dim : s.dims) {
    RunPath(s, root, dim, /*disk=*/false, &notes);
    RunPath(s, root, dim, /*disk=*/true, &notes);
  }
  absl::PrintF("\n");
  for (const std::string& note : notes) absl::PrintF("# %s\n", note);
  std::filesystem::remove_all(root);
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
