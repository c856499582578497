#include "data/prefetching_source.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/criteo.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

// CountingSource's examples read apart from their parsing: each raw line is an example's
// number in decimal. ReadRaw fails at chunk `read_fails_at`, ParseRaw at the chunk whose first
// example is `parse_fails_at` (each when >= 0). Every third chunk's parse sleeps a little, so
// that with several parsers later chunks are often parsed first.
class SplitCountingSource final : public ChunkedSource {
 public:
  SplitCountingSource(uint64_t total, int read_fails_at, int64_t parse_fails_at)
      : total_(total), read_fails_at_(read_fails_at), parse_fails_at_(parse_fails_at) {}

  uint64_t size() const override { return total_; }
  absl::Status Rewind() override {
    next_ = 0;
    chunks_ = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<DataSlice> Next(size_t) override {
    return absl::UnimplementedError("read through ReadRaw");
  }
  absl::StatusOr<bool> ReadChunk(size_t, Dataset*) override {
    return absl::UnimplementedError("read through ReadRaw");
  }
  bool ParsesApart() const override { return true; }
  absl::StatusOr<bool> ReadRaw(size_t max_examples, RawChunk* raw) override {
    if (chunks_++ == read_fails_at_) return absl::DataLossError("read failed");
    raw->Clear();
    while (raw->lines() < max_examples && next_ < total_) {
      raw->bytes += std::to_string(next_);
      raw->ends.push_back(raw->bytes.size());
      raw->line_numbers.push_back(++next_);
    }
    return raw->lines() > 0;
  }
  absl::Status ParseRaw(const RawChunk& raw, Dataset* chunk) const override {
    *chunk = Dataset();
    chunk->row_offsets.assign(1, 0);
    for (size_t i = 0; i < raw.lines(); ++i) {
      const int64_t number = std::stoll(std::string(raw.line(i)));
      if (i == 0 && number == parse_fails_at_) {
        return absl::InvalidArgumentError(absl::StrCat("line ", raw.line_numbers[i]));
      }
      chunk->labels.push_back(static_cast<float>(number));
      chunk->row_offsets.push_back(0);
    }
    if (raw.lines() > 0 && std::stoll(std::string(raw.line(0))) / 10 % 3 == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return absl::OkStatus();
  }

 private:
  const uint64_t total_;
  const int read_fails_at_;
  const int64_t parse_fails_at_;
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

// Three passes of `source` (chunks of 10) hand out its `n` examples in order, then empty
// slices, not a hang.
void ExpectThreePassesInOrder(PrefetchingSource& source, int n) {
  for (int pass = 0; pass < 3; ++pass) {
    ASSERT_TRUE(source.Rewind().ok());
    EXPECT_EQ(Drain(source, 10), Iota(n)) << "pass " << pass;
    absl::StatusOr<DataSlice> after = source.Next(10);
    ASSERT_TRUE(after.ok());
    EXPECT_EQ(after->size(), 0u);
  }
}

TEST(PrefetchingSourceTest, HandsOutTheInnerSourcesExamplesInOrderEveryPass) {
  auto inner = std::make_unique<CountingSource>(1003, -1);
  CountingSource* counting = inner.get();
  PrefetchingSource source(std::move(inner), 3);
  EXPECT_EQ(source.size(), 1003u);
  ExpectThreePassesInOrder(source, 1003);
  EXPECT_EQ(counting->rewinds, 3);
}

// `source`'s first `good` chunks of 10 (examples 0, 10, ... first), then `message`'s error,
// then empty slices.
void ExpectChunksThenError(PrefetchingSource& source, int good, const std::string& message) {
  ASSERT_TRUE(source.Rewind().ok());
  for (int i = 0; i < good; ++i) {
    absl::StatusOr<DataSlice> slice = source.Next(10);
    ASSERT_TRUE(slice.ok()) << slice.status();
    EXPECT_EQ(slice->data->labels[0], 10.0f * i);
  }
  absl::StatusOr<DataSlice> bad = source.Next(10);
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), message);
  absl::StatusOr<DataSlice> after = source.Next(10);
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->size(), 0u);
}

TEST(PrefetchingSourceTest, AnErrorArrivesInItsPlaceAndEndsThePass) {
  PrefetchingSource source(std::make_unique<CountingSource>(100, 2), 4);
  ExpectChunksThenError(source, 2, "chunk 2");
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

TEST(PrefetchingSourceTest, SeveralParsersHandOutTheChunksInTheirOrder) {
  PrefetchingSource source(std::make_unique<SplitCountingSource>(1003, -1, -1), 2, 3);
  EXPECT_EQ(source.parsers(), 3);
  ExpectThreePassesInOrder(source, 1003);
  // A source that does not parse apart is read on one thread, whatever was asked.
  EXPECT_EQ(PrefetchingSource(std::make_unique<CountingSource>(10, -1), 4, 3).parsers(), 1);
}

TEST(PrefetchingSourceTest, WithSeveralParsersAReadOrParseErrorArrivesInItsPlace) {
  // ReadRaw fails at chunk 4, ParseRaw at the chunk of examples 20..29 (chunk 2).
  for (const auto& [read_fails_at, parse_fails_at, good_chunks] :
       {std::tuple<int, int64_t, int>{4, -1, 4}, {-1, 20, 2}, {4, 20, 2}}) {
    PrefetchingSource source(
        std::make_unique<SplitCountingSource>(100, read_fails_at, parse_fails_at), 4, 3);
    ExpectChunksThenError(source, good_chunks, parse_fails_at >= 0 ? "line 21" : "read failed");
    // A new pass starts over.
    ASSERT_TRUE(source.Rewind().ok());
    ASSERT_TRUE(source.Next(10).ok());
  }
}

TEST(PrefetchingSourceTest, SeveralParsersDestroyedMidPass) {
  auto source = std::make_unique<PrefetchingSource>(
      std::make_unique<SplitCountingSource>(100000, -1, -1), 2, 4);
  ASSERT_TRUE(source->Rewind().ok());
  ASSERT_TRUE(source->Next(7).ok());
  ASSERT_TRUE(source->Rewind().ok());
  EXPECT_EQ(Drain(*source, 200), Iota(100000));
  ASSERT_TRUE(source->Rewind().ok());
  ASSERT_TRUE(source->Next(9).ok());
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
  // One thread (ReadChunk), then three parsers (ReadRaw and ParseRaw): the same chunks.
  for (const int parsers : {1, 3}) {
    auto plain = CriteoReader::Open(path, options);
    auto inner = CriteoReader::Open(path, options);
    ASSERT_TRUE(plain.ok()) << plain.status();
    ASSERT_TRUE(inner.ok()) << inner.status();
    PrefetchingSource prefetched(std::move(*inner), 4, parsers);
    EXPECT_EQ(prefetched.parsers(), parsers);
    for (int pass = 0; pass < 2; ++pass) {
      ASSERT_TRUE((*plain)->Rewind().ok());
      ASSERT_TRUE(prefetched.Rewind().ok());
      int step = 0;
      for (; step < 100; ++step) {
        absl::StatusOr<DataSlice> a = (*plain)->Next(5);
        absl::StatusOr<DataSlice> b = prefetched.Next(5);
        ASSERT_TRUE(a.ok() && b.ok());
        ASSERT_EQ(a->size(), b->size()) << "step " << step;
        if (a->size() == 0) break;
        EXPECT_EQ(a->data->labels, b->data->labels);
        EXPECT_EQ(a->data->ids, b->data->ids);
        EXPECT_EQ(a->data->values, b->data->values);
        EXPECT_EQ(a->data->row_offsets, b->data->row_offsets);
        EXPECT_EQ(a->data->num_features, b->data->num_features);
      }
      EXPECT_EQ(step, 10) << "48 examples of partition 1, 5 a chunk";
    }
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace syncline
