// Supervision of one job: starts the children that start its nodes (launch/cluster.h: a node
// each, or one mpirun or srun), watches them while the coordinator runs the job, asks for
// time-based checkpoints, and stops everything when a node fails or the launcher is interrupted.
//
// Thread-safety: Supervise() is called from one thread; the coordinator runs on its own.
#ifndef SYNCLINE_LAUNCH_SUPERVISOR_H_
#define SYNCLINE_LAUNCH_SUPERVISOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "core/coordinator.h"
#include "launch/checkpoint_tracker.h"
#include "launch/process_group.h"
#include "launch/run_report.h"
#include "syncline/job_spec.h"

namespace syncline {

// The node binary `name` ("syncline-ps"): beside this program, as in an installed bin/ and in
// the build tree's BUILD/bin. SYNCLINE_BIN_DIR overrides the folder.
std::string FindBinary(const std::string& name);

// The child process of node (role, rank) of a job whose coordinator is at `coordinator`.
// A worker runs `worker_command` (a user's program: syncline-launch ... -- COMMAND) with
// SYNCLINE_COORDINATOR and SYNCLINE_RANK set, when one is given.
ProcessSpec NodeProcess(wire::Role role, int rank, const std::string& coordinator,
                        const std::vector<std::string>& worker_command = {});

struct JobOutcome {
  absl::Status status;            // the coordinator's verdict
  std::string failure;            // why the job failed; empty: it did not
  int failure_code = 1;           // the launcher's exit code when it failed (2: bad input)
  std::vector<std::string> lost;  // workers the job went on without
  int restarts = 0;               // failed nodes restarted in place (--max-restarts)
  absl::Duration wall;
};

// Called before a failed node's replacement starts (--max-restarts): gives it a key of its own
// (per-node keys, core/job_key.h). An error fails the job.
using RekeyNode = std::function<absl::Status(wire::Role role, int rank)>;

// Runs the job: `coordinator` (not yet running) on a thread of its own, and `processes`, the
// children that start its nodes (launch/cluster.h's NodeProcesses: one per node, or one
// mpirun or srun for all). `signal` is polled: a non-zero value is an interruption by that
// signal. A child labelled with a worker's id ("w3") that fails is that worker lost. With
// --max-restarts, a child labelled with a node's id that fails is first restarted in place,
// and the job rolls back to the newest complete checkpoint (Coordinator::Restart).
JobOutcome Supervise(const JobSpec& spec, const std::vector<ProcessSpec>& processes,
                     Coordinator& coordinator, RunReport& report, CheckpointTracker& checkpoints,
                     int64_t restore_clock, const std::atomic<int>& signal,
                     RekeyNode rekey = nullptr);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_SUPERVISOR_H_
