#include "launch/run_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "job/privacy_plan.h"

// RunReport's callbacks and the state they keep; its outputs are in run_report_csv.cc
// (metrics.csv, embedding.csv), run_report_progress.cc (the progress line) and
// run_report_summary.cc (summary.json and the closing text).
namespace syncline {
namespace {

namespace fs = std::filesystem;

// A worker's split from the wire, which is not trusted: a part that is negative or not finite
// counts as 0 seconds, and negative steps as none.
RunReport::StepSplit ReadStepSplit(wire::StepSeconds::Reader s) {
  RunReport::StepSplit split;
  split.steps = std::max<int64_t>(0, s.getSteps());
  const std::array<double, 6> parts = {s.getBatch(),    s.getUpload(),   s.getCompute(),
                                       s.getCompress(), s.getDownload(), s.getNetwork()};
  for (size_t i = 0; i < parts.size(); ++i) {
    split.seconds[i] = std::isfinite(parts[i]) ? std::max(0.0, parts[i]) : 0.0;
  }
  return split;
}

}  // namespace

RunReport::StepSplit& RunReport::StepSplit::operator+=(const StepSplit& other) {
  steps += other.steps;
  for (size_t i = 0; i < seconds.size(); ++i) seconds[i] += other.seconds[i];
  return *this;
}

RunReport::RunReport(const JobSpec& job, std::string out, bool interactive)
    : job_(job),
      privacy_(job.privacy.on() && JobAccountant(job).ok()
                   ? std::optional<RdpAccountant>(*JobAccountant(job))
                   : std::nullopt),
      out_(std::move(out)),
      interactive_(interactive),
      start_(absl::Now()) {}

RunReport::~RunReport() = default;

void RunReport::OnStarted(const NodeTable& table) {
  absl::MutexLock lock(&mu_);
  for (int w = 0; w < table.num_workers; ++w) workers_[w];
}

void RunReport::OnProgress(int worker, wire::Progress::Reader p) {
  absl::MutexLock lock(&mu_);
  WorkerState& w = workers_[worker];
  w.clock = p.getClock();
  if (!w.left) w.total_steps = p.getTotalSteps();
  w.epoch = p.getEpoch();
  w.loss = p.getTrainLoss();
  w.reported_examples += p.getExamples();
  const StepSplit split = ReadStepSplit(p.getStepSeconds());
  if (!w.done) w.split += split;
  // The workers in the job as this row is written: all of them less those lost on the way.
  const int world = static_cast<int>(workers_.size()) - workers_left_;
  metrics_ << absl::StrFormat(
      "%.3f,%d,%d,%d,%.6g,%d,%.3g,%.4g,%d", WallSeconds(metrics_wall_offset_), worker, p.getClock(),
      p.getEpoch(), p.getTrainLoss(), p.getExamples(), p.getStaleness(), p.getConsensus(), world);
  for (double seconds : split.seconds) metrics_ << absl::StrFormat(",%.6g", seconds);
  w.bytes_so_far = p.getBytes();
  metrics_ << absl::StrFormat(",%d,,,,", p.getBytes());
  if (privacy_) metrics_ << absl::StrFormat(",%.6g", privacy_->Spent(p.getClock()).epsilon);
  metrics_ << "\n";
  metrics_.flush();
}

void RunReport::OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader e) {
  absl::MutexLock lock(&mu_);
  uint64_t bytes = 0;
  for (const auto& [rank, w] : workers_) bytes += w.bytes_so_far;
  const double seconds = std::isfinite(e.getSeconds()) ? std::max(0.0, e.getSeconds()) : 0.0;
  evaluation_seconds_ += seconds;
  const int world = static_cast<int>(workers_.size()) - workers_left_;
  metrics_ << absl::StrFormat("%.3f,%d,%d,%d,,,,,%d,,,,,,,%d,%.6g,%.6g,%.6g,%.6g",
                              WallSeconds(metrics_wall_offset_), worker, clock,
                              workers_[worker].epoch, world, bytes, e.getLoss(), e.getAuc(),
                              e.getAccuracy(), seconds);
  if (privacy_) metrics_ << ",";  // (no epsilon: not a step)
  metrics_ << "\n";
  metrics_.flush();
}

void RunReport::OnWorkerDone(int worker, wire::WorkerStats::Reader s) {
  {
    absl::MutexLock lock(&mu_);
    WorkerState& w = workers_[worker];
    w.done = true;
    w.steps = s.getSteps();
    w.steps_trained = s.getStepsTrained() >= 0 ? s.getStepsTrained() : s.getSteps();
    w.examples = s.getExamples();
    examples_in_model_ = std::max(examples_in_model_, s.getExamplesInModel());
    w.bytes_pushed = s.getBytesPushed();
    w.bytes_pulled = s.getBytesPulled();
    w.split = ReadStepSplit(s.getStepSeconds());
    // Untrusted text: at most a short name (JsonString escapes it).
    w.device = std::string(s.getDevice().cStr()).substr(0, 64);
  }
  if (checkpoints_ != nullptr) checkpoints_->OnWorkerGone(worker, s.getSteps());
}

void RunReport::OnEvaluation(int worker, wire::Evaluation::Reader e) {
  // A program of one's own (WorkerSession::Finish without an evaluation) answers with none.
  if (e.getExamples() == 0) return;
  absl::MutexLock lock(&mu_);
  have_evaluation_ = true;
  test_loss_ = e.getLoss();
  test_auc_ = e.getAuc();
  test_accuracy_ = e.getAccuracy();
  test_examples_ = e.getExamples();
}

void RunReport::OnServerStats(int server, wire::ServerStats::Reader s) {
  absl::MutexLock lock(&mu_);
  WriteEmbeddingRow(server, s);  // the final figures, however short the run
  server_requests_ += s.getRequests();
  server_rejected_ += s.getRejected();
  server_bytes_in_ += s.getBytesIn();
  server_bytes_out_ += s.getBytesOut();
  server_bytes_[server] = {s.getBytesIn(), s.getBytesOut()};
  auto hist = s.getStalenessHistogram();
  if (staleness_.size() < hist.size()) staleness_.resize(hist.size(), 0);
  for (size_t i = 0; i < hist.size(); ++i) staleness_[i] += hist[i];
  checkpoint_pause_s_ = std::max(checkpoint_pause_s_, s.getCheckpointPauseSeconds());
  examples_trained_ = std::max(examples_trained_, s.getExamplesTrained());
  for (auto lost : s.getLostWorkers()) {
    int64_t& at = finished_at_[lost.getWorker()];
    at = std::max(at, lost.getClock());
  }
  if (s.getRounds() > 0 && (s.getRoundsShort() > rounds_.short_rounds || rounds_.rounds == 0)) {
    rounds_.rounds = s.getRounds();
    rounds_.short_rounds = s.getRoundsShort();
    rounds_.clients_missing = s.getClientsMissing();
    rounds_.updates_late = s.getUpdatesLate();
    rounds_.which.clear();
    for (int64_t r : s.getShortRounds()) rounds_.which.push_back(r);
  }
  if (s.hasEmbedding()) {
    auto e = s.getEmbedding();
    embedding_.tables += e.getTables();
    embedding_.rows_in_memory += e.getRowsInMemory();
    embedding_.rows_on_disk += e.getRowsOnDisk();
    embedding_.admitted += e.getAdmitted();
    embedding_.rejected += e.getRejected();
    embedding_.expired += e.getExpired();
    embedding_.memory_hits += e.getMemoryHits();
    embedding_.disk_hits += e.getDiskHits();
    embedding_.evictions += e.getEvictions();
    embedding_.memory_bytes += e.getMemoryBytes();
    embedding_.budget_bytes += e.getMemoryBudgetBytes();
  }
}

void RunReport::OnChildExit(const std::string& label, int64_t max_rss_kib) {
  absl::MutexLock lock(&mu_);
  if (max_rss_kib > 0) peak_rss_kib_[label] = max_rss_kib;
}

void RunReport::OnServerProgress(int server, wire::ServerStats::Reader s) {
  absl::MutexLock lock(&mu_);
  WriteEmbeddingRow(server, s);
}

void RunReport::OnNodeDown(wire::Role role, int rank, const std::string& reason) {
  {
    absl::MutexLock lock(&mu_);
    down_.push_back(reason);
    if (role == wire::Role::WORKER) {
      WorkerState& w = workers_[rank];
      if (!w.left && !w.done) {
        w.left = true;
        ++workers_left_;
        w.total_steps = w.clock;  // the rest is the other workers' to train
      }
    }
  }
  if (checkpoints_ != nullptr && role == wire::Role::WORKER) checkpoints_->OnWorkerGone(rank, -1);
}

void RunReport::OnWorkerLeft(int worker, int64_t clock, const std::vector<int>& takers) {
  absl::MutexLock lock(&mu_);
  if (!takers.empty()) handed_from_[worker] = clock;
  world_sizes_.emplace_back(clock, static_cast<int>(workers_.size()) - workers_left_);
}

void RunReport::OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                               const std::vector<int>& donors) {
  absl::MutexLock lock(&mu_);
  joined_[worker] = first_clock;
  WorkerState& w = workers_[worker];
  world_sizes_.emplace_back(first_clock, static_cast<int>(workers_.size()) - workers_left_);
  w.clock = first_clock;
  ClearProgress();
  std::cout << absl::StrFormat("%s joined at clock %d; %s", name, first_clock,
                               donors.empty()
                                   ? "no worker is still training to give it batches"
                                   : absl::StrCat(absl::StrJoin(donors, ", ",
                                                                [](std::string* out, int r) {
                                                                  absl::StrAppend(out, "w", r);
                                                                }),
                                                  " give it a share of their batches"))
            << std::endl;
}

void RunReport::OnCheckpointed(wire::Role role, int rank, int64_t clock,
                               const absl::Status& status) {
  if (checkpoints_ != nullptr) checkpoints_->OnCheckpointed(role, rank, clock, status);
}

void RunReport::OnRollback(wire::Role role, int rank, int64_t clock, const std::string& reason) {
  // On the coordinator's thread, as it starts ignoring the undone timeline's reports: a
  // checkpoint past the clock completed before then is unpublished and written again.
  if (checkpoints_ != nullptr) checkpoints_->OnRollback(clock);
  absl::MutexLock lock(&mu_);
  down_.push_back(reason);
  if (recovering_) return;  // a second failure joins the rollback under way
  recovering_ = true;
  ++rollbacks_;
  rollback_clock_ = clock;
  rollback_reason_ = DataEndpointId(role, rank);
  for (auto& [w, state] : workers_) {
    state.clock = clock;
    state.done = false;
  }
}

void RunReport::OnRecovered(int64_t clock, absl::Duration took, int64_t undone) {
  absl::MutexLock lock(&mu_);
  recovering_ = false;
  steps_undone_ += undone;
  recovery_seconds_.push_back(absl::ToDoubleSeconds(took));
}

void RunReport::OnRestart(const std::string& label) {
  absl::MutexLock lock(&mu_);
  restarted_.push_back(label);
}

RunReport::Clocks RunReport::WorkerClocks() {
  absl::MutexLock lock(&mu_);
  Clocks c;
  bool first = true;
  for (const auto& [rank, w] : workers_) {
    if (w.done && w.steps > 0) {
      c.min_finished_at = c.min_finished_at == 0 ? w.steps : std::min(c.min_finished_at, w.steps);
    }
    // Workers that finished, or have not reported yet (or never will: lost early, or resumed
    // past their last step), do not bound the clock.
    if (w.done || w.total_steps == 0) continue;
    c.max_clock = std::max(c.max_clock, w.clock);
    c.min_total_steps = first ? w.total_steps : std::min(c.min_total_steps, w.total_steps);
    first = false;
  }
  return c;
}

void RunReport::SetCheckpoints(CheckpointTracker* tracker, int64_t resumed_from) {
  checkpoints_ = tracker;
  resumed_from_ = resumed_from;
}

void RunReport::ChildLine(std::string_view label, std::string_view line) {
  absl::MutexLock lock(&mu_);
  ClearProgress();
  std::cerr << "[" << label << "] " << line << "\n";
  auto [it, inserted] = logs_.try_emplace(std::string(label));
  if (inserted) {
    it->second.open(fs::path(out_) / "logs" / (std::string(label) + ".log"), std::ios::trunc);
  }
  // Flushed per line: people (and tests) follow a node with tail -f while the job runs.
  if (it->second) it->second << line << std::endl;
}

}  // namespace syncline
