// PrefetchingSource: reads and parses the next batches of a streamed source on a thread of its
// own while the training loop works on the current one, as a DataLoader's worker does. Parsing
// a Criteo line costs about as much as training on it; with the read ahead the trainer waits on
// the file only when parsing is the slower of the two.
//
// The examples and their order are exactly the inner source's: only when they are parsed
// changes. A pass asks every Next() for the same max_examples (the trainer's batch size, or
// the evaluation's chunk); the read-ahead is `depth` such chunks.
//
// Thread-safety: thread-compatible, like every ExampleSource; the inner source is used only by
// the reading thread while one runs.
#ifndef SYNCLINE_WORKER_PREFETCHING_SOURCE_H_
#define SYNCLINE_WORKER_PREFETCHING_SOURCE_H_

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/example_source.h"

namespace syncline {

class PrefetchingSource final : public ExampleSource {
 public:
  // depth >= 1 chunks are read ahead.
  explicit PrefetchingSource(std::unique_ptr<ChunkedSource> inner, int depth = 4);
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

 private:
  struct Chunk {
    absl::Status status;  // the read's error, if any
    bool more = false;    // false: the end of the pass
    std::unique_ptr<Dataset> data;
  };

  void Start(size_t max_examples);
  void Stop();
  void Read(size_t max_examples);

  const std::unique_ptr<ChunkedSource> inner_;
  const size_t depth_;
  size_t max_examples_ = 0;            // of the current pass; 0 before its first Next()
  bool ended_ = false;                 // the pass's end (or an error) was handed out
  std::unique_ptr<Dataset> current_;   // what the last slice points into
  std::unique_ptr<Dataset> previous_;  // and the one before

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<Chunk> ready_;                     // guarded by mu_
  std::vector<std::unique_ptr<Dataset>> free_;  // guarded by mu_: buffers to reuse
  bool stop_ = false;                           // guarded by mu_
  std::thread reader_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_PREFETCHING_SOURCE_H_
