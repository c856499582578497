// A worker's part of a checkpoint: the file w<R>.state (its clock and its backend's state,
// e.g. error-feedback residuals) and its receipt, in the checkpoint folder of that clock.
//
// File: magic "SYWS" | version u32 (2) | clock i64 | state length u64 | state | plan length
// u64 | plan | CRC32C u32 of everything before it. Host byte order (little-endian here).
// Version 1 (no plan) is still read.
//
// RestoreWorker resumes a worker from such a checkpoint.
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_WORKER_WORKER_CHECKPOINT_H_
#define SYNCLINE_WORKER_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

class SyncBackend;
struct TrainerOptions;

struct WorkerCheckpoint {
  int64_t clock = 0;
  std::string state;  // SyncBackend::SaveState()
  std::string plan;   // WorkPlan::Save(): the departures and arrivals this worker had heard
};

// Writes CheckpointDir(root, clock)/w<rank>.state atomically, then the receipt "w<rank>".
absl::Status WriteWorkerCheckpoint(const std::string& root, int rank,
                                   const WorkerCheckpoint& checkpoint);

// Reads w<rank>.state from a checkpoint folder; DataLoss naming the file when it is damaged.
absl::StatusOr<WorkerCheckpoint> ReadWorkerCheckpoint(const std::string& checkpoint_dir, int rank);

// Resumes worker `rank` from the checkpoint folder `restore`: `backend` takes its saved state,
// `trainer` its start step and departures. Where a resumed worker starts: its saved clock and
// state, or the checkpoint's clock when the checkpoint holds nothing of it (it had finished, or was
// lost, before). The departures of workers that had left are restored from its own state and from
// the longest list any worker's state holds (a leaver's rank has no state: it learns there that it
// left). Errors name the file.
absl::Status RestoreWorker(const std::string& restore, int rank, int workers, SyncBackend& backend,
                           TrainerOptions& trainer);

}  // namespace syncline

#endif  // SYNCLINE_WORKER_WORKER_CHECKPOINT_H_
