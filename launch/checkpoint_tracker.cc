#include "launch/checkpoint_tracker.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "core/log.h"

namespace syncline {

CheckpointTracker::CheckpointTracker(CheckpointTrackerOptions options)
    : options_(std::move(options)) {}

void CheckpointTracker::OnCheckpointed(wire::Role role, int rank, int64_t clock,
                                       const absl::Status& status) {
  absl::MutexLock lock(&mu_);
  Pending& p = pending_[clock];
  if (!status.ok()) {
    SYNCLINE_LOG(ERROR) << "checkpoint " << clock
                        << " is incomplete: " << (role == wire::Role::SERVER ? "ps" : "w") << rank
                        << " could not write its part: " << status;
    p.failed = true;
    return;
  }
  (role == wire::Role::SERVER ? p.servers : p.workers).insert(rank);
  MaybeComplete(clock);
}

void CheckpointTracker::OnWorkerGone(int rank, int64_t steps) {
  absl::MutexLock lock(&mu_);
  gone_[rank] = steps;
  std::vector<int64_t> clocks;
  for (const auto& [clock, p] : pending_) clocks.push_back(clock);
  for (int64_t clock : clocks) MaybeComplete(clock);
}

void CheckpointTracker::MaybeComplete(int64_t clock) {
  auto it = pending_.find(clock);
  if (it == pending_.end() || it->second.failed) return;
  const Pending& p = it->second;
  if (static_cast<int>(p.servers.size()) < options_.servers) return;
  for (int w = 0; w < options_.workers; ++w) {
    if (p.workers.count(w)) continue;
    auto gone = gone_.find(w);
    // A worker still training holds the checkpoint back; one that finished before this clock
    // or was lost (ASP/SSP go on without it) never writes its part, and a resumed job starts
    // it at the checkpoint's clock without saved state.
    if (gone == gone_.end() || (gone->second >= clock)) return;
  }
  Manifest manifest;
  manifest.clock = clock;
  manifest.unix_seconds = absl::ToUnixSeconds(absl::Now());
  for (int s = 0; s < options_.servers; ++s) manifest.nodes.push_back(absl::StrCat("ps", s));
  for (int w : p.workers) manifest.nodes.push_back(absl::StrCat("w", w));
  manifest.job = options_.job;
  manifest.job.emplace_back("servers", absl::StrCat(options_.servers));
  manifest.job.emplace_back("workers", absl::StrCat(options_.workers));
  const std::string dir = CheckpointDir(options_.root, clock);
  if (auto s = WriteManifest(dir, manifest); !s.ok()) {
    SYNCLINE_LOG(ERROR) << "checkpoint " << clock << ": cannot write the manifest: " << s;
    pending_.erase(it);
    return;
  }
  ++written_;
  last_clock_ = std::max(last_clock_, clock);
  pending_.erase(it);
  SYNCLINE_LOG(INFO) << "checkpoint " << clock << " complete: " << dir;
  auto pruned = PruneCheckpoints(options_.root, options_.keep);
  if (!pruned.ok()) SYNCLINE_LOG(WARNING) << "pruning old checkpoints: " << pruned.status();
}

int CheckpointTracker::checkpoints_written() const {
  absl::MutexLock lock(&mu_);
  return written_;
}

int64_t CheckpointTracker::last_clock() const {
  absl::MutexLock lock(&mu_);
  return last_clock_;
}

}  // namespace syncline
