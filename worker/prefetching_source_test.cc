#include "worker/prefetching_source.h"

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/criteo.h"

namespace syncline {
namespace {

// `total` examples numbered 0..total-1 (the label is the number), or an error at chunk
// `fail_at` (counting from 0) when it is >= 0.
class CountingSource final : public ChunkedSource {
 public:
  CountingSource(uint64_t total, int fail_at) : total_(total), fail_at_(fail_at) {}

  uint64_t size() const override { return total_; }
  absl::Status Rewind() override {
    next_ = 0;
    chunks_ = 0;
    ++rewinds;
    return absl::OkStatus();
  }
  absl::StatusOr<DataSlice> Next(size_t) override {
    return absl::UnimplementedError("read through ReadChunk");
  }
  absl::StatusOr<bool> ReadChunk(size_t max_examples, Dataset* chunk) override {
    if (chunks_++ == fail_at_) return absl::DataLossError(absl::StrCat("chunk ", fail_at_));
    *chunk = Dataset();
    chunk->row_offsets.assign(1, 0);
    while (chunk->size() < max_examples && next_ < total_) {
      chunk->labels.push_back(static_cast<float>(next_++));
      chunk->row_offsets.push_back(0);
    }
    return chunk->size() > 0;
  }

  int rewinds = 0;

 private:
  const uint64_t total_;
  const int fail_at_;
  uint64_t next_ = 0;
  int chunks_ = 0;
};

// The labels of every slice until the pass's end.
std::vector<float> Drain(ExampleSource& source, size_t batch) {
  std::vector<float> labels;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<DataSlice> slice = source.Next(batch);
    EXPECT_TRUE(slice.ok()) << slice.status();
    if (!slice.ok() || slice->size() == 0) break;
    EXPECT_LE(slice->size(), batch);
    for (uint32_t e = slice->begin; e < slice->end; ++e) labels.push_back(slice->data->labels[e]);
  }
  return labels;
}

std::vector<float> Iota(int n) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(static_cast<float>(i));
  return v;
}

TEST(PrefetchingSourceTest, HandsOutTheInnerSourcesExamplesInOrderEveryPass) {
  auto inner = std::make_unique<CountingSource>(1003, -1);
  CountingSource* counting = inner.get();
  PrefetchingSource source(std::move(inner), 3);
  EXPECT_EQ(source.size(), 1003u);
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_TRUE(source.Rewind().ok());
    EXPECT_EQ(Drain(source, 10), Iota(1003)) << "pass " << pass;
    // After the end: empty slices, not a hang.
    absl::StatusOr<DataSlice> after = source.Next(10);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->size(), 0u);
  }
  EXPECT_EQ(counting->rewinds, 3);
}

TEST(PrefetchingSourceTest, AnErrorArrivesInItsPlaceAndEndsThePass) {
  PrefetchingSource source(std::make_unique<CountingSource>(100, 2), 4);
  ASSERT_TRUE(source.Rewind().ok());
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<DataSlice> slice = source.Next(10);
    ASSERT_TRUE(slice.ok());
    EXPECT_EQ(slice->data->labels[0], 10.0f * i);
  }
  absl::StatusOr<DataSlice> bad = source.Next(10);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(bad.status().message(), "chunk 2");
  absl::StatusOr<DataSlice> after = source.Next(10);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), 0u);
}

TEST(PrefetchingSourceTest, RewindMidPassStartsOverAndAChangedChunkSizeIsRefused) {
  PrefetchingSource source(std::make_unique<CountingSource>(50, -1), 2);
  ASSERT_TRUE(source.Rewind().ok());
  ASSERT_TRUE(source.Next(7).ok());
  EXPECT_EQ(source.Next(8).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(source.Rewind().ok());
  EXPECT_EQ(Drain(source, 8), Iota(50));
}

TEST(PrefetchingSourceTest, DestroyedMidPassWithAFullReadAhead) {
  // The reading thread is blocked on a full queue; the destructor must wake and join it.
  auto source = std::make_unique<PrefetchingSource>(std::make_unique<CountingSource>(10000, -1), 2);
  ASSERT_TRUE(source->Rewind().ok());
  ASSERT_TRUE(source->Next(1).ok());
  source.reset();
}

TEST(PrefetchingSourceTest, ACriteoFileReadsTheSameWithAndWithoutTheReadAhead) {
  const std::string path = ::testing::TempDir() + "/prefetch_test.tsv";
  {
    std::ofstream out(path);
    for (int i = 0; i < 97; ++i) {
      out << (i % 3 == 0) << '\t' << i << "\t\t\t\t\t\t\t\t\t\t\t\t";
      for (int f = 0; f < 26; ++f) out << '\t' << std::hex << (i * 31 + f) << std::dec;
      out << '\n';
    }
  }
  CriteoOptions options;
  options.partition = 1;
  options.num_partitions = 2;
  auto plain = CriteoReader::Open(path, options);
  auto inner = CriteoReader::Open(path, options);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(inner.ok()) << inner.status();
  PrefetchingSource prefetched(std::move(*inner));
  ASSERT_TRUE((*plain)->Rewind().ok());
  ASSERT_TRUE(prefetched.Rewind().ok());
  for (int step = 0; step < 100; ++step) {
    absl::StatusOr<DataSlice> a = (*plain)->Next(5);
    absl::StatusOr<DataSlice> b = prefetched.Next(5);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size()) << "step " << step;
    if (a->size() == 0) break;
    EXPECT_EQ(a->data->labels, b->data->labels);
    EXPECT_EQ(a->data->ids, b->data->ids);
    EXPECT_EQ(a->data->values, b->data->values);
    EXPECT_EQ(a->data->row_offsets, b->data->row_offsets);
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace syncline
