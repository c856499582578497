// UpdatePool: a few threads that share the arithmetic of one large dense update with the
// server's own thread, for machines with cores to spare (ServerOptions::update_threads).
//
// A 1 MiB SGD update reads and writes about 3 MiB, which one core does in 60-150 us (the
// gradient has just been written by the receiving thread, often on another core): as long as
// a push-pull's transfer. Cut into parts on several cores it runs in a fraction of that. The
// update rules are element-wise, so any cut gives the same bits as one thread.
//
// Thread-safety: Run may be called from one thread at a time (the server's thread).
#ifndef SYNCLINE_PS_UPDATE_POOL_H_
#define SYNCLINE_PS_UPDATE_POOL_H_

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace syncline {

class UpdatePool {
 public:
  // `threads` counts the caller: threads - 1 helpers are started (none for 1).
  explicit UpdatePool(int threads);
  ~UpdatePool();  // stops and joins the helpers
  UpdatePool(const UpdatePool&) = delete;
  UpdatePool& operator=(const UpdatePool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Calls task(i) once for every i in [0, tasks), on the caller and the helpers, and returns
  // when all calls have returned. task must not call Run. If calls throw, the tasks not yet
  // started are skipped and the first exception is rethrown here once the others returned.
  void Run(size_t tasks, absl::FunctionRef<void(size_t)> task);

 private:
  void HelperLoop();
  // Claims and runs tasks of the current round until none is left; the caller holds `lock`,
  // which is released while a task runs.
  void Work(std::unique_lock<std::mutex>& lock);

  std::mutex mu_;
  std::condition_variable work_cv_;  // a round started, or stop
  std::condition_variable done_cv_;  // the round's last task finished
  uint64_t round_ = 0;
  bool stop_ = false;
  size_t tasks_ = 0;
  size_t next_ = 0;     // the next task to claim
  size_t running_ = 0;  // claimed, not finished
  const absl::FunctionRef<void(size_t)>* task_ = nullptr;
  std::exception_ptr failure_;  // the round's first exception
  std::vector<std::thread> helpers_;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_UPDATE_POOL_H_
