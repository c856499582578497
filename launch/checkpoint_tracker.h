// CheckpointTracker: the launcher's side of checkpoints. Every node writes its part of
// checkpoint C and its receipt, then tells the coordinator; once every server and every worker
// still training at C has, the tracker writes the MANIFEST (which makes the checkpoint
// visible) and deletes checkpoints beyond the newest `keep`. A checkpoint some node could not
// write is never completed and is logged.
//
// Thread-safety: thread-safe (the coordinator's thread reports, the launcher's thread reads).
#ifndef SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_
#define SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "core/syncline.capnp.h"

namespace syncline {

struct CheckpointTrackerOptions {
  std::string root;
  int servers = 1;
  int workers = 1;
  int keep = 3;
  // Written into every manifest (sync, model, ...); servers and workers are added.
  std::vector<std::pair<std::string, std::string>> job;
};

class CheckpointTracker {
 public:
  explicit CheckpointTracker(CheckpointTrackerOptions options);

  // A node's part of checkpoint `clock` is written (or failed with `status`).
  void OnCheckpointed(wire::Role role, int rank, int64_t clock, const absl::Status& status);
  // Worker `rank` finished after `steps` clocks, or is gone (steps = -1): checkpoints beyond
  // its last clock do not wait for it.
  void OnWorkerGone(int rank, int64_t steps);

  int checkpoints_written() const;
  // The clock of the newest checkpoint made visible (-1: none).
  int64_t last_clock() const;

 private:
  struct Pending {
    std::set<int> servers;
    std::set<int> workers;
    bool failed = false;
  };
  void MaybeComplete(int64_t clock) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CheckpointTrackerOptions options_;
  mutable absl::Mutex mu_;
  std::map<int64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  // Workers no longer training: their last clock (-1 when lost).
  std::map<int, int64_t> gone_ ABSL_GUARDED_BY(mu_);
  int written_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_clock_ ABSL_GUARDED_BY(mu_) = -1;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_
