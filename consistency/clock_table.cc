#include "consistency/clock_table.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace syncline {

ClockTable::ClockTable(int num_workers) : ClockTable(num_workers, 0) {}

ClockTable::ClockTable(int num_workers, int joinable)
    : clocks_(num_workers + joinable, 0),
      active_(num_workers + joinable, true),
      joinable_(num_workers + joinable, false) {
  for (int w = num_workers; w < num_workers + joinable; ++w) {
    active_[w] = false;
    joinable_[w] = true;
  }
  Recompute();
}

absl::Status ClockTable::Join(int worker, int64_t clock) {
  if (!joinable(worker)) {
    return absl::FailedPreconditionError(
        absl::StrFormat("worker %d is not a slot that may join the clock set", worker));
  }
  if (clock < 0) return absl::InvalidArgumentError(absl::StrFormat("join at clock %d", clock));
  joinable_[worker] = false;
  active_[worker] = true;
  clocks_[worker] = clock;
  Recompute();
  return absl::OkStatus();
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
  joinable_[worker] = false;  // a joiner that left does not come back
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
