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

JobOutcome Supervise(const JobSpec& spec, const std::vector<ProcessSpec>& processes,
                     Coordinator& coordinator, RunReport& report, CheckpointTracker& checkpoints,
                     int64_t restore_clock, const std::atomic<int>& signal) {
  JobOutcome out;
  // By child label: the last error line it logged ("E HH:MM:SS.mmm TAG message", core/log.h),
  // from the tag on, which names a failure the node could not tell the coordinator (it failed
  // before registering, e.g. with no free port); else the last line it wrote to stderr that is
  // not a log line, which is what a remote shell says when it cannot start the node ("ssh:
  // connect to host ...", "command not found").
  std::map<std::string, std::string, std::less<>> last_error, last_other;
  ProcessGroup group([&](std::string_view label, OutputStream stream, std::string_view line) {
    report.ChildLine(NodeOfLine(label, line), line);
    const bool log_line = IsLogLine(line);
    if (log_line && line[0] == 'E') {
      last_error[std::string(label)] = std::string(line.substr(kLogPrefix));
    } else if (!log_line && stream == OutputStream::kStderr && !line.empty()) {
      last_other[std::string(label)] = std::string(line.substr(0, 300));
    }
  });
  std::atomic<bool> job_done{false};
  const absl::Time start = absl::Now();
  std::thread run([&] {
    out.status = coordinator.Run();
    job_done.store(true);
  });
  auto fail = [&](std::string reason, int code) {
    if (!out.failure.empty()) return;
    out.failure = std::move(reason);
    out.failure_code = code;
    coordinator.Abort(out.failure);
  };
  auto check_signal = [&] {
    if (const int sig = signal.load(); sig != 0) {
      fail(absl::StrFormat("interrupted by signal %d", sig), 128 + sig);
    }
  };
  std::map<std::string, int> pids;  // by label, the latest child started
  for (const ProcessSpec& p : processes) {
    // A signal stops the starting too: a job of many nodes takes a while to start.
    check_signal();
    if (!out.failure.empty()) break;
    if (auto pid = group.Start(p); !pid.ok()) {
      fail(std::string(pid.status().message()), 1);
    } else {
      pids[p.label] = *pid;
    }
  }
  // Hung nodes the launcher was asked to stop for a restart, and why (their exit's reason).
  std::map<std::string, std::string> hung;
  auto describe = [&hung](const ExitEvent& e) {
    auto h = hung.find(e.label);
    return h == hung.end() ? DescribeExit(e)
                           : absl::StrCat(h->second, "; stopped (", DescribeExit(e), ")");
  };

  CheckpointTimer timer(spec, start, restore_clock);
  // --max-restarts: a failed node's child is started again, and every other node rolls back to
  // the newest complete checkpoint (this run's, or the one it resumed from). True when it was.
  std::string not_restarted;  // why the last failed node was not restarted, when it could be
  auto restart = [&](const ExitEvent& e) {
    const auto node = NodeOfLabel(e.label);
    if (!node || !coordinator.CanRestart()) return false;
    checkpoints.Flush();  // a manifest decided is on disk before a replacement reads it
    int64_t clock = checkpoints.last_clock();
    std::string dir = clock >= 0 ? CheckpointDir(spec.checkpoint.dir, clock) : "";
    if (clock < 0 && restore_clock >= 0) {
      clock = restore_clock;
      dir = spec.checkpoint.restore;
    }
    const std::string reason = describe(e);
    if (clock < 0) {
      not_restarted = "not restarted: no complete checkpoint to roll back to yet";
      SYNCLINE_LOG(ERROR) << "cannot restart " << e.label << " (" << reason
                          << "): " << not_restarted;
      return false;
    }
    auto child = std::find_if(processes.begin(), processes.end(),
                              [&](const ProcessSpec& p) { return p.label == e.label; });
    if (child == processes.end() ||
        !coordinator.Restart(node->first, node->second, reason, clock, dir)) {
      return false;
    }
    timer.OnRollback();
    ++out.restarts;
    hung.erase(e.label);
    report.OnRestart(e.label);
    if (auto pid = group.Start(*child); !pid.ok()) {
      // The coordinator waits for a replacement that will not come: the job stops, named.
      fail(absl::StrCat("cannot restart ", e.label, ": ", pid.status().message()), 1);
    } else {
      pids[e.label] = *pid;
    }
    return true;
  };
  std::vector<ExitEvent> exited;
  // A node that failed on its own has usually told the coordinator why (a bad line of its
  // data, say) just before it exited: give that reason a moment to arrive, so that the job's
  // error is the node's own words rather than only its exit code.
  std::string exit_failure;
  std::optional<std::pair<wire::Role, int>> exit_node;
  std::string exit_label;
  int exit_code = 1;
  absl::Time exit_deadline = absl::InfiniteFuture();
  while (!job_done.load()) {
    timer.Poll(coordinator, report, checkpoints);
    for (auto& [id, why] : coordinator.TakeHungNodes()) {
      // Only a child of its own (local, or the ssh client of a remote node) can be stopped; the
      // coordinator declares a node down that is still there after another timeout.
      auto pid = pids.find(id);
      if (pid == pids.end()) continue;
      SYNCLINE_LOG(WARNING) << "stopping " << id << " (pid " << pid->second << ") to restart it";
      hung[id] = why;
      ::kill(pid->second, SIGKILL);
    }
    exited.clear();
    (void)group.Poll(absl::Milliseconds(200), &exited);
    for (const ExitEvent& e : exited) {
      report.OnChildExit(e.label, e.max_rss_kib);
      if (e.success()) continue;
      const std::optional<int> worker = WorkerOfLabel(e.label);
      const bool job_stopper = e.exit_code == kExitBadInput || e.exit_code == kExitDiverged;
      if (out.failure.empty() && !job_stopper && restart(e)) continue;
      if (out.failure.empty() && worker && MinWorkers(spec) < spec.workers && !job_stopper) {
        // ASP/SSP, gossip and --min-workers go on without a lost worker: the coordinator counts
        // those left, tells the servers and hands its batches over.
        out.lost.push_back(DescribeExit(e));
        coordinator.ReportLost(wire::Role::WORKER, *worker, out.lost.back());
        continue;
      }
      if (exit_failure.empty()) {
        exit_failure = describe(e);
        if (const auto node = NodeOfLabel(e.label)) exit_node = *node;
        exit_label = e.label;
        if (!not_restarted.empty()) absl::StrAppend(&exit_failure, " (", not_restarted, ")");
        exit_code = job_stopper ? e.exit_code : 1;  // bad input or divergence, as it reported
        // A node killed by a signal said nothing: no reason to wait for.
        exit_deadline = absl::Now() + (e.signal == 0 ? absl::Seconds(1) : absl::ZeroDuration());
      }
    }
    if (!exit_failure.empty() && absl::Now() >= exit_deadline) {
      // A node that could have been restarted told the coordinator why it failed, which went
      // on waiting for the restart: its words name the failure.
      if (const std::string words =
              exit_node ? coordinator.LastWords(exit_node->first, exit_node->second) : "";
          !words.empty()) {
        exit_failure = absl::StrCat(words, " (", exit_failure, ")");
      } else if (auto said = last_error.find(exit_label); said != last_error.end()) {
        exit_failure = absl::StrCat(said->second, " (", exit_failure, ")");
      } else if (auto other = last_other.find(exit_label); other != last_other.end()) {
        exit_failure = absl::StrCat(exit_label, ": ", other->second, " (", exit_failure, ")");
      }
      fail(exit_failure, exit_code);
    }
    check_signal();
    report.DrawProgress(absl::Now() - start);
  }
  run.join();
  if (out.failure.empty() && !exit_failure.empty()) {
    // The coordinator ended the job first, with the failed node's own reason.
    out.failure = out.status.ok() ? exit_failure
                                  : absl::StrCat(out.status.message(), " (", exit_failure, ")");
    out.failure_code = exit_code;
  }
  // Nodes exit on their own after the shutdown or the abort; give them a moment. After a
  // failure, a node that had not registered yet never hears of the abort (it would wait for
  // its startup timeout): those get a second, then SIGTERM.
  const bool failed = !out.status.ok() || !out.failure.empty();
  const absl::Time grace = absl::Now() + (failed ? absl::Seconds(1) : absl::Seconds(10));
  while (group.running() > 0 && absl::Now() < grace) {
    exited.clear();
    (void)group.Poll(absl::Milliseconds(100), &exited);
    for (const ExitEvent& e : exited) {
      report.OnChildExit(e.label, e.max_rss_kib);
      if (!e.success() && out.failure.empty() && out.status.ok()) out.failure = DescribeExit(e);
      // A node that rejected its input (exit 2) may have told the coordinator first: the job
      // failed over bad input all the same.
      if (!e.success() && (e.exit_code == kExitBadInput || e.exit_code == kExitDiverged) &&
          out.failure_code == 1) {
        out.failure_code = e.exit_code;
      }
    }
  }
  exited.clear();
  group.TerminateAll(absl::Seconds(2), &exited);
  for (const ExitEvent& e : exited) report.OnChildExit(e.label, e.max_rss_kib);
  out.wall = absl::Now() - start;
  if (!out.status.ok() && out.failure.empty()) out.failure = std::string(out.status.message());
  return out;
}

}  // namespace syncline
