// ExampleSource: where the training loop and evaluation get their examples from, one slice at a
// time, so that a dataset held in memory and a file streamed from disk (larger than memory) train
// the same way.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_DATA_EXAMPLE_SOURCE_H_
#define SYNCLINE_DATA_EXAMPLE_SOURCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace syncline {

// Examples [begin, end) of *data. The data stays valid until the source's next call.
struct DataSlice {
  const Dataset* data = nullptr;
  uint32_t begin = 0;
  uint32_t end = 0;

  size_t size() const { return end - begin; }
};

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  // Examples in one pass (an epoch).
  virtual uint64_t size() const = 0;

  // Starts a pass from the first example.
  virtual absl::Status Rewind() = 0;

  // The next at most `max_examples` (> 0) examples of the pass, in order; an empty slice at the
  // end of the pass. Errors are the source's (e.g. a malformed line of a streamed file).
  virtual absl::StatusOr<DataSlice> Next(size_t max_examples) = 0;

  // Whether a slice stays valid for one more Next() (and a Rewind) than the contract above
  // says: until the second Next() after it. A trainer that reads a batch ahead needs that.
  virtual bool KeepsPreviousSlice() const { return false; }

  // The one dataset every slice is of, which does not change while the source lives (a
  // partition held in memory); null for sources that fill their slices (streamed files). A
  // GPU model may keep it on the device (Model::KeepData).
  virtual const Dataset* Resident() const { return nullptr; }
};

// A chunk's lines as read from a file, before they are parsed (ChunkedSource::ReadRaw).
struct RawChunk {
  std::string bytes;                   // the lines back to back, without their ends
  std::vector<size_t> ends;            // where each line ends in `bytes`
  std::vector<uint64_t> line_numbers;  // each line's 1-based number in its file, for errors

  size_t lines() const { return ends.size(); }
  std::string_view line(size_t i) const {
    const size_t begin = i == 0 ? 0 : ends[i - 1];
    return std::string_view(bytes).substr(begin, ends[i] - begin);
  }
  void Clear() {
    bytes.clear();
    ends.clear();
    line_numbers.clear();
  }
};

// A source that fills a caller's Dataset with its next chunk: what a PrefetchingSource
// (prefetching_source.h) reads ahead from.
class ChunkedSource : public ExampleSource {
 public:
  // Replaces *chunk with the next at most max_examples examples of the pass; false (and an empty
  // chunk) at its end.
  virtual absl::StatusOr<bool> ReadChunk(size_t max_examples, Dataset* chunk) = 0;

  // A source whose parsing costs more than its reading may split ReadChunk in two, so that a
  // PrefetchingSource parses several chunks at once: ReadRaw takes the next chunk's lines, in
  // order (false and no lines at the pass's end), and ParseRaw, which may run on any thread,
  // beside ReadRaw and other ParseRaw calls, makes of them the chunk ReadChunk would have.
  virtual bool ParsesApart() const { return false; }
  virtual absl::StatusOr<bool> ReadRaw(size_t /*max_examples*/, RawChunk* /*raw*/) {
    return absl::UnimplementedError("this source does not read raw chunks");
  }
  virtual absl::Status ParseRaw(const RawChunk& /*raw*/, Dataset* /*chunk*/) const {
    return absl::UnimplementedError("this source does not parse raw chunks");
  }
};

// A Dataset already in memory. Does not copy it: `data` must outlive the source.
class InMemorySource final : public ExampleSource {
 public:
  explicit InMemorySource(const Dataset& data) : data_(data) {}

  bool KeepsPreviousSlice() const override { return true; }
  const Dataset* Resident() const override { return &data_; }
  uint64_t size() const override { return data_.size(); }
  absl::Status Rewind() override {
    next_ = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<DataSlice> Next(size_t max_examples) override {
    const size_t end = std::min(data_.size(), next_ + max_examples);
    DataSlice slice{&data_, static_cast<uint32_t>(next_), static_cast<uint32_t>(end)};
    next_ = end;
    return slice;
  }

 private:
  const Dataset& data_;
  size_t next_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_DATA_EXAMPLE_SOURCE_H_
