// CheckpointTracker: the launcher's side of checkpoints. Every node writes its part of
// checkpoint C and its receipt, then tells the coordinator; once every server and every worker
// still training at C has, the tracker writes the MANIFEST (which makes the checkpoint
// visible) and deletes checkpoints beyond the newest `keep`. A checkpoint some node could not
// write (or a time-based request the workers outran) is never completed and is logged.
//
// Manifests are written and old checkpoints deleted on the tracker's own thread, so that slow
// disks never hold up the coordinator's thread (which answers heartbeats).
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_
#define SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
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
  // Finishes the manifests and deletions under way, and logs the checkpoints left incomplete.
  ~CheckpointTracker();
  CheckpointTracker(const CheckpointTracker&) = delete;
  CheckpointTracker& operator=(const CheckpointTracker&) = delete;

  // A node's part of checkpoint `clock` is written (or failed with `status`).
  void OnCheckpointed(wire::Role role, int rank, int64_t clock, const absl::Status& status);
  // Worker `rank` finished after `steps` clocks, or is gone (steps = -1): checkpoints beyond
  // its last clock do not wait for it.
  void OnWorkerGone(int rank, int64_t steps);

  // The job rolled back to checkpoint `clock` (in-place recovery): the parts of later ones
  // came from the timeline undone, and they are written again on the new one.
  void OnRollback(int64_t clock);

  // Whether checkpoint `clock` is decided: visible, or known to be incomplete.
  bool Resolved(int64_t clock) const;
  // Waits until every manifest decided so far is written.
  void Flush();

  int checkpoints_written() const;
  // Checkpoints some node (or the manifest) failed to write; a request the workers outran
  // (FailedPrecondition) is a miss, not a failure.
  int checkpoints_failed() const;
  // OK unless checkpoints failed and none was written: then FailedPrecondition naming how many
  // failed and the first failure. A job that ends so has no checkpoint to resume from, and
  // must not say "ok" (syncline-launch exits kExitCheckpointsFailed).
  absl::Status Verdict() const;
  // The clock of the newest checkpoint made visible (-1: none).
  int64_t last_clock() const;

 private:
  struct Pending {
    std::set<int> servers;
    std::set<int> workers;
    bool failed = false;
  };
  void MaybeComplete(int64_t clock);           // mu_ held
  void CountFailure(const std::string& what);  // mu_ held
  void Loop();
  void WriteManifest(int64_t clock, std::vector<std::string> nodes);

  const CheckpointTrackerOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int64_t, Pending> pending_;
  std::set<int64_t> completed_;  // decided complete (manifest queued or written)
  std::set<int64_t> failed_;     // decided incomplete
  // Workers no longer training: their last clock (-1 when lost).
  std::map<int, int64_t> gone_;
  std::deque<std::pair<int64_t, std::vector<std::string>>> to_write_;
  bool writing_ = false;
  bool stop_ = false;
  int written_ = 0;
  int failed_writes_ = 0;
  std::string first_failure_;
  int64_t last_clock_ = -1;
  std::thread thread_;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_CHECKPOINT_TRACKER_H_
