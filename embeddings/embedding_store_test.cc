#include "embeddings/embedding_store.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "optim/optimizer.h"
#include "ps/shard_table.h"
#include "rocksdb/db.h"
#include "rocksdb/sst_file_writer.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

// A fresh directory under the test temp dir, removed with everything in it at the end.
using testing_util::ScopedTempDir;

TableConfig Table(uint32_t dim, OptimizerKind kind = OptimizerKind::kSgd) {
  TableConfig c;
  c.id = 7;
  c.dense = false;
  c.dim = dim;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

EmbeddingStoreOptions Options(const std::string& path, uint64_t rows) {
  EmbeddingStoreOptions o;
  o.path = path;
  o.max_memory_rows = rows;
  o.rocksdb_block_cache_bytes = 1 << 20;
  o.rocksdb_write_buffer_bytes = 4 << 20;
  return o;
}

std::unique_ptr<EmbeddingStore> MustOpen(const TableConfig& t, const EmbeddingStoreOptions& o) {
  auto store = EmbeddingStore::Open(t, o);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

struct RowCopy {
  uint64_t id;
  std::vector<float> floats;  // weights then state
  int64_t step;
  bool operator==(const RowCopy&) const = default;
};

std::vector<RowCopy> AllRows(const EmbeddingStore& store) {
  std::vector<RowCopy> rows;
  absl::Status s = store.ForEachRow([&](const EmbeddingRow& r) {
    RowCopy c{r.id, {r.weights.begin(), r.weights.end()}, r.step};
    c.floats.insert(c.floats.end(), r.state.begin(), r.state.end());
    rows.push_back(std::move(c));
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

bool BitwiseEqual(const std::vector<RowCopy>& a, const std::vector<RowCopy>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id || a[i].step != b[i].step || a[i].floats.size() != b[i].floats.size() ||
        std::memcmp(a[i].floats.data(), b[i].floats.data(), a[i].floats.size() * 4) != 0) {
      return false;
    }
  }
  return true;
}

TEST(EmbeddingStoreTest, InitialRowsEqualShardTableRows) {
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(6);
  t.init_scale = 0.05f;
  t.seed = 11;
  auto store = MustOpen(t, Options(dir.Sub("db"), 16));
  auto shard = *ShardTable::Create(t, 0, 1);
  const std::vector<uint64_t> ids = {0, 1, 99, uint64_t{1} << 40};
  std::vector<float> a(ids.size() * 6), b(ids.size() * 6);
  ASSERT_TRUE(store->Read(ids, a.data()).ok());
  ASSERT_TRUE(shard->Read(ids, b.data()).ok());
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], a[1]);
}

// 20k rows through a 1k-row (or byte-sized) memory tier: every row comes back exactly, and the
// tier never holds more than its budget.
class RoundTripTest : public testing::TestWithParam<bool> {};

TEST_P(RoundTripTest, LargeTableRoundTripsThroughSmallBudget) {
  const bool byte_budget = GetParam();
  constexpr uint64_t kSeed = 20240611;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  constexpr uint64_t kRows = 20000;
  constexpr uint32_t kDim = 8;
  ScopedTempDir dir("embedding_store");
  EmbeddingStoreOptions o = Options(dir.Sub("db"), byte_budget ? 0 : 1000);
  if (byte_budget) o.max_memory_bytes = 96 << 10;
  auto store = MustOpen(Table(kDim), o);
  ASSERT_NE(store, nullptr);
  if (!byte_budget) {
    EXPECT_EQ(store->memory_capacity_rows(), 1000u);
  }
  EXPECT_LT(store->memory_capacity_rows(), kRows / 10);

  auto check_budget = [&] {
    const EmbeddingStoreStats s = store->stats();
    EXPECT_LE(s.rows_in_memory, store->memory_capacity_rows());
    if (byte_budget) {
      EXPECT_LE(s.memory_bytes, o.max_memory_bytes);
    }
  };
  // SGD with learning rate 1 from zeros: each row becomes exactly -grad.
  auto value = [](uint64_t id, uint32_t i) { return static_cast<float>(id) + 0.125f * i; };
  std::mt19937_64 rng(kSeed);
  std::vector<uint64_t> ids(kRows);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  constexpr size_t kBatch = 50;
  std::vector<float> grad(kBatch * kDim);
  for (size_t b = 0; b < kRows; b += kBatch) {
    std::span<const uint64_t> batch(ids.data() + b, kBatch);
    for (size_t k = 0; k < kBatch; ++k) {
      for (uint32_t i = 0; i < kDim; ++i) grad[k * kDim + i] = -value(batch[k], i);
    }
    ASSERT_TRUE(store->Apply(batch, grad.data(), 1.0f).ok());
    check_budget();
  }
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<float> out(kBatch * kDim);
  for (size_t b = 0; b < kRows; b += kBatch) {
    std::span<const uint64_t> batch(ids.data() + b, kBatch);
    ASSERT_TRUE(store->Read(batch, out.data()).ok());
    for (size_t k = 0; k < kBatch; ++k) {
      for (uint32_t i = 0; i < kDim; ++i) {
        ASSERT_EQ(out[k * kDim + i], value(batch[k], i)) << "id " << batch[k];
      }
    }
    check_budget();
  }
  const EmbeddingStoreStats s = store->stats();
  EXPECT_EQ(s.admitted, kRows);
  EXPECT_GT(s.disk_hits, kRows * 9 / 10);
  EXPECT_GT(s.evictions, kRows);
  EXPECT_GE(s.rows_on_disk + s.rows_in_memory, kRows);
  EXPECT_EQ(AllRows(*store).size(), kRows);
  if (byte_budget) {  // the accounting is tight: the budget is used, not just honoured
    EXPECT_GT(s.memory_bytes, o.max_memory_bytes * 3 / 4);
    EXPECT_EQ(s.rows_in_memory, store->memory_capacity_rows());
  }
}

INSTANTIATE_TEST_SUITE_P(Budgets, RoundTripTest, testing::Bool(),
                         [](const auto& info) { return info.param ? "Bytes" : "Rows"; });

// A row evicted and reloaded continues exactly like one that stayed in memory.
class OptimizerStateTest : public testing::TestWithParam<OptimizerKind> {};

TEST_P(OptimizerStateTest, EvictionKeepsOptimizerStateBitwise) {
  constexpr uint64_t kSeed = 4242;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(16, GetParam());
  t.optimizer.learning_rate = 0.05f;
  t.init_scale = 0.1f;
  auto roomy = MustOpen(t, Options(dir.Sub("roomy"), 10000));
  auto tight = MustOpen(t, Options(dir.Sub("tight"), 40));
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal;
  std::vector<uint64_t> ids(64);
  std::vector<float> grad(ids.size() * t.dim);
  std::vector<float> a(grad.size()), b(grad.size());
  for (int round = 0; round < 60; ++round) {
    for (uint64_t& id : ids) id = rng() % 1500;  // repeats included
    for (float& g : grad) g = normal(rng);
    ASSERT_TRUE(roomy->Apply(ids, grad.data(), 0.25f).ok());
    ASSERT_TRUE(tight->Apply(ids, grad.data(), 0.25f).ok());
    ASSERT_TRUE(roomy->Read(ids, a.data()).ok());
    ASSERT_TRUE(tight->Read(ids, b.data()).ok());
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << "round " << round;
  }
  EXPECT_GT(tight->stats().evictions, 1000u);
  EXPECT_GT(tight->stats().disk_hits, 1000u);
  EXPECT_EQ(roomy->stats().evictions, 0u);
  const auto rows = AllRows(*roomy);
  EXPECT_TRUE(BitwiseEqual(rows, AllRows(*tight)));
  EXPECT_TRUE(std::is_sorted(rows.begin(), rows.end(),
                             [](const RowCopy& x, const RowCopy& y) { return x.id < y.id; }));
  EXPECT_EQ(rows.front().floats.size(),
            t.dim * (1 + static_cast<size_t>(StateFloatsPerWeight(t.optimizer.kind))));
}

// Writes a snapshot's entries into an SST file at `path`, counting them.
void WriteSnapshot(const EmbeddingSnapshot& snapshot, const std::string& path, uint64_t* entries) {
  rocksdb::Options sst_options;
  rocksdb::SstFileWriter writer(rocksdb::EnvOptions(), sst_options);
  ASSERT_TRUE(writer.Open(path).ok());
  ASSERT_TRUE(snapshot
                  .ForEachEntry([&](std::string_view key, std::string_view value) {
                    ++*entries;
                    auto s = writer.Put(rocksdb::Slice(key.data(), key.size()),
                                        rocksdb::Slice(value.data(), value.size()));
                    return s.ok() ? absl::OkStatus() : absl::InternalError(s.ToString());
                  })
                  .ok());
  ASSERT_TRUE(writer.Finish().ok());
}

TEST_P(OptimizerStateTest, SnapshotRestoresThePointInTimeOfCapture) {
  constexpr uint64_t kSeed = 77;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(8, GetParam());
  t.init_scale = 0.1f;
  auto store = MustOpen(t, Options(dir.Sub("live"), 50));  // most rows live on disk
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal;
  std::vector<uint64_t> ids(40);
  std::vector<float> grad(ids.size() * t.dim);
  auto train = [&](int rounds) {
    for (int round = 0; round < rounds; ++round) {
      for (uint64_t& id : ids) id = rng() % 600;
      for (float& g : grad) g = normal(rng);
      ASSERT_TRUE(store->Apply(ids, grad.data(), 0.5f).ok());
      ASSERT_TRUE(store->AdvanceStep().ok());
    }
  };
  train(30);
  const auto at_capture = AllRows(*store);
  auto snapshot = store->Capture();
  train(10);  // the store goes on changing, in memory and on disk
  ASSERT_FALSE(BitwiseEqual(at_capture, AllRows(*store)));

  const std::string sst = dir.Sub("snapshot.sst");
  uint64_t entries = 0;
  WriteSnapshot(*snapshot, sst, &entries);
  EXPECT_EQ(entries, at_capture.size() + 1);  // + the step record
  snapshot.reset();

  EmbeddingStoreOptions restore = Options(dir.Sub("restored"), 20);
  restore.restore_from = sst;
  auto restored = MustOpen(t, restore);
  EXPECT_EQ(restored->step(), 30);
  EXPECT_EQ(restored->stats().rows_on_disk, at_capture.size());
  EXPECT_TRUE(BitwiseEqual(at_capture, AllRows(*restored)));
  restored.reset();

  // A restore replaces what the folder held: the live store's folder, trained further and
  // flushed, comes back as it was at the capture.
  train(5);
  ASSERT_TRUE(store->FlushAll().ok());
  store.reset();
  EmbeddingStoreOptions over = Options(dir.Sub("live"), 50);
  over.restore_from = sst;
  auto replaced = MustOpen(t, over);
  EXPECT_TRUE(BitwiseEqual(at_capture, AllRows(*replaced)));
  EXPECT_EQ(replaced->step(), 30);
}

INSTANTIATE_TEST_SUITE_P(Rules, OptimizerStateTest,
                         testing::Values(OptimizerKind::kSgd, OptimizerKind::kAdagrad,
                                         OptimizerKind::kAdam, OptimizerKind::kFtrl,
                                         OptimizerKind::kMomentum, OptimizerKind::kYogi),
                         [](const auto& info) {
                           switch (info.param) {
                             case OptimizerKind::kSgd:
                               return std::string("Sgd");
                             case OptimizerKind::kAdagrad:
                               return std::string("Adagrad");
                             case OptimizerKind::kAdam:
                               return std::string("Adam");
                             case OptimizerKind::kFtrl:
                               return std::string("Ftrl");
                             case OptimizerKind::kMomentum:
                               return std::string("Momentum");
                             case OptimizerKind::kYogi:
                               return std::string("Yogi");
                           }
                           return std::string("Other");
                         });

// The index takes its whole share of the budget by the time the tier is half full: a rehash
// later (at the final row, say) would hold its old and new arrays on top of every block of
// rows. So past half full, the store's memory grows only when a block of rows is allocated.
TEST(EmbeddingStoreTest, TheIndexStopsGrowingAtHalfTheTier) {
  constexpr uint64_t kRows = 100000;  // an index larger than the one Init starts with
  constexpr uint64_t kBlockRows = 4096;
  ScopedTempDir dir("embedding_store");
  auto store = MustOpen(Table(1), Options(dir.Sub("db"), kRows));
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->memory_capacity_rows(), kRows);
  const float grad = 1.0f;
  uint64_t before = store->stats().memory_bytes;
  for (uint64_t id = 0; id < kRows; ++id) {
    ASSERT_TRUE(store->Apply(std::span<const uint64_t>(&id, 1), &grad, 1.0f).ok());
    const uint64_t now = store->stats().memory_bytes;
    if (id + 1 > kRows / 2 + 1 && now != before) {
      EXPECT_EQ(id % kBlockRows, 0u) << "the memory grew by " << now - before << " bytes at row "
                                     << id + 1 << ", not a block's start";
    }
    before = now;
  }
  EXPECT_EQ(store->stats().rows_in_memory, kRows);
}

TEST(EmbeddingStoreTest, AdmissionAfterThreeSightings) {
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(4);
  t.init_scale = 0.5f;
  EmbeddingStoreOptions o = Options(dir.Sub("db"), 1000);
  o.admit_after = 3;
  o.sketch_seed = 99;
  auto store = MustOpen(t, o);
  std::vector<float> init(4), out(4), grad = {1, 1, 1, 1};
  InitialEmbeddingRow(t, 5, init.data());
  const std::vector<uint64_t> id = {5};
  ASSERT_TRUE(store->Read(id, out.data()).ok());  // 1st: initial values, nothing stored
  EXPECT_EQ(out, init);
  ASSERT_TRUE(store->Apply(id, grad.data(), 1.0f).ok());  // dropped, and no sighting
  ASSERT_TRUE(store->Read(id, out.data()).ok());          // 2nd
  ASSERT_TRUE(store->Apply(id, grad.data(), 1.0f).ok());  // dropped
  ASSERT_TRUE(store->Read(id, out.data()).ok());          // 3rd: admitted
  EXPECT_EQ(out, init);
  ASSERT_TRUE(store->Apply(id, grad.data(), 1.0f).ok());  // applied
  ASSERT_TRUE(store->Read(id, out.data()).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i], init[i] - 1.0f);
  EmbeddingStoreStats s = store->stats();
  EXPECT_EQ(s.admitted, 1u);
  EXPECT_EQ(s.rejected, 4u);
  EXPECT_EQ(s.dropped_updates, 2u);
  EXPECT_EQ(s.rows_in_memory, 1u);

  // 200 ids, each pulled and pushed twice (two training steps), stay out: a step is one
  // sighting, not two. A third pull admits all of them, and its push is applied.
  std::vector<uint64_t> many(200);
  std::iota(many.begin(), many.end(), 1000);
  std::vector<float> grads(many.size() * 4, 0.5f), rows(many.size() * 4);
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(store->Read(many, rows.data()).ok());
    ASSERT_TRUE(store->Apply(many, grads.data(), 1.0f).ok());
  }
  s = store->stats();
  EXPECT_EQ(s.admitted, 1u);
  EXPECT_EQ(s.dropped_updates, 2u + 400u);
  EXPECT_EQ(AllRows(*store).size(), 1u);
  ASSERT_TRUE(store->Read(many, rows.data()).ok());
  ASSERT_TRUE(store->Apply(many, grads.data(), 1.0f).ok());
  s = store->stats();
  EXPECT_EQ(s.admitted, 201u);
  EXPECT_EQ(s.dropped_updates, 402u);
  EXPECT_EQ(AllRows(*store).size(), 201u);
}

// An evaluation's read (create = false) gives a missing row's initial values and leaves the
// store as it was: no row, no sighting.
TEST(EmbeddingStoreTest, AReadThatMayNotCreateLeavesNoRowAndNoSighting) {
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(4);
  t.init_scale = 0.5f;
  EmbeddingStoreOptions o = Options(dir.Sub("db"), 1000);
  o.admit_after = 2;
  auto store = MustOpen(t, o);
  std::vector<float> init(4), out(4);
  InitialEmbeddingRow(t, 9, init.data());
  const std::vector<uint64_t> id = {9};
  for (int k = 0; k < 3; ++k) ASSERT_TRUE(store->Read(id, out.data(), /*create=*/false).ok());
  EXPECT_EQ(out, init);
  EXPECT_EQ(store->stats().admitted, 0u);
  EXPECT_EQ(store->stats().rejected, 0u);
  ASSERT_TRUE(store->Read(id, out.data()).ok());  // the first sighting
  EXPECT_EQ(store->stats().admitted, 0u);
  ASSERT_TRUE(store->Read(id, out.data()).ok());  // the second: admitted
  EXPECT_EQ(store->stats().admitted, 1u);
  ASSERT_TRUE(store->Read(id, out.data(), /*create=*/false).ok());  // an existing row reads
  EXPECT_EQ(out, init);
  EXPECT_EQ(AllRows(*store).size(), 1u);
}

// A restored store admits each id at the same sighting as the store it was captured from:
// the sketch's counts travel in the snapshot (and through FlushAll and a reopen).
TEST(EmbeddingStoreTest, AdmissionCountsSurviveASnapshotAndAReopen) {
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(4);
  EmbeddingStoreOptions o = Options(dir.Sub("live"), 1000);
  o.admit_after = 3;
  o.sketch_seed = 99;
  auto store = MustOpen(t, o);
  std::vector<float> out(4);
  const std::vector<uint64_t> id = {7};
  for (int k = 0; k < 2; ++k) ASSERT_TRUE(store->Read(id, out.data()).ok());
  EXPECT_EQ(store->stats().admitted, 0u);
  auto snapshot = store->Capture();
  uint64_t entries = 0;
  WriteSnapshot(*snapshot, dir.Sub("snapshot.sst"), &entries);
  EXPECT_EQ(entries, 2u);  // the step record and the sketch: no rows yet
  snapshot.reset();

  EmbeddingStoreOptions r = o;
  r.path = dir.Sub("restored");
  r.restore_from = dir.Sub("snapshot.sst");
  auto restored = MustOpen(t, r);
  ASSERT_TRUE(restored->Read(id, out.data()).ok());  // the third sighting
  EXPECT_EQ(restored->stats().admitted, 1u);
  EXPECT_EQ(AllRows(*restored).size(), 1u);

  ASSERT_TRUE(store->FlushAll().ok());
  store.reset();
  auto reopened = MustOpen(t, o);
  ASSERT_TRUE(reopened->Read(id, out.data()).ok());
  EXPECT_EQ(reopened->stats().admitted, 1u);
}

class ExpiryTest : public testing::TestWithParam<int64_t> {};

// 30 rows (20 of them on disk); ids 0..4 are read every step, the others never again: after
// T + 1 steps the 25 others are gone from both tiers, whether the disk is swept every step
// (param 1) or expired rows are found when loaded (param 1000).
TEST_P(ExpiryTest, UntouchedRowsExpireFromBothTiers) {
  ScopedTempDir dir("embedding_store");
  TableConfig t = Table(2);
  t.init_scale = 0.25f;
  EmbeddingStoreOptions o = Options(dir.Sub("db"), 10);
  o.expire_after_steps = 2;
  o.expiry_sweep_steps = GetParam();
  auto store = MustOpen(t, o);
  std::vector<uint64_t> all(30), hot = {0, 1, 2, 3, 4};
  std::iota(all.begin(), all.end(), 0);
  std::vector<float> grad(all.size() * 2, 1.0f), out(all.size() * 2);
  ASSERT_TRUE(store->Apply(all, grad.data(), 1.0f).ok());  // step 0
  EXPECT_EQ(store->stats().rows_on_disk, 20u);
  for (int step = 1; step <= 3; ++step) {
    ASSERT_TRUE(store->AdvanceStep().ok());
    ASSERT_TRUE(store->Read(hot, out.data()).ok());
    if (step < 3) {
      EXPECT_EQ(store->stats().expired, 0u) << "step " << step;
    }
  }
  // Step 3: rows last touched at step 0 have gone 3 > 2 steps untouched.
  std::vector<uint64_t> left;
  for (const RowCopy& r : AllRows(*store)) left.push_back(r.id);
  EXPECT_EQ(left, hot);
  if (GetParam() == 1) {
    EXPECT_EQ(store->stats().expired, 25u);
  }
  // An expired row starts again from its initial values.
  std::vector<uint64_t> cold = {17};
  ASSERT_TRUE(store->Read(cold, out.data()).ok());
  std::vector<float> init(2);
  InitialEmbeddingRow(t, 17, init.data());
  EXPECT_EQ(std::vector<float>(out.begin(), out.begin() + 2), init);
  if (GetParam() != 1) {
    EXPECT_GE(store->stats().expired, 1u);
  }
  // Touching every old id finds each expired exactly once.
  std::vector<uint64_t> rest;
  for (uint64_t id = 5; id < 30; ++id) {
    if (id != 17) rest.push_back(id);
  }
  ASSERT_TRUE(store->Read(rest, out.data()).ok());
  EXPECT_EQ(store->stats().expired, 25u);
  EXPECT_EQ(store->stats().admitted, 30u + 25u);
}

INSTANTIATE_TEST_SUITE_P(Sweeps, ExpiryTest, testing::Values(1, 1000));

TEST(EmbeddingStoreTest, CorruptValueOnDiskIsDataLoss) {
  ScopedTempDir dir("embedding_store");
  const std::string path = dir.Sub("db");
  const TableConfig t = Table(4, OptimizerKind::kAdagrad);
  {
    auto store = MustOpen(t, Options(path, 100));
    std::vector<uint64_t> ids = {1, 2, 3, 4};
    std::vector<float> grad(16, 1.0f);
    ASSERT_TRUE(store->Apply(ids, grad.data(), 1.0f).ok());
    ASSERT_TRUE(store->FlushAll().ok());
  }
  {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), path, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    char key[kRowKeySize];
    EncodeRowKey(t.id, 3, key);
    std::string value;
    ASSERT_TRUE(db->Get(rocksdb::ReadOptions(), rocksdb::Slice(key, kRowKeySize), &value).ok());
    value[kRowHeaderSize + 2] ^= 0x01;  // one bit of a weight
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), rocksdb::Slice(key, kRowKeySize), value).ok());
    EncodeRowKey(t.id, 4, key);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), rocksdb::Slice(key, kRowKeySize), "short").ok());
  }
  auto store = MustOpen(t, Options(path, 100));
  std::vector<float> out(4);
  absl::Status s = store->Read(std::vector<uint64_t>{3}, out.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("row 3"), std::string::npos) << s;
  EXPECT_NE(s.message().find(path), std::string::npos) << s;
  s = store->Apply(std::vector<uint64_t>{4}, out.data(), 1.0f);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("row 4"), std::string::npos) << s;
  EXPECT_TRUE(store->Read(std::vector<uint64_t>{1}, out.data()).ok());
  EXPECT_EQ(store->ForEachRow([](const EmbeddingRow&) { return absl::OkStatus(); }).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(store->stats().rows_in_memory, 1u);  // the damaged rows were not loaded
}

TEST(EmbeddingStoreTest, BadPathsAndOptionsAreClearErrors) {
  ScopedTempDir dir("embedding_store");
  const std::string file = dir.Sub("plain_file");
  std::ofstream(file) << "x";
  auto under_file = EmbeddingStore::Open(Table(4), Options(file + "/db", 10));
  ASSERT_FALSE(under_file.ok());
  EXPECT_NE(under_file.status().message().find(file + "/db"), std::string::npos)
      << under_file.status();
  EXPECT_NE(under_file.status().message().find("Open"), std::string::npos);

  EmbeddingStoreOptions missing = Options(dir.Sub("missing"), 10);
  missing.create_if_missing = false;
  auto absent = EmbeddingStore::Open(Table(4), missing);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find(dir.Sub("missing")), std::string::npos)
      << absent.status();

  TableConfig dense = Table(4);
  dense.dense = true;
  EXPECT_EQ(EmbeddingStore::Open(dense, Options(dir.Sub("a"), 10)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingStore::Open(Table(4), Options(dir.Sub("b"), 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EmbeddingStoreOptions tiny = Options(dir.Sub("c"), 0);
  tiny.max_memory_bytes = 100;
  EXPECT_EQ(EmbeddingStore::Open(Table(64), tiny).status().code(),
            absl::StatusCode::kInvalidArgument);

  TableConfig bounded = Table(4);
  bounded.num_keys = 10;
  auto store = MustOpen(bounded, Options(dir.Sub("d"), 10));
  std::vector<float> out(8);
  EXPECT_EQ(store->Read(std::vector<uint64_t>{1, 10}, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->stats().rows_in_memory, 0u);
}

TEST(EmbeddingStoreTest, ReopenSeesFlushedRowsAndStep) {
  ScopedTempDir dir("embedding_store");
  const std::string path = dir.Sub("db");
  TableConfig t = Table(8, OptimizerKind::kAdam);
  t.optimizer.learning_rate = 0.01f;
  t.init_scale = 0.1f;
  std::vector<RowCopy> before;
  {
    auto store = MustOpen(t, Options(path, 64));
    std::vector<uint64_t> ids(500);
    std::iota(ids.begin(), ids.end(), 3000);
    std::vector<float> grad(ids.size() * 8, 0.5f);
    ASSERT_TRUE(store->Apply(ids, grad.data(), 1.0f).ok());
    ASSERT_TRUE(store->AdvanceStep().ok());
    ASSERT_TRUE(store->Apply(ids, grad.data(), 1.0f).ok());
    ASSERT_TRUE(store->FlushAll().ok());
    before = AllRows(*store);
    EXPECT_EQ(store->stats().rows_on_disk, 500u);
  }
  auto store = MustOpen(t, Options(path, 1000));
  EXPECT_EQ(store->step(), 1);
  EXPECT_EQ(store->stats().rows_on_disk, 500u);
  EXPECT_TRUE(BitwiseEqual(AllRows(*store), before));
  std::vector<float> out(8);
  ASSERT_TRUE(store->Read(std::vector<uint64_t>{3123}, out.data()).ok());
  EXPECT_EQ(store->stats().disk_hits, 1u);
  EXPECT_EQ(store->stats().admitted, 0u);
  EXPECT_EQ(std::memcmp(out.data(), before[123].floats.data(), 32), 0);
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// The first eviction orders the rows by their last touch (until then no list is kept), and from
// then on the least recently used row goes first: the touches before and after the tier fills
// count alike.
TEST(EmbeddingStoreTest, EvictsTheLeastRecentlyUsedRowBeforeAndAfterTheTierFills) {
  ScopedTempDir dir("embedding_store");
  auto store = MustOpen(Table(2), Options(dir.path(), 4));
  ASSERT_NE(store, nullptr);
  std::vector<float> out(2);
  auto read = [&](uint64_t id) {
    const uint64_t ids[] = {id};
    ASSERT_TRUE(store->Read(ids, out.data()).ok());
  };
  // Touch order, oldest first: 3 2 4 1.
  for (uint64_t id : {1, 2, 3, 4}) read(id);
  for (uint64_t id : {3, 2, 4, 1}) read(id);
  const uint64_t loads = store->stats().disk_hits;
  read(5);  // evicts 3
  read(6);  // evicts 2
  read(1);  // still in memory
  read(4);  // still in memory
  EXPECT_EQ(store->stats().evictions, 2u);
  EXPECT_EQ(store->stats().disk_hits, loads);
  read(3);  // from disk, evicting 5 (1 and 4 were touched since)
  EXPECT_EQ(store->stats().disk_hits, loads + 1);
  read(6);
  read(1);
  read(4);
  EXPECT_EQ(store->stats().disk_hits, loads + 1);
  read(5);
  EXPECT_EQ(store->stats().disk_hits, loads + 2);
}

}  // namespace
}  // namespace syncline
