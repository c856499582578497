#include "data/prefetching_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"

namespace syncline {

PrefetchingSource::PrefetchingSource(std::unique_ptr<ChunkedSource> inner, int depth, int parsers)
    : inner_(std::move(inner)),
      parsers_(inner_->ParsesApart() ? static_cast<size_t>(std::max(parsers, 1)) : 1),
      depth_(std::max(static_cast<size_t>(std::max(depth, 1)),
                      parsers_ > 1 ? parsers_ + 1 : size_t{1})) {}

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
    changed_.wait(lock, [this] { return done_.contains(handed_); });
    auto it = done_.find(handed_);
    chunk = std::move(it->second);
    done_.erase(it);
    ++handed_;
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
  read_ = handed_ = 0;
  reader_ = std::thread([this, max_examples] { Read(max_examples); });
  if (parsers_ > 1) {
    for (size_t i = 0; i < parsers_; ++i) parser_threads_.emplace_back([this] { Parse(); });
  }
}

void PrefetchingSource::Stop() {
  if (!reader_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  reader_.join();
  for (std::thread& t : parser_threads_) t.join();
  parser_threads_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [seq, c] : done_) {
    if (c.data != nullptr) free_.push_back(std::move(c.data));
  }
  done_.clear();
  for (auto& [seq, raw] : raw_) free_raw_.push_back(std::move(raw));
  raw_.clear();
}

std::unique_ptr<Dataset> PrefetchingSource::TakeBuffer() {
  if (free_.empty()) return std::make_unique<Dataset>();
  std::unique_ptr<Dataset> data = std::move(free_.back());
  free_.pop_back();
  return data;
}

void PrefetchingSource::Read(size_t max_examples) {
  // With several parsers the chunks' lines go to them; else this thread reads whole chunks.
  const bool apart = parsers_ > 1;
  while (true) {
    uint64_t seq;
    std::unique_ptr<Dataset> data;
    RawChunk raw;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return stop_ || read_ - handed_ < depth_; });
      if (stop_) return;
      seq = read_;
      if (!apart) {
        data = TakeBuffer();
      } else if (!free_raw_.empty()) {
        raw = std::move(free_raw_.back());
        free_raw_.pop_back();
      }
    }
    absl::StatusOr<bool> more =
        apart ? inner_->ReadRaw(max_examples, &raw) : inner_->ReadChunk(max_examples, data.get());
    const bool last = !more.ok() || !*more;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (apart && !last) {
        raw_.emplace_back(seq, std::move(raw));
      } else {
        // A whole chunk, or the pass's end or an error, which takes its place in the order (the
        // parsers fill the places before it). The status moves: a copy would share its
        // reference count with this thread, and the library's count is invisible to TSan.
        done_.emplace(seq, Chunk{std::move(more).status(), !last, std::move(data)});
        if (apart) free_raw_.push_back(std::move(raw));
      }
      ++read_;
    }
    changed_.notify_all();
    if (last) return;
  }
}

void PrefetchingSource::Parse() {
  while (true) {
    std::pair<uint64_t, RawChunk> job;
    std::unique_ptr<Dataset> data;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait(lock, [this] { return stop_ || !raw_.empty(); });
      if (stop_) return;
      job = std::move(raw_.front());
      raw_.pop_front();
      data = TakeBuffer();
    }
    Chunk chunk;
    chunk.status = inner_->ParseRaw(job.second, data.get());
    chunk.more = chunk.status.ok();
    chunk.data = std::move(data);
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_.emplace(job.first, std::move(chunk));
      free_raw_.push_back(std::move(job.second));
    }
    changed_.notify_all();
  }
}

}  // namespace syncline
