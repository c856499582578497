#include "worker/prefetching_source.h"

#include <utility>

#include "absl/strings/str_format.h"

namespace syncline {

PrefetchingSource::PrefetchingSource(std::unique_ptr<ChunkedSource> inner, int depth)
    : inner_(std::move(inner)), depth_(depth < 1 ? 1 : static_cast<size_t>(depth)) {}

PrefetchingSource::~PrefetchingSource() { Stop(); }

absl::Status PrefetchingSource::Rewind() {
  Stop();
  max_examples_ = 0;
  ended_ = false;
  return inner_->Rewind();
}

absl::StatusOr<DataSlice> PrefetchingSource::Next(size_t max_examples) {
  if (max_examples_ == 0) {
    Start(max_examples);
  } else if (max_examples != max_examples_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("a prefetched pass reads chunks of %d examples, not %d (rewind first)",
                        max_examples_, max_examples));
  }
  if (ended_) return DataSlice{};
  Chunk chunk;
  {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return !ready_.empty(); });
    chunk = std::move(ready_.front());
    ready_.pop_front();
  }
  changed_.notify_all();
  if (!chunk.status.ok() || !chunk.more) {
    ended_ = true;
    if (chunk.data != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      free_.push_back(std::move(chunk.data));
    }
    if (!chunk.status.ok()) return chunk.status;
    return DataSlice{};
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (previous_ != nullptr) free_.push_back(std::move(previous_));
  }
  previous_ = std::move(current_);
  current_ = std::move(chunk.data);
  return DataSlice{current_.get(), 0, static_cast<uint32_t>(current_->size())};
}

void PrefetchingSource::Start(size_t max_examples) {
  max_examples_ = max_examples;
  stop_ = false;
  reader_ = std::thread([this, max_examples] { Read(max_examples); });
}

void PrefetchingSource::Stop() {
  if (!reader_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  reader_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (Chunk& c : ready_) {
    if (c.data != nullptr) free_.push_back(std::move(c.data));
  }
  ready_.clear();
}

void PrefetchingSource::Read(size_t max_examples) {
  while (true) {
    std::unique_ptr<Dataset> data;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return stop_ || ready_.size() < depth_; });
      if (stop_) return;
      if (!free_.empty()) {
        data = std::move(free_.back());
        free_.pop_back();
      }
    }
    if (data == nullptr) data = std::make_unique<Dataset>();
    Chunk chunk;
    absl::StatusOr<bool> more = inner_->ReadChunk(max_examples, data.get());
    chunk.status = more.status();
    chunk.more = more.ok() && *more;
    chunk.data = std::move(data);
    const bool last = !chunk.more;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_.push_back(std::move(chunk));
    }
    changed_.notify_all();
    if (last) return;
  }
}

}  // namespace syncline
