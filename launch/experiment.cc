#include "launch/experiment.h"

#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <variant>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "job/options.h"
#include "launch/flag_help.h"
#include "launch/flag_modes.h"
#include "launch/job_config.h"
#include "launch/launch_flags.h"
#include "launch/process_group.h"
#include "launch/summary_json.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

// The job of `args` as the launcher reads its command line, checked (`validate`: as BuildJobSpec
// checks it) or not.
absl::StatusOr<JobConfig> ParseJob(const std::vector<std::string>& args, bool validate = true) {
  CLI::App app;
  // Where each run's nodes run (syncline-launch's cluster flags) goes to every run as given;
  // each run checks it when it starts.
  LaunchFlags flags;
  AddLaunchFlags(app, &flags);
  if (absl::Status s = AddJobFlags(app, &flags.config); !s.ok()) return s;
  std::vector<const char*> argv = {"syncline-launch"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  auto action = ParseJobCommandLine(static_cast<int>(argv.size()), argv.data(), app, &flags.config);
  if (!action.ok()) return action.status();
  if (*action == CommandLineAction::kShowHelp) {
    return absl::InvalidArgumentError("--help is not a job flag");
  }
  // Each run starts afresh in its own folder, and its workers are the launcher's own.
  for (const char* flag : {"--resume", "--resume-if-any", "--external-workers", "--sbatch"}) {
    if (app.count(flag) > 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " is not for an experiment's runs"));
    }
  }
  if (!validate) return flags.config;
  if (absl::Status s = Validate(flags.config); !s.ok()) return s;
  return flags.config;
}

// The flags of `args` that the mode of the run with --`flag` `value` ignores, and that the
// launcher would refuse; with `refusals`, also why, by flag.
absl::StatusOr<std::vector<std::string>> IgnoredByTheRun(
    const std::string& flag, const std::string& value, std::vector<std::string> args,
    std::map<std::string, std::string>* refusals = nullptr) {
  args.insert(args.end(), {absl::StrCat("--", flag), value});
  absl::StatusOr<JobConfig> job = ParseJob(args, /*validate=*/false);
  if (!job.ok()) return job.status();
  absl::StatusOr<SyncMode> sync = ParseSyncMode(job->sync);
  std::vector<std::string> ignored;
  if (!sync.ok()) return ignored;  // the check of the whole job names what is wrong with it
  for (const IgnoredFlag& i : IgnoredFlags(*sync, *job)) {
    if (!i.refused) continue;
    ignored.push_back(i.flag);
    if (refusals != nullptr) refusals->emplace(i.flag, i.message);
  }
  return ignored;
}

// ---------------------------------------------------------------------------------------------
// Running the experiment.

// Set by SIGINT/SIGTERM. A signal handler can reach no object, hence the one file-level variable.
std::atomic<int> g_experiment_signal{0};
void OnExperimentSignal(int sig) { g_experiment_signal.store(sig); }

struct ChildOutcome {
  std::string failure;  // empty when the run exited 0
  int signal = 0;       // the signal that interrupted the experiment, if any
};

// Runs one launcher child to completion, forwarding its lines prefixed with its label.
ChildOutcome RunChild(const std::string& label, std::vector<std::string> argv) {
  std::string last_message;
  ProcessGroup group([&](std::string_view, OutputStream stream, std::string_view line) {
    std::ostream& os = stream == OutputStream::kStdout ? std::cout : std::cerr;
    os << "[" << label << "] " << line << std::endl;
    if (line.starts_with("syncline-launch: ")) last_message = line.substr(17);
  });
  ChildOutcome outcome;
  auto pid = group.Start(ProcessSpec{label, std::move(argv)});
  if (!pid.ok()) {
    outcome.failure = std::string(pid.status().message());
    return outcome;
  }
  // No deadline of our own: a training run may take hours, and the launcher enforces the job's
  // deadlines (requests, heartbeats) itself.
  std::vector<ExitEvent> exited;
  while (exited.empty()) {
    (void)group.Poll(absl::Milliseconds(200), &exited);
    if (const int sig = g_experiment_signal.load(); sig != 0 && exited.empty()) {
      outcome.signal = sig;
      // The launcher turns SIGTERM into an orderly abort that still writes its summary.json.
      group.TerminateAll(absl::Seconds(20), &exited);
      break;
    }
  }
  if (!exited.empty() && !exited[0].success()) {
    outcome.failure = last_message.empty()
                          ? DescribeExit(exited[0])
                          : absl::StrCat(last_message, " (", DescribeExit(exited[0]), ")");
  }
  if (outcome.signal != 0 && outcome.failure.empty()) {
    outcome.failure = absl::StrFormat("interrupted by signal %d", outcome.signal);
  }
  return outcome;
}

std::string LauncherPath() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return ec ? "/proc/self/exe" : self.string();
}

constexpr char kExperimentHelp[] =
    "syncline-launch experiment: runs the same job once per value of one swept flag (--sync,\n"
    "--compress, --compress-pull, --aggregate, --partition, --prox-mu, --participation or\n"
    "--client-dropout), on identical data and with the same seed, and compares the runs.\n\n"
    "Writes OUT/NAME/ for each run (NAME: the value, made filesystem-safe, e.g. ssp_1),\n"
    "OUT/summary.csv, OUT/report.md, and with gnuplot OUT/loss_vs_time.png and\n"
    "OUT/loss_vs_steps.png (from OUT/loss_curves.dat and OUT/plots.gp).\n"
    "Every flag not listed below is passed to each run unchanged (see syncline-launch --help).\n"
    "Exit code: 0 when every run succeeded, 1 when any failed, 2 for bad flags.\n\n"
    "Example:\n"
    "  syncline-launch experiment --sync bsp,asp,ssp:1,ssp:4 --workers 4 --epochs 2 \\\n"
    "      --out runs/cmp\n"
    "  syncline-launch experiment --sync fedavg --workers 10 --model softmax --classes 10 \\\n"
    "      --train T --test V --aggregate mean,median,krum:2 --byzantine 1,2:signflip \\\n"
    "      --out runs/robust\n";

}  // namespace

std::string RunFolderName(const std::string& value) {
  std::string name = value;
  for (char& c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') {
      c = '_';
    }
  }
  // "." and ".." name other folders.
  if (name.find_first_not_of('.') == std::string::npos)
    std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

absl::StatusOr<std::vector<SweepValue>> ParseSweepList(const std::string& flag,
                                                       const std::string& list,
                                                       const std::vector<std::string>& job_args) {
  if (std::find(kSweepableFlags.begin(), kSweepableFlags.end(), flag) == kSweepableFlags.end()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--%s cannot be swept; an experiment sweeps one of: --%s", flag,
                        absl::StrJoin(kSweepableFlags, ", --")));
  }
  std::vector<SweepValue> values;
  std::set<std::string> folders;
  std::map<std::string, int> left_out;         // by flag: the runs that leave it out
  std::map<std::string, std::string> refusal;  // by flag: why the launcher refuses it
  for (absl::string_view piece : absl::StrSplit(list, ',')) {
    const std::string value(absl::StripAsciiWhitespace(piece));
    if (value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s=%s: empty value in the list", flag, list));
    }
    // A flag that this value's mode ignores stays out of its run; with the job's other flags:
    // whether a value is valid may depend on them (krum:3 needs enough workers, for one).
    absl::StatusOr<std::vector<std::string>> ignored =
        IgnoredByTheRun(flag, value, job_args, &refusal);
    if (!ignored.ok()) return ignored.status();
    if (std::find(ignored->begin(), ignored->end(), flag) != ignored->end()) {
      return absl::InvalidArgumentError(refusal[flag]);  // the swept flag itself
    }
    for (const std::string& f : *ignored) ++left_out[f];
    std::vector<std::string> args = WithoutFlags(job_args, *ignored);
    args.insert(args.end(), {absl::StrCat("--", flag), value});
    if (auto job = ParseJob(args); !job.ok()) return job.status();
    SweepValue v{value, RunFolderName(value), *std::move(ignored)};
    if (!folders.insert(v.folder).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("--%s=%s: '%s' is listed twice", flag, list, value));
    }
    values.push_back(std::move(v));
  }
  for (const auto& [f, runs] : left_out) {
    if (runs == static_cast<int>(values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(refusal[f], "; no run of the experiment uses it: leave it out, or sweep --",
                       flag, " over a mode that does"));
    }
  }
  return values;
}

std::vector<std::string> WithoutFlags(const std::vector<std::string>& args,
                                      const std::vector<std::string>& flags) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    const std::string name = a.starts_with("--") ? a.substr(2, a.find('=') - 2) : "";
    if (std::find(flags.begin(), flags.end(), name) == flags.end()) {
      out.push_back(a);
    } else if (a.find('=') == std::string::npos) {
      ++i;  // its value
    }
  }
  return out;
}

namespace {

const char* SweepExample(absl::string_view flag) {
  if (flag == "sync") return "bsp,asp,ssp:1,ssp:4";
  if (flag == "compress") return "none,topk:0.01,sign1,fp16";
  if (flag == "compress-pull") return "none,fp16,sign1,topk:0.01";
  if (flag == "aggregate") return "mean,median,trimmed-mean:0.2,krum:2";
  if (flag == "partition") return "iid,dirichlet:1,dirichlet:0.1";
  if (flag == "prox-mu") return "0,0.01,0.1";
  if (flag == "participation") return "0.2,0.5,1";
  return "0,0.1,0.3";
}

// What the command line asks for: the swept flag and its values, and the flags passed on.
struct ExperimentPlan {
  std::string flag;
  std::vector<SweepValue> values;
  std::vector<std::string> job_args;
  std::string out = "runs/experiment";
  std::optional<double> target_loss;
  bool generate_data = false;  // no --train: the first run generates the data
};

constexpr char kMe[] = "syncline-launch experiment";

// Parses and checks the command line: the plan, or an exit code (0 for --help, 2 for bad flags).
// The experiment's own flags, bound to where their values go; the others are the runs'.
struct ExperimentFlags {
  std::map<std::string, std::string> lists;  // by sweepable flag
  std::map<std::string, CLI::Option*> list_options;
  double target_loss = std::numeric_limits<double>::quiet_NaN();
  CLI::Option* target_option = nullptr;
};

void AddExperimentFlags(CLI::App& app, ExperimentFlags& f, std::string* out) {
  for (const char* flag : kSweepableFlags) {
    f.list_options[flag] = app.add_option(absl::StrCat("--", flag), f.lists[flag],
                                          absl::StrCat("Comma-separated values of --", flag,
                                                       " to compare, e.g. ", SweepExample(flag)))
                               ->type_name("LIST")
                               ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }
  f.target_option = app.add_option("--target-loss", f.target_loss,
                                   "Training loss the runs race to; default: the worst final "
                                   "loss among the runs that learned")
                        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--out", *out, "Experiment folder")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
}

std::variant<ExperimentPlan, int> ParseExperiment(int argc, char** argv) {
  ExperimentPlan plan;
  CLI::App app(kExperimentHelp, kMe);
  app.allow_extras();
  ExperimentFlags flags;
  AddExperimentFlags(app, flags, &plan.out);
  std::map<std::string, std::string>& lists = flags.lists;
  const std::map<std::string, CLI::Option*>& list_options = flags.list_options;
  auto usage = [](const std::string& message) {
    std::cerr << kMe << ": " << message << "\nRun with --help for usage.\n";
    return 2;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage(e.what());
  }
  plan.job_args = app.remaining();
  // The flag with several values is the one compared; one with a single value is a fixed
  // setting of every run (`--sync bsp --compress none,topk:0.01`). Without a list the
  // experiment is one run, named after its first such flag besides --sync
  // (`--sync fedavg --participation 1`).
  std::vector<std::string> given, swept;
  for (const auto& [flag, option] : list_options) {
    if (option->count() == 0) continue;
    given.push_back(flag);
    if (absl::StrContains(lists[flag], ',')) swept.push_back(flag);
  }
  if (swept.empty() && !given.empty()) {
    // One run: named after the first given flag (in kSweepableFlags order) other than --sync.
    for (const char* flag : kSweepableFlags) {
      if (std::string(flag) != "sync" &&
          std::find(given.begin(), given.end(), flag) != given.end()) {
        swept.push_back(flag);
        break;
      }
    }
    if (swept.empty()) swept = given;
  }
  if (swept.size() != 1) {
    return usage(absl::StrCat("give several values to compare of exactly one of --",
                              absl::StrJoin(kSweepableFlags, ", --"),
                              ", e.g. --sync bsp,asp,ssp:1 (the others may have one value each)"));
  }
  plan.flag = swept[0];
  for (const std::string& flag : given) {
    if (flag != plan.flag) {
      plan.job_args.insert(plan.job_args.begin(), {absl::StrCat("--", flag), lists[flag]});
    }
  }
  if (flags.target_option->count() > 0) {
    if (!std::isfinite(flags.target_loss)) return usage("--target-loss must be a number");
    plan.target_loss = flags.target_loss;
  }
  if (plan.out.empty()) return usage("--out must name a directory");
  auto values = ParseSweepList(plan.flag, lists[plan.flag], plan.job_args);
  if (!values.ok()) return usage(std::string(values.status().message()));
  plan.values = std::move(*values);
  // Every run's job is checked before the first starts, so a typo costs no training time.
  for (const SweepValue& v : plan.values) {
    std::vector<std::string> args = {absl::StrCat("--", plan.flag), v.value, "--out",
                                     (fs::path(plan.out) / v.folder).string()};
    const std::vector<std::string> job_args = WithoutFlags(plan.job_args, v.left_out);
    args.insert(args.end(), job_args.begin(), job_args.end());
    auto job = ParseJob(args);
    if (!job.ok()) return usage(std::string(job.status().message()));
    plan.generate_data = job->train.empty();
  }
  return plan;
}

// Runs the launcher once per value, one after the other; stops early on a signal, which it
// returns in *interrupted.
std::vector<ExperimentRun> RunSweep(const ExperimentPlan& plan, int* interrupted) {
  const std::string launcher = LauncherPath();
  // Without --train the first run generates the data; the others train on its files.
  std::vector<std::string> data_args;
  std::vector<ExperimentRun> runs;
  std::error_code ec;
  for (size_t i = 0; i < plan.values.size() && *interrupted == 0; ++i) {
    if ((*interrupted = g_experiment_signal.load()) != 0) break;
    const SweepValue& v = plan.values[i];
    const fs::path run_dir = fs::path(plan.out) / v.folder;
    // Results left by an earlier experiment in the same folder must not pass for this run's.
    for (const char* stale :
         {"summary.json", "metrics.csv", "data/train.libsvm", "data/test.libsvm"}) {
      fs::remove(run_dir / stale, ec);
    }
    std::cerr << absl::StrFormat(
                     "=== run %d/%d: %s%s ===", i + 1, plan.values.size(), v.value,
                     v.left_out.empty()
                         ? ""
                         : absl::StrCat(" (without --", absl::StrJoin(v.left_out, ", --"),
                                        ", which it ignores)"))
              << std::endl;
    std::vector<std::string> args = {launcher, absl::StrCat("--", plan.flag), v.value, "--out",
                                     run_dir.string()};
    args.insert(args.end(), data_args.begin(), data_args.end());
    const std::vector<std::string> job_args = WithoutFlags(plan.job_args, v.left_out);
    args.insert(args.end(), job_args.begin(), job_args.end());
    ChildOutcome outcome = RunChild(v.value, std::move(args));
    *interrupted = outcome.signal;
    runs.push_back(ExperimentRun{v, outcome.failure});
    if (!outcome.failure.empty()) {
      std::cerr << absl::StrFormat("=== %s failed: %s ===", v.value, outcome.failure) << std::endl;
    }
    if (plan.generate_data && data_args.empty() &&
        fs::exists(run_dir / "data" / "train.libsvm", ec)) {
      data_args = {"--train", (run_dir / "data" / "train.libsvm").string()};
      if (fs::exists(run_dir / "data" / "test.libsvm", ec)) {
        data_args.insert(data_args.end(), {"--test", (run_dir / "data" / "test.libsvm").string()});
      }
    }
  }
  return runs;
}

// Writes the report and says what it found; returns the number of failed runs, or -1 when
// the report could not be written.
int Report(const ExperimentPlan& plan, const std::vector<ExperimentRun>& runs) {
  ReportOptions report;
  report.dir = plan.out;
  report.flag = plan.flag;
  report.target_loss = plan.target_loss;
  report.job_args = plan.job_args;
  report.gnuplot = FindOnPath("gnuplot");
  const fs::path out(plan.out);
  if (!report.gnuplot) {
    std::cerr << kMe
              << ": warning: gnuplot is not on PATH, so there are no plots (install gnuplot-nox);"
                 " the curves and the script are still written to "
              << (out / "loss_curves.dat").string() << " and " << (out / "plots.gp").string()
              << "\n";
  }
  auto result = WriteExperimentReport(report, runs);
  if (!result.ok()) {
    std::cerr << kMe << ": " << result.status().message() << "\n";
    return -1;
  }
  for (const std::string& warning : result->warnings) {
    std::cerr << kMe << ": warning: " << warning << "\n";
  }
  std::cout << absl::StrFormat("Syncline experiment finished: %d run(s) of --%s, %d failed\n",
                               runs.size(), plan.flag, result->failed_runs);
  for (absl::string_view line : absl::StrSplit(result->commentary, '\n', absl::SkipEmpty())) {
    std::cout << "  " << line << "\n";
  }
  std::cout << "  results: " << (out / "summary.csv").string() << ", "
            << (out / "report.md").string() << "\n";
  return result->failed_runs;
}

}  // namespace

std::string ExperimentFlagsMarkdown() {
  CLI::App app;
  ExperimentFlags flags;
  std::string out = ExperimentPlan().out;
  AddExperimentFlags(app, flags, &out);
  const CLI::App& view = app;  // whose get_options gives const options
  return OptionsMarkdownTable(
      view.get_options([](const CLI::Option* option) { return option->nonpositional(); }),
      /*job_file_keys=*/false);
}

int RunExperiment(int argc, char** argv) {
  std::variant<ExperimentPlan, int> parsed = ParseExperiment(argc, argv);
  if (const int* code = std::get_if<int>(&parsed)) return *code;
  const ExperimentPlan& plan = std::get<ExperimentPlan>(parsed);
  std::error_code ec;
  fs::create_directories(plan.out, ec);
  if (ec) {
    std::cerr << kMe << ": cannot create --out " << plan.out << ": " << ec.message() << "\n";
    return 2;
  }
  struct sigaction sa = {};
  sa.sa_handler = OnExperimentSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  int interrupted = 0;
  const std::vector<ExperimentRun> runs = RunSweep(plan, &interrupted);
  const int failed = Report(plan, runs);
  if (failed < 0) return 1;
  if (interrupted != 0) return 128 + interrupted;
  return failed > 0 ? 1 : 0;
}

}  // namespace syncline
