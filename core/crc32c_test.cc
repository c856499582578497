#include "core/crc32c.h"

#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace syncline {
namespace {

// The definition, one bit at a time.
uint32_t BitwiseCrc32c(const unsigned char* p, size_t n) {
  uint32_t crc = ~uint32_t{0};
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0x82f63b78u : crc >> 1;
  }
  return ~crc;
}

TEST(Crc32cTest, MatchesTheStandardCheckValue) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xe3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
}

TEST(Crc32cTest, MatchesTheDefinitionAtEveryLengthAndAlignment) {
  std::mt19937 rng(7);  // seed logged by the test name: fixed
  std::vector<unsigned char> bytes(300);
  for (auto& b : bytes) b = static_cast<unsigned char>(rng());
  for (size_t offset = 0; offset < 8; ++offset) {
    for (size_t n = 0; n + offset <= bytes.size(); n += 7) {
      ASSERT_EQ(Crc32c(bytes.data() + offset, n), BitwiseCrc32c(bytes.data() + offset, n))
          << "offset " << offset << " length " << n;
    }
  }
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  const char text[] = "the quick brown fox jumps over the lazy dog";
  const size_t n = sizeof(text) - 1;
  for (size_t split = 0; split <= n; ++split) {
    EXPECT_EQ(Crc32c(text + split, n - split, Crc32c(text, split)), Crc32c(text, n));
  }
}

}  // namespace
}  // namespace syncline
