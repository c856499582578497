#include "embeddings/admission_sketch.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace syncline {
namespace {

TEST(AdmissionSketchTest, NeverUnderestimates) {
  constexpr uint64_t kSeed = 77;
  SCOPED_TRACE(testing::Message() << "seed " << kSeed);
  // A small sketch with many ids: collisions happen, and may only raise the counts.
  AdmissionSketch sketch(256, 3, kSeed);
  std::mt19937_64 rng(kSeed);
  absl::flat_hash_map<uint64_t, uint32_t> truth;
  for (int i = 0; i < 20000; ++i) {
    const uint64_t id = rng() % 2000;
    const uint32_t estimate = sketch.Add(id);
    EXPECT_GE(estimate, ++truth[id]);
  }
  for (const auto& [id, count] : truth) EXPECT_GE(sketch.Estimate(id), count);
  EXPECT_EQ(sketch.bytes(), 256u * 3 * sizeof(uint32_t));
}

TEST(AdmissionSketchTest, ExactWithoutCollisionsAndHalves) {
  AdmissionSketch sketch(1 << 16, 4, 5);
  for (uint64_t id = 0; id < 100; ++id) {
    for (uint64_t k = 0; k <= id % 7; ++k) sketch.Add(id);
  }
  for (uint64_t id = 0; id < 100; ++id) EXPECT_EQ(sketch.Estimate(id), id % 7 + 1) << id;
  EXPECT_EQ(sketch.Estimate(1000), 0u);
  sketch.Halve();
  for (uint64_t id = 0; id < 100; ++id) EXPECT_EQ(sketch.Estimate(id), (id % 7 + 1) / 2) << id;
}

TEST(AdmissionSketchTest, SerializedCountsLoadIntoASketchOfTheSameShape) {
  AdmissionSketch sketch(1024, 3, 5);
  for (uint64_t id = 0; id < 50; ++id) {
    for (uint64_t k = 0; k <= id % 4; ++k) sketch.Add(id);
  }
  const std::string bytes = sketch.Serialize();
  AdmissionSketch copy(1024, 3, 5);
  ASSERT_TRUE(copy.Load(bytes).ok());
  for (uint64_t id = 0; id < 60; ++id) EXPECT_EQ(copy.Estimate(id), sketch.Estimate(id)) << id;

  AdmissionSketch other(2048, 3, 5);
  absl::Status s = other.Load(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("width 1024"), std::string::npos) << s;
  EXPECT_EQ(other.Estimate(3), 0u);  // unchanged
  AdmissionSketch reseeded(1024, 3, 6);
  EXPECT_NE(reseeded.Load(bytes).message().find("seed 5"), std::string::npos);
  EXPECT_EQ(copy.Load(bytes.substr(0, bytes.size() - 4)).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(copy.Load("").code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace syncline
