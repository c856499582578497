#include "worker/worker_checkpoint.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "core/log.h"
#include "worker/sync_backend.h"
#include "worker/trainer.h"
#include "worker/work_plan.h"

namespace syncline {

// Where a resumed worker starts: its saved clock and state, or the checkpoint's clock when
// the checkpoint holds nothing of it (it had finished, or was lost, before). The departures
// of workers that had left are restored from its own state and from the longest list any
// worker's state holds (a leaver's rank has no state: it learns there that it left).
absl::Status RestoreWorker(const std::string& restore, int rank, int workers, SyncBackend& backend,
                           TrainerOptions& trainer) {
  auto manifest = ReadManifest(restore);
  if (!manifest.ok()) return manifest.status();
  const std::string me = absl::StrCat("w", rank);
  // Only a part the manifest lists belongs to this checkpoint (a file of an abandoned attempt
  // may lie next to it). Departures are in the workers' states: the others' are read only when
  // some worker is missing from the checkpoint or this worker's own state names departures
  // (then another's list may be longer).
  // The departures node's state file saved, or DataLoss naming the file.
  const auto departures_of =
      [&](const std::string& node,
          const std::string& plan) -> absl::StatusOr<std::vector<SavedDeparture>> {
    auto departures = WorkPlan::Load(plan, workers);
    if (!departures.ok()) {
      return absl::DataLossError(
          absl::StrCat(restore, "/", node, ".state: ", departures.status().message()));
    }
    return departures;
  };
  const auto read_others = [&]() -> absl::Status {
    for (const std::string& node : manifest->nodes) {
      int r = -1;
      if (!node.starts_with("w") || !absl::SimpleAtoi(node.substr(1), &r) || r == rank) continue;
      auto other = ReadWorkerCheckpoint(restore, r);
      if (!other.ok()) return other.status();
      auto departures = departures_of(node, other->plan);
      if (!departures.ok()) return departures.status();
      if (departures->size() > trainer.all_departures.size()) {
        trainer.all_departures = std::move(*departures);
      }
    }
    return absl::OkStatus();
  };
  const int parts = static_cast<int>(
      std::count_if(manifest->nodes.begin(), manifest->nodes.end(),
                    [](const std::string& node) { return node.starts_with("w"); }));
  const bool some_missing = parts < workers;
  if (std::find(manifest->nodes.begin(), manifest->nodes.end(), me) == manifest->nodes.end()) {
    if (auto s = read_others(); !s.ok()) return s;
    trainer.start_step = manifest->clock;
    SYNCLINE_LOG(WARNING) << "no saved state for this worker in " << restore
                          << "; starting at clock " << manifest->clock;
    return absl::OkStatus();
  }
  auto saved = ReadWorkerCheckpoint(restore, rank);
  if (!saved.ok()) return saved.status();
  if (auto s = backend.RestoreState(saved->state); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat(restore, "/", me, ".state: ", s.message()));
  }
  auto own = departures_of(me, saved->plan);
  if (!own.ok()) return own.status();
  trainer.restored_departures = std::move(*own);
  if (some_missing || !trainer.restored_departures.empty()) {
    if (auto s = read_others(); !s.ok()) return s;
  }
  if (trainer.restored_departures.size() > trainer.all_departures.size()) {
    trainer.all_departures = trainer.restored_departures;
  }
  trainer.start_step = saved->clock;
  SYNCLINE_LOG(INFO) << "resuming at clock " << saved->clock << " from " << restore
                     << (trainer.all_departures.empty()
                             ? std::string()
                             : absl::StrFormat(" (%d worker%s had left)",
                                               trainer.all_departures.size(),
                                               trainer.all_departures.size() == 1 ? "" : "s"));
  return absl::OkStatus();
}

}  // namespace syncline
