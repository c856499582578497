// Checks and derived facts of a JobSpec (syncline/job_spec.h).
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_JOB_SPEC_H_
#define SYNCLINE_JOB_JOB_SPEC_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "syncline/job_spec.h"

namespace syncline {

// Checks every value and every combination (ranges, Criteo data with the ctr model, gossip
// without servers); the InvalidArgument error names the launcher flag and the bad value, as
// "--epochs=0: must be >= 1". Does not touch the file system. A spec from the network is
// untrusted: nodes run this on what the coordinator hands them.
absl::Status ValidateJobSpec(const JobSpec& spec);

// Whether a lost worker's remaining batches go to the workers still training (the parameter-
// server modes bsp, ssp, asp, gossip, and allreduce; worker/work_plan.h).
bool HandsOverBatches(const SyncMode& sync);
// Whether a failed node can be restarted in place, the job rolling back to a checkpoint
// (--max-restarts: bsp, ssp, asp, allreduce, hybrid and synchronous gossip).
bool RollsBackInPlace(const SyncMode& sync);
// The fewest workers the job goes on with: --min-workers, or the mode's default (every worker
// under bsp, ssp:0, fedavg, allreduce and hybrid; 1 under ssp:S with S >= 1, asp and gossip).
int MinWorkers(const JobSpec& spec);
// The most workers the job may have: --max-workers, or --workers when no worker may join.
int MaxWorkers(const JobSpec& spec);
// The most servers, and the most workers, a job may have.
inline constexpr int kMostNodes = 4096;

// Whether the job reads Criteo data: format criteo, a .tsv training file with format auto, or
// (no training file) the synthetic data the launcher generates for the ctr model.
bool UsesCriteoData(const JobSpec& spec);

// Settings that are valid but likely not what the user wants, one line each (the launcher logs
// them as warnings before the job starts).
std::vector<std::string> JobSpecWarnings(const JobSpec& spec);

// The settings a checkpoint's manifest records and --resume compares, as (flag, text) pairs:
// the ones that would make a resumed run differ from the run it continues.
std::vector<std::pair<std::string, std::string>> ManifestEntries(const JobSpec& spec);

// Why an asynchronous gossip job cannot checkpoint or resume.
std::string AsyncGossipCannotCheckpoint(const SyncMode& sync);

// "--flag=value: rule" as an InvalidArgument error.
absl::Status InvalidFlag(absl::string_view flag, absl::string_view value, absl::string_view rule);
// OK when value >= min, else "--flag=value: must be >= min".
absl::Status CheckAtLeast(absl::string_view flag, int64_t value, int64_t min);

}  // namespace syncline

#endif  // SYNCLINE_JOB_JOB_SPEC_H_
