#include "launch/run_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "job/job_spec.h"
#include "job/options.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.6g", v);
}

// The parts of a step, as summary.json names them; metrics.csv's columns add "_s".
constexpr std::array<const char*, 6> kStepParts = {"batch",    "upload",   "compute",
                                                   "compress", "download", "network"};

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

// `split` as a JSON object's members: "batch": 0.1, "upload": 0, ... (each divided by `per`).
std::string StepSplitJson(const RunReport::StepSplit& split, double per) {
  std::string out;
  for (size_t i = 0; i < kStepParts.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", JsonString(kStepParts[i]), ": ",
                    JsonNumber(per > 0 ? split.seconds[i] / per : 0.0));
  }
  return out;
}

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  return absl::StrFormat("%.1f %s", b, units[u]);
}

}  // namespace

RunReport::StepSplit& RunReport::StepSplit::operator+=(const StepSplit& other) {
  steps += other.steps;
  for (size_t i = 0; i < seconds.size(); ++i) seconds[i] += other.seconds[i];
  return *this;
}

RunReport::RunReport(const JobSpec& job, std::string out, bool interactive)
    : job_(job), out_(std::move(out)), interactive_(interactive), start_(absl::Now()) {}

RunReport::~RunReport() = default;

absl::Status RunReport::Open() {
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  fs::create_directories(fs::path(out_) / "logs", ec);
  const std::string path = (fs::path(out_) / "metrics.csv").string();
  std::string header =
      "wall_seconds,worker,clock,epoch,train_loss,examples,staleness,consensus,world_size";
  for (const char* part : kStepParts) absl::StrAppend(&header, ",", part, "_s");
  metrics_wall_offset_ = OpenCsv(path, header, metrics_, /*clock_column=*/2);
  if (ec || !metrics_) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

double RunReport::OpenCsv(const std::string& path, const std::string& header, std::ofstream& out,
                          int clock_column) {
  std::error_code ec;
  const bool append = resumed_from_ >= 0 && fs::file_size(path, ec) > 0 && !ec;
  double last_wall = 0;
  if (append) {
    std::ifstream in(path);
    std::string line, kept;
    size_t missing = 0;  // columns that `header` adds to the file's
    if (std::getline(in, line)) {
      if (line != header && header.starts_with(line + ",")) {
        missing = std::count(header.begin() + line.size(), header.end(), ',');
        line = header;
      }
      kept = line + "\n";
    }
    while (std::getline(in, line)) {
      const std::vector<absl::string_view> f = absl::StrSplit(line, ',');
      double wall = 0;
      int64_t clock = 0;
      if (in.eof() || !absl::SimpleAtod(f[0], &wall) ||
          (clock_column >= 0 && (f.size() <= static_cast<size_t>(clock_column) ||
                                 !absl::SimpleAtoi(f[clock_column], &clock)))) {
        continue;  // unreadable, or the last line without its newline: cut short
      }
      last_wall = std::max(last_wall, wall);
      if (clock_column < 0 || clock <= resumed_from_) {
        kept += line + std::string(missing, ',') + "\n";
      }
    }
    in.close();
    // Replaced whole (a crash leaves the old file or the new one), or, where that fails,
    // rewritten in place: never appended to unfiltered.
    const std::string temp = path + ".tmp";
    std::ofstream rewrite(temp, std::ios::trunc);
    rewrite << kept;
    rewrite.close();
    bool replaced = false;
    if (rewrite) {
      fs::rename(temp, path, ec);
      replaced = !ec;
    }
    if (!replaced) {
      fs::remove(temp, ec);
      out.open(path, std::ios::trunc);
      out << kept;
      out.flush();
      return last_wall;
    }
  }
  out.open(path, append ? std::ios::app : std::ios::trunc);
  if (!append) out << header << "\n";
  out.flush();
  return last_wall;
}

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
    w.bytes_pushed = s.getBytesPushed();
    w.bytes_pulled = s.getBytesPulled();
    w.split = ReadStepSplit(s.getStepSeconds());
    // Untrusted text: at most a short name (JsonString escapes it).
    w.device = std::string(s.getDevice().cStr()).substr(0, 64);
  }
  if (checkpoints_ != nullptr) checkpoints_->OnWorkerGone(worker, s.getSteps());
}

void RunReport::OnEvaluation(int worker, wire::Evaluation::Reader e) {
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

void RunReport::WriteEmbeddingRow(int server, wire::ServerStats::Reader s) {
  if (!s.hasEmbedding()) return;
  if (!embedding_csv_.is_open()) {
    embedding_wall_offset_ =
        OpenCsv((fs::path(out_) / "embedding.csv").string(),
                "wall_seconds,server,rows_in_memory,rows_on_disk,admitted,rejected,expired,"
                "evictions,memory_hit_rate,memory_bytes",
                embedding_csv_);
  }
  auto e = s.getEmbedding();
  const uint64_t touches = e.getMemoryHits() + e.getDiskHits();
  embedding_csv_ << absl::StrFormat(
      "%.3f,%d,%d,%d,%d,%d,%d,%d,%.6f,%d\n", WallSeconds(embedding_wall_offset_), server,
      e.getRowsInMemory(), e.getRowsOnDisk(), e.getAdmitted(), e.getRejected(), e.getExpired(),
      e.getEvictions(), touches ? static_cast<double>(e.getMemoryHits()) / touches : 1.0,
      e.getMemoryBytes());
  embedding_csv_.flush();
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
}

void RunReport::OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                               const std::vector<int>& donors) {
  absl::MutexLock lock(&mu_);
  joined_[worker] = first_clock;
  WorkerState& w = workers_[worker];
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

void RunReport::ClearProgress() {
  if (interactive_ && progress_shown_) {
    std::cerr << "\r\033[K";
    progress_shown_ = false;
  }
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

absl::Status RunReport::WriteSummary(absl::Duration wall, const std::string& failure,
                                     const std::string& status) {
  absl::MutexLock lock(&mu_);
  int64_t steps = 0, max_steps = 0;
  uint64_t pushed = 0, pulled = 0, examples = 0;
  double final_loss = 0;
  int reporting = 0;
  for (const auto& [rank, w] : workers_) {
    steps += w.steps_trained;
    max_steps = std::max(max_steps, w.steps);
    pushed += w.bytes_pushed;
    pulled += w.bytes_pulled;
    examples += w.examples;
    if (w.clock > 0) {
      final_loss += w.loss;
      ++reporting;
    }
  }
  uint64_t reads = 0, sum = 0;
  int64_t max_staleness = 0;
  for (size_t i = 0; i < staleness_.size(); ++i) {
    reads += staleness_[i];
    sum += staleness_[i] * i;
    if (staleness_[i] > 0) max_staleness = static_cast<int64_t>(i);
  }
  std::ostringstream j;
  j << "{\n";
  j << "  \"status\": "
    << JsonString(!status.empty()   ? status
                  : failure.empty() ? "ok"
                                    : "failed")
    << ",\n";
  if (!failure.empty()) j << "  \"error\": " << JsonString(failure) << ",\n";
  j << "  \"sync\": " << JsonString(SyncModeName(job_.sync)) << ",\n";
  j << "  \"servers\": " << job_.servers << ",\n";
  j << "  \"workers\": " << job_.workers << ",\n";
  j << "  \"model\": " << JsonString(ModelName(job_.model.kind)) << ",\n";
  if (!job_.model.hidden.empty()) {
    j << "  \"hidden\": " << JsonString(HiddenName(job_.model.hidden)) << ",\n";
  }
  j << "  \"device_requested\": " << JsonString(DeviceName(job_.device)) << ",\n";
  // Where the workers that finished computed, as they said: "cpu", "cuda:0", or the devices of
  // a mixed job, sorted ("cpu,cuda:0"); "cpu" when none said (workers of an older build).
  if (failure.empty()) {
    std::set<std::string> devices;
    for (const auto& [rank, w] : workers_) {
      if (!w.device.empty()) devices.insert(w.device);
    }
    j << "  \"device\": " << JsonString(devices.empty() ? "cpu" : absl::StrJoin(devices, ","))
      << ",\n";
  }
  j << "  \"optimizer\": " << JsonString(OptimizerName(job_.training.optimizer)) << ",\n";
  j << "  \"learning_rate\": " << JsonNumber(job_.training.learning_rate) << ",\n";
  j << "  \"batch_size\": " << job_.training.batch_size << ",\n";
  j << "  \"seed\": " << job_.seed << ",\n";
  j << "  \"train\": " << JsonString(job_.data.train) << ",\n";
  j << "  \"test\": " << JsonString(job_.data.test) << ",\n";
  j << "  \"epochs\": " << job_.training.epochs << ",\n";
  j << "  \"steps\": " << steps << ",\n";
  j << "  \"steps_per_worker\": " << max_steps << ",\n";
  j << "  \"examples\": " << examples << ",\n";
  // Examples of the iterations finished, as the servers counted them (the lost workers' too).
  // Without servers the workers count them: a lost worker's up to its last progress report.
  double trained = examples_trained_;
  if (job_.servers == 0) {
    trained = 0;
    for (const auto& [rank, w] : workers_) {
      trained += static_cast<double>(w.done ? w.examples : w.reported_examples);
    }
  }
  j << "  \"examples_trained\": " << JsonNumber(trained) << ",\n";
  j << "  \"workers_left\": " << workers_left_ << ",\n";
  // Iterations trained twice: those a lost worker finished after the clock its batches were
  // handed over from (its last heartbeat).
  int64_t redone = 0;
  for (const auto& [worker, from] : handed_from_) {
    if (auto it = finished_at_.find(worker); it != finished_at_.end()) {
      redone += std::max<int64_t>(0, it->second - from);
    }
  }
  // ...and the iterations rollbacks undid (the fastest worker's clock less the checkpoint's).
  j << "  \"steps_redone\": " << redone + steps_undone_ << ",\n";
  const int workers_joined = static_cast<int>(joined_.size()) +
                             static_cast<int>(std::count_if(
                                 restarted_.begin(), restarted_.end(),
                                 [](const std::string& label) { return label.starts_with("w"); }));
  j << "  \"restarts\": " << restarted_.size() << ",\n";
  j << "  \"rollbacks\": " << rollbacks_ << ",\n";
  // Workers that joined the running job: by themselves (--join), and replacements of failed
  // ones.
  j << "  \"workers_joined\": " << workers_joined << ",\n";
  j << "  \"recovery_seconds\": [";
  for (size_t i = 0; i < recovery_seconds_.size(); ++i) {
    j << (i ? ", " : "") << JsonNumber(recovery_seconds_[i]);
  }
  j << "],\n";
  j << "  \"wall_seconds\": " << JsonNumber(absl::ToDoubleSeconds(wall)) << ",\n";
  j << "  \"train_loss\": " << (reporting ? JsonNumber(final_loss / reporting) : "null") << ",\n";
  j << "  \"test_examples\": " << test_examples_ << ",\n";
  j << "  \"test_loss\": " << (have_evaluation_ ? JsonNumber(test_loss_) : "null") << ",\n";
  // AUC is the binary models' (softmax and mlp give class probabilities, even for 2).
  if (job_.model.kind == ModelKind::kLogreg || job_.model.kind == ModelKind::kCtr) {
    j << "  \"test_auc\": " << (have_evaluation_ ? JsonNumber(test_auc_) : "null") << ",\n";
  }
  j << "  \"test_accuracy\": " << (have_evaluation_ ? JsonNumber(test_accuracy_) : "null") << ",\n";
  j << "  \"bytes_pushed\": " << pushed << ",\n";
  j << "  \"bytes_pulled\": " << pulled << ",\n";
  j << "  \"bytes_pushed_per_worker_step\": "
    << JsonNumber(steps > 0 ? static_cast<double>(pushed) / steps : 0.0) << ",\n";
  // Every byte the workers moved, and what one worker and the busiest server moved: the
  // figures compression is judged by.
  j << "  \"bytes_all\": " << pushed + pulled << ",\n";
  const double per_worker = workers_.empty() ? 0.0 : 1.0 / workers_.size();
  j << "  \"bytes_per_worker\": {\"pushed\": " << JsonNumber(pushed * per_worker)
    << ", \"pulled\": " << JsonNumber(pulled * per_worker)
    << ", \"all\": " << JsonNumber((pushed + pulled) * per_worker) << "},\n";
  if (!server_bytes_.empty()) {
    const auto busiest = std::max_element(
        server_bytes_.begin(), server_bytes_.end(), [](const auto& a, const auto& b) {
          return a.second.first + a.second.second < b.second.first + b.second.second;
        });
    j << "  \"busiest_server\": {\"server\": " << busiest->first
      << ", \"bytes_in\": " << busiest->second.first
      << ", \"bytes_out\": " << busiest->second.second
      << ", \"bytes_all\": " << busiest->second.first + busiest->second.second << "},\n";
  }
  j << "  \"server_bytes_in\": " << server_bytes_in_ << ",\n";
  j << "  \"server_bytes_out\": " << server_bytes_out_ << ",\n";
  j << "  \"server_requests\": " << server_requests_ << ",\n";
  j << "  \"server_rejected\": " << server_rejected_ << ",\n";
  j << "  \"max_staleness_served\": " << max_staleness << ",\n";
  j << "  \"mean_staleness_served\": " << JsonNumber(reads ? static_cast<double>(sum) / reads : 0.0)
    << ",\n";
  if (embedding_.tables > 0) {
    const EmbeddingTotals& e = embedding_;
    const uint64_t touches = e.memory_hits + e.disk_hits;
    j << "  \"embedding\": {\"tables\": " << e.tables
      << ", \"rows_in_memory\": " << e.rows_in_memory << ", \"rows_on_disk\": " << e.rows_on_disk
      << ", \"admitted\": " << e.admitted << ", \"rejected\": " << e.rejected
      << ", \"expired\": " << e.expired << ", \"evictions\": " << e.evictions
      << ", \"memory_hit_rate\": "
      << JsonNumber(touches ? static_cast<double>(e.memory_hits) / touches : 1.0)
      << ", \"memory_bytes\": " << e.memory_bytes << ", \"memory_budget_bytes\": " << e.budget_bytes
      << "},\n";
  }
  // Where the workers' iterations went: seconds per iteration by part, over the iterations of
  // every worker (a finished worker's last run, a lost one's reports), and each worker's
  // totals with the device it computed on.
  StepSplit all_split;
  for (const auto& [rank, w] : workers_) all_split += w.split;
  j << "  \"step_seconds\": {" << StepSplitJson(all_split, static_cast<double>(all_split.steps))
    << "},\n";
  j << "  \"worker_step_seconds\": {";
  bool first_worker = true;
  for (const auto& [rank, w] : workers_) {
    j << (first_worker ? "" : ", ") << JsonString(absl::StrCat("w", rank)) << ": {";
    if (!w.device.empty()) j << "\"device\": " << JsonString(w.device) << ", ";
    j << "\"steps\": " << w.split.steps << ", " << StepSplitJson(w.split, 1) << "}";
    first_worker = false;
  }
  j << "},\n";
  j << "  \"peak_rss_mib\": {";
  bool first_rss = true;
  for (const auto& [label, kib] : peak_rss_kib_) {
    j << (first_rss ? "" : ", ") << JsonString(label) << ": " << JsonNumber(kib / 1024.0);
    first_rss = false;
  }
  j << "},\n";
  j << "  \"resumed_from_clock\": " << (resumed_from_ >= 0 ? std::to_string(resumed_from_) : "null")
    << ",\n";
  if (checkpoints_ != nullptr) {
    const int64_t last = checkpoints_->last_clock();
    j << "  \"checkpoints_written\": " << checkpoints_->checkpoints_written() << ",\n";
    j << "  \"checkpoints_failed\": " << checkpoints_->checkpoints_failed() << ",\n";
    j << "  \"last_checkpoint_clock\": " << (last >= 0 ? std::to_string(last) : "null") << ",\n";
    j << "  \"checkpoint_pause_seconds\": " << JsonNumber(checkpoint_pause_s_) << ",\n";
  }
  if (rounds_.rounds > 0) {
    j << "  \"rounds\": {\"closed\": " << rounds_.rounds << ", \"short\": " << rounds_.short_rounds
      << ", \"clients_missing\": " << rounds_.clients_missing
      << ", \"updates_late\": " << rounds_.updates_late << ", \"short_rounds\": [";
    for (size_t i = 0; i < rounds_.which.size(); ++i) j << (i ? ", " : "") << rounds_.which[i];
    j << "]},\n";
  }
  j << "  \"nodes_down\": [";
  for (size_t i = 0; i < down_.size(); ++i) j << (i ? ", " : "") << JsonString(down_[i]);
  j << "]\n}\n";
  const std::string path = (fs::path(out_) / "summary.json").string();
  std::ofstream out(path, std::ios::trunc);
  out << j.str();
  if (!out) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path));
  return absl::OkStatus();
}

std::string RunReport::SummaryText(absl::Duration wall) {
  absl::MutexLock lock(&mu_);
  int64_t steps = 0;
  uint64_t pushed = 0, pulled = 0;
  for (const auto& [rank, w] : workers_) {
    steps += w.steps_trained;
    pushed += w.bytes_pushed;
    pulled += w.bytes_pulled;
  }
  std::string s = absl::StrFormat(
      "Syncline run finished: %s, %d servers, %d workers, model %s\n"
      "  %d steps in %.2f s (%.0f steps/s)\n"
      "  pushed %s, pulled %s\n",
      SyncModeName(job_.sync), job_.servers, job_.workers, ModelName(job_.model.kind), steps,
      absl::ToDoubleSeconds(wall), steps / std::max(1e-9, absl::ToDoubleSeconds(wall)),
      HumanBytes(pushed), HumanBytes(pulled));
  if (have_evaluation_) {
    s += absl::StrFormat("  test: %d examples, loss %.4f", test_examples_, test_loss_);
    if (test_auc_ >= 0) s += absl::StrFormat(", AUC %.4f", test_auc_);
    if (test_accuracy_ >= 0) s += absl::StrFormat(", accuracy %.4f", test_accuracy_);
    s += "\n";
  }
  if (!restarted_.empty()) {
    std::vector<std::string> took;
    for (double t : recovery_seconds_) took.push_back(absl::StrFormat("%.2f s", t));
    s += absl::StrFormat(
        "  recovered in place: %d restart%s (%s), %d rollback%s (%s), %d iterations trained "
        "again\n",
        restarted_.size(), restarted_.size() == 1 ? "" : "s", absl::StrJoin(restarted_, ", "),
        rollbacks_, rollbacks_ == 1 ? "" : "s", absl::StrJoin(took, ", "), steps_undone_);
  }
  s += absl::StrFormat("  results: %s/summary.json, %s/metrics.csv\n", out_, out_);
  return s;
}

}  // namespace syncline
