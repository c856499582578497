#include "launch/experiment.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

// absl::string_view is not std::string_view in this Abseil build; gmock's matchers want strings.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// summary.csv as one map per data row, keyed by the header.
std::vector<std::map<std::string, std::string>> ReadCsv(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty());
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> fields = absl::StrSplit(lines[i], ',');
    std::map<std::string, std::string>& row = rows.emplace_back();
    for (size_t j = 0; j < header.size() && j < fields.size(); ++j) row[header[j]] = fields[j];
  }
  return rows;
}

TEST(ParseSweepListTest, SplitsValidatesAndNamesFolders) {
  auto values = ParseSweepList("sync", "bsp,asp, ssp:1,ssp:4");
  ASSERT_TRUE(values.ok()) << values.status();
  std::vector<std::string> names, folders;
  for (const SweepValue& v : *values) {
    names.push_back(v.value);
    folders.push_back(v.folder);
  }
  EXPECT_THAT(names, ElementsAre("bsp", "asp", "ssp:1", "ssp:4"));
  EXPECT_THAT(folders, ElementsAre("bsp", "asp", "ssp_1", "ssp_4"));
}

TEST(ParseSweepListTest, RejectsBadValuesNamingThem) {
  auto bad = ParseSweepList("sync", "bsp,ssp:x");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad.status()), HasSubstr("ssp:x"));
  EXPECT_THAT(Message(ParseSweepList("sync", "bsp,nope").status()), HasSubstr("nope"));
  EXPECT_THAT(Message(ParseSweepList("sync", "bsp,,asp").status()), HasSubstr("empty"));
  EXPECT_THAT(Message(ParseSweepList("sync", "").status()), HasSubstr("empty"));
  EXPECT_THAT(Message(ParseSweepList("sync", "asp,bsp,asp").status()), HasSubstr("twice"));
  // A value is checked with the job's other flags: krum:3 needs 9 updates.
  EXPECT_THAT(Message(ParseSweepList("aggregate", "median,krum:3").status()),
              HasSubstr("has 2 (workers)"));
  EXPECT_TRUE(ParseSweepList("aggregate", "median,krum:3", {"--workers", "10"}).ok());
  EXPECT_THAT(Message(ParseSweepList("epochs", "1,2").status()), HasSubstr("cannot be swept"));
}

// A flag that some runs' modes ignore (and the launcher would refuse) is left out of those
// runs only; one that no run uses is refused up front, as the launcher would.
TEST(ParseSweepListTest, LeavesAFlagOutOfTheRunsWhoseModeIgnoresIt) {
  auto values = ParseSweepList("sync", "bsp,gossip:ring,fedavg",
                               {"--servers", "3", "--epochs=2", "--workers", "3"});
  ASSERT_TRUE(values.ok()) << values.status();
  ASSERT_EQ(values->size(), 3u);
  EXPECT_THAT((*values)[0].left_out, ElementsAre());
  EXPECT_THAT((*values)[1].left_out, ElementsAre("servers"));
  EXPECT_THAT((*values)[2].left_out, ElementsAre("epochs"));
  auto none = ParseSweepList("sync", "gossip:ring,allreduce", {"--servers", "3"});
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(Message(none.status()), HasSubstr("--servers is for --sync bsp"));
  EXPECT_THAT(Message(none.status()), HasSubstr("no run of the experiment uses it"));
  // The swept flag itself, ignored by the fixed mode.
  EXPECT_THAT(Message(ParseSweepList("aggregate", "mean,median", {"--sync", "asp"}).status()),
              HasSubstr("--aggregate is for --sync bsp and fedavg, not asp"));
}

TEST(WithoutFlagsTest, DropsTheNamedFlagsAndTheirValues) {
  EXPECT_THAT(WithoutFlags({"--servers", "3", "--epochs=2", "--workers", "4", "--lr", "0.1"},
                           {"servers", "epochs"}),
              ElementsAre("--workers", "4", "--lr", "0.1"));
}

TEST(RunFolderNameTest, IsFilesystemSafe) {
  EXPECT_EQ(RunFolderName("ssp:1"), "ssp_1");
  EXPECT_EQ(RunFolderName("topk:0.01"), "topk_0.01");
  EXPECT_EQ(RunFolderName("a/b c"), "a_b_c");
  EXPECT_EQ(RunFolderName(".."), "__");
}

// Two workers; the header has an extra column, as later launchers append more.
constexpr char kMetrics[] =
    "wall_seconds,worker,clock,epoch,train_loss,examples,staleness\n"
    "0.5,0,10,0,0.9,2560,0\n"  // w1 has not reported: no point yet
    "0.6,1,10,0,0.7,2560,1\n"  // (0.9 + 0.7) / 2 = 0.8
    "1.0,0,20,0,0.5,2560,0\n"  // (0.5 + 0.7) / 2 = 0.6
    "1.2,1,20,0,0.4,2560,2\n"  // 0.45
    "1.4,0,30,0,0.3";          // cut off mid-write: ignored

TEST(LossCurveTest, MeanOfEachWorkersLatestLossOnceAllReported) {
  const std::string dir = TempDir("curve");
  WriteFile(dir + "/metrics.csv", kMetrics);
  auto curve = ReadLossCurve(dir + "/metrics.csv", 2);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->size(), 3u);
  EXPECT_DOUBLE_EQ((*curve)[0].wall_seconds, 0.6);
  EXPECT_DOUBLE_EQ((*curve)[0].loss, 0.8);
  EXPECT_DOUBLE_EQ((*curve)[0].clock, 10);
  EXPECT_DOUBLE_EQ((*curve)[1].loss, 0.6);
  EXPECT_DOUBLE_EQ((*curve)[1].clock, 15);
  EXPECT_DOUBLE_EQ((*curve)[2].loss, 0.45);

  EXPECT_EQ(TimeToTarget(*curve, 0.8), 0.6);
  EXPECT_EQ(TimeToTarget(*curve, 0.55), 1.2);
  EXPECT_EQ(TimeToTarget(*curve, 0.45), 1.2);
  EXPECT_EQ(TimeToTarget(*curve, 0.3), std::nullopt);
}

TEST(LossCurveTest, RowsAtTheSameTimeMakeOnePoint) {
  const std::string dir = TempDir("curve_same");
  WriteFile(dir + "/metrics.csv",
            "wall_seconds,worker,clock,train_loss\n1,0,10,0.8\n1,1,10,0.6\n2,0,20,0.4\n"
            "2,1,20,0.2\n");
  auto curve = ReadLossCurve(dir + "/metrics.csv", 2);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->size(), 2u);
  EXPECT_DOUBLE_EQ((*curve)[1].wall_seconds, 2);
  EXPECT_DOUBLE_EQ((*curve)[1].clock, 20);
  EXPECT_DOUBLE_EQ((*curve)[1].loss, 0.3);
}

TEST(LossCurveTest, FindsColumnsByNameAndRejectsMalformedRows) {
  const std::string dir = TempDir("curve_bad");
  WriteFile(dir + "/reordered.csv", "train_loss,clock,worker,wall_seconds\n0.5,3,0,2.5\n");
  auto curve = ReadLossCurve(dir + "/reordered.csv", 1);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_EQ(curve->size(), 1u);
  EXPECT_DOUBLE_EQ((*curve)[0].wall_seconds, 2.5);
  EXPECT_DOUBLE_EQ((*curve)[0].loss, 0.5);

  WriteFile(dir + "/bad.csv", "wall_seconds,worker,clock,train_loss\n1,0,1,0.5\n2,0,x,0.4\n");
  EXPECT_THAT(Message(ReadLossCurve(dir + "/bad.csv", 1).status()), HasSubstr("bad.csv:3"));
  WriteFile(dir + "/nocol.csv", "wall_seconds,worker,clock\n1,0,1\n");
  EXPECT_THAT(Message(ReadLossCurve(dir + "/nocol.csv", 1).status()), HasSubstr("train_loss"));
  EXPECT_FALSE(ReadLossCurve(dir + "/missing.csv", 1).ok());
}

std::string FakeSummary(const std::string& status, const std::string& error, double wall,
                        int steps_per_worker, double test_loss, double max_staleness) {
  return absl::StrFormat(
      "{\n  \"status\": \"%s\",\n%s  \"sync\": \"x\",\n  \"workers\": 2,\n"
      "  \"steps\": %d,\n  \"steps_per_worker\": %d,\n  \"wall_seconds\": %g,\n"
      "  \"train_loss\": 0.4,\n  \"test_loss\": %g,\n  \"test_auc\": 0.9,\n"
      "  \"test_accuracy\": 0.8,\n  \"bytes_pushed\": 1000,\n  \"bytes_pulled\": 500,\n"
      "  \"busiest_server\": {\"server\": 1, \"bytes_in\": 700, \"bytes_out\": 300, "
      "\"bytes_all\": 1000},\n"
      "  \"max_staleness_served\": %g,\n  \"mean_staleness_served\": 0.5,\n"
      "  \"nodes_down\": [\"w1 \\\"gone\\\"\"]\n}\n",
      status, error.empty() ? "" : absl::StrFormat("  \"error\": \"%s\",\n", error),
      2 * steps_per_worker, steps_per_worker, wall, test_loss, max_staleness);
}

// Four runs: bsp slower, asp faster, ssp:1 failed with a summary, ssp:4 failed without one.
std::vector<ExperimentRun> WriteFakeRuns(const fs::path& dir) {
  WriteFile(dir / "bsp/summary.json", FakeSummary("ok", "", 4.0, 100, 0.41, 0));
  WriteFile(dir / "bsp/metrics.csv",
            "wall_seconds,worker,clock,epoch,train_loss,examples\n"
            "1,0,10,0,0.8,1\n1,1,10,0,0.8,1\n3,0,50,0,0.5,1\n3,1,50,0,0.5,1\n");
  WriteFile(dir / "asp/summary.json", FakeSummary("ok", "", 2.0, 100, 0.40, 3));
  WriteFile(dir / "asp/metrics.csv",
            "wall_seconds,worker,clock,epoch,train_loss,examples\n"
            "0.5,0,10,0,0.7,1\n0.5,1,10,0,0.7,1\n1.5,0,90,0,0.45,1\n1.5,1,80,0,0.45,1\n");
  WriteFile(dir / "ssp_1/summary.json",
            FakeSummary("failed", "w1 killed by signal 9", 1.0, 5, 0.9, 1));
  return {{{"bsp", "bsp"}, ""},
          {{"asp", "asp"}, ""},
          {{"ssp:1", "ssp_1"}, "exited with code 1"},
          {{"ssp:4", "ssp_4"}, "ssp:4 exited with code 2"}};
}

TEST(ExperimentReportTest, WritesSummaryCsvAndReportFromRunFolders) {
  const fs::path dir = TempDir("report");
  ReportOptions options;
  options.dir = dir.string();
  options.job_args = {"--workers", "2"};
  auto result = WriteExperimentReport(options, WriteFakeRuns(dir));
  ASSERT_TRUE(result.ok()) << result.status();
  // The default target is the worst final training loss among the successful runs (bsp's).
  ASSERT_TRUE(result->target_loss.has_value());
  EXPECT_DOUBLE_EQ(*result->target_loss, 0.5);
  EXPECT_EQ(result->failed_runs, 2);

  auto rows = ReadCsv((dir / "summary.csv").string());
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["mode"], "bsp");
  EXPECT_EQ(rows[0]["status"], "ok");
  EXPECT_EQ(rows[0]["wall_seconds"], "4.000");
  EXPECT_EQ(rows[0]["steps"], "200");
  EXPECT_EQ(rows[0]["clocks_per_second_per_worker"], "25.00");
  EXPECT_EQ(rows[0]["time_to_target_seconds"], "3.000");
  EXPECT_EQ(rows[0]["bytes_on_wire"], "1500");
  EXPECT_EQ(rows[0]["bytes_pushed"], "1000");
  EXPECT_EQ(rows[0]["bytes_pulled"], "500");
  EXPECT_EQ(rows[0]["busiest_server_bytes"], "1000");
  EXPECT_EQ(rows[0]["test_auc"], "0.9");
  EXPECT_EQ(rows[0]["max_staleness"], "0");
  EXPECT_EQ(rows[1]["mode"], "asp");
  EXPECT_EQ(rows[1]["final_train_loss"], "0.45");
  EXPECT_EQ(rows[1]["time_to_target_seconds"], "1.500");
  EXPECT_EQ(rows[1]["clocks_per_second_per_worker"], "50.00");
  EXPECT_EQ(rows[1]["max_staleness"], "3");
  EXPECT_EQ(rows[2]["mode"], "ssp:1");
  EXPECT_EQ(rows[2]["folder"], "ssp_1");
  EXPECT_EQ(rows[2]["status"], "failed");
  EXPECT_EQ(rows[2]["time_to_target_seconds"], "");
  EXPECT_EQ(rows[2]["error"], "w1 killed by signal 9");  // summary.json's error wins
  EXPECT_EQ(rows[3]["status"], "failed");
  EXPECT_EQ(rows[3]["error"], "ssp:4 exited with code 2");

  const std::string md = ReadFile((dir / "report.md").string());
  EXPECT_THAT(md, HasSubstr("| `asp` | ok | 2.00 |"));
  EXPECT_THAT(md, HasSubstr("`asp` reached the target first, after 1.50 s"));
  EXPECT_THAT(md, HasSubstr("relative to `bsp`"));
  EXPECT_THAT(md, HasSubstr("`asp` 2.00×"));  // 3 s / 1.5 s to the target; 100 vs 50 steps/s
  EXPECT_THAT(md, HasSubstr("`ssp:1` failed: w1 killed by signal 9"));
  EXPECT_THAT(md, HasSubstr("`--workers 2`"));
  // Curves and the script are written even without gnuplot.
  EXPECT_THAT(ReadFile((dir / "plots.gp").string()), HasSubstr("loss_vs_time.png"));
  EXPECT_THAT(ReadFile((dir / "loss_curves.dat").string()), HasSubstr("# index 1: asp"));
  EXPECT_FALSE(fs::exists(dir / "loss_vs_time.png"));
  EXPECT_THAT(md, HasSubstr("Not drawn"));
}

TEST(ExperimentReportTest, AGivenTargetNobodyReachesIsReportedAsNever) {
  const fs::path dir = TempDir("report_target");
  ReportOptions options;
  options.dir = dir.string();
  options.target_loss = 0.1;
  auto result = WriteExperimentReport(options, WriteFakeRuns(dir));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ReadCsv((dir / "summary.csv").string())[0]["time_to_target_seconds"], "");
  const std::string md = ReadFile((dir / "report.md").string());
  EXPECT_THAT(md, HasSubstr("No run reached the target."));
  EXPECT_THAT(md, HasSubstr("| never |"));
}

// Robust aggregators against an attacked mean: the mean's loss barely falls, and it is not
// the others' target (it would be theirs from the start); it never reaches the one they set.
TEST(ExperimentReportTest, ARunThatDidNotLearnSetsNoTargetForTheOthers) {
  const fs::path dir = TempDir("report_attacked");
  const std::string header = "wall_seconds,worker,clock,epoch,train_loss,examples\n";
  for (const auto& [folder, first, last] :
       {std::tuple{"mean", 0.69, 0.64}, std::tuple{"median", 0.69, 0.40},
        std::tuple{"krum_2", 0.69, 0.45}}) {
    WriteFile(dir / folder / "summary.json", FakeSummary("ok", "", 4.0, 100, 0.4, 0));
    WriteFile(dir / folder / "metrics.csv",
              absl::StrFormat("%s1,0,10,0,%g,1\n1,1,10,0,%g,1\n3,0,50,0,%g,1\n3,1,50,0,%g,1\n",
                              header, first, first, last, last));
  }
  ReportOptions options;
  options.dir = dir.string();
  options.flag = "aggregate";
  auto result = WriteExperimentReport(
      options, {{{"mean", "mean"}, ""}, {{"median", "median"}, ""}, {{"krum:2", "krum_2"}, ""}});
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->target_loss.has_value());
  EXPECT_DOUBLE_EQ(*result->target_loss, 0.45);
  EXPECT_THAT(result->commentary, HasSubstr("among the runs that learned; `mean` closed less"));
  auto rows = ReadCsv((dir / "summary.csv").string());
  EXPECT_EQ(rows[0]["time_to_target_seconds"], "");  // mean: never
  EXPECT_EQ(rows[1]["time_to_target_seconds"], "3.000");
}

TEST(ExperimentReportTest, GnuplotDrawsBothPlots) {
  const std::optional<std::string> gnuplot = FindOnPath("gnuplot");
  if (!gnuplot) GTEST_SKIP() << "gnuplot is not installed";
  const fs::path dir = TempDir("report_plots");
  ReportOptions options;
  options.dir = dir.string();
  options.gnuplot = gnuplot;
  auto result = WriteExperimentReport(options, WriteFakeRuns(dir));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->warnings.empty()) << result->warnings[0];
  for (const char* png : {"loss_vs_time.png", "loss_vs_steps.png"}) {
    EXPECT_GT(fs::file_size(dir / png), 1000u) << png;
  }
  EXPECT_THAT(ReadFile((dir / "report.md").string()), HasSubstr("](loss_vs_time.png)"));
}

TEST(ExperimentCommandTest, BadFlagsExitTwoBeforeAnyRun) {
  const std::string out = TempDir("experiment_bad");
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--sync", "bsp,nope"},
                                             {"--epochs", "1"},
                                             {"--sync", "bsp", "--epochs", "0"},
                                             {"--sync", "bsp", "--no-such-flag", "1"},
                                             {"--sync", "bsp", "--target-loss", "x"},
                                             {"--sync", "bsp,asp", "--compress", "none,fp16"}}) {
    std::vector<std::string> argv = {SYNCLINE_LAUNCH_BIN, "experiment", "--out", out + "/x"};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = RunProcess(argv, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, 2) << absl::StrJoin(args, " ") << "\n" << r.output;
  }
  EXPECT_FALSE(fs::exists(out + "/x"));
  auto help = RunProcess({SYNCLINE_LAUNCH_BIN, "experiment", "--help"}, absl::Seconds(30));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.output, HasSubstr("--target-loss"));
}

TEST(ExperimentCommandTest, AFailedRunIsReportedAndTheExperimentExitsOne) {
  const std::string out = TempDir("experiment_failed");
  WriteFile(out + "/bad.libsvm", "1 1:1 2:1\n0 3:1\nnot a label\n");
  auto r = RunProcess({SYNCLINE_LAUNCH_BIN, "experiment", "--sync", "bsp,asp", "--train",
                       out + "/bad.libsvm", "--out", out + "/cmp"},
                      absl::Seconds(60));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto rows = ReadCsv(out + "/cmp/summary.csv");
  ASSERT_EQ(rows.size(), 2u) << r.output;
  for (auto& row : rows) {
    EXPECT_EQ(row["status"], "failed");
    // The worker that read the bad line says which, and the job fails with its reason.
    EXPECT_THAT(row["error"], HasSubstr("bad.libsvm:3: label is not a number"));
  }
  EXPECT_THAT(ReadFile(out + "/cmp/report.md"), HasSubstr("`asp` failed: "));
}

// The cluster flags go to every run as given (here a port range and the local launcher).
TEST(ExperimentCommandTest, ComparesBspAndAspOnTheSameData) {
  const std::string out = TempDir("experiment_e2e");
  auto r = RunProcess({SYNCLINE_LAUNCH_BIN, "experiment", "--sync", "bsp,asp", "--gen-rows", "4000",
                       "--gen-test-rows", "1000", "--gen-features", "2000", "--epochs", "1",
                       "--launcher", "local", "--port-range", "40300-40400", "--out", out},
                      absl::Seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("=== run 2/2: asp ==="));
  EXPECT_THAT(r.output, HasSubstr("[asp] "));
  auto rows = ReadCsv(out + "/summary.csv");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["mode"], "bsp");
  EXPECT_EQ(rows[1]["mode"], "asp");
  for (auto& row : rows) {
    EXPECT_EQ(row["status"], "ok") << row["error"];
    EXPECT_NE(row["time_to_target_seconds"], "");
  }
  EXPECT_TRUE(fs::exists(out + "/report.md"));
  // The second run trained on the first run's data.
  EXPECT_THAT(ReadFile(out + "/asp/summary.json"), HasSubstr(out + "/bsp/data/train.libsvm"));
  // A single value of the other sweepable flag is a fixed setting of every run, not a second
  // sweep (it used to be refused).
  const std::string fixed = out + "/fixed";
  auto f = RunProcess({SYNCLINE_LAUNCH_BIN, "experiment", "--sync", "asp", "--compress",
                       "none,fp16", "--train", out + "/bsp/data/train.libsvm", "--out", fixed},
                      absl::Seconds(120));
  ASSERT_EQ(f.exit_code, 0) << f.output;
  auto fixed_rows = ReadCsv(fixed + "/summary.csv");
  ASSERT_EQ(fixed_rows.size(), 2u);
  for (const char* run : {"none", "fp16"}) {
    EXPECT_THAT(ReadFile(fixed + "/" + run + "/summary.json"), HasSubstr("\"sync\": \"asp\""))
        << run;
  }
  if (FindOnPath("gnuplot")) {
    for (const char* png : {"loss_vs_time.png", "loss_vs_steps.png"}) {
      ASSERT_TRUE(fs::exists(out + "/" + png)) << png;
      EXPECT_GT(fs::file_size(out + "/" + png), 0u) << png;
    }
  }
}

}  // namespace
}  // namespace syncline
