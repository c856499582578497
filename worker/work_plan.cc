#include "worker/work_plan.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
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
    // the whole of the leaver's epoch. Each segment is shared on its own, so that takers that
    // append in different epochs still split every segment the same way, and the taker that
    // starts a segment turns with the leaver's epoch, so that none gets every odd batch.
    auto take = [&](const std::vector<BatchRef>& segment, size_t from, int segment_epoch) {
      const size_t first = from + (j + static_cast<size_t>(segment_epoch)) % shares;
      for (size_t r = first; r < segment.size(); r += shares) list.push_back(segment[r]);
    };
    if (epoch == target) {
      const std::vector<BatchRef>& rest = EpochOf(d.worker, left_epoch, i);
      take(rest, std::min<size_t>(static_cast<size_t>(position), rest.size()), left_epoch);
      for (int e = left_epoch + 1; e <= target && e < epochs_; ++e) {
        take(EpochOf(d.worker, e, i), 0, e);
      }
    } else {
      take(EpochOf(d.worker, epoch, i), 0, epoch);
    }
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
  if (step < 0 || (self_left_at_ && step >= *self_left_at_)) return std::nullopt;
  const int all = static_cast<int>(departures_.size());
  if (all == 0) {
    const int64_t n = batches_.at(self_);
    if (n == 0 || step >= n * epochs_) return std::nullopt;
    return Located{static_cast<int>(step / n), {self_, step % n}};
  }
  const auto at = Locate(self_, step, all);
  if (!at) return std::nullopt;
  return Located{at->first, EpochOf(self_, at->first, all)[at->second]};
}

int64_t WorkPlan::total_steps() const {
  const int all = static_cast<int>(departures_.size());
  if (all == 0) return batches_.at(self_) * epochs_;
  int64_t total = 0;
  for (int e = 0; e < epochs_; ++e) total += static_cast<int64_t>(EpochOf(self_, e, all).size());
  return self_left_at_ ? std::min(total, *self_left_at_) : total;
}

absl::Status WorkPlan::LoadLeaverSizes() {
  for (const Departure& d : departures_) {
    if (batches_.contains(d.worker)) continue;
    auto n = batches_of_(d.worker);
    if (!n.ok()) return n.status();
    batches_[d.worker] = *n;
    memo_.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WorkPlan::Leave(const Departure& d, int64_t next_step) {
  if (d.clock < 0) return 0;
  for (const Departure& earlier : departures_) {
    if (earlier.worker == d.worker) return 0;  // heard twice
  }
  if (d.worker == self_) {
    // Only a resumed leaver hears of itself: the rest of its plan is the takers'.
    const int64_t before = total_steps();
    departures_.push_back(d);
    memo_.clear();
    self_left_at_ = d.clock;  // once: a departure heard twice returned above
    return total_steps() - before;
  }
  const bool taker = std::find(d.takers.begin(), d.takers.end(), self_) != d.takers.end();
  const int64_t before = total_steps();
  // The epoch this worker is in: a share never goes into an epoch it has passed.
  const std::optional<Located> here = At(std::min(next_step, std::max<int64_t>(before - 1, 0)));
  const int index = static_cast<int>(departures_.size());
  departures_.push_back(d);
  memo_.clear();
  // Only a taker needs the leavers' partitions (their sizes): the others only keep the
  // departure, for the plans it may have to compute after a later one.
  if (!taker) return 0;
  if (auto s = LoadLeaverSizes(); !s.ok()) return s;
  if (here) {
    const auto left = Locate(d.worker, d.clock, index);
    if (left && here->epoch > left->first) {
      applied_epoch_[index] = here->epoch;
      memo_.clear();
    }
  }
  return total_steps() - before;
}

namespace {

// Little-endian fixed-width fields, read with bounds checks.
template <typename T>
void Put(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
bool Get(std::string_view* in, T* value) {
  if (in->size() < sizeof(T)) return false;
  std::memcpy(value, in->data(), sizeof(T));
  in->remove_prefix(sizeof(T));
  return true;
}

}  // namespace

std::string WorkPlan::Save() const {
  std::string out;
  Put<uint32_t>(&out, static_cast<uint32_t>(departures_.size()));
  for (size_t i = 0; i < departures_.size(); ++i) {
    const Departure& d = departures_[i];
    const auto applied = applied_epoch_.find(static_cast<int>(i));
    Put<int32_t>(&out, d.worker);
    Put<int64_t>(&out, d.clock);
    Put<int32_t>(&out, applied == applied_epoch_.end() ? -1 : applied->second);
    Put<uint32_t>(&out, static_cast<uint32_t>(d.takers.size()));
    for (int t : d.takers) Put<int32_t>(&out, t);
  }
  return out;
}

absl::StatusOr<std::vector<SavedDeparture>> WorkPlan::Load(std::string_view bytes, int workers) {
  auto bad = [](const std::string& why) {
    return absl::DataLossError(absl::StrCat("saved work plan: ", why));
  };
  if (bytes.empty()) return std::vector<SavedDeparture>();  // a version-1 state: none
  uint32_t count = 0;
  if (!Get(&bytes, &count)) return bad("truncated");
  if (count > static_cast<uint32_t>(workers)) {
    return bad(absl::StrFormat("%d departures in a job of %d workers", count, workers));
  }
  std::vector<SavedDeparture> out;
  for (uint32_t i = 0; i < count; ++i) {
    SavedDeparture s;
    int32_t worker = 0, applied = 0;
    uint32_t takers = 0;
    if (!Get(&bytes, &worker) || !Get(&bytes, &s.departure.clock) || !Get(&bytes, &applied) ||
        !Get(&bytes, &takers)) {
      return bad("truncated");
    }
    if (worker < 0 || worker >= workers || s.departure.clock < 0 || applied < -1 ||
        takers > static_cast<uint32_t>(workers)) {
      return bad(absl::StrFormat("departure %d is not one of a job of %d workers", i, workers));
    }
    s.departure.worker = worker;
    s.applied_epoch = applied;
    for (uint32_t t = 0; t < takers; ++t) {
      int32_t rank = 0;
      if (!Get(&bytes, &rank)) return bad("truncated");
      if (rank < 0 || rank >= workers || rank == worker ||
          (!s.departure.takers.empty() && rank <= s.departure.takers.back())) {
        return bad(absl::StrFormat("departure %d names taker %d", i, rank));
      }
      s.departure.takers.push_back(rank);
    }
    for (const SavedDeparture& earlier : out) {
      if (earlier.departure.worker == worker) {
        return bad(absl::StrFormat("w%d departs twice", worker));
      }
    }
    out.push_back(std::move(s));
  }
  if (!bytes.empty()) return bad("bytes after the last departure");
  return out;
}

absl::Status WorkPlan::Restore(const std::vector<SavedDeparture>& own,
                               const std::vector<SavedDeparture>& all, int64_t next_step) {
  if (!departures_.empty()) return absl::FailedPreconditionError("the plan has departures");
  if (own.size() > all.size()) return absl::InternalError("own departures beyond all");
  for (size_t i = 0; i < own.size(); ++i) {
    if (!(own[i].departure == all[i].departure)) {
      return absl::DataLossError(
          absl::StrFormat("the checkpoint's workers heard departure %d differently (w%d and w%d)",
                          i, own[i].departure.worker, all[i].departure.worker));
    }
    const Departure& d = own[i].departure;
    if (d.worker == self_) {
      if (auto s = Leave(d, next_step); !s.ok()) return s.status();
      continue;
    }
    if (own[i].applied_epoch >= epochs_) {
      return absl::DataLossError(
          absl::StrFormat("saved work plan: a share appended to epoch %d of %d",
                          own[i].applied_epoch + 1, epochs_));
    }
    if (own[i].applied_epoch >= 0) applied_epoch_[static_cast<int>(i)] = own[i].applied_epoch;
    departures_.push_back(d);
  }
  memo_.clear();
  if (auto s = LoadLeaverSizes(); !s.ok()) return s;
  for (size_t i = own.size(); i < all.size(); ++i) {
    if (auto s = Leave(all[i].departure, next_step); !s.ok()) return s.status();
  }
  return absl::OkStatus();
}

}  // namespace syncline
