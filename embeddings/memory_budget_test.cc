#include "embeddings/memory_budget.h"

#include "gtest/gtest.h"

namespace syncline {
namespace {

TEST(MemoryBudgetTest, ParsesBytesAndRows) {
  EXPECT_EQ(ParseMemoryBudget("2GiB")->bytes, uint64_t{2} << 30);
  EXPECT_EQ(ParseMemoryBudget("512 MiB")->bytes, uint64_t{512} << 20);
  EXPECT_EQ(ParseMemoryBudget("1.5GB")->bytes, uint64_t{1500000000});
  EXPECT_EQ(ParseMemoryBudget("4096b")->bytes, 4096u);
  EXPECT_EQ(ParseMemoryBudget("1000000rows")->rows, 1000000u);
  EXPECT_EQ(ParseMemoryBudget("1000000rows")->bytes, 0u);
}

TEST(MemoryBudgetTest, RejectsWhatItCannotRead) {
  for (const char* text : {"", "2", "GiB", "-1GiB", "0MiB", "2 furlongs", "1.5rows", "1e99TB"}) {
    auto b = ParseMemoryBudget(text);
    EXPECT_FALSE(b.ok()) << text;
    if (!b.ok()) {
      EXPECT_NE(b.status().message().find("memory budget"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace syncline
