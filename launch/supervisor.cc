#include "launch/supervisor.h"

#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string_view>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "checkpoint/checkpoint.h"
#include "core/log.h"
#include "core/node_table.h"
#include "job/job_spec.h"
#include "job/node_join.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

fs::path BinaryDir() {
  if (const char* dir = std::getenv("SYNCLINE_BIN_DIR"); dir != nullptr && *dir) return dir;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : self.parent_path();
}

// Time-based checkpoints: about every checkpoint.seconds, a clock the fastest worker will
// reach only after every node has heard of the request. A request is outstanding until its
// checkpoint is complete or known to be incomplete: a slow disk then stretches the interval
// instead of piling captures up.
class CheckpointTimer {
 public:
  CheckpointTimer(const JobSpec& spec, absl::Time start, int64_t restore_clock)
      : spec_(spec),
        start_(start),
        restore_clock_(restore_clock),
        next_(start + absl::Seconds(spec.checkpoint.seconds)) {}

  // The job rolled back: a request outstanding belonged to the timeline undone.
  void OnRollback() { requested_ = -1; }

  void Poll(Coordinator& coordinator, RunReport& report, const CheckpointTracker& checkpoints) {
    if (spec_.checkpoint.seconds <= 0 || absl::Now() < next_ || coordinator.Recovering() ||
        (requested_ >= 0 && !checkpoints.Resolved(requested_))) {
      return;
    }
    const RunReport::Clocks clocks = report.WorkerClocks();
    const double elapsed = absl::ToDoubleSeconds(absl::Now() - start_);
    // The fastest worker's clock as last heard: from its progress reports (every log_every
    // steps) or its heartbeats (every heartbeat interval), whichever is newer.
    const int64_t latest = std::max(clocks.max_clock, coordinator.LatestWorkerClock());
    const int64_t done_here = latest - std::max<int64_t>(restore_clock_, 0);
    if (done_here <= 0 || elapsed <= 0) return;
    const double rate = done_here / elapsed;  // steps a second
    // How far behind that clock may be (twice, for safety), and a quarter second of steps for
    // the request's way to every node.
    const int64_t trail = std::min<int64_t>(
        spec_.training.log_every,
        static_cast<int64_t>(std::ceil(rate * spec_.timeouts.heartbeat_interval_s)));
    const int64_t lead = 2 * trail + static_cast<int64_t>(std::ceil(rate * 0.25)) + 1;
    int64_t clock = latest + lead;
    // A periodic checkpoint would take that clock anyway.
    if (spec_.checkpoint.every > 0 && clock % spec_.checkpoint.every == 0) ++clock;
    // The job's last step is known from the workers' progress reports; before the first (a
    // --log-every longer than the job), the request goes out, and a worker that has finished
    // before it reports it missed.
    if (clocks.min_total_steps == 0 || clock < clocks.min_total_steps) {
      coordinator.RequestCheckpoint(clock);
      requested_ = clock;
    } else if (!said_too_late_) {
      said_too_late_ = true;
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "--checkpoint-seconds %g: the job ends (clock %d) before the next checkpoint's clock "
          "(%d), so none is taken",
          spec_.checkpoint.seconds, clocks.min_total_steps, clock);
    }
    next_ = absl::Now() + absl::Seconds(spec_.checkpoint.seconds);
  }

 private:
  const JobSpec& spec_;
  const absl::Time start_;
  const int64_t restore_clock_;
  absl::Time next_;
  int64_t requested_ = -1;
  bool said_too_late_ = false;
};

// --checkpoint-every past the job's end: said once, as soon as the workers' progress reports
// tell where the job ends, so that nobody waits for a checkpoint (or a --resume) that cannot
// come.
class CheckpointPlanCheck {
 public:
  CheckpointPlanCheck(const JobSpec& spec, int64_t restore_clock)
      : every_(spec.checkpoint.every), restore_clock_(restore_clock) {}

  // While the job runs, from the workers' progress reports.
  void Poll(RunReport& report) { Check(report.WorkerClocks().min_total_steps); }
  // After a job that succeeded, for one shorter than --log-every (no progress reports).
  void Finish(RunReport& report) { Check(report.WorkerClocks().min_finished_at); }

 private:
  // `end`: the clock the job ends at, as far as is known (0: not yet).
  void Check(int64_t end) {
    if (said_ || every_ <= 0 || end <= 0) return;
    said_ = true;
    const int64_t first = (std::max<int64_t>(restore_clock_, 0) / every_ + 1) * every_;
    if (first <= end) return;
    if (restore_clock_ >= 0) {  // the run it resumes checkpointed; this one ends first
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "--checkpoint-every %d: the job ends at clock %d, before the next checkpoint's (%d): "
          "this run adds none",
          every_, end, first);
      return;
    }
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "--checkpoint-every %d is past the job's end: the workers stop at clock %d, before the "
        "first checkpoint's (%d), so this run writes no checkpoint (and --resume would find "
        "none); give --checkpoint-every %d or less, or train longer",
        every_, end, first, end);
  }

  const int64_t every_;
  const int64_t restore_clock_;
  bool said_ = false;
};

// The node a child's label names ("w3", "ps1"); nullopt for cluster launchers (mpirun, srun).
std::optional<std::pair<wire::Role, int>> NodeOfLabel(const std::string& label) {
  int rank = 0;
  if (label.size() >= 2 && label[0] == 'w' && absl::SimpleAtoi(label.substr(1), &rank)) {
    return std::make_pair(wire::Role::WORKER, rank);
  }
  if (label.size() >= 3 && label.starts_with("ps") && absl::SimpleAtoi(label.substr(2), &rank)) {
    return std::make_pair(wire::Role::SERVER, rank);
  }
  return std::nullopt;
}

// The worker a child's label names ("w3": 3); nullopt for servers and cluster launchers.
std::optional<int> WorkerOfLabel(const std::string& label) {
  auto node = NodeOfLabel(label);
  if (!node || node->first != wire::Role::WORKER) return std::nullopt;
  return node->second;
}

// The node a line of output came from. A child that is one node says so by its label; the
// output of mpirun or srun mixes every rank's lines, which name their node after the level and
// the time ("I 12:00:01.234 w3 ..."), so each node's lines still land in logs/NODE.log.
// The length of a log line's level and time ("E 12:00:01.234 ", core/log.h).
constexpr size_t kLogPrefix = sizeof("E 00:00:00.000 ") - 1;

// Whether `line` is one of a node's log lines: its level and time first.
bool IsLogLine(std::string_view line) {
  return line.size() > kLogPrefix && (line[0] == 'I' || line[0] == 'W' || line[0] == 'E') &&
         line[1] == ' ' && line[4] == ':' && line[7] == ':' && line[10] == '.';
}

std::string_view NodeOfLine(std::string_view label, std::string_view line) {
  if (label != "mpirun" && label != "srun") return label;
  // Open MPI's --tag-output and srun --label put "[1,3]<stderr>:" or "3: " first.
  if (!IsLogLine(line)) return label;
  const std::string_view rest = line.substr(kLogPrefix);
  const size_t space = rest.find(' ');
  const std::string_view tag = rest.substr(0, space);
  const bool node =
      tag.size() >= 2 && tag.size() <= 8 &&
      (tag[0] == 'w' || (tag.size() >= 3 && tag.substr(0, 2) == "ps")) &&
      tag.find_first_not_of("0123456789", tag[0] == 'w' ? 1 : 2) == std::string_view::npos;
  return node ? tag : label;
}

}  // namespace

std::string FindBinary(const std::string& name) { return (BinaryDir() / name).string(); }

ProcessSpec NodeProcess(wire::Role role, int rank, const std::string& coordinator,
                        const std::vector<std::string>& worker_command) {
  const bool server = role == wire::Role::SERVER;
  if (!server && !worker_command.empty()) {
    // A user's program joins through the worker session, which reads these (as syncline-worker
    // reads its flags' variables).
    return ProcessSpec{
        DataEndpointId(role, rank),
        worker_command,
        {{"SYNCLINE_COORDINATOR", coordinator}, {"SYNCLINE_RANK", absl::StrCat(rank)}}};
  }
  return ProcessSpec{DataEndpointId(role, rank),
                     {FindBinary(server ? "syncline-ps" : "syncline-worker"), "--coordinator",
                      coordinator, "--rank", absl::StrCat(rank)}};
}

namespace {

// One job's supervision, in phases: start the children, watch them and the coordinator until
// the job ends (restarting failed nodes, handing lost workers over, failing the job with the
// failed node's own words), then give the children a moment to exit.
class Supervision {
 public:
  Supervision(const JobSpec& spec, const std::vector<ProcessSpec>& processes,
              Coordinator& coordinator, RunReport& report, CheckpointTracker& checkpoints,
              int64_t restore_clock, const std::atomic<int>& signal, RekeyNode rekey)
      : spec_(spec),
        processes_(processes),
        coordinator_(coordinator),
        report_(report),
        checkpoints_(checkpoints),
        restore_clock_(restore_clock),
        signal_(signal),
        rekey_(std::move(rekey)),
        group_([this](std::string_view label, OutputStream stream, std::string_view line) {
          OnLine(label, stream, line);
        }),
        start_(absl::Now()),
        timer_(spec, start_, restore_clock),
        plan_check_(spec, restore_clock) {}

  JobOutcome Run() {
    std::thread run([&] {
      out_.status = coordinator_.Run();
      job_done_.store(true);
    });
    StartAll();
    while (!job_done_.load()) Watch();
    run.join();
    if (out_.status.ok() && out_.failure.empty()) plan_check_.Finish(report_);
    if (out_.failure.empty() && !exit_failure_.empty()) {
      // The coordinator ended the job first, with the failed node's own reason.
      out_.failure = out_.status.ok()
                         ? exit_failure_
                         : absl::StrCat(out_.status.message(), " (", exit_failure_, ")");
      out_.failure_code = exit_code_;
    }
    LetChildrenExit();
    out_.wall = absl::Now() - start_;
    if (!out_.status.ok() && out_.failure.empty()) {
      out_.failure = std::string(out_.status.message());
    }
    return out_;
  }

 private:
  // A child's line goes to the report. By child label, the last error line it logged ("E
  // HH:MM:SS.mmm TAG message", core/log.h), from the tag on, names a failure the node could
  // not tell the coordinator (it failed before registering, e.g. with no free port); else the
  // last line it wrote to stderr that is not a log line, which is what a remote shell says
  // when it cannot start the node ("ssh: connect to host ...", "command not found").
  void OnLine(std::string_view label, OutputStream stream, std::string_view line) {
    report_.ChildLine(NodeOfLine(label, line), line);
    const bool log_line = IsLogLine(line);
    if (log_line && line[0] == 'E') {
      last_error_[std::string(label)] = std::string(line.substr(kLogPrefix));
    } else if (!log_line && stream == OutputStream::kStderr && !line.empty()) {
      last_other_[std::string(label)] = std::string(line.substr(0, 300));
    }
  }

  void Fail(std::string reason, int code) {
    if (!out_.failure.empty()) return;
    out_.failure = std::move(reason);
    out_.failure_code = code;
    coordinator_.Abort(out_.failure);
  }

  void CheckSignal() {
    if (const int sig = signal_.load(); sig != 0) {
      Fail(absl::StrFormat("interrupted by signal %d", sig), 128 + sig);
    }
  }

  void StartAll() {
    for (const ProcessSpec& p : processes_) {
      // A signal stops the starting too: a job of many nodes takes a while to start.
      CheckSignal();
      if (!out_.failure.empty()) break;
      if (auto pid = group_.Start(p); !pid.ok()) {
        Fail(std::string(pid.status().message()), 1);
      } else {
        pids_[p.label] = *pid;
      }
    }
  }

  // One turn of the loop while the job runs.
  void Watch() {
    timer_.Poll(coordinator_, report_, checkpoints_);
    plan_check_.Poll(report_);
    StopHungNodes();
    std::vector<ExitEvent> exited;
    (void)group_.Poll(absl::Milliseconds(200), &exited);
    for (const ExitEvent& e : exited) OnExit(e);
    if (!exit_failure_.empty() && absl::Now() >= exit_deadline_) FailWithTheNodesWords();
    CheckSignal();
    report_.DrawProgress(absl::Now() - start_);
  }

  // Hung nodes the coordinator wants restarted. Only a child of its own (local, or the ssh
  // client of a remote node) can be stopped; the coordinator declares a node down that is
  // still there after another timeout.
  void StopHungNodes() {
    for (auto& [id, why] : coordinator_.TakeHungNodes()) {
      auto pid = pids_.find(id);
      if (pid == pids_.end()) continue;
      SYNCLINE_LOG(WARNING) << "stopping " << id << " (pid " << pid->second << ") to restart it";
      hung_[id] = why;
      ::kill(pid->second, SIGKILL);
    }
  }

  std::string Describe(const ExitEvent& e) const {
    auto h = hung_.find(e.label);
    return h == hung_.end() ? DescribeExit(e)
                            : absl::StrCat(h->second, "; stopped (", DescribeExit(e), ")");
  }

  // A child exited while the job runs: restarted, lost, or the job's failure.
  void OnExit(const ExitEvent& e) {
    report_.OnChildExit(e.label, e.max_rss_kib);
    if (e.success() || StoppedWhenNotNeeded(e)) return;
    const std::optional<int> worker = WorkerOfLabel(e.label);
    const bool job_stopper = e.exit_code == kExitBadInput || e.exit_code == kExitDiverged;
    if (out_.failure.empty() && !job_stopper && Restart(e)) return;
    if (out_.failure.empty() && worker && MinWorkers(spec_) < spec_.workers && !job_stopper) {
      // ASP/SSP, gossip and --min-workers go on without a lost worker: the coordinator counts
      // those left, tells the servers and hands its batches over.
      out_.lost.push_back(DescribeExit(e));
      coordinator_.ReportLost(wire::Role::WORKER, *worker, out_.lost.back());
      return;
    }
    if (!exit_failure_.empty()) return;
    // A node that failed on its own has usually told the coordinator why (a bad line of its
    // data, say) just before it exited: give that reason a moment to arrive, so that the job's
    // error is the node's own words rather than only its exit code.
    exit_failure_ = Describe(e);
    if (const auto node = NodeOfLabel(e.label)) exit_node_ = *node;
    exit_label_ = e.label;
    if (!not_restarted_.empty()) absl::StrAppend(&exit_failure_, " (", not_restarted_, ")");
    exit_code_ = job_stopper ? e.exit_code : 1;  // bad input or divergence, as it reported
    // A node killed by a signal said nothing: no reason to wait for.
    exit_deadline_ = absl::Now() + (e.signal == 0 ? absl::Seconds(1) : absl::ZeroDuration());
  }

  // A node stopped from outside (SIGKILL, SIGTERM: not a crash of its own) once the job no
  // longer needs it: training over and it is not the evaluator, or the results are in. Its
  // part is done, so the job goes on to its end (a --max-restarts job once failed here, though
  // its test loss was computed, issue 44); the coordinator hears it is gone.
  bool StoppedWhenNotNeeded(const ExitEvent& e) {
    const auto node = NodeOfLabel(e.label);
    const bool from_outside =
        e.signal == SIGKILL || e.signal == SIGTERM || e.signal == SIGINT || e.signal == SIGHUP;
    if (!node || !from_outside || coordinator_.StillNeeds(node->first, node->second)) {
      return false;
    }
    SYNCLINE_LOG(WARNING) << DescribeExit(e)
                          << " after its part of the job was done (the training is over); the "
                             "job goes on without it";
    coordinator_.ReportLost(node->first, node->second, DescribeExit(e));
    return true;
  }

  // The failed node's words, as the coordinator heard them or as it logged them, name the
  // failure; its exit follows in brackets.
  void FailWithTheNodesWords() {
    if (const std::string words =
            exit_node_ ? coordinator_.LastWords(exit_node_->first, exit_node_->second) : "";
        !words.empty()) {
      exit_failure_ = absl::StrCat(words, " (", exit_failure_, ")");
    } else if (auto said = last_error_.find(exit_label_); said != last_error_.end()) {
      exit_failure_ = absl::StrCat(said->second, " (", exit_failure_, ")");
    } else if (auto other = last_other_.find(exit_label_); other != last_other_.end()) {
      exit_failure_ = absl::StrCat(exit_label_, ": ", other->second, " (", exit_failure_, ")");
    }
    Fail(exit_failure_, exit_code_);
  }

  // --max-restarts: a failed node's child is started again, and every other node rolls back
  // to the newest complete checkpoint (this run's, or the one it resumed from). True when it
  // was.
  bool Restart(const ExitEvent& e) {
    const auto node = NodeOfLabel(e.label);
    if (!node || !coordinator_.CanRestart()) return false;
    checkpoints_.Flush();  // a manifest decided is on disk before a replacement reads it
    int64_t clock = checkpoints_.last_clock();
    std::string dir = clock >= 0 ? CheckpointDir(spec_.checkpoint.dir, clock) : "";
    if (clock < 0 && restore_clock_ >= 0) {
      clock = restore_clock_;
      dir = spec_.checkpoint.restore;
    }
    const std::string reason = Describe(e);
    if (clock < 0) {
      not_restarted_ = "not restarted: no complete checkpoint to roll back to yet";
      SYNCLINE_LOG(ERROR) << "cannot restart " << e.label << " (" << reason
                          << "): " << not_restarted_;
      return false;
    }
    auto child = std::find_if(processes_.begin(), processes_.end(),
                              [&](const ProcessSpec& p) { return p.label == e.label; });
    if (child == processes_.end()) return false;
    // The replacement's own key (its next incarnation's), which the coordinator accepts from
    // now on in place of the failed one's: before the coordinator waits for a registration.
    if (rekey_) {
      if (absl::Status s = rekey_(node->first, node->second); !s.ok()) {
        not_restarted_ = absl::StrCat("not restarted: ", s.message());
        SYNCLINE_LOG(ERROR) << "cannot restart " << e.label << ": " << s.message();
        return false;
      }
    }
    if (!coordinator_.Restart(node->first, node->second, reason, clock, dir)) return false;
    timer_.OnRollback();
    ++out_.restarts;
    hung_.erase(e.label);
    report_.OnRestart(e.label);
    if (auto pid = group_.Start(*child); !pid.ok()) {
      // The coordinator waits for a replacement that will not come: the job stops, named.
      Fail(absl::StrCat("cannot restart ", e.label, ": ", pid.status().message()), 1);
    } else {
      pids_[e.label] = *pid;
    }
    return true;
  }

  // Nodes exit on their own after the shutdown or the abort; give them a moment. After a
  // failure, a node that had not registered yet never hears of the abort (it would wait for
  // its startup timeout): those get a second, then SIGTERM.
  void LetChildrenExit() {
    const bool failed = !out_.status.ok() || !out_.failure.empty();
    const absl::Time grace = absl::Now() + (failed ? absl::Seconds(1) : absl::Seconds(10));
    std::vector<ExitEvent> exited;
    while (group_.running() > 0 && absl::Now() < grace) {
      exited.clear();
      (void)group_.Poll(absl::Milliseconds(100), &exited);
      for (const ExitEvent& e : exited) {
        report_.OnChildExit(e.label, e.max_rss_kib);
        if (!e.success() && out_.failure.empty() && out_.status.ok() && !StoppedWhenNotNeeded(e)) {
          out_.failure = DescribeExit(e);
        }
        // A node that rejected its input (exit 2) may have told the coordinator first: the job
        // failed over bad input all the same.
        if (!e.success() && (e.exit_code == kExitBadInput || e.exit_code == kExitDiverged) &&
            out_.failure_code == 1) {
          out_.failure_code = e.exit_code;
        }
      }
    }
    exited.clear();
    group_.TerminateAll(absl::Seconds(2), &exited);
    for (const ExitEvent& e : exited) report_.OnChildExit(e.label, e.max_rss_kib);
  }

  const JobSpec& spec_;
  const std::vector<ProcessSpec>& processes_;
  Coordinator& coordinator_;
  RunReport& report_;
  CheckpointTracker& checkpoints_;
  const int64_t restore_clock_;
  const std::atomic<int>& signal_;
  const RekeyNode rekey_;
  std::map<std::string, std::string, std::less<>> last_error_, last_other_;
  ProcessGroup group_;
  const absl::Time start_;
  CheckpointTimer timer_;
  CheckpointPlanCheck plan_check_;
  JobOutcome out_;
  std::atomic<bool> job_done_{false};
  std::map<std::string, int> pids_;  // by label, the latest child started
  // Hung nodes the launcher was asked to stop for a restart, and why (their exit's reason).
  std::map<std::string, std::string> hung_;
  std::string not_restarted_;  // why the last failed node was not restarted, when it could be
  // The first node that failed on its own, waited on until exit_deadline_ for its words.
  std::string exit_failure_;
  std::optional<std::pair<wire::Role, int>> exit_node_;
  std::string exit_label_;
  int exit_code_ = 1;
  absl::Time exit_deadline_ = absl::InfiniteFuture();
};

}  // namespace

JobOutcome Supervise(const JobSpec& spec, const std::vector<ProcessSpec>& processes,
                     Coordinator& coordinator, RunReport& report, CheckpointTracker& checkpoints,
                     int64_t restore_clock, const std::atomic<int>& signal, RekeyNode rekey) {
  return Supervision(spec, processes, coordinator, report, checkpoints, restore_clock, signal,
                     std::move(rekey))
      .Run();
}

}  // namespace syncline
