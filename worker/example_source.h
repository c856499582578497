// ExampleSource: where the training loop and evaluation get their examples from, one slice at a
// time, so that a dataset held in memory and a file streamed from disk (larger than memory) train
// the same way.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_EXAMPLE_SOURCE_H_
#define SYNCLINE_WORKER_EXAMPLE_SOURCE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/dataset.h"

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
};

// A source that fills a caller's Dataset with its next chunk: what a PrefetchingSource
// (prefetching_source.h) reads ahead from.
class ChunkedSource : public ExampleSource {
 public:
  // Replaces *chunk with the next at most max_examples examples of the pass; false (and an empty
  // chunk) at its end.
  virtual absl::StatusOr<bool> ReadChunk(size_t max_examples, Dataset* chunk) = 0;
};

// A Dataset already in memory. Does not copy it: `data` must outlive the source.
class InMemorySource final : public ExampleSource {
 public:
  explicit InMemorySource(const Dataset& data) : data_(data) {}

  bool KeepsPreviousSlice() const override { return true; }
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

#endif  // SYNCLINE_WORKER_EXAMPLE_SOURCE_H_
