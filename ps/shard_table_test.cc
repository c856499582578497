#include "ps/shard_table.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "optim/optimizer.h"

namespace syncline {
namespace {

TableConfig Dense(uint64_t keys, uint32_t dim) {
  TableConfig c;
  c.id = 3;
  c.dense = true;
  c.num_keys = keys;
  c.dim = dim;
  c.optimizer.learning_rate = 1.0f;
  return c;
}

TEST(ShardTableTest, DenseShardsPartitionTheKeys) {
  uint64_t covered = 0;
  for (int s = 0; s < 3; ++s) {
    auto t = ShardTable::Create(Dense(10, 2), s, 3);
    ASSERT_TRUE(t.ok());
    covered += (*t)->range().size();
    EXPECT_TRUE((*t)->CheckRange((*t)->range()).ok());
    EXPECT_FALSE((*t)->CheckRange({(*t)->range().begin, (*t)->range().end + 1}).ok());
  }
  EXPECT_EQ(covered, 10u);
}

TEST(ShardTableTest, DenseRangeUpdateAndRead) {
  auto t = *ShardTable::Create(Dense(4, 2), 0, 1);
  std::vector<float> g = {1, 2, 3, 4};
  t->ApplyRange({1, 3}, g.data(), 0.5f);
  std::vector<float> out(8);
  t->ReadRange({0, 4}, out.data());
  EXPECT_EQ(out, (std::vector<float>{0, 0, -0.5f, -1, -1.5f, -2, 0, 0}));
}

TEST(ShardTableTest, SparseRowsAreSeededByKeyAndAgreeAcrossShardCounts) {
  TableConfig c = Dense(0, 4);
  c.dense = false;
  c.init_scale = 0.1f;
  c.seed = 9;
  auto one = *ShardTable::Create(c, 0, 1);
  uint64_t key = 0;
  while (SparseShardOf(key, 2) != 1) ++key;
  auto shard1 = *ShardTable::Create(c, 1, 2);
  std::vector<float> a(4), b(4);
  ASSERT_TRUE(one->Read(std::vector<uint64_t>{key}, a.data()).ok());
  ASSERT_TRUE(shard1->Read(std::vector<uint64_t>{key}, b.data()).ok());
  EXPECT_EQ(a, b);
  for (float v : a) EXPECT_LE(std::abs(v), 0.1f);
  EXPECT_NE(a[0], a[1]);
}

TEST(ShardTableTest, SparseTableIsBounded) {
  TableConfig c = Dense(0, 1);
  c.dense = false;
  c.max_rows = 2;
  auto t = *ShardTable::Create(c, 0, 1);
  std::vector<float> out(3);
  EXPECT_EQ(t->Read(std::vector<uint64_t>{1, 2, 3}, out.data()).code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(ShardTableTest, AggregatesApplyInClockOrderWithTheirScale) {
  TableConfig c = Dense(0, 1);
  c.dense = false;
  auto t = *ShardTable::Create(c, 0, 1);
  std::vector<uint64_t> k = {42};
  std::vector<float> g1 = {2}, g2 = {6};
  t->Accumulate(0, 1, k, g1.data());
  t->Accumulate(0, 0, k, g2.data());
  t->Accumulate(1, 0, k, g1.data());
  ASSERT_TRUE(t->ApplyAggregates(1, [](int64_t) { return 0.25f; }).ok());
  EXPECT_EQ(t->pending_aggregates(), 1u);
  std::vector<float> out(1);
  ASSERT_TRUE(t->Read(k, out.data()).ok());
  EXPECT_FLOAT_EQ(out[0], -2.0f);
}

// DP-FedAvg: every round from `from` on is applied, one without contributions too (its noise
// alone), each with the fixed scale, in round order; a sparse table is refused.
TEST(ShardTableTest, NoisyRoundsApplyEveryRoundWithItsNoise) {
  auto t = *ShardTable::Create(Dense(3, 1), 0, 1);
  const std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  t->AccumulateRange(0, 0, {0, 3}, a.data());
  t->AccumulateRange(0, 1, {0, 3}, b.data());
  t->AccumulateRange(2, 0, {0, 3}, a.data());
  std::vector<int64_t> noised;
  auto noise = [&](int64_t round, std::span<float> sum) {
    noised.push_back(round);
    for (float& v : sum) v += 100.0f * (round + 1);
  };
  // Rounds 0 and 1 (none pushed to round 1), at scale 1/4, learning rate 1.
  ASSERT_TRUE(t->ApplyNoisyAggregates(0, 2, 0.25f, noise).ok());
  EXPECT_EQ(noised, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(t->pending_aggregates(), 1u);  // round 2 waits
  std::vector<float> out(3);
  t->ReadRange({0, 3}, out.data());
  for (int i = 0; i < 3; ++i) {
    const float round0 = (a[i] + b[i] + 100.0f) * 0.25f, round1 = 200.0f * 0.25f;
    EXPECT_FLOAT_EQ(out[i], -(round0 + round1));
  }
  TableConfig sparse = Dense(0, 1);
  sparse.dense = false;
  auto s = *ShardTable::Create(sparse, 0, 1);
  EXPECT_EQ(s->ApplyNoisyAggregates(0, 1, 1.0f, noise).code(),
            absl::StatusCode::kFailedPrecondition);
}

// BSP with compressed sparse pushes: a clock's row takes the most held steps (and the largest
// spread) among the workers' contributions to it; rows without counts take one step.
TEST(ShardTableTest, AHeldRowOfAClockTakesTheMostStepsAnyWorkerHeld) {
  TableConfig c = Dense(0, 1);
  c.dense = false;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  auto t = *ShardTable::Create(c, 0, 1);
  // Row 7: worker 0 sends a sum of 3 pushes, worker 1 one push. Row 8: no counts at all.
  const std::vector<uint64_t> k7 = {7}, k8 = {8};
  const std::vector<float> g0 = {3}, g1 = {1}, g8 = {2};
  t->Accumulate(0, 0, k7, g0.data(), std::vector<uint16_t>{3}, std::vector<float>{1.0f});
  t->Accumulate(0, 1, k7, g1.data(), std::vector<uint16_t>{1}, std::vector<float>{1.0f});
  t->Accumulate(0, 1, k8, g8.data());
  // Row 9: worker 0's 2 stands for 2 pushes whose squares are 5 x 2^2 / 2 = 10, worker 1's 1
  // for one push (1): the row's 2 steps must add 11, a spread of 2 x 11 / 3^2.
  const std::vector<uint64_t> k9 = {9};
  const std::vector<float> two = {2}, one = {1};
  t->Accumulate(0, 0, k9, two.data(), std::vector<uint16_t>{2}, std::vector<float>{5.0f});
  t->Accumulate(0, 1, k9, one.data());
  ASSERT_TRUE(t->ApplyAggregates(1, [](int64_t) { return 0.5f; }).ok());
  std::vector<float> got(3);
  ASSERT_TRUE(t->Read(std::vector<uint64_t>{7, 8, 9}, got.data()).ok());
  // The reference: row 7's sum 4 applied as 3 steps of 4/3, row 8 as one step.
  std::vector<float> w7 = {0}, h7 = {0}, w8 = {0}, h8 = {0};
  int64_t step = 0;
  ApplyHeldUpdate(c.optimizer, w7.data(), h7.data(), nullptr, std::vector<float>{4}.data(), 0.5f, 1,
                  3, 1.0f, &step);
  ApplyUpdate(c.optimizer, w8.data(), h8.data(), g8.data(), 0.5f, 1, 1);
  EXPECT_EQ(got[0], w7[0]);
  EXPECT_EQ(got[1], w8[0]);
  std::vector<float> w9 = {0}, h9 = {0};
  step = 0;
  ApplyHeldUpdate(c.optimizer, w9.data(), h9.data(), nullptr, std::vector<float>{3}.data(), 0.5f, 1,
                  2, 2.0f * 11 / 9, &step);
  EXPECT_FLOAT_EQ(got[2], w9[0]);
  EXPECT_NEAR(h9[0], 11 * 0.25f, 1e-5);  // the squares of the three pushes, times scale^2
  EXPECT_NE(w7[0], -1.0f);               // one Adagrad step of any gradient moves by -lr
}

std::vector<float> FloatsOf(Frame frame) {
  auto v = frame.As<float>();
  EXPECT_TRUE(v.ok());
  return std::vector<float>(v->begin(), v->end());
}

// A sparse table of `dim` floats a row, seeded rows, Adagrad: where sums' bits show.
TableConfig SparseAdagrad(uint32_t dim) {
  TableConfig c = Dense(0, dim);
  c.dense = false;
  c.init_scale = 0.1f;
  c.optimizer.kind = OptimizerKind::kAdagrad;
  c.optimizer.learning_rate = 0.05f;
  return c;
}

// An evaluation's read (create = false) gives a missing row's initial values and creates none.
TEST(ShardTableTest, AReadThatMayNotCreateLeavesTheTableAsItWas) {
  const TableConfig c = SparseAdagrad(3);
  auto t = *ShardTable::Create(c, 0, 1);
  const std::vector<uint64_t> keys = {4, 11};
  std::vector<float> created(6), peeked(6);
  ASSERT_TRUE(t->Read({&keys[1], 1}, peeked.data() + 3, /*create=*/false).ok());
  EXPECT_TRUE(t->Capture()->row_ids.empty());
  ASSERT_TRUE(t->Read(keys, created.data()).ok());
  EXPECT_EQ(t->Capture()->row_ids.size(), 2u);
  ASSERT_TRUE(t->Read({&keys[0], 1}, peeked.data(), /*create=*/false).ok());
  EXPECT_EQ(peeked, created);  // the initial values, whether the row exists or not
  EXPECT_NE(created[3], 0.0f);
}

// A clock with one push of increasing keys (a lone worker's) is applied as it came; its rows
// must take the same bits as when merged with a second worker's zeros, and as the same push
// in another order, which goes through the hash map.
TEST(ShardTableTest, ALonePushOfAClockTakesTheBitsOfTheMergedSums) {
  const TableConfig c = SparseAdagrad(3);
  auto alone = *ShardTable::Create(c, 0, 1);
  auto merged = *ShardTable::Create(c, 0, 1);
  auto reordered = *ShardTable::Create(c, 0, 1);
  std::mt19937 rng(17);  // seed: replayable
  std::normal_distribution<float> normal;
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 200; k += 1 + rng() % 5) keys.push_back(k);
  const std::vector<uint64_t> backwards(keys.rbegin(), keys.rend());
  for (int64_t clock = 0; clock < 4; ++clock) {
    std::vector<float> g(keys.size() * 3), zeros(g.size(), 0.0f), g_backwards(g.size());
    for (float& v : g) v = normal(rng);
    for (size_t i = 0; i < g.size(); i += 7) g[i] = -0.0f;  // the sum turns these into +0
    for (size_t r = 0; r < keys.size(); ++r) {
      std::copy_n(&g[(keys.size() - 1 - r) * 3], 3, &g_backwards[r * 3]);
    }
    alone->Accumulate(clock, 0, keys, g.data());
    merged->Accumulate(clock, 0, keys, g.data());
    merged->Accumulate(clock, 1, keys, zeros.data());
    reordered->Accumulate(clock, 0, backwards, g_backwards.data());
    for (auto* t : {&alone, &merged, &reordered}) {
      ASSERT_TRUE((*t)->ApplyAggregates(clock + 1, [](int64_t) { return 0.5f; }).ok());
    }
  }
  std::vector<float> a(keys.size() * 3), m(a.size()), r(a.size());
  ASSERT_TRUE(alone->Read(keys, a.data()).ok());
  ASSERT_TRUE(merged->Read(keys, m.data()).ok());
  ASSERT_TRUE(reordered->Read(keys, r.data()).ok());
  EXPECT_EQ(std::memcmp(a.data(), m.data(), a.size() * sizeof(float)), 0);
  EXPECT_EQ(std::memcmp(a.data(), r.data(), a.size() * sizeof(float)), 0);
  EXPECT_NE(a[0], 0.0f);
}

// Several workers' pushes of increasing keys are merged in order, without the hash map; the
// rows must take the bits of the hash map's sums (one push reversed sends them there), with
// and without held counts (compressed pushes: each row's steps and spread come from them), for
// a few pushes and many (the merge's heap several levels deep), one of them empty.
class SortedMergeTest : public testing::TestWithParam<std::tuple<bool, int>> {};

TEST_P(SortedMergeTest, MergedSortedPushesTakeTheBitsOfTheHashedSums) {
  const auto [with_held, pushes] = GetParam();
  const TableConfig c = SparseAdagrad(2);
  auto merged = *ShardTable::Create(c, 0, 1);
  auto hashed = *ShardTable::Create(c, 0, 1);
  std::mt19937 rng(23);  // seed: replayable
  std::normal_distribution<float> normal;
  auto reversed = [](const auto& v, size_t width) {
    std::remove_cvref_t<decltype(v)> out(v.size());
    const size_t rows = v.size() / width;
    for (size_t r = 0; r < rows; ++r) {
      std::copy_n(&v[(rows - 1 - r) * width], width, &out[r * width]);
    }
    return out;
  };
  for (int64_t clock = 0; clock < 3; ++clock) {
    // Workers 0..pushes-2 push overlapping random subsets of 0..99; worker 2 twice in one
    // clock, the second time nothing in clock 1. With held counts, worker 3's pushes have none
    // (as a mix of codecs would).
    for (int push = 0; push < pushes; ++push) {
      const int worker = push < pushes - 1 ? push : 2;
      std::vector<uint64_t> keys;
      for (uint64_t k = 0; k < 100; ++k) {
        if (rng() % 3 == 0 && !(clock == 1 && push == pushes - 1)) keys.push_back(k);
      }
      std::vector<float> g(keys.size() * 2);
      for (float& v : g) v = rng() % 9 == 0 ? -0.0f : normal(rng);
      std::vector<uint16_t> held;
      std::vector<float> spread;
      if (with_held && worker != 3) {
        for (size_t r = 0; r < keys.size(); ++r) {
          held.push_back(static_cast<uint16_t>(rng() % 5));  // 0 counts as 1
          spread.push_back(0.5f + static_cast<float>(rng() % 100) / 50.0f);
        }
      }
      merged->Accumulate(clock, worker, keys, g.data(), held, spread);
      if (worker == 1) {
        hashed->Accumulate(clock, worker, reversed(keys, 1), reversed(g, 2).data(),
                           reversed(held, 1), reversed(spread, 1));
      } else {
        hashed->Accumulate(clock, worker, keys, g.data(), held, spread);
      }
    }
    for (auto* t : {&merged, &hashed}) {
      ASSERT_TRUE((*t)->ApplyAggregates(clock + 1, [](int64_t) { return 0.25f; }).ok());
    }
  }
  std::vector<uint64_t> keys(100);
  for (uint64_t k = 0; k < 100; ++k) keys[k] = k;
  std::vector<float> m(200), h(200);
  ASSERT_TRUE(merged->Read(keys, m.data()).ok());
  ASSERT_TRUE(hashed->Read(keys, h.data()).ok());
  EXPECT_EQ(std::memcmp(m.data(), h.data(), m.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Held, SortedMergeTest,
                         testing::Combine(testing::Bool(), testing::Values(5, 21)),
                         [](const auto& info) {
                           return absl::StrCat(std::get<0>(info.param) ? "Counts" : "None",
                                               std::get<1>(info.param), "Pushes");
                         });

TEST(ShardTableTest, DenseBlocksGiveTheSameUpdatesAsOneArray) {
  // 7 rows of 3 in blocks of 2 rows (24 bytes): ranges and rows cross block edges.
  TableConfig c = Dense(7, 3);
  c.optimizer.kind = OptimizerKind::kAdam;
  c.init_scale = 0.5f;
  auto blocked = *ShardTable::Create(c, 0, 1, nullptr, 2 * 3 * sizeof(float));
  auto flat = *ShardTable::Create(c, 0, 1);
  std::vector<float> g(21);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>(i) - 1.0f;
  for (auto* t : {blocked.get(), flat.get()}) {
    t->ApplyRange({1, 6}, g.data(), 0.5f);
    t->ApplyRange({0, 7}, g.data(), 1.0f);
    ASSERT_TRUE(t->Apply(std::vector<uint64_t>{2, 5}, g.data(), 2.0f).ok());
  }
  std::vector<float> a(21), b(21);
  blocked->ReadRange({0, 7}, a.data());
  flat->ReadRange({0, 7}, b.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(FloatsOf(blocked->ShareRange({1, 6})), std::vector<float>(b.begin() + 3, b.end() - 3));
  const auto snap_a = blocked->Capture();
  const auto snap_b = flat->Capture();
  EXPECT_EQ(snap_a->weights, snap_b->weights);
  EXPECT_EQ(snap_a->state, snap_b->state);
  EXPECT_EQ(blocked->block_copies(), 0u);
}

TEST(ShardTableTest, SharedReplyKeepsTheValuesOfTheMomentItWasTaken) {
  // 4 rows of 1 float in blocks of 2 rows.
  auto t = *ShardTable::Create(Dense(4, 1), 0, 1, nullptr, 2 * sizeof(float));
  const std::vector<float> g = {1, 1, 1, 1};
  Frame before = t->ShareRange({0, 2});
  EXPECT_EQ(before.owner().get(), t->ShareRange({0, 2}).owner().get()) << "not shared";
  t->ApplyRange({0, 4}, g.data(), 1.0f);
  EXPECT_EQ(t->block_copies(), 1u);  // block 0 was referenced, block 1 was not
  Frame after = t->ShareRange({0, 2});
  EXPECT_EQ(FloatsOf(before), (std::vector<float>{0, 0}));
  EXPECT_EQ(FloatsOf(after), (std::vector<float>{-1, -1}));
  // A row update through keys copies too, and a reply of the whole table (two blocks) is a
  // copy that later writes do not need to preserve.
  Frame whole = t->ShareRange({0, 4});
  ASSERT_TRUE(t->Apply(std::vector<uint64_t>{1}, g.data(), 1.0f).ok());
  EXPECT_EQ(t->block_copies(), 2u);
  EXPECT_EQ(FloatsOf(after), (std::vector<float>{-1, -1}));
  EXPECT_EQ(FloatsOf(whole), (std::vector<float>{-1, -1, -1, -1}));
  std::vector<float> now(4);
  t->ReadRange({0, 4}, now.data());
  EXPECT_EQ(now, (std::vector<float>{-1, -2, -1, -1}));
  EXPECT_TRUE(t->LoadDense(std::vector<float>{5, 6, 7, 8}, {}, 3).ok());
  EXPECT_EQ(FloatsOf(t->ShareRange({2, 4})), (std::vector<float>{7, 8}));
}

TEST(ShardTableTest, UnreferencedBlocksAreUpdatedInPlace) {
  auto t = *ShardTable::Create(Dense(4, 1), 0, 1, nullptr, 2 * sizeof(float));
  const std::vector<float> g = {1, 1, 1, 1};
  const void* block0 = nullptr;
  {
    Frame reply = t->ShareRange({0, 2});
    block0 = reply.data();
  }  // released, as ZeroMQ releases a sent reply
  for (int i = 0; i < 3; ++i) t->ApplyRange({0, 4}, g.data(), 1.0f);
  ASSERT_TRUE(t->Apply(std::vector<uint64_t>{0, 3}, g.data(), 1.0f).ok());
  EXPECT_EQ(t->block_copies(), 0u);
  Frame reply = t->ShareRange({0, 2});
  EXPECT_EQ(reply.data(), block0);
  EXPECT_EQ(FloatsOf(reply), (std::vector<float>{-4, -3}));
}

TEST(ShardTableTest, SmallPartsOfLargeBlocksAreCopiedNotShared) {
  auto t = *ShardTable::Create(Dense(64, 1), 0, 1, nullptr, 64 * sizeof(float));
  Frame small = t->ShareRange({0, 8});  // an eighth of the block
  const std::vector<float> g(64, 1.0f);
  t->ApplyRange({0, 64}, g.data(), 1.0f);
  EXPECT_EQ(t->block_copies(), 0u);
  EXPECT_EQ(FloatsOf(small), std::vector<float>(8, 0.0f));
}

// Dense updates shared out over a pool give the bits of one thread, across block edges, with
// a reply holding a block (copy-on-write), for every rule with state.
TEST(ShardTableTest, PooledDenseUpdatesAreBitwiseThoseOfOneThread) {
  constexpr uint64_t kSeed = 77;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  std::mt19937_64 rng(kSeed);
  std::normal_distribution<float> normal;
  const uint32_t dim = 3;
  const uint64_t rows = 3 * ShardTable::kMinFloatsPerUpdateTask + 7;  // several tasks
  std::vector<float> g(rows * dim);
  UpdatePool pool(3);
  for (const auto kind :
       {OptimizerKind::kSgd, OptimizerKind::kAdagrad, OptimizerKind::kAdam, OptimizerKind::kFtrl}) {
    TableConfig c = Dense(rows, dim);
    c.init_scale = 0.1f;
    c.optimizer.kind = kind;
    c.optimizer.learning_rate = 0.05f;
    // Blocks of 1000 rows, so that tasks and blocks cut the range in different places.
    auto one = *ShardTable::Create(c, 0, 1, nullptr, 1000 * dim * sizeof(float));
    auto pooled = *ShardTable::Create(c, 0, 1, nullptr, 1000 * dim * sizeof(float));
    pooled->set_update_pool(&pool);
    Frame held = pooled->ShareRange({1000, 2000});
    const std::vector<float> held_before = FloatsOf(held);
    for (int step = 0; step < 3; ++step) {
      for (float& x : g) x = normal(rng);
      const KeyRange r = step == 1 ? KeyRange{5, rows - 2} : KeyRange{0, rows};
      one->ApplyRange(r, g.data(), 0.5f);
      pooled->ApplyRange(r, g.data(), 0.5f);
    }
    std::vector<float> a(rows * dim), b(rows * dim);
    one->ReadRange({0, rows}, a.data());
    pooled->ReadRange({0, rows}, b.data());
    ASSERT_EQ(a, b) << "rule " << static_cast<int>(kind);
    EXPECT_EQ(one->Capture()->state, pooled->Capture()->state);
    EXPECT_EQ(FloatsOf(held), held_before) << "a pooled update wrote into a held block";
  }
}

}  // namespace
}  // namespace syncline
