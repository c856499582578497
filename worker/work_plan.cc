#include "worker/work_plan.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {

absl::StatusOr<WorkPlan> WorkPlan::Create(int self, int epochs,
                                          std::function<absl::StatusOr<int64_t>(int)> batches_of) {
  return Create(self, epochs, std::move(batches_of), -1);
}

absl::StatusOr<WorkPlan> WorkPlan::Create(int self, int epochs,
                                          std::function<absl::StatusOr<int64_t>(int)> batches_of,
                                          int partitions) {
  if (epochs < 1) return absl::InvalidArgumentError("a work plan needs at least one epoch");
  if (partitions < -1 || partitions == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("a job of %d partitions", partitions));
  }
  WorkPlan plan(self, epochs, partitions);
  plan.batches_of_ = std::move(batches_of);
  if (plan.HasPartition(self)) {
    auto own = plan.batches_of_(self);
    if (!own.ok()) return own.status();
    plan.batches_[self] = *own;
  }
  return plan;
}

bool WorkPlan::HasPartition(int worker) const {
  if (worker < 0 || origin_.contains(worker)) return false;
  return partitions_ < 0 || worker < partitions_;
}

int64_t WorkPlan::Origin(int worker) const {
  const auto it = origin_.find(worker);
  return it == origin_.end() ? 0 : it->second;
}

std::vector<BatchRef> WorkPlan::Given(const Arrival& a, size_t k, int epoch, int upto) const {
  std::vector<BatchRef> given;
  const Cut& cut = a.cuts[k];
  const auto at = Locate(cut.donor, cut.clock, upto, /*own=*/false);
  if (!at || epoch < at->first) return given;  // its plan ended before the cut, or not yet
  const std::vector<BatchRef>& list = EpochOf(cut.donor, epoch, upto, /*own=*/false);
  const size_t shares = a.cuts.size() + 1;
  const size_t from =
      epoch == at->first ? std::min(static_cast<size_t>(at->second), list.size()) : 0;
  const size_t first = from + (k + static_cast<size_t>(epoch)) % shares;
  for (size_t r = first; r < list.size(); r += shares) given.push_back(list[r]);
  return given;
}

const std::vector<BatchRef>& WorkPlan::EpochOf(int worker, int epoch, int upto, bool own) const {
  own = own && worker == self_;
  const auto key = std::make_tuple(worker, epoch, upto, own);
  if (auto it = memo_.find(key); it != memo_.end()) return it->second;
  std::vector<BatchRef> list;
  int64_t n = 0;
  if (HasPartition(worker)) {
    const auto size = batches_.find(worker);
    if (size != batches_.end()) n = size->second;
  }
  list.reserve(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) list.push_back({worker, b});
  for (int i = 0; i < upto; ++i) {
    if (const Arrival* a = std::get_if<Arrival>(&events_[i])) {
      if (a->worker == worker) {
        // The joiner: the donors' shares of this epoch, donor by donor.
        for (size_t k = 0; k < a->cuts.size(); ++k) {
          const std::vector<BatchRef> given = Given(*a, k, epoch, i);
          list.insert(list.end(), given.begin(), given.end());
        }
        continue;
      }
      const auto me = std::find_if(a->cuts.begin(), a->cuts.end(),
                                   [&](const Cut& c) { return c.donor == worker; });
      if (me == a->cuts.end()) continue;
      const size_t k = static_cast<size_t>(me - a->cuts.begin());
      const auto at = Locate(worker, me->clock, i, own);
      if (!at || epoch < at->first) continue;
      const size_t from =
          epoch == at->first ? std::min(static_cast<size_t>(at->second), list.size()) : 0;
      std::vector<BatchRef> kept(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(from));
      if (own && !applied_epoch_.empty() && applied_epoch_.begin()->first < i) {
        // Self appended a share late: the joiner computes this plan without that, so self drops
        // from its cut on only what the joiner is given (the others stay: trained twice).
        std::map<std::pair<int, int64_t>, int> given;
        for (const BatchRef& b : Given(*a, k, epoch, i)) ++given[{b.partition, b.batch}];
        for (size_t r = from; r < list.size(); ++r) {
          const auto g = given.find({list[r].partition, list[r].batch});
          if (g != given.end() && g->second > 0) {
            --g->second;
          } else {
            kept.push_back(list[r]);
          }
        }
      } else {
        const size_t shares = a->cuts.size() + 1;
        const size_t offset = (k + static_cast<size_t>(epoch)) % shares;
        for (size_t r = from; r < list.size(); ++r) {
          if ((r - from) % shares != offset) kept.push_back(list[r]);
        }
      }
      list = std::move(kept);
      continue;
    }
    const Departure& d = std::get<Departure>(events_[i]);
    const auto me = std::find(d.takers.begin(), d.takers.end(), worker);
    if (me == d.takers.end()) continue;
    const size_t j = static_cast<size_t>(me - d.takers.begin());
    const size_t shares = d.takers.size();
    const auto left = Locate(d.worker, d.clock, i, /*own=*/false);
    if (!left) continue;  // it had finished its plan
    const auto [left_epoch, position] = *left;
    int target = left_epoch;
    if (own) {
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
      const std::vector<BatchRef>& rest = EpochOf(d.worker, left_epoch, i, false);
      take(rest, std::min<size_t>(static_cast<size_t>(position), rest.size()), left_epoch);
      for (int e = left_epoch + 1; e <= target && e < epochs_; ++e) {
        take(EpochOf(d.worker, e, i, false), 0, e);
      }
    } else {
      take(EpochOf(d.worker, epoch, i, false), 0, epoch);
    }
  }
  return memo_.emplace(key, std::move(list)).first->second;
}

std::vector<BatchRef> WorkPlan::Epoch(int worker, int epoch, int upto) const {
  if (upto < 0) upto = static_cast<int>(events_.size());
  return EpochOf(worker, epoch, upto, /*own=*/true);
}

std::optional<std::pair<int, int64_t>> WorkPlan::Locate(int worker, int64_t clock, int upto,
                                                        bool own) const {
  const int64_t position = std::max<int64_t>(clock - Origin(worker), 0);
  int64_t before = 0;
  for (int e = 0; e < epochs_; ++e) {
    const int64_t size = static_cast<int64_t>(EpochOf(worker, e, upto, own).size());
    if (position < before + size) return std::make_pair(e, position - before);
    before += size;
  }
  return std::nullopt;
}

std::optional<WorkPlan::Located> WorkPlan::At(int64_t step) const {
  if (step < 0 || (self_left_at_ && step >= *self_left_at_)) return std::nullopt;
  const int all = static_cast<int>(events_.size());
  if (all == 0) {
    const int64_t n = HasPartition(self_) ? batches_.at(self_) : 0;
    if (n == 0 || step >= n * epochs_) return std::nullopt;
    return Located{static_cast<int>(step / n), {self_, step % n}};
  }
  if (step < Origin(self_)) return std::nullopt;
  const auto at = Locate(self_, step, all, /*own=*/true);
  if (!at) return std::nullopt;
  return Located{at->first, EpochOf(self_, at->first, all, /*own=*/true)[at->second]};
}

int64_t WorkPlan::total_steps() const {
  const int all = static_cast<int>(events_.size());
  if (all == 0) return HasPartition(self_) ? batches_.at(self_) * epochs_ : 0;
  int64_t total = Origin(self_);
  for (int e = 0; e < epochs_; ++e) {
    total += static_cast<int64_t>(EpochOf(self_, e, all, /*own=*/true).size());
  }
  return self_left_at_ ? std::min(total, *self_left_at_) : total;
}

int64_t WorkPlan::Length() const { return std::max<int64_t>(total_steps() - Origin(self_), 0); }

void WorkPlan::Reach(int worker, int upto, std::set<int>* partitions,
                     std::set<std::pair<int, int>>* seen) const {
  if (!seen->insert({worker, upto}).second) return;
  if (HasPartition(worker)) partitions->insert(worker);
  for (int i = 0; i < upto; ++i) {
    if (const Arrival* a = std::get_if<Arrival>(&events_[i])) {
      if (a->worker != worker) continue;  // a donor keeps only part of what it had
      for (const Cut& c : a->cuts) Reach(c.donor, i, partitions, seen);
      continue;
    }
    const Departure& d = std::get<Departure>(events_[i]);
    if (std::find(d.takers.begin(), d.takers.end(), worker) != d.takers.end()) {
      Reach(d.worker, i, partitions, seen);
    }
  }
}

absl::Status WorkPlan::LoadSizesFor(int worker) {
  std::set<int> partitions;
  std::set<std::pair<int, int>> seen;
  Reach(worker, static_cast<int>(events_.size()), &partitions, &seen);
  for (int p : partitions) {
    if (batches_.contains(p)) continue;
    auto n = batches_of_(p);
    if (!n.ok()) return n.status();
    batches_[p] = *n;
    memo_.clear();
  }
  return absl::OkStatus();
}

absl::Status WorkPlan::Push(Event e) {
  const Arrival* a = std::get_if<Arrival>(&e);
  if (a) origin_[a->worker] = a->first_clock;
  const int joiner = a ? a->worker : -1;
  events_.push_back(std::move(e));
  memo_.clear();
  if (auto s = LoadSizesFor(self_); !s.ok()) {
    events_.pop_back();
    if (joiner >= 0) origin_.erase(joiner);
    memo_.clear();
    return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WorkPlan::Leave(const Departure& d, int64_t next_step) {
  if (d.clock < 0) return 0;
  for (const Event& e : events_) {
    const Departure* earlier = std::get_if<Departure>(&e);
    if (earlier && earlier->worker == d.worker) return 0;  // heard twice
  }
  if (d.worker == self_) {
    // Only a resumed leaver hears of itself: the rest of its plan is the takers'.
    const int64_t before = total_steps();
    if (auto s = Push(d); !s.ok()) return s;
    self_left_at_ = d.clock;  // once: a departure heard twice returned above
    return total_steps() - before;
  }
  const bool taker = std::find(d.takers.begin(), d.takers.end(), self_) != d.takers.end();
  const int64_t before = total_steps();
  // The epoch this worker is in: a share never goes into an epoch it has passed.
  const std::optional<Located> here =
      At(std::max(Origin(self_), std::min(next_step, std::max<int64_t>(before - 1, 0))));
  const int index = static_cast<int>(events_.size());
  // Only a taker needs the leavers' partitions (their sizes, read by Push): the others only
  // keep the departure, for the plans they may have to compute after a later event.
  if (auto s = Push(d); !s.ok()) return s;
  if (!taker) return 0;
  if (here) {
    const auto left = Locate(d.worker, d.clock, index, /*own=*/false);
    if (left && here->epoch > left->first) {
      applied_epoch_[index] = here->epoch;
      memo_.clear();
    }
  }
  return total_steps() - before;
}

absl::Status WorkPlan::Check(const Arrival& a) const {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrFormat("arrival of w%d: %s", a.worker, why));
  };
  if (a.worker < 0) return bad("a negative rank");
  if (partitions_ > 0 && a.worker < partitions_) {
    return bad(absl::StrFormat("ranks below %d have a partition of their own", partitions_));
  }
  if (a.first_clock < 0) return bad(absl::StrFormat("first clock %d", a.first_clock));
  for (const Event& e : events_) {
    bool named = false;
    if (const Departure* d = std::get_if<Departure>(&e)) {
      named = d->worker == a.worker ||
              std::find(d->takers.begin(), d->takers.end(), a.worker) != d->takers.end();
    } else {
      const Arrival& other = std::get<Arrival>(e);
      named = std::any_of(other.cuts.begin(), other.cuts.end(),
                          [&](const Cut& c) { return c.donor == a.worker; });
    }
    if (named) return bad("it took part in the job before it joined");
  }
  for (size_t k = 0; k < a.cuts.size(); ++k) {
    const Cut& c = a.cuts[k];
    if (c.donor < 0 || c.donor == a.worker) {
      return bad(absl::StrFormat("donor %d is not another worker", c.donor));
    }
    if (k > 0 && c.donor <= a.cuts[k - 1].donor) {
      return bad(absl::StrFormat("donor w%d after w%d: donors go once each, in rank order", c.donor,
                                 a.cuts[k - 1].donor));
    }
    if (c.clock < 0) return bad(absl::StrFormat("donor w%d cut at clock %d", c.donor, c.clock));
    for (const Event& e : events_) {
      const Departure* d = std::get_if<Departure>(&e);
      if (d && d->worker == c.donor) return bad(absl::StrFormat("donor w%d had left", c.donor));
    }
    if (partitions_ > 0 && c.donor >= partitions_ && !origin_.contains(c.donor)) {
      return bad(absl::StrFormat("donor w%d has not joined", c.donor));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> WorkPlan::Arrive(const Arrival& a) {
  if (origin_.contains(a.worker)) return 0;  // heard twice
  if (auto s = Check(a); !s.ok()) return s;
  const int64_t before = Length();
  if (auto s = Push(a); !s.ok()) return s;
  return a.worker == self_ ? Length() : Length() - before;
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

// The first field of the format with arrivals; the format before it starts with the count of
// departures, which is below the job's workers.
constexpr uint32_t kEventsTag = 0xFFFFFF02u;
constexpr uint8_t kDepartureKind = 0;
constexpr uint8_t kArrivalKind = 1;

void PutDeparture(std::string* out, const Departure& d, int applied_epoch) {
  Put<int32_t>(out, d.worker);
  Put<int64_t>(out, d.clock);
  Put<int32_t>(out, applied_epoch);
  Put<uint32_t>(out, static_cast<uint32_t>(d.takers.size()));
  for (int t : d.takers) Put<int32_t>(out, t);
}

absl::Status Bad(const std::string& why) {
  return absl::DataLossError(absl::StrCat("saved work plan: ", why));
}

// Departure fields, event `i` of a job of `workers`.
absl::Status GetDeparture(std::string_view* bytes, uint32_t i, int workers, SavedEvent* out) {
  Departure d;
  int32_t worker = 0, applied = 0;
  uint32_t takers = 0;
  if (!Get(bytes, &worker) || !Get(bytes, &d.clock) || !Get(bytes, &applied) ||
      !Get(bytes, &takers)) {
    return Bad("truncated");
  }
  if (worker < 0 || worker >= workers || d.clock < 0 || applied < -1 ||
      takers > static_cast<uint32_t>(workers)) {
    return Bad(absl::StrFormat("departure %d is not one of a job of %d workers", i, workers));
  }
  d.worker = worker;
  for (uint32_t t = 0; t < takers; ++t) {
    int32_t rank = 0;
    if (!Get(bytes, &rank)) return Bad("truncated");
    if (rank < 0 || rank >= workers || rank == worker ||
        (!d.takers.empty() && rank <= d.takers.back())) {
      return Bad(absl::StrFormat("departure %d names taker %d", i, rank));
    }
    d.takers.push_back(rank);
  }
  out->event = std::move(d);
  out->applied_epoch = applied;
  return absl::OkStatus();
}

// Arrival fields, event `i` of a job of `workers`.
absl::Status GetArrival(std::string_view* bytes, uint32_t i, int workers, SavedEvent* out) {
  Arrival a;
  int32_t worker = 0;
  uint32_t cuts = 0;
  if (!Get(bytes, &worker) || !Get(bytes, &a.first_clock) || !Get(bytes, &cuts)) {
    return Bad("truncated");
  }
  if (worker < 0 || worker >= workers || a.first_clock < 0 ||
      cuts > static_cast<uint32_t>(workers)) {
    return Bad(absl::StrFormat("arrival %d is not one of a job of %d workers", i, workers));
  }
  a.worker = worker;
  for (uint32_t k = 0; k < cuts; ++k) {
    Cut c;
    int32_t donor = 0;
    if (!Get(bytes, &donor) || !Get(bytes, &c.clock)) return Bad("truncated");
    if (donor < 0 || donor >= workers || donor == worker || c.clock < 0 ||
        (!a.cuts.empty() && donor <= a.cuts.back().donor)) {
      return Bad(absl::StrFormat("arrival %d names donor %d", i, donor));
    }
    c.donor = donor;
    a.cuts.push_back(c);
  }
  out->event = std::move(a);
  return absl::OkStatus();
}

}  // namespace

std::string WorkPlan::Save() const {
  const bool arrivals = std::any_of(events_.begin(), events_.end(), [](const Event& e) {
    return std::holds_alternative<Arrival>(e);
  });
  std::string out;
  if (arrivals) Put<uint32_t>(&out, kEventsTag);
  Put<uint32_t>(&out, static_cast<uint32_t>(events_.size()));
  for (size_t i = 0; i < events_.size(); ++i) {
    if (const Arrival* a = std::get_if<Arrival>(&events_[i])) {
      Put<uint8_t>(&out, kArrivalKind);
      Put<int32_t>(&out, a->worker);
      Put<int64_t>(&out, a->first_clock);
      Put<uint32_t>(&out, static_cast<uint32_t>(a->cuts.size()));
      for (const Cut& c : a->cuts) {
        Put<int32_t>(&out, c.donor);
        Put<int64_t>(&out, c.clock);
      }
      continue;
    }
    if (arrivals) Put<uint8_t>(&out, kDepartureKind);
    const auto applied = applied_epoch_.find(static_cast<int>(i));
    PutDeparture(&out, std::get<Departure>(events_[i]),
                 applied == applied_epoch_.end() ? -1 : applied->second);
  }
  return out;
}

absl::StatusOr<std::vector<SavedEvent>> WorkPlan::Load(std::string_view bytes, int workers) {
  if (bytes.empty()) return std::vector<SavedEvent>();  // a version-1 state: none
  uint32_t count = 0;
  if (!Get(&bytes, &count)) return Bad("truncated");
  const bool tagged = count == kEventsTag;
  if (tagged && !Get(&bytes, &count)) return Bad("truncated");
  // Every rank leaves at most once and joins at most once.
  const uint64_t most = static_cast<uint64_t>(std::max(workers, 0)) * (tagged ? 2 : 1);
  if (count > most) {
    return Bad(tagged ? absl::StrFormat("%d events in a job of %d workers", count, workers)
                      : absl::StrFormat("%d departures in a job of %d workers", count, workers));
  }
  std::vector<SavedEvent> out;
  for (uint32_t i = 0; i < count; ++i) {
    uint8_t kind = kDepartureKind;
    if (tagged && !Get(&bytes, &kind)) return Bad("truncated");
    SavedEvent s;
    if (kind == kDepartureKind) {
      if (auto st = GetDeparture(&bytes, i, workers, &s); !st.ok()) return st;
    } else if (kind == kArrivalKind) {
      if (auto st = GetArrival(&bytes, i, workers, &s); !st.ok()) return st;
    } else {
      return Bad(absl::StrFormat("event %d is of unknown kind %d", i, kind));
    }
    for (const SavedEvent& earlier : out) {
      if (earlier.event.index() != s.event.index()) continue;
      if (const Departure* d = std::get_if<Departure>(&s.event)) {
        if (std::get<Departure>(earlier.event).worker == d->worker) {
          return Bad(absl::StrFormat("w%d departs twice", d->worker));
        }
      } else {
        const int joiner = std::get<Arrival>(s.event).worker;
        if (std::get<Arrival>(earlier.event).worker == joiner) {
          return Bad(absl::StrFormat("w%d joins twice", joiner));
        }
      }
    }
    out.push_back(std::move(s));
  }
  if (!bytes.empty()) return Bad("bytes after the last event");
  return out;
}

absl::Status WorkPlan::Restore(const std::vector<SavedEvent>& own,
                               const std::vector<SavedEvent>& all, int64_t next_step) {
  if (!events_.empty()) return absl::FailedPreconditionError("the plan has heard events already");
  if (own.size() > all.size()) return absl::InternalError("own events beyond all");
  for (size_t i = 0; i < own.size(); ++i) {
    if (!(own[i].event == all[i].event)) {
      auto who = [](const Event& e) {
        if (const Arrival* a = std::get_if<Arrival>(&e)) return absl::StrCat("w", a->worker, "+");
        return absl::StrCat("w", std::get<Departure>(e).worker);
      };
      return absl::DataLossError(
          absl::StrFormat("the checkpoint's workers heard event %d differently (%s and %s)", i,
                          who(own[i].event), who(all[i].event)));
    }
    if (const Arrival* a = std::get_if<Arrival>(&own[i].event)) {
      if (origin_.contains(a->worker)) continue;
      if (auto s = Check(*a); !s.ok()) {
        return absl::DataLossError(absl::StrCat("saved work plan: ", s.message()));
      }
      origin_[a->worker] = a->first_clock;
      events_.push_back(*a);
      continue;
    }
    const Departure& d = std::get<Departure>(own[i].event);
    if (d.worker == self_) {
      if (auto s = Leave(d, next_step); !s.ok()) return s.status();
      continue;
    }
    if (own[i].applied_epoch >= epochs_) {
      return absl::DataLossError(
          absl::StrFormat("saved work plan: a share appended to epoch %d of %d",
                          own[i].applied_epoch + 1, epochs_));
    }
    if (own[i].applied_epoch >= 0) {
      applied_epoch_[static_cast<int>(events_.size())] = own[i].applied_epoch;
    }
    events_.push_back(d);
  }
  memo_.clear();
  if (auto s = LoadSizesFor(self_); !s.ok()) return s;
  for (size_t i = own.size(); i < all.size(); ++i) {
    if (const Arrival* a = std::get_if<Arrival>(&all[i].event)) {
      if (auto s = Arrive(*a); !s.ok()) return s.status();
    } else if (auto s = Leave(std::get<Departure>(all[i].event), next_step); !s.ok()) {
      return s.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace syncline
