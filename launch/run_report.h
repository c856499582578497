// RunReport: what a user sees of a job and what it leaves behind. It observes the coordinator
// (progress, results, failures), forwards the children's log lines with a "[w1]" prefix (also
// into OUT/logs/), keeps a live progress line, and writes OUT/metrics.csv and
// OUT/embedding.csv as reports arrive and OUT/summary.json at the end.
//
// Thread-safety: the CoordinatorObserver callbacks come from the coordinator's thread; the
// other methods from the launcher's main thread. State shared by both is guarded by mu_.
#ifndef SYNCLINE_LAUNCH_RUN_REPORT_H_
#define SYNCLINE_LAUNCH_RUN_REPORT_H_

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/coordinator.h"
#include "job/privacy_accountant.h"
#include "launch/checkpoint_tracker.h"
#include "syncline/job_spec.h"

namespace syncline {

class RunReport : public CoordinatorObserver {
 public:
  // Where a worker's iterations spent their time (wire::StepSeconds, checked): seconds per part,
  // in the order batch, upload, compute, compress, download, network.
  struct StepSplit {
    // The parts, as summary.json names them; metrics.csv's columns add "_s".
    static constexpr std::array<const char*, 6> kParts = {"batch",    "upload",   "compute",
                                                          "compress", "download", "network"};
    int64_t steps = 0;
    std::array<double, 6> seconds{};
    StepSplit& operator+=(const StepSplit& other);
  };

  // `job` is the job as the nodes get it; its files go into the run folder `out`.
  RunReport(const JobSpec& job, std::string out, bool interactive);
  ~RunReport() override;

  // Creates OUT/metrics.csv and OUT/logs/.
  absl::Status Open();

  void OnStarted(const NodeTable& table) override;
  void OnProgress(int worker, wire::Progress::Reader progress) override;
  void OnWorkerDone(int worker, wire::WorkerStats::Reader stats) override;
  void OnEvaluation(int worker, wire::Evaluation::Reader evaluation) override;
  // A held-out row in OUT/metrics.csv (--eval-every).
  void OnHeldOut(int worker, int64_t clock, wire::Evaluation::Reader evaluation) override;
  void OnServerStats(int server, wire::ServerStats::Reader stats) override;
  // Appends the embedding tables' figures to OUT/embedding.csv.
  void OnServerProgress(int server, wire::ServerStats::Reader stats) override;
  void OnNodeDown(wire::Role role, int rank, const std::string& reason) override;
  void OnWorkerLeft(int worker, int64_t clock, const std::vector<int>& takers) override;
  void OnWorkerJoined(int worker, const std::string& name, int64_t first_clock,
                      const std::vector<int>& donors) override;
  void OnCheckpointed(wire::Role role, int rank, int64_t clock,
                      const absl::Status& status) override;
  void OnRollback(wire::Role role, int rank, int64_t clock, const std::string& reason) override;
  void OnRecovered(int64_t clock, absl::Duration took, int64_t undone) override;
  // The launcher restarted the child `label` (a failed node) in place.
  void OnRestart(const std::string& label);

  // Checkpoint reports go to `tracker` (not owned; may be null); `resumed_from` is the clock
  // the job restarted from (-1: a fresh start). Both appear in summary.json.
  void SetCheckpoints(CheckpointTracker* tracker, int64_t resumed_from);

  // A child exited; its peak resident memory goes to summary.json.
  void OnChildExit(const std::string& label, int64_t max_rss_kib);

  // A line a child printed.
  void ChildLine(std::string_view label, std::string_view line);
  // Redraws the progress line (a terminal) or prints one now and then (a log).
  void DrawProgress(absl::Duration elapsed);
  void EndProgress();

  // The fastest training worker's clock and the fewest steps a training worker will run (0
  // before any report), for choosing a checkpoint clock ahead of the workers.
  struct Clocks {
    int64_t max_clock = 0;
    int64_t min_total_steps = 0;
    // The fewest steps a worker that finished stopped at (0: none finished yet), for a job
    // shorter than --log-every, whose workers report no progress before they finish.
    int64_t min_finished_at = 0;
  };
  Clocks WorkerClocks();

  // Writes OUT/summary.json; `failure` is empty for a successful run.
  // `status`: "ok" without a failure, else "failed" or (a diverged model) "diverged".
  absl::Status WriteSummary(absl::Duration wall, const std::string& failure,
                            const std::string& status = "");
  // The closing summary printed on stdout.
  std::string SummaryText(absl::Duration wall);

 private:
  struct WorkerState {
    int64_t clock = 0;
    int64_t total_steps = 0;
    int epoch = 0;
    double loss = 0;
    bool done = false;
    bool left = false;  // lost while the job went on
    uint64_t examples = 0;
    uint64_t reported_examples = 0;  // by its progress reports
    uint64_t bytes_pushed = 0;
    uint64_t bytes_pulled = 0;
    uint64_t bytes_so_far = 0;  // pushed and pulled, as its last progress report said
    int64_t steps = 0;          // the clock it stopped at
    int64_t steps_trained = 0;  // iterations it trained in this run (the summary's steps)
    StepSplit split;            // done: of its last run (WorkerStats); else its reports' sum
    std::string device;         // where it computed, once done
  };
  // summary.json's members, one a line, in the order added (values are JSON already).
  class JsonMembers {
   public:
    void Add(std::string_view key, std::string json);
    std::string Text() const;

   private:
    std::vector<std::string> lines_;
  };
  // The workers' figures summed: steps trained in this run (of a worker that did not finish, up
  // to its last report), bytes, and their latest losses.
  struct WorkerTotals {
    int64_t steps = 0, max_steps = 0;
    uint64_t pushed = 0, pulled = 0, examples = 0;
    double loss_sum = 0;
    int reporting = 0;  // workers with a loss reported
  };
  WorkerTotals SumWorkers() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // summary.json's sections, in order (run_report_summary.cc).
  void AddJobMembers(JsonMembers& j, const std::string& failure, const std::string& status) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddProgressMembers(JsonMembers& j, const WorkerTotals& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddResultMembers(JsonMembers& j, absl::Duration wall, const WorkerTotals& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddTrafficMembers(JsonMembers& j, const WorkerTotals& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddStepMembers(JsonMembers& j) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddRecoveryMembers(JsonMembers& j) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AddPrivacyMembers(JsonMembers& j, const WorkerTotals& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string ProgressText(absl::Duration elapsed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearProgress() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Appends a server's embedding figures to OUT/embedding.csv (when it has embedding tables).
  void WriteEmbeddingRow(int server, wire::ServerStats::Reader stats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Opens a CSV output whose first column is wall_seconds. A new run writes `header`. A resumed
  // run goes on with the rows of the run it resumes: rows whose column `clock_column` (when
  // >= 0) is past the resumed clock are dropped, as the resumed run does those steps again,
  // and so are unreadable ones (a line cut short by a crash). Rows of an older build, whose
  // header lacks columns that `header` adds at its end, get those columns empty. Returns the
  // largest wall_seconds of the rows read, from which the resumed run's times continue; 0 for
  // a new file.
  double OpenCsv(const std::string& path, const std::string& header, std::ofstream& out,
                 int clock_column = -1) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Seconds since the start, continuing the run that this one resumes (see OpenCsv).
  double WallSeconds(double offset) const {
    return offset + absl::ToDoubleSeconds(absl::Now() - start_);
  }

  const JobSpec job_;
  // --dp: the accountant of the job's plan (metrics.csv's epsilon column, summary.json's
  // "privacy"); empty without --dp.
  const std::optional<RdpAccountant> privacy_;
  const std::string out_;
  const bool interactive_;
  const absl::Time start_;

  absl::Mutex mu_;
  std::ofstream metrics_ ABSL_GUARDED_BY(mu_);
  std::ofstream embedding_csv_ ABSL_GUARDED_BY(mu_);
  double metrics_wall_offset_ ABSL_GUARDED_BY(mu_) = 0;
  double embedding_wall_offset_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, std::ofstream> logs_ ABSL_GUARDED_BY(mu_);
  std::map<int, WorkerState> workers_ ABSL_GUARDED_BY(mu_);
  bool have_evaluation_ ABSL_GUARDED_BY(mu_) = false;
  double test_loss_ ABSL_GUARDED_BY(mu_) = 0;
  double test_auc_ ABSL_GUARDED_BY(mu_) = -1;
  double test_accuracy_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t test_examples_ ABSL_GUARDED_BY(mu_) = 0;
  // Time of the held-out evaluations (--eval-every), left out of the speed figures.
  double evaluation_seconds_ ABSL_GUARDED_BY(mu_) = 0;
  int workers_left_ ABSL_GUARDED_BY(mu_) = 0;
  // Workers that joined the running job (syncline-worker --join), by rank: the clock each
  // entered at.
  std::map<int, int64_t> joined_ ABSL_GUARDED_BY(mu_);
  // The world size over time: (clock, workers in the job from then on) at each departure (the
  // clock its batches are handed over from, as the coordinator has it) and arrival.
  std::vector<std::pair<int64_t, int>> world_sizes_ ABSL_GUARDED_BY(mu_);
  double examples_trained_ ABSL_GUARDED_BY(mu_) = 0;  // the servers' largest count
  // An elastic all-reduce's: the largest count of a worker that finished (-1: none).
  double examples_in_model_ ABSL_GUARDED_BY(mu_) = -1;
  // Lost workers: the clock their batches were handed over from, and the most iterations a
  // server had seen each finish (the difference is trained twice).
  std::map<int, int64_t> handed_from_ ABSL_GUARDED_BY(mu_);
  std::map<int, int64_t> finished_at_ ABSL_GUARDED_BY(mu_);
  // In-place recovery: restarts (the failed nodes restarted, by label), rollbacks made, the
  // iterations they undid (the fastest worker's clock, as it stopped, less the rollback's), and
  // the time each took from the restart to training again.
  std::vector<std::string> restarted_ ABSL_GUARDED_BY(mu_);
  int rollbacks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_undone_ ABSL_GUARDED_BY(mu_) = 0;
  bool recovering_ ABSL_GUARDED_BY(mu_) = false;
  int64_t rollback_clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::string rollback_reason_ ABSL_GUARDED_BY(mu_);
  std::vector<double> recovery_seconds_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> staleness_ ABSL_GUARDED_BY(mu_);
  uint64_t server_requests_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t server_rejected_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t server_bytes_in_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t server_bytes_out_ ABSL_GUARDED_BY(mu_) = 0;
  // Embedding tables, summed over servers.
  struct EmbeddingTotals {
    uint32_t tables = 0;
    uint64_t rows_in_memory = 0, rows_on_disk = 0, admitted = 0, rejected = 0, expired = 0;
    uint64_t memory_hits = 0, disk_hits = 0, evictions = 0, memory_bytes = 0, budget_bytes = 0;
  };
  EmbeddingTotals embedding_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> peak_rss_kib_ ABSL_GUARDED_BY(mu_);
  CheckpointTracker* checkpoints_ = nullptr;
  int64_t resumed_from_ = -1;
  double checkpoint_pause_s_ ABSL_GUARDED_BY(mu_) = 0;  // the longest over servers
  // Federated rounds, as the server that saw the most short rounds counted them.
  struct Rounds {
    uint64_t rounds = 0, short_rounds = 0, clients_missing = 0, updates_late = 0;
    std::vector<int64_t> which;
  };
  Rounds rounds_ ABSL_GUARDED_BY(mu_);
  // Each server's final bytes received and sent, by rank: the busiest one bounds the job.
  std::map<int, std::pair<uint64_t, uint64_t>> server_bytes_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> down_ ABSL_GUARDED_BY(mu_);
  bool progress_shown_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_log_line_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_RUN_REPORT_H_
