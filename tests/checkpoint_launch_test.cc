// End-to-end checkpoints: a real job loses a parameter server to SIGKILL, is restarted with
// --resume and ends exactly where an uninterrupted run ends; a damaged newest checkpoint is
// reported and skipped in favour of the one before it.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <string_view>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

using testing_util::JsonNumber;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;
const std::string kGen = SYNCLINE_GEN_BIN;
constexpr int kEvery = 25;

// The job: logreg under BSP on 10k features with a memory tier of 1500 rows per server, so
// most rows live in RocksDB and checkpoints carry both tiers.
std::vector<std::string> Job(const std::string& data, const std::string& out) {
  return {kLaunch,
          "--servers",
          "2",
          "--workers",
          "2",
          "--sync",
          "bsp",
          "--train",
          data + "/train.libsvm",
          "--test",
          data + "/test.libsvm",
          "--epochs",
          "3",
          "--batch-size",
          "64",
          "--optimizer",
          "adagrad",
          "--lr",
          "0.1",
          "--embedding-memory",
          "1500rows",
          "--checkpoint-every",
          std::to_string(kEvery),
          "--checkpoint-keep",
          "3",
          "--out",
          out};
}

std::vector<std::string> Resume(std::vector<std::string> job) {
  job.push_back("--resume");
  return job;
}

// The largest clock in metrics.csv.
int64_t LastLoggedClock(const std::string& out) {
  int64_t last = 0;
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ',');
    if (f.size() > 2) last = std::max<int64_t>(last, std::stoll(f[2]));
  }
  return last;
}

// The checkpoint folders under `root` that have a MANIFEST, oldest first.
std::vector<std::string> CompleteCheckpoints(const std::string& root) {
  std::vector<std::string> complete;
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    if (std::filesystem::exists(e.path() / "MANIFEST")) complete.push_back(e.path().string());
  }
  std::sort(complete.begin(), complete.end());
  return complete;
}

// Generated libsvm data in `data`: train.libsvm and test.libsvm.
void Generate(const std::string& data, int rows, int test_rows, int features, int nnz, int seed) {
  auto gen = RunProcess({kGen, "--out", data + "/train.libsvm", "--test-out", data + "/test.libsvm",
                         "--rows", std::to_string(rows), "--test-rows", std::to_string(test_rows),
                         "--features", std::to_string(features), "--nnz", std::to_string(nnz),
                         "--seed", std::to_string(seed)});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
}

// After resumes, metrics.csv has each worker's steps once, in order, with times that go on
// from the run before instead of starting again at 0.
void ExpectEachStepLoggedOnceInOrder(const std::string& out) {
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_GT(lines.size(), 2u);
  EXPECT_TRUE(lines[0].starts_with("wall_seconds,worker,clock,")) << lines[0];
  std::map<std::string, std::pair<double, int64_t>> last;  // worker -> (wall, clock)
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], ',');
    ASSERT_GE(f.size(), 3u) << lines[i];
    const double wall = std::stod(f[0]);
    const int64_t clock = std::stoll(f[2]);
    auto it = last.find(f[1]);
    if (it != last.end()) {
      EXPECT_GT(clock, it->second.second) << "line " << i << ": " << lines[i];
      EXPECT_GE(wall, it->second.first) << "line " << i << ": " << lines[i];
    }
    last[f[1]] = {wall, clock};
  }
  EXPECT_EQ(last.size(), 2u);
}

TEST(CheckpointLaunchTest, AKilledServerResumesFromTheLastCheckpointAndEndsLikeAnUninterruptedRun) {
  const std::string data = TempDir("ckpt_data");
  ASSERT_NO_FATAL_FAILURE(Generate(data, 16000, 3000, 10000, 20, 5));

  const std::string whole = TempDir("ckpt_whole");
  auto a = RunProcess(Job(data, whole));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const std::string whole_summary = ReadFile(whole + "/summary.json");
  ASSERT_TRUE(JsonNumber(whole_summary, "test_loss").has_value()) << whole_summary;
  EXPECT_GT(*JsonNumber(whole_summary, "checkpoints_written"), 5) << whole_summary;
  EXPECT_GT(*JsonNumber(whole_summary, "test_auc"), 0.8) << whole_summary;
  // The memory tiers were too small: rows moved to RocksDB and back.
  ASSERT_TRUE(JsonNumber(whole_summary, "evictions").has_value()) << whole_summary;
  EXPECT_GT(*JsonNumber(whole_summary, "evictions"), 1000) << whole_summary;
  EXPECT_LT(*JsonNumber(whole_summary, "memory_hit_rate"), 1.0) << whole_summary;
  // Each process's peak memory, and the servers' embedding figures over time (at least the
  // final row of each server).
  EXPECT_GT(*JsonNumber(whole_summary, "ps0"), 0) << whole_summary;
  EXPECT_GT(*JsonNumber(whole_summary, "w1"), 0) << whole_summary;
  std::vector<std::string> rows =
      absl::StrSplit(ReadFile(whole + "/embedding.csv"), '\n', absl::SkipEmpty());
  ASSERT_GE(rows.size(), 3u);
  EXPECT_EQ(rows[0],
            "wall_seconds,server,rows_in_memory,rows_on_disk,admitted,rejected,expired,evictions,"
            "memory_hit_rate,memory_bytes");
  std::set<std::string> servers;
  for (size_t i = 1; i < rows.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(rows[i], ',');
    ASSERT_EQ(f.size(), 10u) << rows[i];
    servers.insert(f[1]);
    EXPECT_LE(std::stoll(f[2]), 1500) << "the memory tier is bounded: " << rows[i];
  }
  EXPECT_EQ(servers, (std::set<std::string>{"0", "1"}));

  // The same job, slowed down, loses ps1 to SIGKILL after its second checkpoint.
  const std::string out = TempDir("ckpt_killed");
  std::string output;
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    output.append(line.data(), line.size());
    output += '\n';
  });
  std::vector<std::string> slow = Job(data, out);
  slow.insert(slow.end(), {"--min-step-ms", "5"});
  auto launcher = group.Start(ProcessSpec{"launch", slow});
  ASSERT_TRUE(launcher.ok());
  std::vector<ExitEvent> exited;
  const std::string second = out + "/checkpoints/ckpt-" + std::string(10, '0') + "50/MANIFEST";
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && exited.empty() && !std::filesystem::exists(second)) {
    (void)group.Poll(absl::Milliseconds(20), &exited);
  }
  ASSERT_TRUE(exited.empty()) << "the job ended before its second checkpoint:\n" << output;
  ASSERT_NE(testing_util::KillChildOfRank(*launcher, "syncline-ps", 1), 0) << output;
  testing_util::AwaitAnExit(group, absl::Seconds(60), &exited);
  ASSERT_EQ(exited.size(), 1u) << output;
  EXPECT_NE(exited[0].exit_code, 0) << output;
  EXPECT_NE(output.find("ps1 killed by signal 9"), std::string::npos) << output;
  const int64_t reached = LastLoggedClock(out);
  const int64_t saved = *JsonNumber(ReadFile(out + "/summary.json"), "last_checkpoint_clock");

  auto resumed = RunProcess(Resume(Job(data, out)));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const std::string summary = ReadFile(out + "/summary.json");
  const double from = *JsonNumber(summary, "resumed_from_clock");
  EXPECT_EQ(from, saved) << summary;
  // Lost no more than the steps since the last checkpoint (the log trails the real clock by
  // up to log_every steps, and the newest checkpoint may still have been in flight).
  EXPECT_GE(from, reached - 2 * kEvery) << "reached " << reached << "\n" << summary;
  // Its steps are those it trained: each worker's from the resumed clock on.
  EXPECT_EQ(*JsonNumber(summary, "steps"),
            *JsonNumber(summary, "workers") * (*JsonNumber(summary, "steps_per_worker") - from))
      << summary;
  // BSP resumes exactly: the same final model, bit for bit (params.tsv holds every test
  // feature's weights with 9 significant digits, enough to tell any two floats apart).
  const std::string whole_params = ReadFile(whole + "/params.tsv");
  ASSERT_GT(whole_params.size(), 1000u);
  EXPECT_TRUE(ReadFile(out + "/params.tsv") == whole_params);
  EXPECT_DOUBLE_EQ(*JsonNumber(summary, "test_loss"), *JsonNumber(whole_summary, "test_loss"))
      << summary;
  ExpectEachStepLoggedOnceInOrder(out);

  // Damage the newest checkpoint: --resume reports it and takes the one before.
  std::vector<std::string> dirs;
  for (const auto& e : std::filesystem::directory_iterator(out + "/checkpoints")) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("ckpt-") && std::filesystem::exists(e.path() / "MANIFEST")) {
      dirs.push_back(e.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  ASSERT_GE(dirs.size(), 2u);
  const std::string newest = dirs.back() + "/ps0/shard.sst";
  std::filesystem::resize_file(newest, std::filesystem::file_size(newest) - 100);
  auto again = RunProcess(Resume(Job(data, out)));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("skipping a damaged or partial checkpoint"), std::string::npos)
      << again.output;
  EXPECT_NE(again.output.find("truncated"), std::string::npos) << again.output;
  const std::string after = ReadFile(out + "/summary.json");
  EXPECT_EQ(*JsonNumber(after, "resumed_from_clock"),
            std::stoll(dirs[dirs.size() - 2].substr(dirs[dirs.size() - 2].rfind('-') + 1)));
  EXPECT_TRUE(ReadFile(out + "/params.tsv") == whole_params);
  ExpectEachStepLoggedOnceInOrder(out);
  // The damaged checkpoint was set aside, not left among the live ones.
  EXPECT_TRUE(std::filesystem::exists(out + "/checkpoints/abandoned-" +
                                      std::filesystem::path(dirs.back()).filename().string()));
  for (const std::string& dir : {data, whole, out}) std::filesystem::remove_all(dir);
}

// --checkpoint-seconds: the launcher picks clocks ahead of the workers, every node writes its
// part there, and a job resumed from such a clock (no multiple of anything) ends exactly like
// the uninterrupted one.
TEST(CheckpointLaunchTest, TimeBasedCheckpointsCompleteAndResumeExactly) {
  const std::string data = TempDir("tckpt_data");
  ASSERT_NO_FATAL_FAILURE(Generate(data, 8000, 2000, 5000, 20, 6));
  auto job = [&](const std::string& out) {
    return std::vector<std::string>{kLaunch,
                                    "--train",
                                    data + "/train.libsvm",
                                    "--test",
                                    data + "/test.libsvm",
                                    "--epochs",
                                    "4",
                                    "--batch-size",
                                    "32",
                                    "--embedding-memory",
                                    "800rows",
                                    "--min-step-ms",
                                    "4",
                                    "--checkpoint-seconds",
                                    "0.3",
                                    "--checkpoint-keep",
                                    "20",
                                    "--log-every",
                                    "5",
                                    "--out",
                                    out};
  };
  // --resume-if-any: the same command for every attempt, starting afresh the first time.
  auto if_any = [&](const std::string& out) {
    std::vector<std::string> args = job(out);
    args.push_back("--resume-if-any");
    return args;
  };
  const std::string out = TempDir("tckpt");
  auto a = RunProcess(if_any(out));
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("no complete checkpoint in"), std::string::npos) << a.output;
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_NE(summary.find("\"resumed_from_clock\": null"), std::string::npos) << summary;
  EXPECT_GE(*JsonNumber(summary, "checkpoints_written"), 2) << summary << a.output;
  const std::string whole_params = ReadFile(out + "/params.tsv");
  ASSERT_GT(whole_params.size(), 1000u);
  // Resume from the newest (the job had finished; the steps after it run again).
  std::filesystem::remove(out + "/params.tsv");
  auto b = RunProcess(if_any(out));
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const double from = *JsonNumber(ReadFile(out + "/summary.json"), "resumed_from_clock");
  EXPECT_GT(from, 0);
  EXPECT_TRUE(ReadFile(out + "/params.tsv") == whole_params);
  // A fresh run in the same folder moves the earlier run's checkpoints into a folder of their
  // own instead of writing among them or deleting them, twice.
  for (int fresh = 1; fresh <= 2; ++fresh) {
    auto c = RunProcess(job(out));
    ASSERT_EQ(c.exit_code, 0) << c.output;
    EXPECT_NE(c.output.find("of an earlier run to"), std::string::npos) << c.output;
  }
  int earlier_runs = 0;
  for (const auto& e : std::filesystem::directory_iterator(out + "/checkpoints")) {
    if (!e.path().filename().string().starts_with("earlier-run-")) continue;
    ++earlier_runs;
    bool complete = false;
    for (const auto& c : std::filesystem::directory_iterator(e.path())) {
      complete |= std::filesystem::exists(c.path() / "MANIFEST");
    }
    EXPECT_TRUE(complete) << e.path();
  }
  EXPECT_EQ(earlier_runs, 2);
  EXPECT_NE(ReadFile(out + "/summary.json").find("\"resumed_from_clock\": null"),
            std::string::npos);
  auto both = RunProcess(Resume(if_any(out)));
  EXPECT_EQ(both.exit_code, 2) << both.output;
  // With --log-every longer than the job no progress report comes before its end: the
  // checkpoints' clocks come from the workers' heartbeats.
  const std::string quiet = TempDir("tckpt_quiet");
  std::vector<std::string> args = job(quiet);
  args.insert(args.end(), {"--log-every", "100000"});
  auto q = RunProcess(args);
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_GE(*JsonNumber(ReadFile(quiet + "/summary.json"), "checkpoints_written"), 1) << q.output;
  for (const std::string& dir : {data, out, quiet}) std::filesystem::remove_all(dir);
}

void ServerlessWorkersResumeExactly(const std::string& sync, const std::string& compress);

// Serverless: three synchronous gossip peers checkpoint their models every 20 steps; a job
// resumed from the oldest checkpoint (the newer ones made partial) ends with the same
// parameters, byte for byte, as the uninterrupted one. Asynchronous gossip is refused.
TEST(CheckpointLaunchTest, SynchronousGossipPeersResumeExactly) {
  ASSERT_NO_FATAL_FAILURE(ServerlessWorkersResumeExactly("gossip:ring", "none"));
  const std::string out = TempDir("gckpt_async");
  auto async = RunProcess({kLaunch, "--sync", "gossip:exp:async", "--workers", "3",
                           "--checkpoint-every", "5", "--out", out + "/async"});
  EXPECT_EQ(async.exit_code, 2) << async.output;
  EXPECT_NE(async.output.find("is asynchronous"), std::string::npos) << async.output;
  std::filesystem::remove_all(out);
}

// All-reduce workers save model, optimizer state and error-feedback residual alike.
TEST(CheckpointLaunchTest, AllReduceWorkersResumeExactly) {
  ASSERT_NO_FATAL_FAILURE(ServerlessWorkersResumeExactly("allreduce:ring", "none"));
  ASSERT_NO_FATAL_FAILURE(ServerlessWorkersResumeExactly("allreduce:doubling", "topk:0.05"));
}

void ServerlessWorkersResumeExactly(const std::string& sync, const std::string& compress) {
  SCOPED_TRACE(sync + " " + compress);
  const std::string data = TempDir("gckpt_data");
  ASSERT_NO_FATAL_FAILURE(Generate(data, 6000, 1000, 2000, 10, 3));
  const std::string out = TempDir("gckpt");
  const std::vector<std::string> job = {kLaunch,
                                        "--compress",
                                        compress,
                                        "--sync",
                                        sync,
                                        "--workers",
                                        "3",
                                        "--optimizer",
                                        "adagrad",
                                        "--lr",
                                        "0.1",
                                        "--batch-size",
                                        "64",
                                        "--train",
                                        data + "/train.libsvm",
                                        "--test",
                                        data + "/test.libsvm",
                                        "--epochs",
                                        "2",
                                        "--checkpoint-every",
                                        "20",
                                        "--out",
                                        out};
  auto whole = RunProcess(job);
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const std::string whole_params = ReadFile(out + "/params.tsv");
  ASSERT_GT(whole_params.size(), 1000u);
  const std::vector<std::string> complete = CompleteCheckpoints(out + "/checkpoints");
  ASSERT_GE(complete.size(), 2u) << whole.output;
  for (size_t i = 1; i < complete.size(); ++i) std::filesystem::remove(complete[i] + "/MANIFEST");
  std::filesystem::remove(out + "/params.tsv");

  auto resumed = RunProcess(Resume(job));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(*JsonNumber(ReadFile(out + "/summary.json"), "resumed_from_clock"), 20)
      << resumed.output;
  EXPECT_TRUE(ReadFile(out + "/params.tsv") == whole_params);
  for (const std::string& dir : {data, out}) std::filesystem::remove_all(dir);
}

// Runs `job` (whose --out is `out`), SIGKILLs worker 1 once metrics.csv reaches clock 20, and
// expects the launcher to go on without it and exit 0.
void RunKillingWorkerOne(const std::vector<std::string>& job, const std::string& out,
                         std::string* output) {
  ProcessGroup group([output](std::string_view, OutputStream, std::string_view line) {
    output->append(line.data(), line.size());
    *output += '\n';
  });
  auto launcher = group.Start(ProcessSpec{"launch", job});
  ASSERT_TRUE(launcher.ok());
  std::vector<ExitEvent> exited;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && exited.empty() && LastLoggedClock(out) < 20) {
    (void)group.Poll(absl::Milliseconds(20), &exited);
  }
  ASSERT_TRUE(exited.empty()) << "the job ended before the kill:\n" << *output;
  ASSERT_NE(testing_util::KillChildOfRank(*launcher, "syncline-worker", 1), 0) << *output;
  testing_util::AwaitAnExit(group, absl::Seconds(90), &exited);
  ASSERT_EQ(exited.size(), 1u) << *output;
  EXPECT_EQ(exited[0].exit_code, 0) << *output;  // the job went on without w1
}

// A gossip peer SIGKILLed mid-run: the others go on (dropping it after --peer-timeout) and
// checkpoint without it; resuming from such a checkpoint would bring it back with an empty
// model, so --resume refuses and says why.
TEST(CheckpointLaunchTest, GossipResumeWithoutEveryPeerIsRefused) {
  const std::string data = TempDir("glost_data");
  ASSERT_NO_FATAL_FAILURE(Generate(data, 6000, 1000, 2000, 10, 3));
  const std::string out = TempDir("glost");
  const std::vector<std::string> job = {kLaunch,
                                        "--sync",
                                        "gossip:ring",
                                        "--workers",
                                        "3",
                                        "--train",
                                        data + "/train.libsvm",
                                        "--test",
                                        data + "/test.libsvm",
                                        "--epochs",
                                        "8",
                                        "--batch-size",
                                        "64",
                                        "--min-step-ms",
                                        "5",
                                        "--peer-timeout",
                                        "1",
                                        "--checkpoint-every",
                                        "5",
                                        "--out",
                                        out};
  std::string output;
  ASSERT_NO_FATAL_FAILURE(RunKillingWorkerOne(job, out, &output));

  auto resumed = RunProcess(Resume(job));
  EXPECT_EQ(resumed.exit_code, 2) << resumed.output;
  EXPECT_NE(resumed.output.find("holds no state of w1"), std::string::npos) << resumed.output;
  for (const std::string& dir : {data, out}) std::filesystem::remove_all(dir);
}

// A BSP job that lost a worker and then checkpointed resumes into the same plan: the
// checkpoint's worker states carry the departures, the leaver's rank learns from them that it
// has nothing left, and the resumed run ends with the parameters of the run that went on.
TEST(CheckpointLaunchTest, AJobThatLostAWorkerResumesIntoTheSamePlanExactly) {
  const std::string data = TempDir("shrink_data");
  ASSERT_NO_FATAL_FAILURE(Generate(data, 12000, 1000, 2000, 10, 5));
  const std::string out = TempDir("shrink_ckpt");
  const std::vector<std::string> job = {kLaunch,
                                        "--servers",
                                        "2",
                                        "--workers",
                                        "4",
                                        "--min-workers",
                                        "3",
                                        "--sync",
                                        "bsp",
                                        "--optimizer",
                                        "adagrad",
                                        "--lr",
                                        "0.1",
                                        "--batch-size",
                                        "64",
                                        "--train",
                                        data + "/train.libsvm",
                                        "--test",
                                        data + "/test.libsvm",
                                        "--epochs",
                                        "2",
                                        "--min-step-ms",
                                        "10",
                                        "--heartbeat-interval",
                                        "0.1",
                                        "--checkpoint-every",
                                        "10",
                                        "--checkpoint-keep",
                                        "100",
                                        "--out",
                                        out};
  std::string output;
  ASSERT_NO_FATAL_FAILURE(RunKillingWorkerOne(job, out, &output));
  const std::string whole_params = ReadFile(out + "/params.tsv");
  ASSERT_GT(whole_params.size(), 1000u);
  const std::string marker = "its batches from clock ";
  const size_t at = output.find(marker);
  ASSERT_NE(at, std::string::npos) << output;
  const int64_t left = std::stoll(output.substr(at + marker.size()));
  // The departure's clock comes from w1's last heartbeat, which may lag w1 by a heartbeat's
  // worth of iterations (more on a loaded machine): a checkpoint at left + 10 may predate the
  // departure. w1 was at most 10 clocks past the last checkpoint completed before the
  // departure (one every 10), and the others cannot pass its clock + 1 before hearing of it:
  // a checkpoint 20 clocks past that one was written after the departure.
  int64_t before = 0;  // the last checkpoint completed before the departure was announced
  const std::string completed = " complete: ";
  for (size_t line = 0; line < at;) {
    const size_t end = std::min(output.find('\n', line), output.size());
    const std::string_view text(output.data() + line, end - line);
    const size_t word = text.find("checkpoint ");
    if (word != std::string_view::npos && text.find(completed) != std::string_view::npos) {
      before = std::max<int64_t>(before, std::stoll(std::string(text.substr(word + 11))));
    }
    line = end + 1;
  }
  // Keep the first complete checkpoint well after the departure; drop the later ones.
  const std::vector<std::string> complete = CompleteCheckpoints(out + "/checkpoints");
  int64_t kept = -1;
  for (const std::string& dir : complete) {
    const int64_t clock = std::stoll(dir.substr(dir.rfind('-') + 1));
    if (kept < 0 && clock >= std::max(left + 10, before + 20)) {
      kept = clock;
    } else if (kept >= 0) {
      std::filesystem::remove(dir + "/MANIFEST");
    }
  }
  ASSERT_GE(kept, 0) << "no checkpoint at or after clock " << std::max(left + 10, before + 20)
                     << ":\n"
                     << output;
  std::filesystem::remove(out + "/params.tsv");

  auto resumed = RunProcess(Resume(job));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_EQ(JsonNumber(ReadFile(out + "/summary.json"), "resumed_from_clock"), kept);
  EXPECT_NE(resumed.output.find("(1 worker had left)"), std::string::npos) << resumed.output;
  // The leaver's rank comes back with nothing to train: its plan ends where it left.
  EXPECT_NE(ReadFile(out + "/logs/w1.log").find("trained " + std::to_string(left)),
            std::string::npos)
      << ReadFile(out + "/logs/w1.log");
  EXPECT_TRUE(ReadFile(out + "/params.tsv") == whole_params) << resumed.output;
  for (const std::string& dir : {data, out}) std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace syncline
