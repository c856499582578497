// A worker's part of a checkpoint: the file w<R>.state (its clock and its state: a sync backend's,
// e.g. error-feedback residuals, or a user's program's) and its receipt, in the checkpoint folder
// of that clock.
//
// File: magic "SYWS" | version u32 (2) | clock i64 | state length u64 | state | plan length
// u64 | plan | CRC32C u32 of everything before it. Host byte order (little-endian here).
// Version 1 (no plan) is still read.
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_CHECKPOINT_WORKER_PART_H_
#define SYNCLINE_CHECKPOINT_WORKER_PART_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

struct WorkerCheckpoint {
  int64_t clock = 0;
  std::string state;  // SyncBackend::SaveState(), or a user program's own
  std::string plan;   // WorkPlan::Save(): the departures and arrivals this worker had heard
};

// Writes CheckpointDir(root, clock)/w<rank>.state atomically, then the receipt "w<rank>".
absl::Status WriteWorkerCheckpoint(const std::string& root, int rank,
                                   const WorkerCheckpoint& checkpoint);

// Reads w<rank>.state from a checkpoint folder; DataLoss naming the file when it is damaged.
absl::StatusOr<WorkerCheckpoint> ReadWorkerCheckpoint(const std::string& checkpoint_dir, int rank);

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_WORKER_PART_H_
