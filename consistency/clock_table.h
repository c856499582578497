// Bounded-staleness bookkeeping, after Petuum's Bösen: every worker owns a clock, the number
// of iterations it has finished. A reader in iteration c may be served once every active
// worker has finished iteration c - s - 1, i.e. when min_clock >= c - s, where s is the
// staleness bound: 0 is BSP, unbounded is ASP. Workers that finish leave the set, so they
// never hold the others back.
//
// These types hold no messages and do no I/O, so that the parameter server, the tests and
// later backends share one definition of "may this read be served now".
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_CONSISTENCY_CLOCK_TABLE_H_
#define SYNCLINE_CONSISTENCY_CLOCK_TABLE_H_

#include <cstdint>
#include <limits>
#include <vector>

#include "absl/status/status.h"

namespace syncline {

// MinClock() of a table with no active worker: every read may be served.
inline constexpr int64_t kAllFinished = std::numeric_limits<int64_t>::max();

class ClockTable {
 public:
  explicit ClockTable(int num_workers);
  // With `joinable` more slots, for workers that join later (Join): outside the set until then.
  ClockTable(int num_workers, int joinable);

  // Worker `worker` has finished `clock` iterations. Clocks only move forward.
  absl::Status Advance(int worker, int64_t clock);
  // The worker leaves the clock set (it finished, or it is gone).
  absl::Status Finish(int worker);
  // A joinable slot enters the clock set at `clock`, once: FailedPrecondition for any other.
  absl::Status Join(int worker, int64_t clock);
  // Whether `worker` is a slot that may still Join.
  bool joinable(int worker) const {
    return worker >= 0 && worker < num_workers() && joinable_[worker];
  }

  int64_t clock(int worker) const { return clocks_[worker]; }
  bool active(int worker) const { return active_[worker]; }
  int num_workers() const { return static_cast<int>(clocks_.size()); }
  // Smallest clock of the active workers; kAllFinished when none is active.
  int64_t MinClock() const { return min_clock_; }

 private:
  void Recompute();
  std::vector<int64_t> clocks_;
  std::vector<bool> active_;
  std::vector<bool> joinable_;
  int64_t min_clock_ = 0;
};

// Which reads a staleness bound allows.
class StalenessGate {
 public:
  // staleness < 0: unbounded (ASP).
  explicit StalenessGate(int64_t staleness) : staleness_(staleness) {}
  int64_t staleness() const { return staleness_; }
  bool bounded() const { return staleness_ >= 0; }
  bool synchronous() const { return staleness_ == 0; }

  // Whether a reader in iteration `clock` may be served when the slowest active worker has
  // finished `min_clock` iterations. A negative clock marks an ungated read (evaluation).
  bool CanRead(int64_t clock, int64_t min_clock) const {
    return clock < 0 || !bounded() || min_clock == kAllFinished || clock - staleness_ <= min_clock;
  }
  // The smallest min_clock at which CanRead(clock, .) holds.
  int64_t RequiredMinClock(int64_t clock) const { return clock - staleness_; }
  // Iterations of other workers' updates a read at `clock` may miss when served now.
  static int64_t StalenessOf(int64_t clock, int64_t min_clock) {
    if (clock < 0 || min_clock == kAllFinished || clock <= min_clock) return 0;
    return clock - min_clock;
  }

 private:
  int64_t staleness_;
};

// Counts of reads by the staleness they were served with; the last bucket collects the rest.
class StalenessHistogram {
 public:
  static constexpr int kBuckets = 64;
  StalenessHistogram() : counts_(kBuckets, 0) {}
  void Record(int64_t staleness);
  const std::vector<uint64_t>& counts() const { return counts_; }
  int64_t max() const { return max_; }
  double mean() const { return total_ == 0 ? 0.0 : static_cast<double>(sum_) / total_; }
  uint64_t total() const { return total_; }

 private:
  std::vector<uint64_t> counts_;
  int64_t max_ = 0;
  uint64_t sum_ = 0;
  uint64_t total_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CONSISTENCY_CLOCK_TABLE_H_
