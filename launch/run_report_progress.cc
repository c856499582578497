// RunReport's live progress line: redrawn in place on a terminal, a line now and then in a log.
#include <algorithm>
#include <iostream>

#include "absl/strings/str_format.h"
#include "job/job_spec.h"
#include "job/options.h"
#include "launch/run_report.h"

namespace syncline {

void RunReport::ClearProgress() {
  if (interactive_ && progress_shown_) {
    std::cerr << "\r\033[K";
    progress_shown_ = false;
  }
}

std::string RunReport::ProgressText(absl::Duration elapsed) {
  int64_t done = 0, total = 0;
  double loss = 0;
  int reporting = 0, epoch = 0;
  for (const auto& [rank, w] : workers_) {
    done += w.clock;
    total += w.total_steps;
    epoch = std::max(epoch, w.epoch);
    if (w.clock > 0) {
      loss += w.loss;
      ++reporting;
    }
  }
  const double seconds = absl::ToDoubleSeconds(elapsed);
  std::string text = absl::StrFormat("[%s] %.1fs", SyncModeName(job_.sync), seconds);
  if (total > 0 && job_.sync.fedavg()) {
    // Clients report the rounds they trained in: the furthest one is where the job is.
    int64_t round = 0;
    for (const auto& [rank, w] : workers_) round = std::max(round, w.clock);
    const int rounds = job_.federated.rounds;
    const double rate = seconds > 0 ? round / seconds : 0;
    text += absl::StrFormat("  round %d/%d (%.0f%%)", round, rounds, 100.0 * round / rounds);
    if (reporting > 0) text += absl::StrFormat("  train loss %.4f", loss / reporting);
    if (rate > 0 && round < rounds) text += absl::StrFormat("  ETA %.0fs", (rounds - round) / rate);
  } else if (total > 0) {
    const double rate = seconds > 0 ? done / seconds : 0;
    text += absl::StrFormat("  epoch %d/%d  steps %d/%d (%.0f%%)  %.0f steps/s", epoch,
                            job_.training.epochs, done, total, 100.0 * done / total, rate);
    if (reporting > 0) text += absl::StrFormat("  train loss %.4f", loss / reporting);
    if (rate > 0 && done < total) text += absl::StrFormat("  ETA %.0fs", (total - done) / rate);
  } else {
    text += "  starting...";
  }
  if (recovering_) {
    text += absl::StrFormat("  recovering: %s restarted, rolling back to checkpoint %d",
                            rollback_reason_, rollback_clock_);
  } else if (rollbacks_ > 0) {
    text += absl::StrFormat("  (%d rollback%s)", rollbacks_, rollbacks_ == 1 ? "" : "s");
  }
  if (workers_left_ > 0) {
    text += absl::StrFormat("  %d of %d workers (%d lost%s)",
                            static_cast<int>(workers_.size()) - workers_left_, workers_.size(),
                            workers_left_,
                            HandsOverBatches(job_.sync) ? ", their batches handed over" : "");
  }
  return text;
}

void RunReport::DrawProgress(absl::Duration elapsed) {
  absl::MutexLock lock(&mu_);
  if (interactive_) {
    std::cerr << "\r\033[K" << ProgressText(elapsed) << std::flush;
    progress_shown_ = true;
  } else if (absl::Now() - last_log_line_ >= absl::Seconds(5)) {
    std::cerr << ProgressText(elapsed) << "\n";
    last_log_line_ = absl::Now();
  }
}

void RunReport::EndProgress() {
  absl::MutexLock lock(&mu_);
  ClearProgress();
}
}  // namespace syncline
