#include "launch/run_report.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "core/message.h"
#include "launch/experiment.h"
#include "launch/summary_json.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string TempOut(const std::string& name) {
  const fs::path p = fs::path(testing::TempDir()) / ("run_report_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// The split in a message's order: steps, batch, upload, compute, compress, download, network.
void SetSplit(wire::StepSeconds::Builder s, const std::vector<double>& v) {
  s.setSteps(static_cast<int64_t>(v[0]));
  s.setBatch(v[1]);
  s.setUpload(v[2]);
  s.setCompute(v[3]);
  s.setCompress(v[4]);
  s.setDownload(v[5]);
  s.setNetwork(v[6]);
}

void Progress(RunReport& report, int worker, int64_t clock, const std::vector<double>& split) {
  MessageBuilder b(wire::MsgType::PROGRESS);
  auto p = b.header().getBody().initProgress();
  p.setClock(clock);
  p.setEpoch(1);
  p.setTrainLoss(0.5);
  p.setTotalSteps(100);
  SetSplit(p.initStepSeconds(), split);
  Message m = b.Finish();
  ASSERT_TRUE(m.Parse().ok());
  report.OnProgress(worker, m.header().getBody().getProgress());
}

void Done(RunReport& report, int worker, const std::vector<double>& split,
          const std::string& device) {
  MessageBuilder b(wire::MsgType::WORKER_DONE);
  auto s = b.header().getBody().initWorkerStats();
  s.setSteps(static_cast<int64_t>(split[0]));
  SetSplit(s.initStepSeconds(), split);
  s.setDevice(device);
  Message m = b.Finish();
  ASSERT_TRUE(m.Parse().ok());
  report.OnWorkerDone(worker, m.header().getBody().getWorkerStats());
}

constexpr char kSplitColumns[] = "batch_s,upload_s,compute_s,compress_s,download_s,network_s";
// After the split: a progress row's bytes, and a held-out row's figures.
constexpr char kHeldOutColumns[] = ",bytes,test_loss,test_auc,test_accuracy,eval_s";

// metrics.csv gets each report's split after the columns it had; summary.json the mean seconds
// per step over the workers' steps and each worker's totals and device. Seconds from the wire
// that are negative or not finite count as 0.
TEST(RunReportTest, WritesTheStepSplitToMetricsAndSummary) {
  const std::string out = TempOut("split");
  JobSpec job;
  RunReport report(job, out, /*interactive=*/false);
  ASSERT_TRUE(report.Open().ok());
  Progress(report, 0, 10, {10, 0.5, 0, 2, 0.25, 0, 1});
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  Progress(report, 1, 10, {-5, -1, 0, nan, 0.001, -inf, inf});
  Done(report, 0, {20, 1, 0, 4, 0.5, 0, 2}, "cpu");
  ASSERT_TRUE(report.WriteSummary(absl::Seconds(1), "").ok());

  std::vector<std::string> rows =
      absl::StrSplit(ReadAll(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].starts_with("wall_seconds,worker,clock,")) << rows[0];
  EXPECT_TRUE(rows[0].ends_with(std::string(",world_size,") + kSplitColumns + kHeldOutColumns))
      << rows[0];
  std::vector<std::string> w0 = absl::StrSplit(rows[1], ',');
  std::vector<std::string> w1 = absl::StrSplit(rows[2], ',');
  ASSERT_EQ(w0.size(), 20u) << rows[1];
  EXPECT_EQ(std::vector<std::string>(w0.begin() + 9, w0.begin() + 15),
            (std::vector<std::string>{"0.5", "0", "2", "0.25", "0", "1"}));
  ASSERT_EQ(w1.size(), 20u) << rows[2];
  EXPECT_EQ(std::vector<std::string>(w1.begin() + 9, w1.begin() + 15),
            (std::vector<std::string>{"0", "0", "0", "0.001", "0", "0"}));

  const std::string summary = ReadAll(out + "/summary.json");
  auto fields = ParseSummaryJson(summary);
  ASSERT_TRUE(fields.ok()) << fields.status() << summary;
  // w0's totals (it finished) and w1's reports (0 steps): 20 steps.
  auto number = [&](const std::string& key) {
    auto it = fields->find(key);
    return it == fields->end() ? std::nullopt : it->second.number;
  };
  EXPECT_DOUBLE_EQ(number("step_seconds.batch").value_or(-1), 1.0 / 20) << summary;
  EXPECT_DOUBLE_EQ(number("step_seconds.upload").value_or(-1), 0) << summary;
  EXPECT_DOUBLE_EQ(number("step_seconds.compute").value_or(-1), 4.0 / 20) << summary;
  EXPECT_DOUBLE_EQ(number("step_seconds.compress").value_or(-1), 0.501 / 20) << summary;
  EXPECT_DOUBLE_EQ(number("step_seconds.download").value_or(-1), 0) << summary;
  EXPECT_DOUBLE_EQ(number("step_seconds.network").value_or(-1), 2.0 / 20) << summary;
  EXPECT_EQ(number("worker_step_seconds.w0.steps"), 20);
  EXPECT_EQ(number("worker_step_seconds.w0.compute"), 4);
  EXPECT_EQ(fields->at("worker_step_seconds.w0.device").text, "cpu");
  EXPECT_EQ(number("worker_step_seconds.w1.steps"), 0);
  EXPECT_EQ(number("worker_step_seconds.w1.network"), 0);
  // The job's device: where the workers that said computed.
  EXPECT_EQ(fields->at("device").text, "cpu");
}

// An interrupted run's workers never say they are done: its steps are those their progress
// reports counted, from the clock the run resumed from. The closing text counts in words.
TEST(RunReportTest, AnInterruptedRunCountsTheStepsItsWorkersReported) {
  const std::string out = TempOut("interrupted");
  JobSpec job;
  job.servers = 1;
  job.workers = 2;
  RunReport report(job, out, /*interactive=*/false);
  report.SetCheckpoints(nullptr, /*resumed_from=*/100);
  ASSERT_TRUE(report.Open().ok());
  Progress(report, 0, 400, {10, 0, 0, 1, 0, 0, 1});
  Progress(report, 1, 390, {10, 0, 0, 1, 0, 0, 1});
  ASSERT_TRUE(report.WriteSummary(absl::Seconds(1), "interrupted by signal 2", "failed").ok());
  auto fields = ParseSummaryJson(ReadAll(out + "/summary.json"));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->at("steps").number, 300 + 290);
  EXPECT_EQ(fields->at("steps_per_worker").number, 400);
  EXPECT_NE(report.SummaryText(absl::Seconds(1)).find("bsp, 1 server, 2 workers, model"),
            std::string::npos)
      << report.SummaryText(absl::Seconds(1));
}

// summary.json's device is where the workers computed: every device a worker reported.
TEST(RunReportTest, TheJobsDeviceIsTheWorkersDevices) {
  const std::string out = TempOut("devices");
  JobSpec job;
  RunReport report(job, out, /*interactive=*/false);
  ASSERT_TRUE(report.Open().ok());
  Done(report, 0, {10, 0, 0, 1, 0, 0, 1}, "cuda:0");
  Done(report, 1, {10, 0, 0, 1, 0, 0, 1}, "cpu");
  ASSERT_TRUE(report.WriteSummary(absl::Seconds(1), "").ok());
  auto fields = ParseSummaryJson(ReadAll(out + "/summary.json"));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->at("device").text, "cpu,cuda:0");
  EXPECT_EQ(fields->at("worker_step_seconds.w0.device").text, "cuda:0");
}

// A run resumed over the metrics.csv of an older build, without the split's columns, has them
// added, empty in the old rows, and the file still reads as a loss curve.
TEST(RunReportTest, AResumedRunAddsTheSplitColumnsToAnOlderMetricsFile) {
  const std::string out = TempOut("resumed");
  {
    std::ofstream old(out + "/metrics.csv");
    old << "wall_seconds,worker,clock,epoch,train_loss,examples,staleness,consensus,world_size\n"
        << "1.000,0,5,1,0.6,100,0,0,1\n"
        << "2.000,0,10,1,0.5,100,0,0,1\n";
  }
  JobSpec job;
  RunReport report(job, out, /*interactive=*/false);
  report.SetCheckpoints(nullptr, /*resumed_from=*/5);
  ASSERT_TRUE(report.Open().ok());
  Progress(report, 0, 10, {5, 0.1, 0, 0.2, 0, 0, 0.3});

  std::vector<std::string> rows =
      absl::StrSplit(ReadAll(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_TRUE(rows[0].ends_with(std::string(",world_size,") + kSplitColumns + kHeldOutColumns))
      << rows[0];
  EXPECT_EQ(rows[1], "1.000,0,5,1,0.6,100,0,0,1,,,,,,,,,,,");
  EXPECT_TRUE(rows[2].ends_with(",0.1,0,0.2,0,0,0.3,0,,,,")) << rows[2];
  auto curve = ReadLossCurve(out + "/metrics.csv", 1);
  ASSERT_TRUE(curve.ok()) << curve.status();
  EXPECT_EQ(curve->size(), 2u);
}

// --eval-every: each held-out evaluation is a row of metrics.csv with the test figures, the
// workers' bytes so far and its seconds, and no training columns; ReadLossCurve skips it,
// ReadHeldOutCurve reads it (its time less the evaluations so far); summary.json has the
// evaluations' time, which the steps per second leave out.
TEST(RunReportTest, HeldOutEvaluationsAreRowsOfTheirOwn) {
  const std::string out = TempOut("held_out");
  JobSpec job;
  RunReport report(job, out, /*interactive=*/false);
  ASSERT_TRUE(report.Open().ok());
  auto progress = [&](int worker, int64_t clock, uint64_t bytes) {
    MessageBuilder b(wire::MsgType::PROGRESS);
    auto p = b.header().getBody().initProgress();
    p.setClock(clock);
    p.setEpoch(1);
    p.setTrainLoss(0.5);
    p.setBytes(bytes);
    Message m = b.Finish();
    ASSERT_TRUE(m.Parse().ok());
    report.OnProgress(worker, m.header().getBody().getProgress());
  };
  auto held_out = [&](int64_t clock, double loss, double seconds) {
    MessageBuilder b(wire::MsgType::HELD_OUT);
    auto e = b.header().getBody().initEvaluation();
    e.setLoss(loss);
    e.setAuc(0.75);
    e.setAccuracy(-1);
    e.setExamples(100);
    e.setSeconds(seconds);
    Message m = b.Finish();
    ASSERT_TRUE(m.Parse().ok());
    report.OnHeldOut(0, clock, m.header().getBody().getEvaluation());
  };
  progress(0, 10, 1000);
  progress(1, 10, 2000);
  held_out(10, 0.4, 0.25);
  progress(0, 20, 3000);
  held_out(20, 0.3, 0.5);
  ASSERT_TRUE(report.WriteSummary(absl::Seconds(10), "").ok());

  std::vector<std::string> rows =
      absl::StrSplit(ReadAll(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_EQ(rows.size(), 6u);
  std::vector<std::string> first = absl::StrSplit(rows[3], ',');
  ASSERT_EQ(first.size(), 20u) << rows[3];
  EXPECT_EQ(first[2], "10");
  EXPECT_EQ(first[4], "");  // no training loss
  EXPECT_EQ(std::vector<std::string>(first.begin() + 15, first.end()),
            (std::vector<std::string>{"3000", "0.4", "0.75", "-1", "0.25"}));
  std::vector<std::string> second = absl::StrSplit(rows[5], ',');
  EXPECT_EQ(second[15], "5000");  // w0's 3000 and w1's 2000
  auto curve = ReadLossCurve(out + "/metrics.csv", 2);
  ASSERT_TRUE(curve.ok()) << curve.status();
  ASSERT_FALSE(curve->empty());
  EXPECT_EQ(curve->back().clock, 15);  // the mean of the workers' latest, held-out rows skipped
  auto held = ReadHeldOutCurve(out + "/metrics.csv");
  ASSERT_TRUE(held.ok()) << held.status();
  ASSERT_EQ(held->size(), 2u);
  EXPECT_EQ((*held)[0].clock, 10);
  EXPECT_EQ((*held)[0].loss, 0.4);
  EXPECT_EQ((*held)[1].bytes, 5000);
  auto fields = ParseSummaryJson(ReadAll(out + "/summary.json"));
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(fields->at("evaluation_seconds").number, 0.75);
}

}  // namespace
}  // namespace syncline
