#include "ps/update_pool.h"

#include <pthread.h>

#include <string>
#include <utility>

namespace syncline {

UpdatePool::UpdatePool(int threads) {
  for (int i = 1; i < threads; ++i) {
    helpers_.emplace_back([this] { HelperLoop(); });
    const std::string name = "sl-update" + std::to_string(i);
    pthread_setname_np(helpers_.back().native_handle(), name.c_str());
  }
}

UpdatePool::~UpdatePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : helpers_) t.join();
}

void UpdatePool::Run(size_t tasks, absl::FunctionRef<void(size_t)> task) {
  if (helpers_.empty() || tasks <= 1) {
    for (size_t i = 0; i < tasks; ++i) task(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  task_ = &task;
  tasks_ = tasks;
  next_ = 0;
  ++round_;
  work_cv_.notify_all();
  Work(lock);
  // Every task is claimed; wait for the helpers' last ones. Each finishes in bounded time.
  done_cv_.wait(lock, [this] { return running_ == 0; });
  task_ = nullptr;
  tasks_ = 0;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void UpdatePool::Work(std::unique_lock<std::mutex>& lock) {
  while (next_ < tasks_) {
    const size_t i = next_++;
    ++running_;
    const absl::FunctionRef<void(size_t)>& task = *task_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      task(i);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    if (failure) {
      if (!failure_) failure_ = failure;
      next_ = tasks_;  // skip what is left
    }
    if (--running_ == 0 && next_ >= tasks_) done_cv_.notify_one();
  }
}

void UpdatePool::HelperLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t seen = round_;
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || round_ != seen; });
    if (stop_) return;
    seen = round_;
    Work(lock);
  }
}

}  // namespace syncline
