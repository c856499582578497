#include "ps/shard_table.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace syncline
