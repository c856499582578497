#include "ps/server_checkpoint.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <random>

#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

using testing_util::ScopedTempDir;

TableConfig Config(uint32_t id, bool dense, uint32_t dim, OptimizerKind kind) {
  TableConfig c;
  c.id = id;
  c.dense = dense;
  c.num_keys = dense ? 300 : 0;
  c.dim = dim;
  c.optimizer.kind = kind;
  c.optimizer.learning_rate = 0.05f;
  c.init_scale = 0.1f;
  c.seed = 5;
  c.max_rows = TableConfig::kDefaultMaxRows;  // what a spec from the wire says for "default"
  return c;
}

// A shard with a dense Adam table, a sparse Adagrad table in memory and a sparse FTRL table in
// an embedding store whose memory tier holds a fraction of its rows.
struct Shard {
  std::map<uint32_t, std::unique_ptr<ShardTable>> tables;

  static absl::StatusOr<std::unique_ptr<ShardTable>> Make(const TableConfig& c,
                                                          const std::string& store_dir,
                                                          const std::string& restore_from) {
    if (c.id != 3) return ShardTable::Create(c, 1, 2);
    EmbeddingStoreOptions o;
    o.path = store_dir;
    o.max_memory_rows = 40;
    o.restore_from = restore_from;
    return ShardTable::Create(c, 1, 2, &o);
  }

  // One step of seeded random updates to every table.
  void Train(std::mt19937_64& rng) {
    std::normal_distribution<float> normal;
    for (auto& [id, t] : tables) {
      if (t->config().dense) {
        std::vector<float> g(t->range().size() * t->config().dim);
        for (float& x : g) x = normal(rng);
        t->ApplyRange(t->range(), g.data(), 0.5f);
        continue;
      }
      std::vector<uint64_t> keys;
      while (keys.size() < 32) {
        const uint64_t k = rng() % 500;
        if (SparseShardOf(k, 2) == 1) keys.push_back(k);
      }
      std::vector<float> g(keys.size() * t->config().dim);
      for (float& x : g) x = normal(rng);
      ASSERT_TRUE(t->Apply(keys, g.data(), 0.5f).ok());
      ASSERT_TRUE(t->AdvanceStep().ok());
    }
  }

  // Every value a reader can see: dense ranges and sparse keys 0..499 of this shard.
  std::vector<float> Values() {
    std::vector<float> out;
    for (auto& [id, t] : tables) {
      if (t->config().dense) {
        std::vector<float> v(t->range().size() * t->config().dim);
        t->ReadRange(t->range(), v.data());
        out.insert(out.end(), v.begin(), v.end());
        continue;
      }
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 500; ++k) {
        if (SparseShardOf(k, 2) == 1) keys.push_back(k);
      }
      std::vector<float> v(keys.size() * t->config().dim);
      EXPECT_TRUE(t->Read(keys, v.data()).ok());
      out.insert(out.end(), v.begin(), v.end());
    }
    return out;
  }
};

bool Bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ServerCheckpointTest, RestoreGivesIdenticalParametersAndOptimizerState) {
  constexpr uint64_t kSeed = 2024;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  ScopedTempDir dir("server_checkpoint");
  const std::vector<TableConfig> configs = {Config(1, true, 3, OptimizerKind::kAdam),
                                            Config(2, false, 4, OptimizerKind::kAdagrad),
                                            Config(3, false, 5, OptimizerKind::kFtrl)};
  Shard live;
  for (const auto& c : configs) live.tables[c.id] = *Shard::Make(c, dir.Sub("live"), "");
  std::mt19937_64 rng(kSeed);
  for (int i = 0; i < 20; ++i) live.Train(rng);

  ShardCapture capture;
  capture.clock = 20;
  capture.examples_trained = 1280;  // a resumed or rolled-back run counts on from it
  for (auto& [id, t] : live.tables) capture.tables.push_back(t->Capture());
  const std::vector<float> at_capture = live.Values();
  // The live shard goes on while the capture is written.
  std::mt19937_64 after_rng(kSeed + 1);
  live.Train(after_rng);
  const std::string ckpt = dir.Sub("ckpt");
  auto receipt = WriteShardCheckpoint(ckpt, 1, capture);
  ASSERT_TRUE(receipt.ok()) << receipt.status();
  capture.tables.clear();
  EXPECT_EQ(receipt->node, "ps1");
  EXPECT_EQ(receipt->files.size(), 3u);  // shard.sst and two sparse tables

  auto restored = ReadShardCheckpoint(ckpt, 1, [&](const TableConfig& c, const std::string& file) {
    return Shard::Make(c, dir.Sub("restored"), file);
  });
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(restored->clock, 20);
  EXPECT_EQ(restored->examples_trained, 1280);
  Shard back;
  for (auto& t : restored->tables) {
    const uint32_t id = t->config().id;
    EXPECT_EQ(t->config(), configs[id - 1]);
    back.tables[id] = std::move(t);
  }
  ASSERT_EQ(back.tables.size(), 3u);
  EXPECT_TRUE(Bitwise(back.Values(), at_capture));
  // Optimizer state came back too: the same updates give the same parameters.
  Shard replay;
  for (const auto& c : configs) replay.tables[c.id] = *Shard::Make(c, dir.Sub("replay"), "");
  std::mt19937_64 replay_rng(kSeed);
  for (int i = 0; i < 20; ++i) replay.Train(replay_rng);
  std::mt19937_64 a(kSeed + 7), b(kSeed + 7);
  for (int i = 0; i < 5; ++i) {
    back.Train(a);
    replay.Train(b);
  }
  EXPECT_TRUE(Bitwise(back.Values(), replay.Values()));
}

TEST(ServerCheckpointTest, DamagedShardFileIsDataLoss) {
  ScopedTempDir dir("server_checkpoint");
  Shard live;
  const TableConfig c = Config(1, true, 2, OptimizerKind::kSgd);
  live.tables[1] = *Shard::Make(c, dir.Sub("live"), "");
  ShardCapture capture;
  capture.clock = 4;
  capture.tables.push_back(live.tables[1]->Capture());
  const std::string ckpt = dir.Sub("ckpt");
  ASSERT_TRUE(WriteShardCheckpoint(ckpt, 1, capture).ok());
  const std::string file = ckpt + "/ps1/shard.sst";
  const auto size = std::filesystem::file_size(file);
  std::filesystem::resize_file(file, size / 2);
  auto restored = ReadShardCheckpoint(ckpt, 1, [&](const TableConfig& t, const std::string& f) {
    return Shard::Make(t, dir.Sub("r"), f);
  });
  ASSERT_FALSE(restored.ok());
  EXPECT_EQ(restored.status().code(), absl::StatusCode::kDataLoss) << restored.status();
  EXPECT_NE(restored.status().message().find("shard.sst"), std::string::npos);
}

// A small tmpfs mounted at `dir` for the life of the object, or the reason it cannot be (the
// test then skips: mounting needs root, which CI has).
class SmallTmpfs {
 public:
  SmallTmpfs(const std::string& dir, size_t bytes) : dir_(dir) {
    std::filesystem::create_directories(dir);
    const std::string options = "size=" + std::to_string(bytes);
    if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, options.c_str()) == 0) {
      mounted_ = true;
    } else {
      why_not_ = std::string("cannot mount a tmpfs (needs root): ") + std::strerror(errno);
    }
  }
  ~SmallTmpfs() {
    if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& why_not() const { return why_not_; }

 private:
  const std::string dir_;
  bool mounted_ = false;
  std::string why_not_;
};

// The disk fills in the middle of a shard's table file: that checkpoint fails, naming the file
// and the cause, leaves no receipt behind (so it never counts as complete), and the writer
// writes the next checkpoint elsewhere; the live table is untouched.
TEST(ServerCheckpointTest, ADiskThatFillsMidFileFailsThatCheckpointOnly) {
  ScopedTempDir dir("server_checkpoint");
  SmallTmpfs full(dir.Sub("full"), 64 << 10);
  if (!full.mounted()) GTEST_SKIP() << full.why_not();
  std::mutex mu;
  std::vector<std::pair<int64_t, absl::Status>> done;
  Shard live;
  // 2000 x 16 floats of weights and as many of each of Adam's two moments: 384 KB, six times
  // the tmpfs.
  TableConfig big = Config(1, true, 16, OptimizerKind::kAdam);
  big.num_keys = 4000;
  live.tables[1] = *Shard::Make(big, dir.Sub("l"), "");
  std::mt19937_64 rng(3);
  live.Train(rng);
  const std::vector<float> before = live.Values();
  {
    CheckpointWriter writer([&](int64_t clock, const absl::Status& s) {
      std::lock_guard lock(mu);
      done.emplace_back(clock, s);
    });
    for (int64_t clock : {5, 10}) {
      ShardCapture capture;
      capture.clock = clock;
      capture.tables.push_back(live.tables[1]->Capture());
      writer.Write(CheckpointDir(clock == 5 ? dir.Sub("full") : dir.Sub("ok"), clock), 0,
                   std::move(capture));
    }
    writer.WaitIdle();
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].first, 5);
  EXPECT_FALSE(done[0].second.ok());
  EXPECT_NE(done[0].second.message().find(dir.Sub("full")), std::string::npos) << done[0].second;
  EXPECT_NE(done[0].second.message().find(std::strerror(ENOSPC)), std::string::npos)
      << done[0].second;
  std::cerr << "the failed checkpoint: " << done[0].second << "\n";
  EXPECT_FALSE(std::filesystem::exists(CheckpointDir(dir.Sub("full"), 5) + "/ps0.receipt"));
  EXPECT_TRUE(done[1].second.ok()) << done[1].second;
  EXPECT_TRUE(std::filesystem::exists(CheckpointDir(dir.Sub("ok"), 10) + "/ps0.receipt"));
  EXPECT_TRUE(Bitwise(live.Values(), before));
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

TEST(ServerCheckpointTest, AWriteThatFailsIsReportedAndTheWriterGoesOn) {
  ScopedTempDir dir("server_checkpoint");
  // The checkpoint root is a regular file: nothing can be created under it.
  const std::string root = dir.Sub("not_a_folder");
  std::ofstream(root) << "x";
  std::mutex mu;
  std::vector<std::pair<int64_t, absl::Status>> done;
  {
    CheckpointWriter writer([&](int64_t clock, const absl::Status& s) {
      std::lock_guard lock(mu);
      done.emplace_back(clock, s);
    });
    Shard live;
    live.tables[1] = *Shard::Make(Config(1, true, 2, OptimizerKind::kSgd), dir.Sub("l"), "");
    for (int64_t clock : {5, 10}) {
      ShardCapture capture;
      capture.clock = clock;
      capture.tables.push_back(live.tables[1]->Capture());
      writer.Write(clock == 5 ? CheckpointDir(root, clock) : CheckpointDir(dir.Sub("ok"), clock), 0,
                   std::move(capture));
    }
    writer.WaitIdle();
  }
  ASSERT_EQ(done.size(), 2u);
  EXPECT_EQ(done[0].first, 5);
  EXPECT_FALSE(done[0].second.ok());
  EXPECT_NE(done[0].second.message().find("not_a_folder"), std::string::npos) << done[0].second;
  EXPECT_EQ(done[1].first, 10);
  EXPECT_TRUE(done[1].second.ok()) << done[1].second;
}

}  // namespace
}  // namespace syncline
