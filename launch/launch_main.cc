// syncline-launch: starts a Syncline job on this machine: the coordinator (in this process),
// which hands every node the job spec, and the parameter servers and workers as child processes
// (launch/supervisor.h); shows progress, and writes the run's metrics.csv and summary.json. If
// any process fails it stops the others and exits non-zero with the reason.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/coordinator.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "job/job_spec.h"
#include "job/node_join.h"
#include "launch/checkpoint_tracker.h"
#include "launch/experiment.h"
#include "launch/generate_data.h"
#include "launch/job_config.h"
#include "launch/resume.h"
#include "launch/run_report.h"
#include "launch/supervisor.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

constexpr char kAbout[] =
    "syncline-launch: runs a Syncline training job on this machine.\n"
    "Starts the coordinator, --servers parameter servers and --workers workers, shows progress,\n"
    "and writes OUT/metrics.csv and OUT/summary.json. Options may also come from a TOML job\n"
    "file (keys are the flag names without dashes); flags win over the file.\n"
    "Without --train it generates synthetic data (see the --gen-* flags).\n\n"
    "Example:\n"
    "  syncline-launch --servers 2 --workers 2 --sync bsp --model logreg \\\n"
    "      --train a.libsvm --test b.libsvm --epochs 3 --out runs/x\n"
    "  syncline-launch --model ctr --format criteo --train a.tsv --test b.tsv \\\n"
    "      --embedding-dim 8 --hidden 64    # DLRM-style CTR model on Criteo data\n";

// Exit code 2 with the message: the job cannot start as given.
int Refuse(absl::string_view message) {
  std::cerr << "syncline-launch: " << message << "\n";
  return 2;
}

// Writes the summary and says how the job ended; returns the launcher's exit code.
int Conclude(const JobOutcome& outcome, RunReport& report) {
  if (!outcome.failure.empty()) {
    std::cerr << "syncline-launch: job failed: " << outcome.failure << "\n";
    (void)report.WriteSummary(outcome.wall, outcome.failure,
                              outcome.failure_code == kExitDiverged ? "diverged" : "failed");
    return outcome.failure_code;
  }
  if (auto s = report.WriteSummary(outcome.wall, ""); !s.ok()) {
    std::cerr << "syncline-launch: " << s.message() << "\n";
    return 1;
  }
  std::cout << report.SummaryText(outcome.wall);
  for (const std::string& l : outcome.lost) {
    std::cerr << "syncline-launch: the job went on without " << l << "\n";
  }
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app(kAbout);
  JobConfig config;
  bool resume = false, resume_if_any = false, external_workers = false;
  app.add_flag("--external-workers", external_workers,
               "Start the coordinator and the servers only, print the coordinator's address, and "
               "wait for --workers programs of your own to join it (include/syncline/"
               "worker_session.h; examples/embed_client)");
  app.add_flag("--resume", resume,
               "Restart the job from the newest complete checkpoint in --checkpoint-dir "
               "(damaged or partial ones are reported and skipped)");
  app.add_flag("--resume-if-any", resume_if_any,
               "Like --resume when --checkpoint-dir holds a complete checkpoint, else start "
               "afresh: one command for every attempt of a job that a scheduler may requeue");
  if (auto s = AddJobFlags(app, &config); !s.ok()) return Refuse(s.message());
  auto action = ParseJobCommandLine(argc, argv, app, &config);
  if (!action.ok())
    return Refuse(absl::StrCat(action.status().message(), "\nRun with --help for usage."));
  if (*action == CommandLineAction::kShowHelp) {
    std::cout << app.help();
    return 0;
  }
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  if (!spec.ok()) return Refuse(spec.status().message());
  if (resume && resume_if_any) return Refuse("give --resume or --resume-if-any, not both");
  if ((resume || resume_if_any) && spec->sync.gossip() && spec->sync.asynchronous) {
    return Refuse(AsyncGossipCannotCheckpoint(spec->sync));
  }
  SetLogTag("launch");
  if (auto s = LockRunFolders(*spec, config.out, resume || resume_if_any); !s.ok()) {
    return Refuse(s.message());
  }
  if (spec->data.train.empty()) {
    if (auto s = GenerateData(config, &*spec); !s.ok()) return Refuse(s.message());
  }
  absl::StatusOr<int64_t> restore_clock = PrepareCheckpoints(&*spec, resume, resume_if_any);
  if (!restore_clock.ok()) return Refuse(restore_clock.status().message());

  RunReport report(*spec, config.out, isatty(STDERR_FILENO) != 0);
  CheckpointTracker checkpoints(CheckpointTrackerOptions{.root = spec->checkpoint.dir,
                                                         .servers = spec->servers,
                                                         .workers = spec->workers,
                                                         .keep = spec->checkpoint.keep,
                                                         .job = ManifestEntries(*spec)});
  report.SetCheckpoints(&checkpoints, *restore_clock);
  if (auto s = report.Open(); !s.ok()) return Refuse(s.message());

  ZmqTransport transport;
  auto coordinator =
      Coordinator::Create(transport, "tcp://127.0.0.1:0", CoordinatorOptionsFor(*spec), &report);
  if (!coordinator.ok()) {
    std::cerr << "syncline-launch: " << coordinator.status().message() << "\n";
    return 1;
  }
  if (external_workers) {
    // Scripts read the address from the file; people from the line.
    std::ofstream((fs::path(config.out) / "coordinator.address").string())
        << (*coordinator)->address() << "\n";
    std::cout << "coordinator " << (*coordinator)->address() << "  (waiting for " << spec->workers
              << " external workers, ranks 0.." << spec->workers - 1 << ")" << std::endl;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const JobOutcome outcome = Supervise(*spec, **coordinator, report, checkpoints, *restore_clock,
                                       g_signal, external_workers);
  report.EndProgress();
  checkpoints.Flush();  // manifests decided so far are on disk before the summary counts them
  return Conclude(outcome, report);
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "experiment") {
    return syncline::RunExperiment(argc - 1, argv + 1);
  }
  return syncline::Main(argc, argv);
}
