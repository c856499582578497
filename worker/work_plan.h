// WorkPlan: which batches a worker trains, epoch by epoch, in a job that loses and gains workers.
//
// Batch b of partition p is examples [b * B, (b + 1) * B) of worker p's partition of the
// training data; one pass over a partition is its first batches(p) batches. Only the job's
// first workers (ranks below its partition count) have a partition. With nobody lost or added,
// worker w trains (w, 0), (w, 1), ... every epoch. When worker k leaves having finished
// `clock` iterations, the rest of k's plan is handed to the takers the coordinator named (the
// workers still training, in rank order): of k's remaining batches of that epoch, and later of
// each whole epoch of k, the j-th of S takers appends every S-th batch from the
// ((j + e) mod S)-th on (e: k's epoch of those batches, so that the odd batch goes round) to
// the end of its own epoch.
//
// When a worker joins a running job (a joiner: no partition of its own), each donor the
// coordinator named (the workers still training, in rank order) gives it a share of its plan
// from its cut, the first iteration it had not prepared when it answered: the k-th of D donors,
// with S = D + 1, gives every S-th batch from the ((k + e) mod S)-th on of the rest of the
// epoch e its cut is in, and of every later epoch e of its plan, and keeps the others in their
// order. The joiner's epoch e is the donors' shares of their epochs e, donor by donor. Its
// iterations are numbered from the arrival's first_clock (the others' clock when it joined).
//
// Every worker hears the same departures and arrivals in the same order, so the plan of any
// worker can be computed by any other: a second departure hands over, along with the leaver's
// own batches, the share of the first that it had taken; a joiner's departure hands over what
// the donors gave it; a joiner may later be a taker or a donor.
//
// The policy is at-least-once per epoch. `clock` is the coordinator's last word from the
// leaver (its heartbeats), which may lag by a few iterations: those batches are trained twice,
// none is skipped. A taker that hears of a departure after it has moved on to a later epoch
// appends the batches to the epoch it is in, never to one it has passed; only its own
// checkpoint knows that epoch, so the others compute its plan as if it had not: should it
// later donate, it drops only what the joiner is given, from its cut on, and the rest stays
// with it (some batches may be trained twice). A donor prepares no iteration at or past its
// cut until it has heard the arrival; the plan cannot check that, the caller guarantees it.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_WORK_PLAN_H_
#define SYNCLINE_WORKER_WORK_PLAN_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
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

// A donor's cut: the first iteration of its plan it had not prepared when it answered the
// coordinator (it prepares none at or past it until it hears the arrival).
struct Cut {
  int donor = -1;
  int64_t clock = 0;
  bool operator==(const Cut&) const = default;
};

// A worker joined: the donors (the workers still training, rank order) give it every S-th
// batch (S = donors + 1) of their plans from their cuts on. `first_clock` is the joiner's
// first iteration number (its clocks count from there, so that servers see it enter at the
// others' clock): its plan's position 0 is iteration first_clock.
struct Arrival {
  int worker = -1;
  int64_t first_clock = 0;
  std::vector<Cut> cuts;
  bool operator==(const Arrival&) const = default;
};

// A departure or an arrival, as a worker's checkpoint keeps it: for a departure, the epoch this
// worker appended its share of the remainder to, when that was not the leaver's (-1).
struct SavedEvent {
  std::variant<Departure, Arrival> event;
  int applied_epoch = -1;
};
// The name from before arrivals.
using SavedDeparture = SavedEvent;

class WorkPlan {
 public:
  // The plan of worker `self` over `epochs` epochs. `batches_of(p)` is the number of batches
  // in one pass over partition p; it is asked for `self` now and, later, for the partitions
  // that the leavers and donors self takes from hold. Ranks from `partitions` on (the job's
  // initial worker count) have no partition: their plans hold only what they were given, and
  // batches_of is never asked for them. The 3-argument form gives every rank a partition
  // except the joiners named by arrivals.
  static absl::StatusOr<WorkPlan> Create(int self, int epochs,
                                         std::function<absl::StatusOr<int64_t>(int)> batches_of);
  static absl::StatusOr<WorkPlan> Create(int self, int epochs,
                                         std::function<absl::StatusOr<int64_t>(int)> batches_of,
                                         int partitions);

  // Worker d.worker left. `next_step` is the first iteration of `self` not yet prepared: a
  // share for `self` goes no earlier than the epoch that iteration is in. Returns the batches
  // this worker takes over (0 when it is not a taker, or nothing was left).
  absl::StatusOr<int64_t> Leave(const Departure& d, int64_t next_step);

  // Worker a.worker joined. Returns the batches this worker gains (the joiner: its whole plan)
  // or loses (a donor: a negative number); 0 for any other worker, which only keeps the event,
  // and for an arrival heard before (same joiner). A donor's plan must not have been prepared
  // at or past its cut: the caller guarantees it. InvalidArgument when `a` cannot be one of
  // this job (a joiner with a partition or named before, a donor that is the joiner, has left
  // or has not joined, donors out of rank order or twice, negative clocks).
  absl::StatusOr<int64_t> Arrive(const Arrival& a);

  // The departures and arrivals heard so far, in order, for a checkpoint (Load reads them
  // back). With no arrival the bytes are the format from before arrivals.
  std::string Save() const;
  // DataLoss naming what is wrong when `bytes` are not a Save() of a job whose ranks are below
  // `workers` (its most workers, joiners included). Reads both formats and the empty string.
  static absl::StatusOr<std::vector<SavedEvent>> Load(std::string_view bytes, int workers);
  // A resumed worker's plan: `own` as its checkpoint saved them, then the events only other
  // workers' checkpoints hold (`all` has `own` as its prefix: everyone hears them in one
  // order), heard now, at `next_step`. The worker's own departure, if any, ends its plan at
  // the clock it left at: its batches are the takers'. A joiner's own arrival starts its plan.
  absl::Status Restore(const std::vector<SavedEvent>& own, const std::vector<SavedEvent>& all,
                       int64_t next_step);

  // The batch of `self`'s iteration `step`, with its 0-based epoch; nullopt past the end and,
  // for a joiner, before its first_clock.
  struct Located {
    int epoch = 0;
    BatchRef batch;
  };
  std::optional<Located> At(int64_t step) const;
  // The iteration after `self`'s last: its batches over every epoch, plus first_clock for a
  // joiner (whose iterations run from first_clock).
  int64_t total_steps() const;
  // The batches of `worker` in `epoch` with the events before the `upto`-th (all: -1). Right
  // for another worker only when this one knows the sizes of the partitions its plan holds:
  // those of self's plan are read by Create, Leave, Arrive and Restore; LoadSizesFor reads
  // another's. A partition whose size was never read counts as empty.
  std::vector<BatchRef> Epoch(int worker, int epoch, int upto = -1) const;
  // Reads (batches_of) the sizes of the partitions `worker`'s plan holds that are not known.
  absl::Status LoadSizesFor(int worker);
  bool changed() const { return !events_.empty(); }

 private:
  using Event = std::variant<Departure, Arrival>;

  WorkPlan(int self, int epochs, int partitions)
      : self_(self), epochs_(epochs), partitions_(partitions) {}
  // Whether `worker` has a partition of its own.
  bool HasPartition(int worker) const;
  // The first iteration number of `worker` (a joiner's first_clock, else 0).
  int64_t Origin(int worker) const;
  // The epoch of `worker`'s iteration `clock` and the position in it, under the events before
  // the `upto`-th; nullopt when its plan ends before. A joiner's clock below its first_clock
  // counts as its first iteration (it had trained nothing). `own`: self's plan as self sees
  // it (with the epochs it appended late shares to), else as the others compute it.
  std::optional<std::pair<int, int64_t>> Locate(int worker, int64_t clock, int upto,
                                                bool own) const;
  // Epoch(), memoised until the next event.
  const std::vector<BatchRef>& EpochOf(int worker, int epoch, int upto, bool own) const;
  // What the k-th donor of arrival `upto` (the event index) gives the joiner in `epoch`.
  std::vector<BatchRef> Given(const Arrival& a, size_t k, int epoch, int upto) const;
  // Adds the partitions `worker`'s plan holds under the events before `upto`.
  void Reach(int worker, int upto, std::set<int>* partitions,
             std::set<std::pair<int, int>>* seen) const;
  // InvalidArgument when `a` cannot follow the events heard.
  absl::Status Check(const Arrival& a) const;
  // Appends `e`, then reads the partition sizes self's plan needs; on an error, `e` is dropped.
  absl::Status Push(Event e);
  // Self's batches: total_steps() less its first iteration number.
  int64_t Length() const;

  int self_;
  int epochs_;
  int partitions_;  // ranks below have a partition; -1: every rank but the joiners
  std::function<absl::StatusOr<int64_t>(int)> batches_of_;
  std::map<int, int64_t> batches_;  // per partition, for the partitions read
  std::vector<Event> events_;
  std::map<int, int64_t> origin_;  // the joiners heard: their first_clock
  // For the departures self takes (by event index): the epoch its share of the remainder is
  // appended to, when self heard of it after that epoch (else the leaver's epoch).
  std::map<int, int> applied_epoch_;
  // Where self's plan ends when self is among the departures (a resumed leaver).
  std::optional<int64_t> self_left_at_;
  mutable std::map<std::tuple<int, int, int, bool>, std::vector<BatchRef>> memo_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_WORK_PLAN_H_
