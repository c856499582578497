// WorkPlan: which batches a worker trains, epoch by epoch, in a job that loses workers.
//
// Batch b of partition p is examples [b * B, (b + 1) * B) of worker p's partition of the
// training data; one pass over a partition is its first batches(p) batches. With nobody lost,
// worker w trains (w, 0), (w, 1), ... every epoch. When worker k leaves having finished
// `clock` iterations, the rest of k's plan is handed to the takers the coordinator named (the
// workers still training, in rank order): of k's remaining batches of that epoch, and later of
// each whole epoch of k, the j-th of S takers appends every S-th batch from the
// ((j + e) mod S)-th on (e: k's epoch of those batches, so that the odd batch goes round) to
// the end of its own epoch. Every worker hears the same departures in the same order,
// so the plan of any worker can be computed by any other: a second departure hands over,
// along with the leaver's own batches, the share of the first that it had taken.
//
// The policy is at-least-once per epoch. `clock` is the coordinator's last word from the
// leaver (its heartbeats), which may lag by a few iterations: those batches are trained twice,
// none is skipped. A taker that hears of a departure after it has moved on to a later epoch
// appends the batches to the epoch it is in, never to one it has passed.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_WORK_PLAN_H_
#define SYNCLINE_WORKER_WORK_PLAN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace syncline {

struct BatchRef {
  int partition = 0;
  int64_t batch = 0;
  bool operator==(const BatchRef&) const = default;
};

struct Departure {
  int worker = -1;
  int64_t clock = 0;        // iterations it had finished
  std::vector<int> takers;  // in rank order
  bool operator==(const Departure&) const = default;
};

// A departure as a worker's checkpoint keeps it: with the epoch this worker appended its share
// of the remainder to, when that was not the leaver's (-1).
struct SavedDeparture {
  Departure departure;
  int applied_epoch = -1;
};

class WorkPlan {
 public:
  // The plan of worker `self` over `epochs` epochs. `batches_of(p)` is the number of batches
  // in one pass over partition p; it is asked for `self` now and for a leaver when it leaves.
  static absl::StatusOr<WorkPlan> Create(int self, int epochs,
                                         std::function<absl::StatusOr<int64_t>(int)> batches_of);

  // Worker d.worker left. `next_step` is the first iteration of `self` not yet prepared: a
  // share for `self` goes no earlier than the epoch that iteration is in. Returns the batches
  // this worker takes over (0 when it is not a taker, or nothing was left).
  absl::StatusOr<int64_t> Leave(const Departure& d, int64_t next_step);

  // The departures heard so far, for a checkpoint (Load reads them back).
  std::string Save() const;
  // DataLoss naming what is wrong when `bytes` are not a Save() of a job of `workers`.
  static absl::StatusOr<std::vector<SavedDeparture>> Load(std::string_view bytes, int workers);
  // A resumed worker's plan: `own` as its checkpoint saved them, then the departures only
  // other workers' checkpoints hold (`all` has `own` as its prefix: everyone hears them in one
  // order), heard now, at `next_step`. The worker's own departure, if any, ends its plan at
  // the clock it left at: its batches are the takers'.
  absl::Status Restore(const std::vector<SavedDeparture>& own,
                       const std::vector<SavedDeparture>& all, int64_t next_step);

  // The batch of `self`'s iteration `step`, with its 0-based epoch; nullopt past the end.
  struct Located {
    int epoch = 0;
    BatchRef batch;
  };
  std::optional<Located> At(int64_t step) const;
  // Iterations of `self` over every epoch.
  int64_t total_steps() const;
  // The batches of `worker` in `epoch` with the departures before the `upto`-th (all: -1).
  std::vector<BatchRef> Epoch(int worker, int epoch, int upto = -1) const;
  bool changed() const { return !departures_.empty(); }

 private:
  WorkPlan(int self, int epochs) : self_(self), epochs_(epochs) {}
  // The epoch of `worker`'s iteration `clock` and the position in it, under the departures
  // before the `upto`-th; nullopt when its plan ends before.
  std::optional<std::pair<int, int64_t>> Locate(int worker, int64_t clock, int upto) const;
  // Reads the partition sizes of the leavers not known yet (batches_of).
  absl::Status LoadLeaverSizes();
  // Epoch(), memoised until the next departure.
  const std::vector<BatchRef>& EpochOf(int worker, int epoch, int upto) const;

  int self_;
  int epochs_;
  std::function<absl::StatusOr<int64_t>(int)> batches_of_;
  std::map<int, int64_t> batches_;  // per partition, for self and the leavers
  std::vector<Departure> departures_;
  // For the departures self takes: the epoch its share of the remainder is appended to, when
  // self heard of it after that epoch (else the leaver's epoch).
  std::map<int, int> applied_epoch_;
  // Where self's plan ends when self is among the departures (a resumed leaver).
  std::optional<int64_t> self_left_at_;
  mutable std::map<std::tuple<int, int, int>, std::vector<BatchRef>> memo_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_WORK_PLAN_H_
