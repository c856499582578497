// syncline-launch: starts a Syncline job: the coordinator (in this process), which hands every
// node the job spec, and the parameter servers and workers, as child processes here or through
// ssh, mpirun or srun (launch/cluster.h, launch/supervisor.h); shows progress, and writes the run's
// metrics.csv and summary.json. If any process fails it stops the others and exits non-zero with
// the reason.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/coordinator.h"
#include "core/job_key.h"
#include "core/log.h"
#include "core/net.h"
#include "core/node_table.h"
#include "core/zmq_transport.h"
#include "job/job_spec.h"
#include "job/node_join.h"
#include "job/option_text.h"
#include "launch/batch_script.h"
#include "launch/checkpoint_tracker.h"
#include "launch/cluster.h"
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
    "syncline-launch: runs a Syncline training job, on this machine or (--launcher) across hosts.\n"
    "Starts the coordinator, --servers parameter servers and --workers workers, shows progress,\n"
    "and writes OUT/metrics.csv and OUT/summary.json. Options may also come from a TOML job\n"
    "file (keys are the flag names without dashes); flags win over the file.\n"
    "Without --train it generates synthetic data (see the --gen-* flags).\n\n"
    "Example:\n"
    "  syncline-launch --servers 2 --workers 2 --sync bsp --model logreg \\\n"
    "      --train a.libsvm --test b.libsvm --epochs 3 --out runs/x\n"
    "  syncline-launch --model ctr --format criteo --train a.tsv --test b.tsv \\\n"
    "      --embedding-dim 8 --hidden 64    # DLRM-style CTR model on Criteo data\n"
    "  syncline-launch --model mlp --hidden 256,128 --classes 10 \\\n"
    "      --train a.libsvm --test b.libsvm  # multilayer perceptron, softmax output\n";

// Exit code 2 with the message: the job cannot start as given.
int Refuse(absl::string_view message) {
  std::cerr << "syncline-launch: " << message << "\n";
  return 2;
}

// Writes the summary and says how the job ended; returns the launcher's exit code.
int Conclude(const JobOutcome& outcome, RunReport& report, const CheckpointTracker& checkpoints) {
  if (!outcome.failure.empty()) {
    std::cerr << "syncline-launch: job failed: " << outcome.failure << "\n";
    (void)report.WriteSummary(outcome.wall, outcome.failure,
                              outcome.failure_code == kExitDiverged ? "diverged" : "failed");
    return outcome.failure_code;
  }
  if (absl::Status s = checkpoints.Verdict(); !s.ok()) {
    std::cerr << "syncline-launch: the job trained, but " << s.message() << "\n";
    (void)report.WriteSummary(outcome.wall, std::string(s.message()), "checkpoints_failed");
    return kExitCheckpointsFailed;
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

// --sbatch: a batch script that runs this very command with --launcher slurm inside the
// allocation (the coordinator in the batch step, the nodes by srun), submitted with sbatch.
int SubmitBatchJob(int argc, char** argv, const JobSpec& spec, const std::string& out,
                   const std::string& sbatch_args) {
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return Refuse(absl::StrCat("cannot create ", out, ": ", ec.message()));
  std::vector<std::string> args;
  bool resumes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--sbatch") continue;
    if (a == "--sbatch-args" || a == "--launcher") {
      ++i;
      continue;
    }
    if (a.rfind("--sbatch-args=", 0) == 0 || a.rfind("--launcher=", 0) == 0) continue;
    resumes = resumes || a == "--resume" || a == "--resume-if-any";
    args.emplace_back(a);
  }
  args.insert(args.end(), {"--launcher", "slurm"});
  // A requeued job resumes from its newest complete checkpoint.
  if (!resumes && spec.checkpoint.enabled()) args.emplace_back("--resume-if-any");
  if (auto s = CheckRunFolder(out); !s.ok()) return Refuse(s.message());
  const fs::path script = fs::absolute(fs::path(out) / "job.sbatch");
  absl::StatusOr<std::string> text =
      BatchScriptText({.launcher = fs::canonical("/proc/self/exe", ec).string(),
                       .args = std::move(args),
                       .working_dir = fs::current_path(ec).string(),
                       .output = (fs::absolute(out) / "slurm-%j.out").string(),
                       .tasks = spec.servers + spec.workers});
  if (!text.ok()) return Refuse(text.status().message());
  if (auto s = WriteBatchScript(script.string(), *text); !s.ok()) return Refuse(s.message());
  std::vector<std::string> sbatch = {"sbatch"};
  for (absl::string_view w : absl::StrSplit(sbatch_args, ' ', absl::SkipEmpty())) {
    sbatch.emplace_back(w);
  }
  sbatch.push_back(script.string());
  std::cout << "syncline-launch: submitting " << script.string() << std::endl;
  std::vector<char*> cargv;
  for (std::string& a : sbatch) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  execvp("sbatch", cargv.data());
  return Refuse(absl::StrCat("cannot run sbatch: ", std::strerror(errno), " (the script is at ",
                             script.string(), ")"));
}

int Main(int argc, char** argv) {
  PrepareProcess();
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
  ClusterOptions cluster;
  std::string launcher = "local", hosts, hostfile, port_range, sbatch_args;
  bool sbatch = false, insecure = false;
  auto* where =
      app.add_option_group("Where the nodes run (see \"Run on a cluster\" in the README)");
  where
      ->add_option("--launcher", launcher,
                   "What starts the nodes: local (children of this process), ssh (one --rsh per "
                   "node on --hosts), mpirun (Open MPI across --hosts), slurm (srun inside an "
                   "allocation)")
      ->capture_default_str();
  where->add_option("--hosts", hosts,
                    "ssh/mpirun: hosts to spread the nodes over, HOST[:SLOTS],... e.g. h1,h2:4");
  where->add_option("--hostfile", hostfile,
                    "ssh/mpirun: an Open MPI hostfile (lines 'HOST slots=N') instead of --hosts");
  where
      ->add_option("--servers-per-host", cluster.servers_per_host,
                   "ssh: put the servers K to a host on the first hosts (default: round-robin "
                   "with the workers, one per host and turn)")
      ->check(CLI::Range(0, kMostNodes));
  where
      ->add_option("--rsh", cluster.rsh,
                   "ssh/mpirun: the command that runs COMMAND on HOST, called as RSH HOST "
                   "COMMAND (mpirun: its plm_rsh_agent)")
      ->capture_default_str();
  where->add_option("--interface", cluster.interface,
                    "network interface the coordinator and the nodes listen on (default: the one "
                    "whose route reaches the first host; loopback for a local job)");
  where->add_option("--coordinator-interface", cluster.coordinator_interface,
                    "the coordinator's interface, when it is not the nodes' --interface (a "
                    "launcher on a login node)");
  where->add_option("--port-range", port_range,
                    "listen only on ports FIRST-LAST (coordinator and nodes), for firewalls");
  where->add_option("--launcher-args", cluster.launcher_args,
                    "mpirun/slurm: extra arguments for mpirun or srun, e.g. '--mca "
                    "btl_tcp_if_include eth0' or '--overcommit'");
  where->add_flag("--sbatch", sbatch,
                  "slurm: write OUT/job.sbatch, a batch script that runs this job with "
                  "--launcher slurm (and --resume-if-any when it checkpoints, so that a requeued "
                  "job resumes), and submit it with sbatch");
  where->add_option("--sbatch-args", sbatch_args, "extra arguments for sbatch, e.g. '--wait'");
  where->add_flag("--insecure", insecure,
                  "Off loopback, send plaintext without authentication (trusted networks only). "
                  "Default: CURVE encryption with a per-job key, OUT/job.key");
  where->add_option("--key-file", cluster.key_file,
                    "the job key to use instead of a new OUT/job.key (a file every host can read)");
  if (auto s = AddJobFlags(app, &config); !s.ok()) return Refuse(s.message());
  auto action = ParseJobCommandLine(argc, argv, app, &config);
  if (!action.ok())
    return Refuse(absl::StrCat(action.status().message(), "\nRun with --help for usage."));
  if (*action == CommandLineAction::kShowHelp) {
    std::cout << app.help();
    return 0;
  }
  for (const auto& [flag, text] : {std::pair<const char*, const std::string&>{"--hosts", hosts},
                                   {"--hostfile", hostfile},
                                   {"--rsh", cluster.rsh},
                                   {"--interface", cluster.interface},
                                   {"--coordinator-interface", cluster.coordinator_interface},
                                   {"--port-range", port_range},
                                   {"--launcher-args", cluster.launcher_args},
                                   {"--sbatch-args", sbatch_args},
                                   {"--key-file", cluster.key_file}}) {
    if (auto s = RefuseControlCharacters(flag, text); !s.ok()) return Refuse(s.message());
  }
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  if (!spec.ok()) return Refuse(spec.status().message());
  for (const std::string& warning : JobSpecWarnings(*spec)) SYNCLINE_LOG(WARNING) << warning;
  if (auto kind = ParseLauncher(launcher); kind.ok()) {
    cluster.kind = *kind;
  } else {
    return Refuse(kind.status().message());
  }
  cluster.rsh_given = app.get_option("--rsh")->count() > 0;
  if (!hosts.empty() && !hostfile.empty()) return Refuse("give --hosts or --hostfile, not both");
  if (!hosts.empty() || !hostfile.empty()) {
    auto parsed = hosts.empty() ? ReadHostfile(hostfile) : ParseHosts(hosts);
    if (!parsed.ok()) return Refuse(parsed.status().message());
    cluster.hosts = std::move(*parsed);
  }
  const bool needs_hosts =
      cluster.kind == LauncherKind::kSsh || cluster.kind == LauncherKind::kMpirun;
  if (needs_hosts && cluster.hosts.empty()) {
    return Refuse(absl::StrCat("--launcher ", launcher, " needs --hosts or --hostfile"));
  }
  if (!needs_hosts && !cluster.hosts.empty()) {
    return Refuse(
        absl::StrCat("--hosts and --hostfile are for --launcher ssh or mpirun, not ", launcher));
  }
  if (spec->max_restarts > 0 &&
      (cluster.kind == LauncherKind::kMpirun || cluster.kind == LauncherKind::kSlurm)) {
    return Refuse(absl::StrCat("--max-restarts needs --launcher local or ssh: ", launcher,
                               " starts every node as one world, which cannot restart one of "
                               "them"));
  }
  if (!port_range.empty()) {
    auto ports = ParsePortRange(port_range);
    if (!ports.ok()) return Refuse(absl::StrCat("--port-range: ", ports.status().message()));
    cluster.ports = *ports;
  }
  if (sbatch) return SubmitBatchJob(argc, argv, *spec, config.out, sbatch_args);
  std::error_code cwd_error;
  cluster.working_dir = fs::current_path(cwd_error).string();
  cluster.out = fs::absolute(config.out).string();
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

  absl::StatusOr<std::string> bind_ip = CoordinatorBindIp(cluster);
  if (!bind_ip.ok()) return Refuse(bind_ip.status().message());
  cluster.insecure = insecure;
  const bool loopback = ListensOnlyOnLoopback(cluster, *bind_ip);
  ZmqOptions transport_options;
  if (!cluster.key_file.empty() || (!insecure && !loopback)) {
    // Off loopback every connection is authenticated and encrypted, with a key of this job's
    // own unless one was given (a file all hosts can read: a shared folder).
    absl::StatusOr<JobKey> key = absl::UnknownError("");
    if (cluster.key_file.empty()) {
      cluster.key_file = (fs::absolute(config.out) / "job.key").string();
      key = JobKey::Generate();
      if (auto s = key->Save(cluster.key_file); !s.ok()) return Refuse(s.message());
    } else {
      cluster.key_file = fs::absolute(cluster.key_file).string();
      key = JobKey::Load(cluster.key_file);
      if (!key.ok()) return Refuse(key.status().message());
    }
    transport_options.key = std::make_shared<const JobKey>(*std::move(key));
  }
  ZmqTransport transport(transport_options);
  transport.AllowPeers(
      JobEndpointIds(spec->servers, MaxWorkers(*spec), MaxWorkers(*spec) > spec->workers));
  // The first free port of --port-range, as the nodes take theirs (any port without one).
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      absl::UnavailableError("no port tried");
  for (int port = cluster.ports.any() ? 0 : cluster.ports.first;
       port <= (cluster.ports.any() ? 0 : cluster.ports.last); ++port) {
    coordinator = Coordinator::Create(transport, absl::StrCat("tcp://", *bind_ip, ":", port),
                                      CoordinatorOptionsFor(*spec), &report);
    if (coordinator.ok() || !absl::IsUnavailable(coordinator.status())) break;
  }
  if (!coordinator.ok()) {
    std::cerr << "syncline-launch: " << coordinator.status().message() << "\n";
    return 1;
  }
  auto processes = NodeProcesses(*spec, cluster, (*coordinator)->address(), external_workers);
  if (!processes.ok()) return Refuse(processes.status().message());
  // Only now the run's files: a launch refused above (a bad key file, too few host slots)
  // leaves the previous run's metrics.csv as it was.
  if (auto s = report.Open(); !s.ok()) return Refuse(s.message());
  if (cluster.kind != LauncherKind::kLocal) {
    std::cout << "coordinator " << (*coordinator)->address() << ", nodes by "
              << LauncherName(cluster.kind) << ", "
              << (transport_options.key ? "CURVE with key " + cluster.key_file
                  : loopback            ? std::string("plaintext on loopback")
                                        : std::string("plaintext (--insecure)"))
              << std::endl;
  }
  const bool joins = MaxWorkers(*spec) > spec->workers;
  if (external_workers || joins) {
    // Scripts read the address from the file; people from the line.
    std::ofstream((fs::path(config.out) / "coordinator.address").string())
        << (*coordinator)->address() << "\n";
  }
  if (joins) {
    std::cout << "up to " << MaxWorkers(*spec) - spec->workers
              << " more workers may join: syncline-worker --coordinator "
              << (*coordinator)->address() << " --join"
              << (transport_options.key ? " --key-file " + cluster.key_file : std::string())
              << std::endl;
  }
  if (external_workers) {
    std::cout << "coordinator " << (*coordinator)->address() << "  (waiting for " << spec->workers
              << " external workers, ranks 0.." << spec->workers - 1 << ")" << std::endl;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const JobOutcome outcome =
      Supervise(*spec, *processes, **coordinator, report, checkpoints, *restore_clock, g_signal);
  report.EndProgress();
  checkpoints.Flush();  // manifests decided so far are on disk before the summary counts them
  return Conclude(outcome, report, checkpoints);
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "experiment") {
    return syncline::RunExperiment(argc - 1, argv + 1);
  }
  return syncline::Main(argc, argv);
}
