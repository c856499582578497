// RestoreWorker resumes a worker from its part of a checkpoint (checkpoint/worker_part.h).
//
// Thread-safety: stateless functions.
#ifndef SYNCLINE_WORKER_WORKER_CHECKPOINT_H_
#define SYNCLINE_WORKER_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/worker_part.h"

namespace syncline {

class SyncBackend;
struct TrainerOptions;

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
