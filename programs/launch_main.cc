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
#include <optional>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
#include "job/options.h"
#include "launch/batch_script.h"
#include "launch/checkpoint_tracker.h"
#include "launch/cluster.h"
#include "launch/dp_setup.h"
#include "launch/earlier_results.h"
#include "launch/experiment.h"
#include "launch/flag_help.h"
#include "launch/flag_modes.h"
#include "launch/generate_data.h"
#include "launch/job_config.h"
#include "launch/job_observers.h"
#include "launch/launch_flags.h"
#include "launch/privacy_command.h"
#include "launch/resume.h"
#include "launch/run_report.h"
#include "launch/spelling.h"
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
    "      --train a.libsvm --test b.libsvm  # multilayer perceptron, softmax output\n"
    "  syncline-launch --servers 2 --workers 2 --sync bsp -- python3 train.py --epochs 2\n"
    "      # your own PyTorch worker (syncline.torch) as every worker, with\n"
    "      # SYNCLINE_COORDINATOR and SYNCLINE_RANK set; everything after -- is its command\n";

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
    if (a == "--") {  // the workers' command, word for word
      args.insert(args.end(), argv + i, argv + argc);
      break;
    }
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

// The cluster flags into f.cluster: what starts the nodes, on which hosts, on which ports.
absl::Status ResolveCluster(const CLI::App& app, const JobSpec& spec, LaunchFlags& f) {
  ClusterOptions& cluster = f.cluster;
  absl::StatusOr<LauncherKind> kind = ParseLauncher(f.launcher);
  if (!kind.ok()) return kind.status();
  cluster.kind = *kind;
  cluster.rsh_given = app.get_option("--rsh")->count() > 0;
  if (!f.hosts.empty() && !f.hostfile.empty()) {
    return absl::InvalidArgumentError("give --hosts or --hostfile, not both");
  }
  if (!f.hosts.empty() || !f.hostfile.empty()) {
    auto parsed = f.hosts.empty() ? ReadHostfile(f.hostfile) : ParseHosts(f.hosts);
    if (!parsed.ok()) return parsed.status();
    cluster.hosts = std::move(*parsed);
  }
  const bool needs_hosts =
      cluster.kind == LauncherKind::kSsh || cluster.kind == LauncherKind::kMpirun;
  if (needs_hosts && cluster.hosts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--launcher ", f.launcher, " needs --hosts or --hostfile"));
  }
  if (!needs_hosts && !cluster.hosts.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--hosts and --hostfile are for --launcher ssh or mpirun, not ", f.launcher));
  }
  if (spec.max_restarts > 0 &&
      (cluster.kind == LauncherKind::kMpirun || cluster.kind == LauncherKind::kSlurm)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-restarts needs --launcher local or ssh: ", f.launcher,
                     " starts every node as one world, which cannot restart one of them"));
  }
  if (!f.port_range.empty()) {
    auto ports = ParsePortRange(f.port_range);
    if (!ports.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--port-range: ", ports.status().message()));
    }
    cluster.ports = *ports;
  }
  return absl::OkStatus();
}

// The run folder and the checkpoints for this run: locked, data generated where there is no
// --train, and the checkpoint to restore found. Returns the clock the run starts from (-1:
// afresh).
absl::StatusOr<int64_t> PrepareRunFolder(const LaunchFlags& f, JobSpec& spec) {
  if (f.resume && f.resume_if_any) {
    return absl::InvalidArgumentError("give --resume or --resume-if-any, not both");
  }
  const bool resumes = f.resume || f.resume_if_any;
  if (resumes && spec.sync.gossip() && spec.sync.asynchronous) {
    return absl::InvalidArgumentError(AsyncGossipCannotCheckpoint(spec.sync));
  }
  SetLogTag("launch");
  if (auto s = LockRunFolders(spec, f.config.out, resumes); !s.ok()) return s;
  // Workers of one's own, or a user's worker command, bring their data: generated files would
  // be named in the summary although no worker read them.
  if (spec.data.train.empty() && !f.external_workers && spec.worker_command.empty()) {
    if (auto s = GenerateData(f.config, &spec); !s.ok()) return s;
  }
  return PrepareCheckpoints(&spec, f.resume, f.resume_if_any);
}

// The data ids of the job's nodes: servers, then workers.
std::vector<std::string> NodeIds(const JobSpec& spec) {
  std::vector<std::string> ids;
  for (int r = 0; r < spec.servers; ++r) ids.push_back(DataEndpointId(wire::Role::SERVER, r));
  for (int r = 0; r < spec.workers; ++r) ids.push_back(DataEndpointId(wire::Role::WORKER, r));
  return ids;
}

// Every endpoint id the coordinator's transport accepts: the nodes', the joiners'.
std::vector<std::string> AllowedIds(const JobSpec& spec) {
  return JobEndpointIds(spec.servers, MaxWorkers(spec), MaxWorkers(spec) > spec.workers);
}

// Writes node `node`'s key file of `incarnation` into the folder of node keys `dir`.
absl::Status WriteNodeKey(const JobKey& key, const fs::path& dir, const JobSpec& spec,
                          const std::string& node, int incarnation) {
  return key.SaveNodeKey((dir / (node + ".key")).string(), node, incarnation, NodeIds(spec));
}

// The transport's settings. Off loopback every connection is authenticated and encrypted,
// with a key of this job's own unless one was given (a file all hosts can read: a shared
// folder). With per-node keys (--node-keys on, the default) the nodes get keys of their own,
// OUT/keys/<id>.key, derived from it; `*authority` is then the job's key, which the
// launcher's coordinator holds alone.
absl::StatusOr<ZmqOptions> TransportOptions(LaunchFlags& f, const JobSpec& spec, bool loopback,
                                            std::shared_ptr<JobKey>* authority) {
  ClusterOptions& cluster = f.cluster;
  cluster.insecure = f.insecure;
  cluster.node_key_dir.clear();
  ZmqOptions transport_options;
  if (!cluster.key_file.empty() || (!f.insecure && !loopback)) {
    absl::StatusOr<JobKey> key = absl::UnknownError("");
    if (cluster.key_file.empty()) {
      cluster.key_file = (fs::absolute(f.config.out) / "job.key").string();
      key = JobKey::Generate();
      if (auto s = key->Save(cluster.key_file); !s.ok()) return s;
    } else {
      cluster.key_file = fs::absolute(cluster.key_file).string();
      key = JobKey::Load(cluster.key_file);
      if (!key.ok()) return key.status();
      if (!key->authority()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--key-file ", cluster.key_file, " is the key of node ", key->node(),
                         ", not a job key: give the job's (OUT/job.key of the run that made it)"));
      }
    }
    *authority = std::make_shared<JobKey>(*std::move(key));
    transport_options.key = *authority;
    const bool joins = MaxWorkers(spec) > spec.workers;
    if (cluster.node_keys && joins) {
      std::cout << "every node gets the job key: a worker that joins (--max-workers) has no key "
                   "of its own yet"
                << std::endl;
    } else if (cluster.node_keys) {
      const fs::path dir = fs::absolute(f.config.out) / "keys";
      std::error_code error;
      fs::create_directories(dir, error);
      if (!error) fs::permissions(dir, fs::perms::owner_all, error);
      if (error) {
        return absl::UnavailableError(absl::StrCat("cannot make the folder of node keys ",
                                                   dir.string(), ": ", error.message()));
      }
      // An earlier run's keys go: only this job's nodes have keys here.
      for (const auto& entry : fs::directory_iterator(dir, error)) {
        if (entry.path().extension() == ".key") fs::remove(entry.path(), error);
      }
      for (const std::string& node : NodeIds(spec)) {
        if (auto s = WriteNodeKey(**authority, dir, spec, node, 0); !s.ok()) return s;
      }
      cluster.node_key_dir = dir.string();
    }
  }
  return transport_options;
}

// Gives the replacement of a failed node a key of its own (the next incarnation's), and makes
// the coordinator accept that key alone for the node's control connection.
absl::Status RekeyNode(const JobSpec& spec, const ClusterOptions& cluster, JobKey& key,
                       ZmqTransport& transport, wire::Role role, int rank) {
  if (cluster.node_key_dir.empty()) return absl::OkStatus();
  const std::string node = DataEndpointId(role, rank);
  const int incarnation = key.IncarnationOfNode(node) + 1;
  if (auto s = WriteNodeKey(key, cluster.node_key_dir, spec, node, incarnation); !s.ok()) return s;
  key.SetIncarnation(node, incarnation);
  transport.AllowPeers(AllowedIds(spec));
  SYNCLINE_LOG(INFO) << node << "'s replacement gets the key of incarnation " << incarnation;
  return absl::OkStatus();
}

// The coordinator on the first free port of --port-range, as the nodes take theirs (any port
// without one).
absl::StatusOr<std::unique_ptr<Coordinator>> CreateCoordinator(ZmqTransport& transport,
                                                               const LaunchFlags& f,
                                                               const std::string& bind_ip,
                                                               const JobSpec& spec,
                                                               CoordinatorObserver* observer) {
  const ClusterOptions& cluster = f.cluster;
  CoordinatorOptions options = CoordinatorOptionsFor(spec);
  // Workers of one's own evaluate on test data of their own (WorkerSession::Finish), which
  // the job's spec does not name.
  if (f.external_workers) options.evaluate = true;
  absl::StatusOr<std::unique_ptr<Coordinator>> coordinator =
      absl::UnavailableError("no port tried");
  for (int port = cluster.ports.any() ? 0 : cluster.ports.first;
       port <= (cluster.ports.any() ? 0 : cluster.ports.last); ++port) {
    coordinator = Coordinator::Create(transport, absl::StrCat("tcp://", bind_ip, ":", port),
                                      options, observer);
    if (coordinator.ok() || !absl::IsUnavailable(coordinator.status())) break;
  }
  return coordinator;
}

std::string CoordinatorAddressFile(const std::string& out) {
  return (fs::path(out) / "coordinator.address").string();
}

// Tells people (a line) and scripts (OUT/coordinator.address) where the coordinator is, when
// nodes of their own are to join it.
void AnnounceCoordinator(const LaunchFlags& f, const JobSpec& spec, const std::string& address,
                         const ZmqOptions& transport_options, bool loopback) {
  const ClusterOptions& cluster = f.cluster;
  if (cluster.kind != LauncherKind::kLocal) {
    std::cout << "coordinator " << address << ", nodes by " << LauncherName(cluster.kind) << ", "
              << (!cluster.node_key_dir.empty() ? "keys of their own in " + cluster.node_key_dir +
                                                      " (the job's: " + cluster.key_file + ")"
                  : transport_options.key ? "CURVE with key " + cluster.key_file
                  : loopback              ? std::string("plaintext on loopback")
                                          : std::string("plaintext (--insecure)"))
              << std::endl;
  }
  const bool joins = MaxWorkers(spec) > spec.workers;
  if (f.external_workers || joins) {
    // Scripts read the address from the file; people from the line. It is there while the job
    // runs (RunJob removes it at the end).
    std::ofstream(CoordinatorAddressFile(f.config.out)) << address << "\n";
  }
  if (joins) {
    std::cout << "up to " << MaxWorkers(spec) - spec.workers
              << " more workers may join: syncline-worker --coordinator " << address << " --join"
              << (transport_options.key ? " --key-file " + cluster.key_file : std::string())
              << std::endl;
  }
  if (f.external_workers) {
    std::cout << "coordinator " << address << "  (waiting for " << spec.workers
              << " external workers, ranks 0.." << spec.workers - 1 << ")"
              << (!cluster.node_key_dir.empty()
                      ? "; each with --key-file " + cluster.node_key_dir + " (its own key inside)"
                  : transport_options.key ? "; each with --key-file " + cluster.key_file
                                          : std::string())
              << std::endl;
  }
}

// Starts the coordinator and the nodes, supervises the job to its end and writes its
// summary; returns the launcher's exit code.
int RunJob(LaunchFlags& f, const JobSpec& spec, int64_t restore_clock) {
  RunReport report(spec, f.config.out, isatty(STDERR_FILENO) != 0);
  CheckpointTracker checkpoints(CheckpointTrackerOptions{.root = spec.checkpoint.dir,
                                                         .servers = spec.servers,
                                                         .workers = spec.workers,
                                                         .keep = spec.checkpoint.keep,
                                                         .job = ManifestEntries(spec)});
  report.SetCheckpoints(&checkpoints, restore_clock);
  absl::StatusOr<std::string> bind_ip = CoordinatorBindIp(f.cluster);
  if (!bind_ip.ok()) return Refuse(bind_ip.status().message());
  const bool loopback = ListensOnlyOnLoopback(f.cluster, *bind_ip);
  std::shared_ptr<JobKey> authority;
  absl::StatusOr<ZmqOptions> transport_options = TransportOptions(f, spec, loopback, &authority);
  if (!transport_options.ok()) return Refuse(transport_options.status().message());
  ZmqTransport transport(*transport_options);
  transport.AllowPeers(AllowedIds(spec));
  // Metrics, Prometheus's targets, TensorBoard and the trace (docs/OBSERVABILITY.md).
  absl::StatusOr<std::unique_ptr<JobObservers>> observers = JobObservers::Start(
      JobObserversOptions{.out = f.config.out,
                          .run = f.config.out,
                          .metrics_port = *ParseMetricsPort(f.metrics_port),
                          .ip = *bind_ip,
                          .ports = f.cluster.ports,
                          .scrape_interval = absl::Seconds(f.metrics_scrape_interval)},
      report, &checkpoints);
  if (!observers.ok()) return Refuse(observers.status().message());
  auto coordinator = CreateCoordinator(transport, f, *bind_ip, spec, (*observers)->observer());
  if (!coordinator.ok()) {
    std::cerr << "syncline-launch: " << coordinator.status().message() << "\n";
    return 1;
  }
  (*observers)->SetCoordinator(**coordinator);
  absl::Cleanup detach = [&] { (*observers)->DetachCoordinator(); };
  const std::string address = (*coordinator)->address();
  auto processes = NodeProcesses(spec, f.cluster, address, f.external_workers);
  if (!processes.ok()) return Refuse(processes.status().message());
  // Only now the run's files: a launch refused above (a bad key file, too few host slots)
  // leaves the previous run's metrics.csv as it was.
  if (restore_clock < 0) {
    absl::StatusOr<std::vector<std::string>> moved = SetAsideEarlierResults(f.config.out);
    if (!moved.ok()) return Refuse(moved.status().message());
    if (!moved->empty()) {
      std::cerr << "syncline-launch: moved an earlier run's " << absl::StrJoin(*moved, ", ")
                << " to " << (fs::path(f.config.out) / "previous-run").string() << "\n";
    }
  }
  if (auto s = report.Open(); !s.ok()) return Refuse(s.message());
  AnnounceCoordinator(f, spec, address, *transport_options, loopback);
  if (const int port = (*observers)->metrics_port(); port > 0) {
    std::cout << "metrics: http://" << *bind_ip << ":" << port
              << "/metrics; every node's page: prometheus --config.file "
              << (fs::path(f.config.out) / "prometheus" / "prometheus.yml").string() << std::endl;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const JobOutcome outcome = Supervise(
      spec, *processes, **coordinator, report, checkpoints, restore_clock, g_signal,
      [&](wire::Role role, int rank) {
        return authority == nullptr ? absl::OkStatus()
                                    : RekeyNode(spec, f.cluster, *authority, transport, role, rank);
      });
  std::cerr << (*observers)->Finish(spec);
  // A worker started with its address after the job's end would wait for its startup timeout.
  std::error_code ec;
  fs::remove(CoordinatorAddressFile(f.config.out), ec);
  report.EndProgress();
  checkpoints.Flush();  // manifests decided so far are on disk before the summary counts them
  return Conclude(outcome, report, checkpoints);
}

// The subcommands, for --help, docs/FLAGS.md and the suggestion for a mistyped one.
constexpr std::pair<const char*, const char*> kSubcommands[] = {
    {"experiment",
     "runs the job once per value of a swept flag (--sync bsp,asp,ssp:1, --compress, "
     "--aggregate, ...) on the same data and compares the runs: OUT/summary.csv, OUT/report.md "
     "and plots. Its flags: syncline-launch experiment --help"},
    {"privacy",
     "prints the epsilon that --steps steps at --sampling-rate and --noise-multiplier spend "
     "(or, with --epsilon, the noise multiplier a budget needs) as one JSON line: the "
     "accountant of --dp. Its flags: syncline-launch privacy --help"},
};

std::string SubcommandsText() {
  std::string text = "Subcommands:\n";
  for (const auto& [name, what] : kSubcommands) {
    absl::StrAppend(&text, "  ", absl::StrFormat("%-12s", name), " ", what, "\n");
  }
  absl::StrAppend(&text,
                  "\nEvery flag, and the sync modes each applies to: docs/FLAGS.md "
                  "(syncline-launch --help-markdown).");
  return text;
}

constexpr char kMarkdownIntro[] =
    "<!-- Generated by `syncline-launch --help-markdown` from the flags' own help (launch/\n"
    "     job_config.cc, launch/launch_flags.cc, launch/flag_modes.cc); do not edit by hand.\n"
    "     Regenerate: build/bin/syncline-launch --help-markdown > docs/FLAGS.md -->\n"
    "# syncline-launch flags\n\n"
    "`syncline-launch [OPTIONS] [JOB.toml]` runs one training job; `syncline-launch experiment`\n"
    "runs it once per value of a swept flag ([Subcommands](#subcommands)). A flag with a job-file\n"
    "key may also be set in a TOML job file (`key = value`, the flag's name without dashes); a\n"
    "flag on the command line wins over the file. Paths in a job file (`train`, `test`, `out`,\n"
    "`checkpoint-dir`) are relative to the file's folder, and an error about a value from the\n"
    "file names the file and line. A flag that the job's sync mode ignores is refused or warned\n"
    "about: [Which flags apply to which sync mode](#which-flags-apply-to-which-sync-mode).\n\n";

std::string MarkdownOutro() {
  std::string md = "\n## Subcommands\n\n";
  for (const auto& [name, what] : kSubcommands) {
    absl::StrAppend(&md, "- `syncline-launch ", name, "`: ", what, ".\n");
  }
  absl::StrAppend(&md,
                  "\n### syncline-launch experiment\n\n"
                  "Its own flags; every other flag goes to each run as given (a flag that a "
                  "run's mode ignores is left out of that run).\n\n",
                  ExperimentFlagsMarkdown(),
                  "\n### syncline-launch privacy\n\n"
                  "The RDP accountant of `--dp` (docs/PRIVACY.md) on its own.\n\n",
                  PrivacyFlagsMarkdown());
  absl::StrAppend(
      &md,
      "\n## Which flags apply to which sync mode\n\n"
      "Every flag not listed applies to every mode. A flag given for a mode that ignores it is\n"
      "refused (exit code 2) when the mismatch is explicit: the flag and `--sync` both on the\n"
      "command line, or both in the job file. A job file's setting for another mode than the\n"
      "command line's `--sync` is ignored with a warning, and so is a flag whose row says\n"
      "\"warning\". `syncline-launch experiment` leaves a flag out of the runs whose mode ignores\n"
      "it, and says so. The `--gen-*` flags are ignored, with a warning, when no data is\n"
      "generated: with `--train`, or `--external-workers`.\n\n",
      FlagModesMarkdown());
  return md;
}

// The flags that the job's mode ignores: refused, or logged as warnings.
absl::Status CheckTheFlagsApply(const JobConfig& config) {
  absl::StatusOr<SyncMode> sync = ParseSyncMode(config.sync);
  if (!sync.ok()) return absl::OkStatus();  // BuildJobSpec names what is wrong with it
  absl::StatusOr<std::vector<std::string>> warnings = CheckFlagsApply(*sync, config);
  if (!warnings.ok()) return warnings.status();
  for (const std::string& warning : *warnings) SYNCLINE_LOG(WARNING) << warning;
  return absl::OkStatus();
}

// Everything after the first "--" is the workers' command (a user's program); argc is cut there.
// nullopt without a "--".
std::optional<std::vector<std::string>> TakeWorkerCommand(int* argc, char** argv) {
  for (int i = 1; i < *argc; ++i) {
    if (std::string_view(argv[i]) == "--") {
      std::vector<std::string> command(argv + i + 1, argv + *argc);
      *argc = i;
      return command;
    }
  }
  return std::nullopt;
}

// What a job whose workers run a user's command may not ask for.
absl::Status CheckWorkerCommand(const JobSpec& spec, const LaunchFlags& f) {
  if (spec.worker_command.empty()) {
    return absl::InvalidArgumentError(
        "-- must be followed by the workers' command, e.g. -- python3 train.py");
  }
  if (f.external_workers) {
    return absl::InvalidArgumentError(
        "give --external-workers (you start the workers) or -- COMMAND (the launcher starts "
        "COMMAND as every worker), not both");
  }
  if (spec.max_restarts > 0) {
    return absl::InvalidArgumentError(
        "--max-restarts: a worker command cannot roll back in place (its process would have to "
        "undo its own steps); checkpoint it (--checkpoint-every, syncline.torch."
        "checkpoint_state) and start the job again with --resume");
  }
  if (spec.max_workers > spec.workers) {
    return absl::InvalidArgumentError(
        "--max-workers: workers that join run syncline-worker's built-in models, not the "
        "worker command");
  }
  if (spec.sync.gossip() || spec.sync.fedavg()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync ", SyncModeName(spec.sync),
        ": a worker command (syncline.torch) runs under --sync bsp, ssp:S, asp, hybrid or "
        "allreduce"));
  }
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  PrepareProcess();
  const int full_argc = argc;  // a batch script runs the whole command line, -- COMMAND too
  std::optional<std::vector<std::string>> worker_command = TakeWorkerCommand(&argc, argv);
  CLI::App app(kAbout);
  app.formatter(GroupedHelpFormatter());
  app.footer(SubcommandsText());
  app.get_help_ptr()->group(FlagGroupName(FlagGroup::kJob));
  LaunchFlags f;
  AddLaunchFlags(app, &f);
  bool markdown = false;
  app.add_flag("--help-markdown", markdown, "docs/FLAGS.md")->group("");  // hidden
  if (auto s = AddJobFlags(app, &f.config); !s.ok()) return Refuse(s.message());
  auto action = ParseJobCommandLine(argc, argv, app, &f.config);
  if (!action.ok())
    return Refuse(absl::StrCat(action.status().message(), "\nRun with --help for usage."));
  if (*action == CommandLineAction::kShowHelp || markdown) {
    std::cout << (markdown ? FlagsMarkdown(app, kMarkdownIntro, MarkdownOutro()) : app.help());
    return 0;
  }
  for (const auto& [flag, text] : {std::pair<const char*, const std::string&>{"--hosts", f.hosts},
                                   {"--hostfile", f.hostfile},
                                   {"--rsh", f.cluster.rsh},
                                   {"--interface", f.cluster.interface},
                                   {"--coordinator-interface", f.cluster.coordinator_interface},
                                   {"--port-range", f.port_range},
                                   {"--launcher-args", f.cluster.launcher_args},
                                   {"--sbatch-args", f.sbatch_args},
                                   {"--key-file", f.cluster.key_file}}) {
    if (auto s = RefuseControlCharacters(flag, text); !s.ok()) return Refuse(s.message());
  }
  if (f.external_workers) f.config.given["external-workers"] = {};
  if (auto s = CheckTheFlagsApply(f.config); !s.ok()) return Refuse(s.message());
  absl::StatusOr<JobSpec> spec = BuildJobSpec(f.config);
  if (!spec.ok()) return Refuse(spec.status().message());
  if (worker_command.has_value()) {
    spec->worker_command = std::move(*worker_command);
    if (auto s = CheckWorkerCommand(*spec, f); !s.ok()) return Refuse(s.message());
  }
  for (const std::string& warning : JobSpecWarnings(*spec)) SYNCLINE_LOG(WARNING) << warning;
  if (auto s = ResolveCluster(app, *spec, f); !s.ok()) return Refuse(s.message());
  f.cluster.metrics = f.metrics_port != "off";
  if (f.sbatch) return SubmitBatchJob(full_argc, argv, *spec, f.config.out, f.sbatch_args);
  std::error_code cwd_error;
  f.cluster.working_dir = fs::current_path(cwd_error).string();
  f.cluster.out = fs::absolute(f.config.out).string();
  absl::StatusOr<int64_t> restore_clock = PrepareRunFolder(f, *spec);
  if (!restore_clock.ok()) return Refuse(restore_clock.status().message());
  absl::StatusOr<std::string> privacy = SetUpPrivacy(*spec);
  if (!privacy.ok()) return Refuse(privacy.status().message());
  if (!privacy->empty()) SYNCLINE_LOG(INFO) << *privacy;
  return RunJob(f, *spec, *restore_clock);
}

// A first argument that is neither a flag nor a job file, close to a subcommand's name, is
// that subcommand mistyped.
std::optional<int> RefuseMistypedSubcommand(int argc, char** argv) {
  if (argc < 2) return std::nullopt;
  const std::string first = argv[1];
  if (first.empty() || first[0] == '-' || first.ends_with(".toml")) return std::nullopt;
  std::vector<std::string> names;
  for (const auto& [name, what] : kSubcommands) names.emplace_back(name);
  const std::string suggestion = DidYouMean(first, names);
  if (suggestion.empty()) return std::nullopt;
  return Refuse(
      absl::StrCat("unknown subcommand '", first, "'", suggestion, "\nRun with --help for usage."));
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "experiment") {
    return syncline::RunExperiment(argc - 1, argv + 1);
  }
  if (argc > 1 && std::string_view(argv[1]) == "privacy") {
    return syncline::RunPrivacyCommand(argc - 1, argv + 1);
  }
  if (auto refused = syncline::RefuseMistypedSubcommand(argc, argv)) return *refused;
  return syncline::Main(argc, argv);
}
