// The experiment's report: each run's results read back, summary.csv, report.md and the
// gnuplot plots (see launch/experiment.h).
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
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "launch/experiment.h"
#include "launch/job_config.h"
#include "launch/process_group.h"
#include "launch/summary_json.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

absl::StatusOr<std::string> ReadWholeFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot read %s", path.string()));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// ---------------------------------------------------------------------------------------------
// The job every run shares.

// Parses launcher flags exactly as syncline-launch does, and validates the result.

// The value of the swept flag a run is compared against: BSP for --sync; otherwise the first run.
std::string BaselineValue(const std::string& flag) {
  if (flag == "sync") return "bsp";
  if (flag == "compress" || flag == "compress-pull") return "none";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Report.

// One run's results, as far as its files tell.
struct RunData {
  SweepValue sweep;
  bool ok = false;
  std::string error;
  std::optional<double> wall_seconds, steps, steps_per_worker, test_loss, test_auc, test_accuracy,
      bytes_on_wire, bytes_pushed, bytes_pulled, busiest_server_bytes, max_staleness,
      mean_staleness;
  std::vector<LossPoint> curve;
  std::optional<double> final_loss;  // the curve's last point
  // --eval-every: the held-out curve, and the time its evaluations took (left out of speeds).
  std::vector<LossPoint> held_out;
  double evaluation_seconds = 0;
  // What the runs race to the target on: the held-out curve when every run has one, else the
  // training curve (WriteExperimentReport chooses).
  bool race_held_out = false;
  std::optional<double> time_to_target;

  const std::vector<LossPoint>& Race() const { return race_held_out ? held_out : curve; }
  std::optional<double> RaceFinal() const {
    const std::vector<LossPoint>& c = Race();
    if (c.empty() || !std::isfinite(c.back().loss)) return std::nullopt;
    return c.back().loss;
  }
  // The run's training time: its wall time less its held-out evaluations'.
  std::optional<double> TrainingSeconds() const {
    if (!wall_seconds) return std::nullopt;
    return *wall_seconds - std::clamp(evaluation_seconds, 0.0, *wall_seconds);
  }
  std::optional<double> ClocksPerSecond() const {
    const std::optional<double> seconds = TrainingSeconds();
    if (!steps_per_worker || !seconds || *seconds <= 0) return std::nullopt;
    return *steps_per_worker / *seconds;
  }
  std::optional<double> StepsPerSecond() const {
    const std::optional<double> seconds = TrainingSeconds();
    if (!steps || !seconds || *seconds <= 0) return std::nullopt;
    return *steps / *seconds;
  }
};

RunData LoadRun(const fs::path& dir, const ExperimentRun& run, std::vector<std::string>* warnings) {
  RunData d;
  d.sweep = run.sweep;
  const fs::path folder = dir / run.sweep.folder;
  auto text = ReadWholeFile(folder / "summary.json");
  if (!text.ok()) {
    d.error = run.failure.empty() ? std::string(text.status().message()) : run.failure;
    return d;
  }
  auto json = ParseSummaryJson(*text);
  if (!json.ok()) {
    d.error = absl::StrCat((folder / "summary.json").string(), ": ", json.status().message());
    return d;
  }
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = json->find(key);
    return it == json->end() ? std::nullopt : it->second.number;
  };
  auto text_of = [&](const char* key) -> std::string {
    auto it = json->find(key);
    return it == json->end() || !it->second.text ? "" : *it->second.text;
  };
  const std::string status = text_of("status");
  d.ok = status == "ok" && run.failure.empty();
  if (!d.ok) {
    d.error = text_of("error");
    if (d.error.empty()) d.error = run.failure;
    if (d.error.empty()) d.error = absl::StrCat("status '", status, "' in summary.json");
  }
  d.wall_seconds = number("wall_seconds");
  d.steps = number("steps");
  d.steps_per_worker = number("steps_per_worker");
  d.test_loss = number("test_loss");
  d.test_auc = number("test_auc");
  d.test_accuracy = number("test_accuracy");
  if (auto pushed = number("bytes_pushed"), pulled = number("bytes_pulled"); pushed && pulled) {
    d.bytes_on_wire = *pushed + *pulled;
    d.bytes_pushed = *pushed;
    d.bytes_pulled = *pulled;
  }
  d.busiest_server_bytes = number("busiest_server.bytes_all");
  d.max_staleness = number("max_staleness_served");
  d.mean_staleness = number("mean_staleness_served");
  // Untrusted: anything but a plausible worker count means "whoever reported".
  const double workers_field = number("workers").value_or(0);
  const int workers =
      workers_field >= 1 && workers_field <= 1e6 ? static_cast<int>(workers_field) : 0;
  d.evaluation_seconds = number("evaluation_seconds").value_or(0);
  auto curve = ReadLossCurve((folder / "metrics.csv").string(), workers);
  if (curve.ok()) {
    d.curve = std::move(*curve);
    if (!d.curve.empty() && std::isfinite(d.curve.back().loss)) d.final_loss = d.curve.back().loss;
  } else if (d.ok) {
    warnings->push_back(absl::StrCat(run.sweep.value, ": ", curve.status().message()));
  }
  if (auto held_out = ReadHeldOutCurve((folder / "metrics.csv").string()); held_out.ok()) {
    d.held_out = std::move(*held_out);
  }
  return d;
}

std::string Fixed(std::optional<double> v, int digits) {
  if (!v || !std::isfinite(*v)) return "";
  return absl::StrFormat("%.*f", digits, *v);
}

std::string General(std::optional<double> v) {
  if (!v || !std::isfinite(*v)) return "";
  return absl::StrFormat("%.6g", *v);
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string OneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

absl::Status WriteTextFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc | std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::PermissionDeniedError(absl::StrFormat("cannot write %s", path.string()));
  return absl::OkStatus();
}

std::string SummaryCsv(const std::vector<RunData>& runs, std::optional<double> target) {
  std::string csv =
      "mode,folder,status,wall_seconds,steps,steps_per_worker,clocks_per_second_per_worker,"
      "final_train_loss,test_loss,test_auc,test_accuracy,target_loss,time_to_target_seconds,"
      "bytes_on_wire,max_staleness,mean_staleness,bytes_pushed,bytes_pulled,"
      "busiest_server_bytes,held_out_loss,evaluation_seconds,error\n";
  for (const RunData& r : runs) {
    const std::vector<std::string> fields = {
        CsvField(r.sweep.value),
        CsvField(r.sweep.folder),
        r.ok ? "ok" : "failed",
        Fixed(r.wall_seconds, 3),
        General(r.steps),
        General(r.steps_per_worker),
        Fixed(r.ClocksPerSecond(), 2),
        General(r.final_loss),
        General(r.test_loss),
        General(r.test_auc),
        General(r.test_accuracy),
        General(target),
        Fixed(r.time_to_target, 3),
        Fixed(r.bytes_on_wire, 0),
        General(r.max_staleness),
        General(r.mean_staleness),
        Fixed(r.bytes_pushed, 0),
        Fixed(r.bytes_pulled, 0),
        Fixed(r.busiest_server_bytes, 0),
        r.held_out.empty() ? "" : General(r.held_out.back().loss),
        Fixed(r.evaluation_seconds, 3),
        CsvField(OneLine(r.error)),
    };
    absl::StrAppend(&csv, absl::StrJoin(fields, ","), "\n");
  }
  return csv;
}

std::string MarkdownTable(const std::vector<RunData>& runs, const std::string& flag,
                          bool have_target) {
  const bool any_auc = std::any_of(runs.begin(), runs.end(),
                                   [](const RunData& r) { return r.test_auc.has_value(); });
  std::vector<std::string> header = {
      absl::StrCat("--", flag), "status",           "wall s",   "steps",
      "clocks/s per worker",    "final train loss", "test loss"};
  if (any_auc) header.push_back("test AUC");
  header.insert(header.end(), {"test accuracy", "time to target s", "pushed MiB", "pulled MiB",
                               "all MiB", "busiest server MiB", "max staleness", "mean staleness"});
  std::string md = absl::StrCat("| ", absl::StrJoin(header, " | "), " |\n|");
  for (size_t i = 0; i < header.size(); ++i) md += i < 2 ? " --- |" : " ---: |";
  md += "\n";
  for (const RunData& r : runs) {
    std::vector<std::string> row = {absl::StrCat("`", r.sweep.value, "`"),
                                    r.ok ? "ok" : "**failed**",
                                    Fixed(r.wall_seconds, 2),
                                    General(r.steps),
                                    Fixed(r.ClocksPerSecond(), 1),
                                    Fixed(r.final_loss, 4),
                                    Fixed(r.test_loss, 4)};
    if (any_auc) row.push_back(Fixed(r.test_auc, 4));
    auto mib = [](std::optional<double> bytes) {
      return bytes ? std::optional<double>(*bytes / (1024.0 * 1024.0)) : std::nullopt;
    };
    row.insert(row.end(),
               {Fixed(r.test_accuracy, 4),
                r.ok && have_target && !r.time_to_target ? "never" : Fixed(r.time_to_target, 2),
                Fixed(mib(r.bytes_pushed), 2), Fixed(mib(r.bytes_pulled), 2),
                Fixed(mib(r.bytes_on_wire), 2), Fixed(mib(r.busiest_server_bytes), 2),
                General(r.max_staleness), Fixed(r.mean_staleness, 2)});
    absl::StrAppend(&md, "| ", absl::StrJoin(row, " | "), " |\n");
  }
  return md;
}

std::string Ratio(double v) { return absl::StrFormat("%.2f×", v); }

// The loss the runs race to by default: the worst final training loss among the runs that
// learned, so that a run that did not (an attacked mean among robust aggregators, a diverged
// one) does not hand every other run its loss as a target reached at once. A run learned when
// its loss closed at least half of the way from its first point to the best run's final loss,
// or ended within 5% of it (a run of one point counts); when none did, every run counts.
// `not_learned` gets the values of the runs left out.
std::optional<double> DefaultTarget(const std::vector<RunData>& runs,
                                    std::vector<std::string>* not_learned) {
  std::optional<double> best, target, any;
  for (const RunData& r : runs) {
    if (r.ok && r.RaceFinal()) best = std::min(best.value_or(*r.RaceFinal()), *r.RaceFinal());
  }
  for (const RunData& r : runs) {
    const std::optional<double> final_loss = r.RaceFinal();
    if (!r.ok || !final_loss) continue;
    any = std::max(any.value_or(*final_loss), *final_loss);
    // A curve of one point says nothing of learning, and a final loss within 5% of the best
    // is the noise of short runs: such runs count.
    const std::vector<LossPoint>& curve = r.Race();
    const double first = curve.empty() ? *final_loss : curve.front().loss;
    if (curve.size() >= 2 && *final_loss > 1.05 * *best &&
        first - *final_loss < 0.5 * (first - *best)) {
      not_learned->push_back(r.sweep.value);
      continue;
    }
    target = std::max(target.value_or(*final_loss), *final_loss);
  }
  if (!target) not_learned->clear();
  return target ? target : any;
}

// One sentence per line: which run reached the target first, and speeds relative to the baseline.
std::string Commentary(const std::vector<RunData>& runs, const std::string& flag,
                       std::optional<double> target, bool target_given,
                       const std::vector<std::string>& not_learned) {
  std::vector<std::string> lines;
  const RunData* baseline = nullptr;
  for (const RunData& r : runs) {
    if (r.ok && r.sweep.value == BaselineValue(flag)) baseline = &r;
  }
  for (const RunData& r : runs) {
    if (baseline == nullptr && r.ok) baseline = &r;
  }
  if (baseline == nullptr) {
    lines.push_back("No run finished, so there is nothing to compare; the errors are below.");
  } else if (!target) {
    lines.push_back("No run reported a training loss, so there is no target to race to.");
  } else {
    // Held-out curves (--eval-every) when every run has one: the per-batch training loss is
    // noisy, and a crossing of it is the noise's as much as the run's.
    const char* kind = baseline->race_held_out ? "held-out" : "training";
    std::string source = "--target-loss";
    if (!target_given) {
      source = not_learned.empty()
                   ? absl::StrFormat("the worst final %s loss among the runs", kind)
                   : absl::StrCat("the worst final ", kind, " loss among the runs that learned; `",
                                  absl::StrJoin(not_learned, "`, `"),
                                  "` closed less than half of the way from its first loss to "
                                  "the best run's");
    }
    lines.push_back(absl::StrFormat("Target %s loss: %.4f (%s).", kind, *target, source));
    const RunData* first = nullptr;
    for (const RunData& r : runs) {
      if (r.ok && r.time_to_target && (!first || *r.time_to_target < *first->time_to_target)) {
        first = &r;
      }
    }
    if (first == nullptr) {
      lines.push_back("No run reached the target.");
    } else {
      lines.push_back(absl::StrFormat("`%s` reached the target first, after %.2f s.",
                                      first->sweep.value, *first->time_to_target));
    }
    if (baseline->time_to_target) {
      std::vector<std::string> parts;
      for (const RunData& r : runs) {
        if (!r.ok || &r == baseline) continue;
        parts.push_back(r.time_to_target && *r.time_to_target > 0
                            ? absl::StrCat("`", r.sweep.value, "` ",
                                           Ratio(*baseline->time_to_target / *r.time_to_target))
                            : absl::StrCat("`", r.sweep.value, "` never reached it"));
      }
      if (!parts.empty()) {
        lines.push_back(absl::StrFormat(
            "Speed to the target relative to `%s` (its time divided by the run's; above 1 is "
            "faster): %s.",
            baseline->sweep.value, absl::StrJoin(parts, ", ")));
      }
    }
  }
  if (baseline != nullptr && baseline->StepsPerSecond() && *baseline->StepsPerSecond() > 0) {
    std::vector<std::string> parts;
    for (const RunData& r : runs) {
      if (!r.ok || &r == baseline || !r.StepsPerSecond()) continue;
      parts.push_back(absl::StrFormat("`%s` %s (%.0f steps/s)", r.sweep.value,
                                      Ratio(*r.StepsPerSecond() / *baseline->StepsPerSecond()),
                                      *r.StepsPerSecond()));
    }
    if (!parts.empty()) {
      lines.push_back(absl::StrFormat("Steps per second relative to `%s` (%.0f steps/s): %s.",
                                      baseline->sweep.value, *baseline->StepsPerSecond(),
                                      absl::StrJoin(parts, ", ")));
    }
  }
  for (const RunData& r : runs) {
    if (!r.ok) lines.push_back(absl::StrCat("`", r.sweep.value, "` failed: ", OneLine(r.error)));
  }
  return absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
}

std::string GnuplotString(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// loss_curves.dat: one block per plotted run (gnuplot's `index`), at most kMaxPoints points each.
std::string CurvesData(const std::vector<const RunData*>& plotted) {
  constexpr size_t kMaxPoints = 2000;
  std::string dat =
      "# Smoothed training loss of each run of a Syncline experiment: after each metrics.csv row,\n"
      "# the mean over workers of their latest clock and train_loss. One block per run (gnuplot\n"
      "# `index` 0, 1, ...); columns: wall_seconds clock train_loss consensus mib_pushed\n"
      "# (consensus: gossip's mean distance from the neighbours' models; mib_pushed: the bytes\n"
      "# the workers pushed, spread evenly over the run's clocks, in MiB)\n";
  for (size_t i = 0; i < plotted.size(); ++i) {
    const std::vector<LossPoint>& c = plotted[i]->curve;
    // Two blank lines end a block; the first block follows the header directly.
    absl::StrAppend(&dat, i == 0 ? "" : "\n\n", "# index ", i, ": ", plotted[i]->sweep.value, "\n");
    const size_t stride = (c.size() + kMaxPoints - 1) / kMaxPoints;
    const RunData& r = *plotted[i];
    const double mib_per_clock = r.bytes_pushed && r.steps_per_worker && *r.steps_per_worker > 0
                                     ? *r.bytes_pushed / *r.steps_per_worker / (1024.0 * 1024.0)
                                     : 0.0;
    for (size_t j = 0; j < c.size(); ++j) {
      if (j % stride != 0 && j + 1 != c.size()) continue;
      absl::StrAppendFormat(&dat, "%.3f %.3f %.6g %.6g %.6g\n", c[j].wall_seconds, c[j].clock,
                            c[j].loss, c[j].consensus, c[j].clock * mib_per_clock);
    }
  }
  return dat;
}

// Whether any plotted run has a held-out curve (--eval-every).
bool HasHeldOut(const std::vector<const RunData*>& plotted) {
  return std::any_of(plotted.begin(), plotted.end(),
                     [](const RunData* r) { return !r->held_out.empty(); });
}

// heldout_curves.dat: one block per plotted run, its held-out points.
std::string HeldOutData(const std::vector<const RunData*>& plotted) {
  std::string dat =
      "# Held-out test loss of each run of a Syncline experiment (--eval-every): one block per\n"
      "# run (gnuplot `index` 0, 1, ...); columns: training_seconds clock test_loss mib_moved\n"
      "# (training seconds leave the evaluations out; mib_moved: what the workers had pushed and\n"
      "# pulled, in MiB)\n";
  for (size_t i = 0; i < plotted.size(); ++i) {
    absl::StrAppend(&dat, i == 0 ? "" : "\n\n", "# index ", i, ": ", plotted[i]->sweep.value, "\n");
    for (const LossPoint& p : plotted[i]->held_out) {
      absl::StrAppendFormat(&dat, "%.3f %.3f %.6g %.6g\n", p.wall_seconds, p.clock, p.loss,
                            p.bytes / (1024.0 * 1024.0));
    }
  }
  return dat;
}

// Whether any plotted run reported a consensus distance (gossip runs).
bool HasConsensus(const std::vector<const RunData*>& plotted) {
  for (const RunData* r : plotted) {
    for (const LossPoint& p : r->curve) {
      if (p.consensus > 0) return true;
    }
  }
  return false;
}

std::string PlotScript(const std::vector<const RunData*>& plotted, const std::string& flag,
                       std::optional<double> target) {
  std::string gp = absl::StrCat(
      "# Draws the experiment's loss curves from loss_curves.dat: cd into this folder and run\n"
      "#   gnuplot plots.gp\n"
      "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
      "  set terminal pngcairo size 960,600 noenhanced\n"
      "} else {\n"
      "  set terminal png size 960,600 noenhanced\n"
      "}\n"
      "set grid\n"
      "set key top right\n");
  const char* kLoss = "training loss (mean of the workers' latest)";
  struct Plot {
    const char* png;
    const char* title;
    const char* xlabel;
    const char* ylabel;
    int x, y;
    const char* data = "loss_curves.dat";
    int target_column = 3;  // the column the target line belongs to
  };
  std::vector<Plot> plots = {
      {"loss_vs_time.png", "Training loss against wall-clock time", "wall-clock seconds", kLoss, 1,
       3},
      {"loss_vs_steps.png", "Training loss against steps", "clock (mean iterations per worker)",
       kLoss, 2, 3},
      {"loss_vs_bytes.png", "Training loss against bytes pushed",
       "MiB pushed by the workers (spread evenly over the run)", kLoss, 5, 3},
  };
  if (HasConsensus(plotted)) {
    plots.push_back({"consensus_vs_steps.png", "Consensus distance against steps",
                     "clock (mean iterations per worker)",
                     "distance from the neighbours' models (mean over workers)", 2, 4});
  }
  // With held-out curves, the target is theirs (WriteExperimentReport).
  if (HasHeldOut(plotted)) {
    const char* kHeldOut = "held-out test loss";
    for (Plot& p : plots) p.target_column = 0;
    plots.push_back({"heldout_vs_time.png", "Held-out loss against training time",
                     "seconds of training (evaluations left out)", kHeldOut, 1, 3,
                     "heldout_curves.dat", 3});
    plots.push_back({"heldout_vs_steps.png", "Held-out loss against steps",
                     "clock (iterations of the evaluating worker)", kHeldOut, 2, 3,
                     "heldout_curves.dat", 3});
    plots.push_back({"heldout_vs_bytes.png", "Held-out loss against bytes moved",
                     "MiB the workers had pushed and pulled", kHeldOut, 4, 3, "heldout_curves.dat",
                     3});
  }
  for (const auto& p : plots) {
    absl::StrAppend(&gp, "\nset output ", GnuplotString(p.png), "\n", "set title ",
                    GnuplotString(absl::StrCat(p.title, " by --", flag)), "\n", "set xlabel ",
                    GnuplotString(p.xlabel), "\n", "set ylabel ", GnuplotString(p.ylabel), "\n",
                    "plot ");
    for (size_t i = 0; i < plotted.size(); ++i) {
      absl::StrAppend(&gp, i == 0 ? GnuplotString(p.data) : ", \\\n     \"\"", " index ", i,
                      " using ", p.x, ":", p.y,
                      // Held-out points are few and far between: each is marked.
                      std::string_view(p.data) == "heldout_curves.dat"
                          ? " with linespoints lw 2 title "
                          : " with lines lw 2 title ",
                      GnuplotString(plotted[i]->sweep.value));
    }
    if (target && p.y == p.target_column) {
      absl::StrAppendFormat(&gp, ", \\\n     %.6g with lines dt 2 lc rgb \"gray40\" title %s",
                            *target, GnuplotString(absl::StrFormat("target %.4f", *target)));
    }
    gp += "\n";
  }
  gp += "unset output\n";
  return gp;
}

// Runs `gnuplot plots.gp` in `dir`; returns why it failed, or an empty string.
std::string RunGnuplot(const std::string& gnuplot, const fs::path& dir) {
  std::vector<std::string> output;
  ProcessGroup group([&output](std::string_view, OutputStream, std::string_view line) {
    if (output.size() < 20) output.emplace_back(line);
  });
  auto pid = group.Start(ProcessSpec{"gnuplot", {gnuplot, "plots.gp"}, {}, dir.string()});
  if (!pid.ok()) return std::string(pid.status().message());
  std::vector<ExitEvent> exited;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (exited.empty() && absl::Now() < deadline) {
    (void)group.Poll(absl::Milliseconds(200), &exited);
  }
  if (exited.empty()) group.TerminateAll(absl::Seconds(2), &exited);
  if (!exited.empty() && exited[0].success()) return "";
  const std::string how = exited.empty() ? "gnuplot did not exit" : DescribeExit(exited[0]);
  return absl::StrCat(how, output.empty() ? "" : ": ", absl::StrJoin(output, " / "));
}

// report.md: the job, the table, the commentary, the plots and links to the runs.
std::string ReportMarkdown(const std::vector<RunData>& data, const ReportOptions& options,
                           const ReportResult& result, bool have_curves, bool plots_drawn) {
  std::vector<std::string> values;
  for (const RunData& r : data) values.push_back(r.sweep.value);
  std::string md = absl::StrFormat("# Syncline experiment: --%s %s\n\n", options.flag,
                                   absl::StrJoin(values, ","));
  absl::StrAppendFormat(
      &md, "Every run had the same data, seed and job; only `--%s` changed. Job flags: %s.\n\n",
      options.flag,
      options.job_args.empty() ? "the defaults"
                               : absl::StrCat("`", absl::StrJoin(options.job_args, " "), "`"));
  md += MarkdownTable(data, options.flag, result.target_loss.has_value());
  md +=
      "\nClocks/s per worker: the most steps any worker ran, over the run's wall time. Training "
      "loss: the mean of the workers' latest reported loss. Pushed: every byte of the workers' "
      "pushes, their acknowledgements and clocks; pulled: of their pull requests and replies; "
      "all: both. Busiest server: what the "
      "server that moved the most received and sent.\n\n";
  md += "## Commentary\n\n";
  for (absl::string_view line : absl::StrSplit(result.commentary, '\n', absl::SkipEmpty())) {
    absl::StrAppend(&md, "- ", line, "\n");
  }
  if (have_curves) {
    md += "\n## Training loss\n\n";
    if (plots_drawn) {
      md +=
          "![training loss against wall-clock time](loss_vs_time.png)\n\n"
          "![training loss against steps](loss_vs_steps.png)\n\n"
          "![training loss against bytes pushed](loss_vs_bytes.png)\n\n";
      std::vector<const RunData*> all;
      for (const RunData& r : data) all.push_back(&r);
      if (HasConsensus(all)) {
        md += "![consensus distance against steps](consensus_vs_steps.png)\n\n";
      }
      if (HasHeldOut(all)) {
        md +=
            "## Held-out loss\n\n"
            "The model on the test set while the runs trained (--eval-every); the target and "
            "the time to it are these curves', and the times leave the evaluations out.\n\n"
            "![held-out loss against training time](heldout_vs_time.png)\n\n"
            "![held-out loss against steps](heldout_vs_steps.png)\n\n"
            "![held-out loss against bytes moved](heldout_vs_bytes.png)\n\n";
      }
      md += "Curves: `loss_curves.dat`; to redraw them, run `gnuplot plots.gp` in this folder.\n";
    } else {
      md +=
          "Not drawn (no gnuplot, or it failed). Curves: `loss_curves.dat`; to draw them, run "
          "`gnuplot plots.gp` in this folder.\n";
    }
  }
  md += "\n## Runs\n\n";
  for (const RunData& r : data) {
    absl::StrAppendFormat(&md, "- `%s`: [%s/](%s/) (summary.json, metrics.csv, logs/)\n",
                          r.sweep.value, r.sweep.folder, r.sweep.folder);
  }
  return md;
}

// Writes loss_curves.dat and plots.gp for the runs with curves and, with a gnuplot, draws them.
// Plots of an earlier experiment in the same folder are removed first. Returns a warning when
// nothing could be drawn, empty otherwise; an error only when a file cannot be written.
absl::StatusOr<std::string> WritePlots(const fs::path& dir,
                                       const std::vector<const RunData*>& plotted,
                                       const ReportOptions& options, std::optional<double> target) {
  std::error_code ec;
  for (const char* stale :
       {"loss_vs_time.png", "loss_vs_steps.png", "loss_vs_bytes.png", "consensus_vs_steps.png",
        "heldout_vs_time.png", "heldout_vs_steps.png", "heldout_vs_bytes.png", "loss_curves.dat",
        "heldout_curves.dat", "plots.gp"}) {
    fs::remove(dir / stale, ec);
  }
  if (plotted.empty()) return std::string("no run has a loss curve; no plots");
  std::vector<std::pair<std::string, std::string>> files = {
      {"loss_curves.dat", CurvesData(plotted)},
      {"plots.gp", PlotScript(plotted, options.flag, target)}};
  if (HasHeldOut(plotted)) files.emplace_back("heldout_curves.dat", HeldOutData(plotted));
  for (const auto& [name, text] : files) {
    if (absl::Status s = WriteTextFile(dir / name, text); !s.ok()) return s;
  }
  if (!options.gnuplot) return std::string();  // RunExperiment has said so already
  if (std::string error = RunGnuplot(*options.gnuplot, dir); !error.empty()) {
    return absl::StrCat("gnuplot failed, no plots: ", error);
  }
  return std::string();
}

}  // namespace

absl::StatusOr<std::vector<LossPoint>> ReadLossCurve(const std::string& metrics_csv, int workers) {
  auto text = ReadWholeFile(metrics_csv);
  if (!text.ok()) return text.status();
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  // The last piece is empty after a final newline, or a line the run did not finish writing.
  lines.pop_back();
  if (lines.empty()) return absl::InvalidArgumentError(absl::StrCat(metrics_csv, ": no header"));
  const std::vector<absl::string_view> header = absl::StrSplit(lines[0], ',');
  int wall = -1, worker = -1, clock = -1, loss = -1, consensus = -1, test_loss = -1;
  for (int i = 0; i < static_cast<int>(header.size()); ++i) {
    const absl::string_view name = absl::StripAsciiWhitespace(header[i]);
    if (name == "wall_seconds") wall = i;
    if (name == "worker") worker = i;
    if (name == "clock") clock = i;
    if (name == "train_loss") loss = i;
    if (name == "consensus") consensus = i;
    if (name == "test_loss") test_loss = i;
  }
  if (wall < 0 || worker < 0 || clock < 0 || loss < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        metrics_csv, ":1: the header needs wall_seconds, worker, clock and train_loss columns"));
  }
  std::map<int, std::pair<double, double>> latest;  // worker -> (clock, loss)
  std::map<int, double> latest_consensus;
  std::vector<LossPoint> curve;
  for (size_t n = 1; n < lines.size(); ++n) {
    if (absl::StripAsciiWhitespace(lines[n]).empty()) continue;
    const std::vector<absl::string_view> f = absl::StrSplit(lines[n], ',');
    // A held-out row (--eval-every) has no training loss: ReadHeldOutCurve's.
    if (test_loss >= 0 && f.size() == header.size() && f[loss].empty() && !f[test_loss].empty()) {
      continue;
    }
    double w = 0, c = 0, l = 0;
    int rank = 0;
    if (f.size() != header.size() || !absl::SimpleAtod(f[wall], &w) ||
        !absl::SimpleAtoi(f[worker], &rank) || !absl::SimpleAtod(f[clock], &c) ||
        !absl::SimpleAtod(f[loss], &l)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: malformed row '%s'", metrics_csv, n + 1, std::string(lines[n])));
    }
    latest[rank] = {c, l};
    double d = 0;
    if (consensus >= 0 && absl::SimpleAtod(f[consensus], &d)) latest_consensus[rank] = d;
    if (static_cast<int>(latest.size()) < workers) continue;
    LossPoint p{w, 0, 0, 0};
    for (const auto& [r, cl] : latest) {
      p.clock += cl.first;
      p.loss += cl.second;
    }
    p.clock /= latest.size();
    p.loss /= latest.size();
    for (const auto& [r, value] : latest_consensus) p.consensus += value;
    if (!latest_consensus.empty()) p.consensus /= latest_consensus.size();
    // Workers that report in the same millisecond make one point, not a saw-tooth.
    if (!curve.empty() && curve.back().wall_seconds == w) {
      curve.back() = p;
    } else {
      curve.push_back(p);
    }
  }
  return curve;
}

absl::StatusOr<std::vector<LossPoint>> ReadHeldOutCurve(const std::string& metrics_csv) {
  auto text = ReadWholeFile(metrics_csv);
  if (!text.ok()) return text.status();
  std::vector<absl::string_view> lines = absl::StrSplit(*text, '\n');
  lines.pop_back();  // empty after the last newline, or a line not finished
  std::vector<LossPoint> curve;
  if (lines.empty()) return curve;
  const std::vector<absl::string_view> header = absl::StrSplit(lines[0], ',');
  auto column = [&](absl::string_view name) {
    for (int i = 0; i < static_cast<int>(header.size()); ++i) {
      if (absl::StripAsciiWhitespace(header[i]) == name) return i;
    }
    return -1;
  };
  const int wall = column("wall_seconds"), clock = column("clock"), loss = column("train_loss"),
            test_loss = column("test_loss"), bytes = column("bytes"), eval = column("eval_s");
  if (wall < 0 || clock < 0 || loss < 0 || test_loss < 0) return curve;
  // A point's time leaves out the evaluations so far, its own included: the time the run
  // trained to reach that model.
  double evaluating = 0;
  for (size_t n = 1; n < lines.size(); ++n) {
    const std::vector<absl::string_view> f = absl::StrSplit(lines[n], ',');
    if (f.size() != header.size() || !f[loss].empty() || f[test_loss].empty()) continue;
    LossPoint p;
    double e = 0;
    if (!absl::SimpleAtod(f[wall], &p.wall_seconds) || !absl::SimpleAtod(f[clock], &p.clock) ||
        !absl::SimpleAtod(f[test_loss], &p.loss) ||
        (bytes >= 0 && !f[bytes].empty() && !absl::SimpleAtod(f[bytes], &p.bytes)) ||
        (eval >= 0 && !f[eval].empty() && !absl::SimpleAtod(f[eval], &e))) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s:%d: malformed row '%s'", metrics_csv, n + 1, std::string(lines[n])));
    }
    evaluating += std::isfinite(e) && e > 0 ? e : 0;
    p.wall_seconds = std::max(0.0, p.wall_seconds - evaluating);
    curve.push_back(p);
  }
  return curve;
}

std::optional<double> TimeToTarget(const std::vector<LossPoint>& curve, double target) {
  for (const LossPoint& p : curve) {
    if (p.loss <= target) return p.wall_seconds;
  }
  return std::nullopt;
}

std::optional<std::string> FindOnPath(const std::string& program) {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return std::nullopt;
  for (absl::string_view dir : absl::StrSplit(path, ':', absl::SkipEmpty())) {
    const fs::path candidate = fs::path(std::string(dir)) / program;
    std::error_code ec;
    if (fs::is_regular_file(candidate, ec) && access(candidate.c_str(), X_OK) == 0) {
      return candidate.string();
    }
  }
  return std::nullopt;
}

absl::StatusOr<ReportResult> WriteExperimentReport(const ReportOptions& options,
                                                   const std::vector<ExperimentRun>& runs) {
  const fs::path dir = options.dir;
  ReportResult result;
  std::vector<RunData> data;
  for (const ExperimentRun& run : runs) data.push_back(LoadRun(dir, run, &result.warnings));

  // The held-out curves decide the race when every run that finished has one.
  const bool held_out =
      std::any_of(data.begin(), data.end(), [](const RunData& r) { return r.ok; }) &&
      std::all_of(data.begin(), data.end(),
                  [](const RunData& r) { return !r.ok || !r.held_out.empty(); });
  for (RunData& r : data) r.race_held_out = held_out;
  result.target_loss = options.target_loss;
  std::vector<std::string> not_learned;
  if (!result.target_loss) result.target_loss = DefaultTarget(data, &not_learned);
  for (RunData& r : data) {
    if (!r.ok) ++result.failed_runs;
    if (r.ok && result.target_loss) r.time_to_target = TimeToTarget(r.Race(), *result.target_loss);
  }
  result.commentary = Commentary(data, options.flag, result.target_loss,
                                 options.target_loss.has_value(), not_learned);

  std::vector<const RunData*> plotted;
  for (const RunData& r : data) {
    if (!r.curve.empty()) plotted.push_back(&r);
  }
  auto plots = WritePlots(dir, plotted, options, result.target_loss);
  if (!plots.ok()) return plots.status();
  if (!plots->empty()) result.warnings.push_back(*plots);
  const bool drawn = plots->empty() && options.gnuplot.has_value();

  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"summary.csv", SummaryCsv(data, result.target_loss)},
           {"report.md", ReportMarkdown(data, options, result, !plotted.empty(), drawn)}}) {
    if (absl::Status s = WriteTextFile(dir / name, text); !s.ok()) return s;
  }
  return result;
}
}  // namespace syncline
