// PrefetchingSource: reads and parses the next batches of a streamed source on threads of its
// own while the training loop works on the current one, as a DataLoader's workers do. Parsing
// a Criteo line costs about as much as a CPU worker's training on it, and several times a GPU
// worker's: with the read ahead the trainer waits on the file only when parsing is the slower.
// A source that parses apart from reading (ChunkedSource::ParsesApart) is read by one thread
// and parsed by `parsers` threads, a chunk each, so that a fast consumer (a GPU worker) is not
// bound by one core's parsing.
//
// The examples and their order are exactly the inner source's: only when and where they are
// parsed changes (chunks are numbered as they are read and handed out in that order). An error
// arrives in its chunk's place and ends the pass. A pass asks every Next() for the same
// max_examples (the trainer's batch size, or the evaluation's chunk); at most `depth` chunks
// (at least parsers + 1) are read ahead of the one handed out last.
//
// Thread-safety: thread-compatible, like every ExampleSource; while a pass runs, the inner
// source is read by the reading thread only (and parsed by the parsers, through its const
// ParseRaw).
#ifndef SYNCLINE_DATA_PREFETCHING_SOURCE_H_
#define SYNCLINE_DATA_PREFETCHING_SOURCE_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/example_source.h"

namespace syncline {

class PrefetchingSource final : public ExampleSource {
 public:
  // depth >= 1 chunks are read ahead; parsers >= 1 threads parse, where the inner source
  // parses apart (else its ReadChunk runs on the one reading thread).
  explicit PrefetchingSource(std::unique_ptr<ChunkedSource> inner, int depth = 4, int parsers = 1);
  ~PrefetchingSource() override;
  PrefetchingSource(const PrefetchingSource&) = delete;
  PrefetchingSource& operator=(const PrefetchingSource&) = delete;

  uint64_t size() const override { return inner_->size(); }
  // Stops the read-ahead and rewinds the inner source.
  absl::Status Rewind() override;
  // The inner source's next chunk, or its error, in the order it read them. After the end of the
  // pass, empty slices until Rewind(). InvalidArgument if max_examples differs from the pass's
  // first call.
  absl::StatusOr<DataSlice> Next(size_t max_examples) override;
  // The last two chunks handed out are kept.
  bool KeepsPreviousSlice() const override { return true; }

  // Threads that parse (1 where the inner source does not parse apart).
  int parsers() const { return static_cast<int>(parsers_); }

 private:
  struct Chunk {
    absl::Status status;  // the read's or the parse's error, if any
    bool more = false;    // false: the end of the pass
    std::unique_ptr<Dataset> data;
  };

  void Start(size_t max_examples);
  void Stop();
  // The reading thread: whole chunks (one thread), or raw ones for the parsers.
  void Read(size_t max_examples);
  // A parsing thread (with several parsers).
  void Parse();
  // A buffer to fill (a reused one if any). Called with mu_ held.
  std::unique_ptr<Dataset> TakeBuffer();

  const std::unique_ptr<ChunkedSource> inner_;
  const size_t parsers_;
  const size_t depth_;
  size_t max_examples_ = 0;            // of the current pass; 0 before its first Next()
  bool ended_ = false;                 // the pass's end (or an error) was handed out
  std::unique_ptr<Dataset> current_;   // what the last slice points into
  std::unique_ptr<Dataset> previous_;  // and the one before

  std::mutex mu_;
  std::condition_variable changed_;
  // Chunks numbered as read: `read_` of them so far this pass, `handed_` handed out; the
  // parsed (or failed, or final) ones wait in `done_`, the raw ones in `raw_`.
  uint64_t read_ = 0;                              // guarded by mu_
  uint64_t handed_ = 0;                            // guarded by mu_
  std::map<uint64_t, Chunk> done_;                 // guarded by mu_
  std::deque<std::pair<uint64_t, RawChunk>> raw_;  // guarded by mu_
  std::vector<RawChunk> free_raw_;                 // guarded by mu_: to reuse
  std::vector<std::unique_ptr<Dataset>> free_;     // guarded by mu_: buffers to reuse
  bool stop_ = false;                              // guarded by mu_
  std::thread reader_;
  std::vector<std::thread> parser_threads_;
};

}  // namespace syncline

#endif  // SYNCLINE_DATA_PREFETCHING_SOURCE_H_
