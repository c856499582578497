#include "consistency/clock_table.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace syncline {

ClockTable::ClockTable(int num_workers) : clocks_(num_workers, 0), active_(num_workers, true) {
  Recompute();
}

absl::Status ClockTable::Advance(int worker, int64_t clock) {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrFormat("no worker %d in the clock table", worker));
  }
  if (!active_[worker]) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker %d has left the clock set", worker));
  }
  if (clock < clocks_[worker]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("worker %d clock went back from %d to %d", worker, clocks_[worker], clock));
  }
  clocks_[worker] = clock;
  Recompute();
  return absl::OkStatus();
}

absl::Status ClockTable::Finish(int worker) {
  if (worker < 0 || worker >= num_workers()) {
    return absl::InvalidArgumentError(absl::StrFormat("no worker %d in the clock table", worker));
  }
  active_[worker] = false;
  Recompute();
  return absl::OkStatus();
}

void ClockTable::Recompute() {
  int64_t m = kAllFinished;
  for (size_t i = 0; i < clocks_.size(); ++i) {
    if (active_[i]) m = std::min(m, clocks_[i]);
  }
  min_clock_ = m;
}

void StalenessHistogram::Record(int64_t staleness) {
  staleness = std::max<int64_t>(staleness, 0);
  ++counts_[std::min<int64_t>(staleness, kBuckets - 1)];
  max_ = std::max(max_, staleness);
  sum_ += staleness;
  ++total_;
}

}  // namespace syncline
