// syncline-launch: starts a Syncline job on this machine: the coordinator (in this process),
// the parameter servers and the workers (as child processes), shows progress, and writes the
// run's metrics.csv and summary.json. If any process fails it stops the others and exits
// non-zero with the reason.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "checkpoint/checkpoint.h"
#include "core/coordinator.h"
#include "core/log.h"
#include "core/zmq_transport.h"
#include "gossip/topology.h"
#include "launch/checkpoint_tracker.h"
#include "launch/experiment.h"
#include "launch/job_config.h"
#include "launch/process_group.h"
#include "launch/run_report.h"
#include "tools/criteo_gen.h"
#include "tools/synthetic.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

std::atomic<int> g_signal{0};
void OnSignal(int sig) { g_signal.store(sig); }

// The staleness bound of a --sync value (already validated): 0 BSP, -1 ASP, s SSP(s).
int64_t StalenessOf(const std::string& sync) {
  if (sync == "bsp") return 0;
  // Gossip peers have no servers; the job goes on without a lost peer, as under ASP.
  if (sync == "asp" || sync.starts_with("gossip")) return -1;
  int64_t s = 0;
  (void)absl::SimpleAtoi(sync.substr(4), &s);
  return s;
}

fs::path BinaryDir() {
  if (const char* dir = std::getenv("SYNCLINE_BIN_DIR"); dir != nullptr && *dir) return dir;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path(".") : self.parent_path();
}

// Binaries sit in their folder's build directory (build/ps/syncline-ps) or all in one
// installed bin/ directory.
std::string FindBinary(const std::string& name, const std::string& subdir) {
  const fs::path dir = BinaryDir();
  for (const fs::path& p : {dir / name, dir.parent_path() / subdir / name}) {
    if (fs::exists(p)) return p.string();
  }
  return (dir / name).string();
}

// Points job.train (and job.test, when test rows are asked for) at DATA/train.EXT and
// DATA/test.EXT and opens them for writing.
absl::Status OpenGeneratedFiles(JobConfig& job, const fs::path& data, const std::string& ext,
                                std::ofstream& train, std::ofstream& test) {
  job.train = (data / ("train." + ext)).string();
  train.open(job.train);
  if (job.gen_test_rows > 0) {
    job.test = (data / ("test." + ext)).string();
    test.open(job.test);
  }
  if (!train || (job.gen_test_rows > 0 && !test)) {
    return absl::PermissionDeniedError(absl::StrFormat("cannot write data into %s", data.string()));
  }
  return absl::OkStatus();
}

// Criteo-format click data for the ctr model (see tools/criteo_gen.h).
absl::Status GenerateCriteoData(JobConfig& job, const fs::path& data) {
  CriteoGenOptions o;
  o.rows = job.gen_rows;
  o.test_rows = job.gen_test_rows;
  o.seed = job.seed;
  std::ofstream train, test;
  if (auto s = OpenGeneratedFiles(job, data, "tsv", train, test); !s.ok()) return s;
  auto summary = WriteCriteoSynthetic(o, train, job.gen_test_rows > 0 ? &test : nullptr);
  if (!summary.ok()) return summary.status();
  std::cerr << absl::StrFormat(
      "generated %d training and %d test examples (Criteo format, seed %d) in %s\n",
      summary->train_rows, summary->test_rows, o.seed, data.string());
  return absl::OkStatus();
}

absl::Status GenerateData(JobConfig& job) {
  const fs::path data = fs::path(job.out) / "data";
  std::error_code ec;
  fs::create_directories(data, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrFormat("cannot create %s", data.string()));
  if (UsesCriteoData(job)) {
    if (job.model == "ctr" && job.gen_rows < 100000) {
      std::cerr << "syncline-launch: note: --model ctr learns little from " << job.gen_rows
                << " generated rows (test AUC about 0.6); --gen-rows 200000 --lr 0.05 "
                   "--epochs 2 reaches about 0.83 (examples/ctr)\n";
    }
    return GenerateCriteoData(job, data);
  }
  SyntheticOptions o;
  o.rows = job.gen_rows;
  o.test_rows = job.gen_test_rows;
  o.features = job.gen_features;
  o.nnz = job.gen_nnz;
  o.classes = job.classes;
  o.seed = job.seed;
  std::ofstream train, test;
  if (auto s = OpenGeneratedFiles(job, data, "libsvm", train, test); !s.ok()) return s;
  auto summary = WriteSynthetic(o, train, job.gen_test_rows > 0 ? &test : nullptr);
  if (!summary.ok()) return summary.status();
  std::cerr << absl::StrFormat(
      "generated %d training and %d test examples (%d features, seed %d) in %s\n",
      summary->train_rows, summary->test_rows, o.features, o.seed, data.string());
  return absl::OkStatus();
}

std::vector<std::string> WorkerArgs(const JobConfig& job, const std::string& coordinator,
                                    int rank) {
  std::vector<std::string> a = {FindBinary("syncline-worker", "worker"),
                                "--coordinator",
                                coordinator,
                                "--rank",
                                std::to_string(rank),
                                "--workers",
                                std::to_string(job.workers),
                                "--sync",
                                job.sync,
                                "--train",
                                job.train,
                                "--format",
                                job.format,
                                "--index-base",
                                job.index_base,
                                "--model",
                                job.model,
                                "--classes",
                                std::to_string(job.classes),
                                "--embedding-dim",
                                std::to_string(job.embedding_dim),
                                "--hidden",
                                std::to_string(job.hidden),
                                "--epochs",
                                std::to_string(job.epochs),
                                "--batch-size",
                                std::to_string(job.batch_size),
                                "--optimizer",
                                job.optimizer,
                                "--lr",
                                absl::StrFormat("%.9g", job.learning_rate),
                                "--l2",
                                absl::StrFormat("%.9g", job.l2),
                                "--seed",
                                std::to_string(job.seed),
                                "--log-every",
                                std::to_string(job.log_every),
                                "--request-timeout",
                                absl::StrFormat("%g", job.request_timeout_s)};
  if (job.compress != "none") a.insert(a.end(), {"--compress", job.compress});
  if (job.sync.starts_with("gossip")) {
    a.insert(a.end(), {"--peer-timeout", absl::StrFormat("%g", job.peer_timeout_s)});
  }
  const std::pair<const char*, std::string> injected[] = {
      {"--straggler", job.straggler}, {"--jitter", job.jitter}, {"--delay", job.delay}};
  for (const auto& [flag, value] : injected) {
    if (!value.empty()) a.insert(a.end(), {flag, value});
  }
  if (job.min_step_ms > 0) {
    a.insert(a.end(), {"--min-step-ms", absl::StrFormat("%g", job.min_step_ms)});
  }
  if (!job.test.empty()) {
    a.insert(a.end(),
             {"--test", job.test, "--dump-params", (fs::path(job.out) / "params.tsv").string()});
  }
  return a;
}

// What a checkpoint's manifest says about the job, and what --resume compares (with servers and
// workers): settings that would make the resumed run differ from the one it continues.
std::vector<std::pair<std::string, std::string>> ManifestJob(const JobConfig& job) {
  return {{"sync", job.sync},
          {"model", job.model},
          {"classes", std::to_string(job.classes)},
          {"embedding-dim", std::to_string(job.embedding_dim)},
          {"hidden", std::to_string(job.hidden)},
          {"train", job.train},
          {"format", job.format},
          {"batch-size", std::to_string(job.batch_size)},
          {"seed", std::to_string(job.seed)},
          {"optimizer", job.optimizer},
          {"lr", absl::StrFormat("%.9g", job.learning_rate)},
          {"l2", absl::StrFormat("%.9g", job.l2)},
          {"compress", job.compress}};
}

// Renames every checkpoint folder newer than `clock` under `root` to abandoned-<name>, after
// deleting what an earlier resume set aside (only the latest failed attempt is kept for a
// post-mortem); returns the new names.
std::vector<std::string> AbandonNewerCheckpoints(const std::string& root, int64_t clock) {
  std::vector<std::string> moved;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with("abandoned-")) stale.push_back(entry.path());
  }
  for (const fs::path& p : stale) fs::remove_all(p, ec);
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    int64_t c = 0;
    if (!name.starts_with("ckpt-") || !absl::SimpleAtoi(name.substr(5), &c) || c <= clock) {
      continue;
    }
    const fs::path to = fs::path(root) / ("abandoned-" + name);
    fs::remove_all(to, ec);
    fs::rename(entry.path(), to, ec);
    if (!ec) moved.push_back(to.string());
  }
  return moved;
}

// Moves every ckpt-* folder under `root` into a new folder root/earlier-run-<local time>
// (never deleting anything); returns that folder and how many were moved (0: none, and no
// folder made). An error names the path that could not be read, made or moved.
absl::StatusOr<std::pair<std::string, int>> SetAsideEarlierRun(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) {
    if (ec) return absl::InternalError(absl::StrCat("cannot stat ", root, ": ", ec.message()));
    return std::make_pair(std::string(), 0);
  }
  std::vector<fs::path> earlier;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    if (entry.path().filename().string().starts_with("ckpt-")) earlier.push_back(entry.path());
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", root, ": ", ec.message()));
  if (earlier.empty()) return std::make_pair(std::string(), 0);
  const std::string stamp = absl::FormatTime("%Y%m%d-%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  fs::path to = fs::path(root) / ("earlier-run-" + stamp);
  // create_directory says whether it made the folder: one that exists is another run's.
  for (int n = 2; !fs::create_directory(to, ec); ++n) {
    if (ec) {
      return absl::InternalError(absl::StrCat("cannot create ", to.string(), ": ", ec.message()));
    }
    to = fs::path(root) / absl::StrCat("earlier-run-", stamp, "-", n);
  }
  for (const fs::path& p : earlier) {
    fs::rename(p, to / p.filename(), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot move ", p.string(), " to ", to.string(), ": ", ec.message()));
    }
  }
  return std::make_pair(to.string(), static_cast<int>(earlier.size()));
}

// Takes `folder`/.syncline-launch.lock for as long as this process lives (the descriptor is
// closed on exec, so children do not hold it): two launchers writing one run folder or one
// checkpoint folder would mix their files and move each other's checkpoints.
absl::Status LockFolder(const std::string& folder) {
  std::error_code ec;
  fs::create_directories(folder, ec);
  const std::string path = (fs::path(folder) / ".syncline-launch.lock").string();
  const int fd = open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
  if (fd < 0) return absl::PermissionDeniedError(absl::StrCat("cannot open ", path));
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(folder, " is in use by another syncline-launch (", path, " is locked)"));
  }
  return absl::OkStatus();  // the descriptor stays open, and locked, until exit
}

// Checkpoint flags, the same for servers and workers.
void AddCheckpointArgs(const JobConfig& job, const std::string& restore,
                       std::vector<std::string>& args) {
  if (job.checkpoint_every > 0 || job.checkpoint_seconds > 0) {
    args.insert(args.end(), {"--checkpoint-dir", job.checkpoint_dir, "--checkpoint-every",
                             std::to_string(job.checkpoint_every)});
  }
  if (!restore.empty()) args.insert(args.end(), {"--restore", restore});
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-launch: runs a Syncline training job on this machine.\n"
      "Starts the coordinator, --servers parameter servers and --workers workers, shows progress,\n"
      "and writes OUT/metrics.csv and OUT/summary.json. Options may also come from a TOML job\n"
      "file (keys are the flag names without dashes); flags win over the file.\n"
      "Without --train it generates synthetic data (see the --gen-* flags).\n\n"
      "Example:\n"
      "  syncline-launch --servers 2 --workers 2 --sync bsp --model logreg \\\n"
      "      --train a.libsvm --test b.libsvm --epochs 3 --out runs/x\n"
      "  syncline-launch --model ctr --format criteo --train a.tsv --test b.tsv \\\n"
      "      --embedding-dim 8 --hidden 64    # DLRM-style CTR model on Criteo data\n");
  JobConfig job;
  bool resume = false;
  app.add_flag("--resume", resume,
               "Restart the job from the newest complete checkpoint in --checkpoint-dir "
               "(damaged or partial ones are reported and skipped)");
  bool resume_if_any = false;
  app.add_flag("--resume-if-any", resume_if_any,
               "Like --resume when --checkpoint-dir holds a complete checkpoint, else start "
               "afresh: one command for every attempt of a job that a scheduler may requeue");
  if (auto s = AddJobFlags(app, &job); !s.ok()) {
    std::cerr << "syncline-launch: " << s.message() << "\n";
    return 2;
  }
  auto action = ParseJobCommandLine(argc, argv, app, &job);
  if (!action.ok()) {
    std::cerr << "syncline-launch: " << action.status().message()
              << "\nRun with --help for usage.\n";
    return 2;
  }
  if (*action == CommandLineAction::kShowHelp) {
    std::cout << app.help();
    return 0;
  }
  if (auto s = Validate(job); !s.ok()) {
    std::cerr << "syncline-launch: " << s.message() << "\n";
    return 2;
  }
  if (resume && resume_if_any) {
    std::cerr << "syncline-launch: give --resume or --resume-if-any, not both\n";
    return 2;
  }
  if (job.sync.starts_with("gossip")) {
    // Synchronous gossip checkpoints: every peer saves its model after the same step. Push-sum
    // weight in flight between asynchronous peers would be lost.
    // Validate() accepted the mode, so it parses.
    const bool asynchronous = ParseGossipMode(job.sync)->second;
    if (asynchronous &&
        (job.checkpoint_every > 0 || job.checkpoint_seconds > 0 || resume || resume_if_any)) {
      std::cerr << "syncline-launch: --checkpoint-every, --checkpoint-seconds and --resume need "
                   "parameter servers or synchronous gossip ("
                << job.sync << " is asynchronous)\n";
      return 2;
    }
    // Serverless: the workers average with their neighbours.
    job.servers = 0;
  }
  if (job.checkpoint_dir.empty()) job.checkpoint_dir = (fs::path(job.out) / "checkpoints").string();
  SetLogTag("launch");
  std::error_code ec;
  fs::create_directories(job.out, ec);
  if (ec) {
    std::cerr << "syncline-launch: cannot create --out " << job.out << ": " << ec.message() << "\n";
    return 2;
  }
  std::vector<std::string> locked = {job.out};
  if (job.checkpoint_every > 0 || job.checkpoint_seconds > 0 || resume || resume_if_any) {
    // The checkpoint folder too, unless it is the run folder itself.
    if (fs::weakly_canonical(job.checkpoint_dir, ec) != fs::weakly_canonical(job.out, ec)) {
      locked.push_back(job.checkpoint_dir);
    }
  }
  for (const std::string& folder : locked) {
    if (auto s = LockFolder(folder); !s.ok()) {
      std::cerr << "syncline-launch: " << s.message() << "\n";
      return 2;
    }
  }
  if (job.train.empty()) {
    if (auto s = GenerateData(job); !s.ok()) {
      std::cerr << "syncline-launch: " << s.message() << "\n";
      return 2;
    }
  }

  std::string restore;  // the checkpoint folder to start from
  int64_t restore_clock = -1;
  if (resume_if_any) {
    // Complete checkpoints (damaged ones too: --resume then says what is wrong with them
    // instead of this run quietly starting over); folders without a MANIFEST do not count.
    absl::StatusOr<bool> any = HasCompleteCheckpoint(job.checkpoint_dir);
    if (!any.ok()) {
      std::cerr << "syncline-launch: --resume-if-any: " << any.status().message() << "\n";
      return 2;
    }
    resume = *any;
    if (!resume) {
      std::cerr << "no complete checkpoint in " << job.checkpoint_dir << ": starting afresh\n";
    }
  }
  if (!resume && (job.checkpoint_every > 0 || job.checkpoint_seconds > 0)) {
    // A fresh run writes ckpt-<clock> folders: an earlier run's must not mix with them, and
    // must not be lost either (a forgotten --resume).
    absl::StatusOr<std::pair<std::string, int>> moved = SetAsideEarlierRun(job.checkpoint_dir);
    if (!moved.ok()) {
      std::cerr << "syncline-launch: " << moved.status().message() << "\n";
      return 2;
    }
    if (moved->second > 0) {
      std::cerr << "syncline-launch: moved " << moved->second
                << " checkpoint folder(s) of an earlier run to " << moved->first
                << " (--resume continues a run instead; delete the folder when it is not needed)\n";
    }
  }
  if (resume) {
    auto found = FindNewestCheckpoint(job.checkpoint_dir);
    if (!found.ok()) {
      std::cerr << "syncline-launch: --resume: " << found.status().message() << "\n";
      return 2;
    }
    for (const std::string& skipped : found->skipped) {
      std::cerr << "syncline-launch: skipping a damaged or partial checkpoint: " << skipped << "\n";
    }
    std::vector<std::pair<std::string, std::string>> expected = ManifestJob(job);
    expected.emplace_back("servers", std::to_string(job.servers));
    expected.emplace_back("workers", std::to_string(job.workers));
    for (const auto& [key, value] : found->manifest.job) {
      auto it = std::find_if(expected.begin(), expected.end(),
                             [&key](const auto& kv) { return kv.first == key; });
      if (it != expected.end() && it->second != value) {
        std::cerr << "syncline-launch: --resume: " << found->dir << " was written by a job with --"
                  << key << " " << value << "; this job has " << it->second
                  << " (resume with the same settings, or start afresh with another --out)\n";
        return 2;
      }
    }
    if (job.sync.starts_with("gossip")) {
      // A gossip peer missing from the checkpoint (lost, or finished before it) would come
      // back with an empty model that its neighbours average in; resume only with every peer.
      for (int w = 0; w < job.workers; ++w) {
        const std::string node = absl::StrCat("w", w);
        if (std::find(found->manifest.nodes.begin(), found->manifest.nodes.end(), node) ==
            found->manifest.nodes.end()) {
          std::cerr << "syncline-launch: --resume: " << found->dir << " holds no state of " << node
                    << " (lost or finished before it); gossip peers resume only from "
                    << "a checkpoint of every peer: move this folder aside to use an older one\n";
          return 2;
        }
      }
    }
    restore = found->dir;
    restore_clock = found->manifest.clock;
    // Folders newer than the one resumed from belong to the attempt that failed: set them
    // aside, so that neither pruning nor a later --resume mixes them with this run's.
    for (const std::string& dir : AbandonNewerCheckpoints(job.checkpoint_dir, restore_clock)) {
      std::cerr << "syncline-launch: set aside " << dir << "\n";
    }
    std::cerr << "resuming from " << restore << " (clock " << restore_clock << ")\n";
  }

  RunReport report(job, isatty(STDERR_FILENO) != 0);
  CheckpointTracker checkpoints(CheckpointTrackerOptions{.root = job.checkpoint_dir,
                                                         .servers = job.servers,
                                                         .workers = job.workers,
                                                         .keep = job.checkpoint_keep,
                                                         .job = ManifestJob(job)});
  report.SetCheckpoints(&checkpoints, restore_clock);
  if (auto s = report.Open(); !s.ok()) {
    std::cerr << "syncline-launch: " << s.message() << "\n";
    return 2;
  }

  ZmqTransport transport;
  CoordinatorOptions coordinator_options;
  coordinator_options.num_servers = job.servers;
  coordinator_options.num_workers = job.workers;
  coordinator_options.staleness = StalenessOf(job.sync);
  coordinator_options.heartbeat_interval = absl::Seconds(job.heartbeat_interval_s);
  coordinator_options.heartbeat_timeout = absl::Seconds(job.heartbeat_timeout_s);
  coordinator_options.evaluate = !job.test.empty();
  auto coordinator =
      Coordinator::Create(transport, "tcp://127.0.0.1:0", coordinator_options, &report);
  if (!coordinator.ok()) {
    std::cerr << "syncline-launch: " << coordinator.status().message() << "\n";
    return 1;
  }

  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  ProcessGroup group([&report](std::string_view label, OutputStream, std::string_view line) {
    report.ChildLine(label, line);
  });
  std::atomic<bool> job_done{false};
  absl::Status job_status;
  const absl::Time start = absl::Now();
  std::thread run([&] {
    job_status = (*coordinator)->Run();
    job_done.store(true);
  });

  std::string failure;
  std::vector<std::string> lost;  // workers the job went on without
  int failure_code = 1;
  const std::string& address = (*coordinator)->address();
  for (int r = 0; r < job.servers && failure.empty(); ++r) {
    ProcessSpec spec{"ps" + std::to_string(r),
                     {FindBinary("syncline-ps", "ps"), "--coordinator", address, "--rank",
                      std::to_string(r), "--embedding-dir",
                      (fs::path(job.out) / "embeddings" / ("ps" + std::to_string(r))).string(),
                      "--embedding-memory", job.embedding_memory, "--embedding-admit-after",
                      std::to_string(job.embedding_admit_after), "--embedding-expire-steps",
                      std::to_string(job.embedding_expire_steps), "--update-threads",
                      std::to_string(job.update_threads)}};
    AddCheckpointArgs(job, restore, spec.argv);
    if (auto pid = group.Start(spec); !pid.ok()) failure = std::string(pid.status().message());
  }
  for (int r = 0; r < job.workers && failure.empty(); ++r) {
    ProcessSpec spec{"w" + std::to_string(r), WorkerArgs(job, address, r)};
    AddCheckpointArgs(job, restore, spec.argv);
    if (auto pid = group.Start(spec); !pid.ok()) failure = std::string(pid.status().message());
  }
  if (!failure.empty()) (*coordinator)->Abort(failure);

  std::vector<ExitEvent> exited;
  // Time-based checkpoints: about every checkpoint_seconds, ask for a checkpoint at a clock the
  // fastest worker will reach only after every node has heard of it.
  // A request is outstanding until its checkpoint is complete or known to be incomplete: a
  // slow disk then stretches the interval instead of piling captures up.
  absl::Time next_checkpoint = start + absl::Seconds(job.checkpoint_seconds);
  int64_t requested_clock = -1;
  while (!job_done.load()) {
    if (job.checkpoint_seconds > 0 && absl::Now() >= next_checkpoint &&
        (requested_clock < 0 || checkpoints.Resolved(requested_clock))) {
      const RunReport::Clocks clocks = report.WorkerClocks();
      const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
      const int64_t done_here = clocks.max_clock - std::max<int64_t>(restore_clock, 0);
      if (done_here > 0 && elapsed > 0) {
        // Progress reports trail a worker by up to log_every steps; a second of steps covers
        // the request's way to every node.
        const int64_t lead =
            2 * job.log_every + static_cast<int64_t>(std::ceil(done_here / elapsed)) + 1;
        int64_t clock = clocks.max_clock + lead;
        // A periodic checkpoint would take that clock anyway.
        if (job.checkpoint_every > 0 && clock % job.checkpoint_every == 0) ++clock;
        if (clock < clocks.min_total_steps) {
          (*coordinator)->RequestCheckpoint(clock);
          requested_clock = clock;
        }
        next_checkpoint = absl::Now() + absl::Seconds(job.checkpoint_seconds);
      }
    }
    exited.clear();
    (void)group.Poll(absl::Milliseconds(200), &exited);
    for (const ExitEvent& e : exited) {
      report.OnChildExit(e.label, e.max_rss_kib);
      const bool worker = e.label.rfind("w", 0) == 0;
      if (!e.success() && failure.empty() && worker && coordinator_options.staleness != 0 &&
          e.exit_code != 2) {
        // ASP/SSP go on without a lost worker; the coordinator tells the servers.
        lost.push_back(DescribeExit(e));
        (*coordinator)->ReportLost(wire::Role::WORKER, std::stoi(e.label.substr(1)), lost.back());
        continue;
      }
      if (!e.success() && failure.empty()) {
        failure = DescribeExit(e);
        if (e.exit_code == 2) failure_code = 2;  // bad input, as the child reported
        (*coordinator)->Abort(failure);
      }
    }
    if (const int sig = g_signal.load(); sig != 0 && failure.empty()) {
      failure = absl::StrFormat("interrupted by signal %d", sig);
      failure_code = 128 + sig;
      (*coordinator)->Abort(failure);
    }
    report.DrawProgress(absl::Now() - start);
  }
  run.join();
  // Nodes exit on their own after the shutdown or the abort; give them a moment. After a
  // failure, a node that had not registered yet never hears of the abort (it would wait for
  // its startup timeout): those get a second, then SIGTERM.
  const bool failed = !job_status.ok() || !failure.empty();
  const absl::Time grace = absl::Now() + (failed ? absl::Seconds(1) : absl::Seconds(10));
  while (group.running() > 0 && absl::Now() < grace) {
    exited.clear();
    (void)group.Poll(absl::Milliseconds(100), &exited);
    for (const ExitEvent& e : exited) {
      report.OnChildExit(e.label, e.max_rss_kib);
      if (!e.success() && failure.empty() && job_status.ok()) failure = DescribeExit(e);
      // A node that rejected its input (exit 2) may have told the coordinator first: the job
      // failed over bad input all the same.
      if (!e.success() && e.exit_code == 2 && failure_code == 1) failure_code = 2;
    }
  }
  exited.clear();
  group.TerminateAll(absl::Seconds(2), &exited);
  for (const ExitEvent& e : exited) report.OnChildExit(e.label, e.max_rss_kib);
  const absl::Duration wall = absl::Now() - start;
  report.EndProgress();

  if (!job_status.ok() && failure.empty()) failure = std::string(job_status.message());
  checkpoints.Flush();  // manifests decided so far are on disk before the summary counts them
  if (!failure.empty()) {
    std::cerr << "syncline-launch: job failed: " << failure << "\n";
    (void)report.WriteSummary(wall, failure);
    return failure_code;
  }
  if (auto s = report.WriteSummary(wall, ""); !s.ok()) {
    std::cerr << "syncline-launch: " << s.message() << "\n";
    return 1;
  }
  std::cout << report.SummaryText(wall);
  for (const std::string& l : lost)
    std::cerr << "syncline-launch: the job went on without " << l << "\n";
  return 0;
}

}  // namespace
}  // namespace syncline

int main(int argc, char** argv) {
  if (argc > 1 && std::string_view(argv[1]) == "experiment") {
    return syncline::RunExperiment(argc - 1, argv + 1);
  }
  return syncline::Main(argc, argv);
}
