#include "embeddings/row_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace syncline {
namespace {

TEST(RowCodecTest, Crc32cMatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
}

TEST(RowCodecTest, KeysSortByTableThenId) {
  const std::vector<std::pair<uint32_t, uint64_t>> ordered = {
      {0, 0}, {0, 1}, {0, 255}, {0, 256}, {0, ~uint64_t{0}}, {1, 0}, {1u << 24, 5}};
  std::string previous;
  for (auto [table, id] : ordered) {
    char key[kRowKeySize];
    EncodeRowKey(table, id, key);
    const std::string k(key, kRowKeySize);
    EXPECT_LT(previous, k) << table << "/" << id;
    EXPECT_EQ(k.substr(0, 5), RowKeyPrefix(table));
    uint64_t back = 0;
    ASSERT_TRUE(DecodeRowKey(key, kRowKeySize, table, &back));
    EXPECT_EQ(back, id);
    EXPECT_FALSE(DecodeRowKey(key, kRowKeySize, table + 1, &back));
    previous = k;
  }
}

TEST(RowCodecTest, ValueRoundTripsAndRejectsDamage) {
  const RowShape shape{3, 2};
  std::vector<float> floats(shape.floats());
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = 0.25f * static_cast<float>(i) - 1;
  std::string value;
  EncodeRowValue(shape, 17, 5, floats.data(), &value);
  ASSERT_EQ(value.size(), shape.value_size());

  std::vector<float> back(shape.floats());
  int64_t step = 0, touch = 0;
  ASSERT_TRUE(
      DecodeRowValue(shape, 9, value.data(), value.size(), &step, &touch, back.data()).ok());
  EXPECT_EQ(back, floats);
  EXPECT_EQ(step, 17);
  EXPECT_EQ(touch, 5);

  // Every single flipped byte is caught.
  for (size_t i = 0; i < value.size(); ++i) {
    std::string bad = value;
    bad[i] ^= 0x20;
    absl::Status s = DecodeRowValue(shape, 9, bad.data(), bad.size(), &step, &touch, back.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << "byte " << i;
  }
  absl::Status s = DecodeRowValue(shape, 42, value.data(), 7, &step, &touch, back.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("42"), std::string::npos) << s;

  // A sound value of another shape: the table changed, not the disk.
  s = DecodeRowValue(RowShape{3, 1}, 9, value.data(), value.size(), &step, &touch, back.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
}

}  // namespace
}  // namespace syncline
