#include "launch/checkpoint_tracker.h"

#include <algorithm>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "core/log.h"

namespace syncline {

CheckpointTracker::CheckpointTracker(CheckpointTrackerOptions options)
    : options_(std::move(options)), thread_([this] { Loop(); }) {}

CheckpointTracker::~CheckpointTracker() {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
    for (const auto& [clock, p] : pending_) {
      if (p.failed) continue;
      std::vector<std::string> missing;
      for (int s = 0; s < options_.servers; ++s) {
        if (!p.servers.contains(s)) missing.push_back(absl::StrCat("ps", s));
      }
      for (int w = 0; w < options_.workers; ++w) {
        if (!p.workers.contains(w)) missing.push_back(absl::StrCat("w", w));
      }
      SYNCLINE_LOG(WARNING) << "checkpoint " << clock << " was left incomplete: no part from "
                            << absl::StrJoin(missing, ", ");
    }
  }
  cv_.notify_all();
  thread_.join();
}

void CheckpointTracker::OnCheckpointed(wire::Role role, int rank, int64_t clock,
                                       const absl::Status& status) {
  std::lock_guard lock(mu_);
  if (completed_.contains(clock) || failed_.contains(clock)) return;
  Pending& p = pending_[clock];
  std::set<int>& parts = role == wire::Role::SERVER ? p.servers : p.workers;
  if (!status.ok()) {
    if (parts.contains(rank)) return;  // this node has written it after all (a periodic one)
    // A request the workers outran is expected now and then (the next one tries again); a
    // write that failed is not.
    const std::string what = absl::StrCat(
        "checkpoint ", clock, " is incomplete: ", role == wire::Role::SERVER ? "ps" : "w", rank,
        ": ", status.ToString());
    if (absl::IsFailedPrecondition(status)) {
      SYNCLINE_LOG(WARNING) << what;
    } else {
      SYNCLINE_LOG(ERROR) << what;
      CountFailure(what);
    }
    pending_.erase(clock);
    failed_.insert(clock);
    return;
  }
  parts.insert(rank);
  MaybeComplete(clock);
}

void CheckpointTracker::OnWorkerGone(int rank, int64_t steps) {
  std::lock_guard lock(mu_);
  gone_[rank] = steps;
  std::vector<int64_t> clocks;
  for (const auto& [clock, p] : pending_) clocks.push_back(clock);
  for (int64_t clock : clocks) MaybeComplete(clock);
}

void CheckpointTracker::MaybeComplete(int64_t clock) {
  auto it = pending_.find(clock);
  if (it == pending_.end()) return;
  const Pending& p = it->second;
  if (static_cast<int>(p.servers.size()) < options_.servers) return;
  for (int w = 0; w < options_.workers; ++w) {
    if (p.workers.contains(w)) continue;
    auto gone = gone_.find(w);
    // A worker still training holds the checkpoint back; one that finished before this clock
    // or was lost (ASP/SSP go on without it) never writes its part, and a resumed job starts
    // it at the checkpoint's clock without saved state.
    if (gone == gone_.end() || gone->second >= clock) return;
  }
  std::vector<std::string> nodes;
  for (int s = 0; s < options_.servers; ++s) nodes.push_back(absl::StrCat("ps", s));
  for (int w : p.workers) nodes.push_back(absl::StrCat("w", w));
  pending_.erase(it);
  completed_.insert(clock);
  to_write_.emplace_back(clock, std::move(nodes));
  cv_.notify_all();
}

void CheckpointTracker::OnRollback(int64_t clock) {
  std::vector<int64_t> unpublish;
  {
    std::lock_guard lock(mu_);
    pending_.erase(pending_.upper_bound(clock), pending_.end());
    failed_.erase(failed_.upper_bound(clock), failed_.end());
    unpublish.assign(completed_.upper_bound(clock), completed_.end());
    completed_.erase(completed_.upper_bound(clock), completed_.end());
    std::erase_if(to_write_, [&](const auto& w) { return w.first > clock; });
    last_clock_ = std::min(last_clock_, clock);
  }
  cv_.notify_all();  // a Flush waiting for a manifest taken off the queue
  // A checkpoint completed past the clock will have its parts written again on the new
  // timeline: it must not be visible while they are (a manifest being written now is removed
  // by WriteManifest itself).
  for (int64_t c : unpublish) {
    std::error_code ec;
    std::filesystem::remove(std::filesystem::path(CheckpointDir(options_.root, c)) / "MANIFEST",
                            ec);
    SYNCLINE_LOG(WARNING) << "checkpoint " << c << " is past the rollback to " << clock
                          << ": unpublished, to be written again";
  }
}

bool CheckpointTracker::Resolved(int64_t clock) const {
  std::lock_guard lock(mu_);
  return completed_.contains(clock) || failed_.contains(clock);
}

void CheckpointTracker::Flush() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return to_write_.empty() && !writing_; });
}

void CheckpointTracker::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !to_write_.empty(); });
    if (to_write_.empty()) return;
    auto [clock, nodes] = std::move(to_write_.front());
    to_write_.pop_front();
    writing_ = true;
    lock.unlock();
    WriteManifest(clock, std::move(nodes));
    lock.lock();
    writing_ = false;
    cv_.notify_all();
  }
}

void CheckpointTracker::WriteManifest(int64_t clock, std::vector<std::string> nodes) {
  Manifest manifest;
  manifest.clock = clock;
  manifest.unix_seconds = absl::ToUnixSeconds(absl::Now());
  manifest.nodes = std::move(nodes);
  manifest.job = options_.job;
  manifest.job.emplace_back("servers", absl::StrCat(options_.servers));
  manifest.job.emplace_back("workers", absl::StrCat(options_.workers));
  const std::string dir = CheckpointDir(options_.root, clock);
  if (auto s = syncline::WriteManifest(dir, manifest); !s.ok()) {
    const std::string what =
        absl::StrCat("checkpoint ", clock, ": cannot write the manifest: ", s.ToString());
    SYNCLINE_LOG(ERROR) << what;
    std::lock_guard lock(mu_);
    CountFailure(what);
    return;
  }
  {
    std::lock_guard lock(mu_);
    if (!completed_.contains(clock)) {
      // Unpublished by a rollback while it was written.
      std::error_code ec;
      std::filesystem::remove(std::filesystem::path(dir) / "MANIFEST", ec);
      return;
    }
    ++written_;
    last_clock_ = std::max(last_clock_, clock);
  }
  SYNCLINE_LOG(INFO) << "checkpoint " << clock << " complete: " << dir;
  auto pruned = PruneCheckpoints(options_.root, options_.keep);
  if (!pruned.ok()) SYNCLINE_LOG(WARNING) << "pruning old checkpoints: " << pruned.status();
}

int CheckpointTracker::checkpoints_written() const {
  std::lock_guard lock(mu_);
  return written_;
}

void CheckpointTracker::CountFailure(const std::string& what) {
  if (failed_writes_++ == 0) first_failure_ = what;
}

int CheckpointTracker::checkpoints_failed() const {
  std::lock_guard lock(mu_);
  return failed_writes_;
}

absl::Status CheckpointTracker::Verdict() const {
  std::lock_guard lock(mu_);
  if (failed_writes_ == 0 || written_ > 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "every checkpoint failed (", failed_writes_,
      " failed, none written), so there is none to resume from; the first: ", first_failure_));
}

int64_t CheckpointTracker::last_clock() const {
  std::lock_guard lock(mu_);
  return last_clock_;
}

}  // namespace syncline
