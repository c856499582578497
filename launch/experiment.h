// `syncline-launch experiment`: runs the same job once per value of one swept flag (--sync,
// e.g. `--sync bsp,asp,ssp:1`, --compress, or a federated setting: --aggregate, --partition,
// --compress-pull, --prox-mu, --participation, --client-dropout) on identical data, then compares
// the runs in OUT/summary.csv, OUT/report.md and gnuplot plots of training loss against wall-clock
// time and against steps.
//
// Each run is the launcher itself started as a child (`syncline-launch --sync V --out OUT/NAME
// <the user's other flags>`), so a run of the experiment is exactly a run a user could start by
// hand. The swept flag's name is a parameter throughout, so that other flags (a compression codec)
// can be swept the same way by adding them to kSweepableFlags.
//
// The functions below have no shared state and are thread-compatible; RunExperiment installs
// SIGINT/SIGTERM handlers and must run on the main thread.
#ifndef SYNCLINE_LAUNCH_EXPERIMENT_H_
#define SYNCLINE_LAUNCH_EXPERIMENT_H_

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

// Flags an experiment may sweep over (names without dashes); exactly one is swept per experiment.
inline constexpr std::array<const char*, 8> kSweepableFlags = {
    "sync",      "compress", "compress-pull", "aggregate",
    "partition", "prox-mu",  "participation", "client-dropout"};

// One value of the swept flag and the folder its run writes into.
struct SweepValue {
  std::string value;   // as the job flag takes it, e.g. "ssp:1"
  std::string folder;  // a filesystem-safe name for it, e.g. "ssp_1"
  // Flags of the job's (without dashes) that this value's sync mode ignores and the launcher
  // would refuse (launch/flag_modes.h): left out of this run, e.g. --servers of a gossip run
  // in `--sync bsp,gossip:ring --servers 4`.
  std::vector<std::string> left_out;
};

// Splits a comma-separated list of values of job flag `flag` ("sync") and checks each one as the
// launcher would with the job's other flags `job_args` (an InvalidArgument error naming the flag
// and the value otherwise), less the flags that the value's mode ignores. Empty items,
// duplicates, values whose folder names collide, and a flag that every value's mode ignores
// (and the launcher refuses) are errors too.
absl::StatusOr<std::vector<SweepValue>> ParseSweepList(
    const std::string& flag, const std::string& list,
    const std::vector<std::string>& job_args = {});

// `args` (flags and their values) without the flags named in `flags` (names without dashes),
// given as "--name VALUE" or "--name=VALUE".
std::vector<std::string> WithoutFlags(const std::vector<std::string>& args,
                                      const std::vector<std::string>& flags);

// "ssp:1" -> "ssp_1": letters, digits, '.', '-' and '_' are kept, anything else becomes '_'.
std::string RunFolderName(const std::string& value);

// One point of a run's smoothed training-loss curve, taken after each metrics.csv row once every
// worker has reported: the mean over workers of their latest clock and of their latest train_loss.
// Rows with the same wall_seconds make one point.
struct LossPoint {
  double wall_seconds = 0;
  double clock = 0;
  double loss = 0;
  double consensus = 0;  // gossip: mean of the workers' latest consensus proxy; 0 otherwise
  double bytes = 0;      // held-out points: the bytes the workers had moved; 0 otherwise
};

// Reads a run's metrics.csv (columns found by header name: wall_seconds, worker, clock,
// train_loss; others are ignored) into its loss curve. `workers` is the number of workers in the
// job (points start once all have reported); 0 or less: whichever have reported. A last line
// without its newline (a run cut short) is ignored; other malformed lines are an error naming the
// file and line.
absl::StatusOr<std::vector<LossPoint>> ReadLossCurve(const std::string& metrics_csv, int workers);

// The held-out curve of a run with --eval-every: metrics.csv's held-out rows (an empty train_loss
// and a test_loss), each a point of the test loss at its wall time, clock and bytes. Empty when
// the file has none (or no test_loss column); malformed rows are an error as above.
absl::StatusOr<std::vector<LossPoint>> ReadHeldOutCurve(const std::string& metrics_csv);

// The wall_seconds of the first point whose loss is <= target; nullopt if there is none.
std::optional<double> TimeToTarget(const std::vector<LossPoint>& curve, double target);

// A run of the experiment, as the report sees it.
struct ExperimentRun {
  SweepValue sweep;
  // Why the run failed when its summary.json may not say (e.g. "exited with code 2" and the
  // launcher's last message); empty when the child exited 0.
  std::string failure;
};

struct ReportOptions {
  // The experiment folder; run i lives in dir/runs[i].sweep.folder.
  std::string dir;
  // The swept flag, without dashes. Default "sync".
  std::string flag = "sync";
  // The loss the runs race to. nullopt: the worst final training loss among the successful runs
  // that learned (closed at least half of the way from their first loss to the best run's final
  // one; all of them when none did).
  std::optional<double> target_loss;
  // The flags every run shared, shown in report.md.
  std::vector<std::string> job_args;
  // gnuplot to draw the plots with; nullopt: write the data and script but draw nothing.
  std::optional<std::string> gnuplot;
};

// What the report found: the target it used and which runs failed.
struct ReportResult {
  std::optional<double> target_loss;
  int failed_runs = 0;
  // The commentary of report.md, one sentence per line.
  std::string commentary;
  // Problems with the plots (gnuplot failed); the CSV and report were still written.
  std::vector<std::string> warnings;
};

// Reads each run's summary.json and metrics.csv and writes dir/summary.csv, dir/report.md,
// dir/loss_curves.dat and dir/plots.gp; with a gnuplot, also runs it to draw
// dir/loss_vs_time.png and dir/loss_vs_steps.png. A run whose files are missing or malformed is
// reported as failed, with the reason; only failing to write the outputs is an error.
absl::StatusOr<ReportResult> WriteExperimentReport(const ReportOptions& options,
                                                   const std::vector<ExperimentRun>& runs);

// The path of `program` in $PATH, or nullopt.
std::optional<std::string> FindOnPath(const std::string& program);

// The experiment's own flags (the swept lists, --target-loss, --out) as a Markdown table, for
// docs/FLAGS.md; every other flag is a run's.
std::string ExperimentFlagsMarkdown();

// Entry point of `syncline-launch experiment ...`; argv[0] is "experiment". Returns the exit
// code: 0 when every run succeeded, 1 when any failed, 2 for bad flags, 128+N on signal N.
int RunExperiment(int argc, char** argv);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_EXPERIMENT_H_
