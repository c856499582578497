#include "worker/work_plan.h"

#include <algorithm>

#include "absl/strings/str_format.h"

namespace syncline {

absl::StatusOr<WorkPlan> WorkPlan::Create(int self, int epochs,
                                          std::function<absl::StatusOr<int64_t>(int)> batches_of) {
  if (epochs < 1) return absl::InvalidArgumentError("a work plan needs at least one epoch");
  WorkPlan plan(self, epochs);
  plan.batches_of_ = std::move(batches_of);
  auto own = plan.batches_of_(self);
  if (!own.ok()) return own.status();
  plan.batches_[self] = *own;
  return plan;
}

const std::vector<BatchRef>& WorkPlan::EpochOf(int worker, int epoch, int upto) const {
  const auto key = std::make_tuple(worker, epoch, upto);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::vector<BatchRef> list;
  const auto own = batches_.find(worker);
  const int64_t n = own == batches_.end() ? 0 : own->second;
  list.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) list.push_back({worker, b});
  for (int i = 0; i < upto; ++i) {
    const Departure& d = departures_[i];
    const auto me = std::find(d.takers.begin(), d.takers.end(), worker);
    if (me == d.takers.end()) continue;
    const size_t j = static_cast<size_t>(me - d.takers.begin());
    const size_t shares = d.takers.size();
    const auto left = Locate(d.worker, d.clock, i);
    if (!left) continue;  // it had finished its plan
    const auto [left_epoch, position] = *left;
    int target = left_epoch;
    if (worker == self_) {
      if (auto a = applied_epoch_.find(i); a != applied_epoch_.end()) target = a->second;
    }
    if (epoch < target) continue;
    // The leaver's batches this epoch stands for: the rest of the epoch it left in (and, for a
    // taker that was already further on, every epoch of the leaver up to this one), or later
    // the whole of the leaver's epoch.
    std::vector<BatchRef> rest;
    if (epoch == target) {
      const std::vector<BatchRef>& first = EpochOf(d.worker, left_epoch, i);
      rest.assign(first.begin() + std::min<int64_t>(position, first.size()), first.end());
      for (int e = left_epoch + 1; e <= target && e < epochs_; ++e) {
        const std::vector<BatchRef>& more = EpochOf(d.worker, e, i);
        rest.insert(rest.end(), more.begin(), more.end());
      }
    } else {
      rest = EpochOf(d.worker, epoch, i);
    }
    for (size_t r = j; r < rest.size(); r += shares) list.push_back(rest[r]);
  }
  return memo_.emplace(key, std::move(list)).first->second;
}

std::vector<BatchRef> WorkPlan::Epoch(int worker, int epoch, int upto) const {
  if (upto < 0) upto = static_cast<int>(departures_.size());
  return EpochOf(worker, epoch, upto);
}

std::optional<std::pair<int, int64_t>> WorkPlan::Locate(int worker, int64_t clock, int upto) const {
  int64_t before = 0;
  for (int e = 0; e < epochs_; ++e) {
    const int64_t size = static_cast<int64_t>(EpochOf(worker, e, upto).size());
    if (clock < before + size) return std::make_pair(e, clock - before);
    before += size;
  }
  return std::nullopt;
}

std::optional<WorkPlan::Located> WorkPlan::At(int64_t step) const {
  if (step < 0) return std::nullopt;
  const int all = static_cast<int>(departures_.size());
  if (all == 0) {
    const int64_t n = batches_.at(self_);
    if (n == 0 || step >= n * epochs_) return std::nullopt;
    return Located{static_cast<int>(step / n), {self_, step % n}};
  }
  int64_t before = 0;
  for (int e = 0; e < epochs_; ++e) {
    const std::vector<BatchRef>& list = EpochOf(self_, e, all);
    const int64_t size = static_cast<int64_t>(list.size());
    if (step < before + size) return Located{e, list[step - before]};
    before += size;
  }
  return std::nullopt;
}

int64_t WorkPlan::total_steps() const {
  const int all = static_cast<int>(departures_.size());
  if (all == 0) return batches_.at(self_) * epochs_;
  int64_t total = 0;
  for (int e = 0; e < epochs_; ++e) total += static_cast<int64_t>(EpochOf(self_, e, all).size());
  return total;
}

absl::StatusOr<int64_t> WorkPlan::Leave(const Departure& d, int64_t next_step) {
  if (d.worker == self_ || d.clock < 0) return 0;
  for (const Departure& earlier : departures_) {
    if (earlier.worker == d.worker) return 0;  // heard twice
  }
  if (!batches_.contains(d.worker)) {
    auto n = batches_of_(d.worker);
    if (!n.ok()) return n.status();
    batches_[d.worker] = *n;
  }
  const int64_t before = total_steps();
  // The epoch this worker is in: a share never goes into an epoch it has passed.
  const std::optional<Located> here = At(std::min(next_step, std::max<int64_t>(before - 1, 0)));
  const int index = static_cast<int>(departures_.size());
  departures_.push_back(d);
  memo_.clear();
  if (std::find(d.takers.begin(), d.takers.end(), self_) != d.takers.end() && here) {
    const auto left = Locate(d.worker, d.clock, index);
    if (left && here->epoch > left->first) {
      applied_epoch_[index] = here->epoch;
      memo_.clear();
    }
  }
  return total_steps() - before;
}

}  // namespace syncline
