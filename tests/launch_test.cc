// End-to-end tests: real syncline-launch, syncline-ps and syncline-worker processes talking
// over ZeroMQ on loopback.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "testing/launch_fixture.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

using testing_util::JsonNumber;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;
const std::string kGen = SYNCLINE_GEN_BIN;
const std::string kWorker = SYNCLINE_WORKER_BIN;

// Shared synthetic data (GeneratedDataTest): 20k training and 4k test examples over 10k Zipf
// features.
class LaunchTest : public testing_util::GeneratedDataTest<LaunchTest> {
 public:
  static constexpr char kDataFolder[] = "launch_data";
};

TEST_F(LaunchTest, LogregConvergesAndTheRunIsDocumented) {
  const std::string out = TempDir("converge");
  auto r = RunProcess({kLaunch, "--servers", "2", "--workers", "2", "--sync", "bsp", "--model",
                       "logreg", "--train", Train(), "--test", Test(), "--epochs", "3",
                       "--optimizer", "adagrad", "--lr", "0.1", "--out", out,
                       // On the CPU, a GPU or none: the split below has no copies.
                       "--device", "cpu"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string summary = ReadFile(out + "/summary.json");
  // The floor: the generating model's own AUC on this data is about 0.9; a trained model is
  // well above chance.
  ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.8) << summary;
  EXPECT_LT(*JsonNumber(summary, "test_loss"), 0.45) << summary;
  for (const char* key :
       {"servers", "workers", "steps", "epochs", "wall_seconds", "bytes_pushed", "bytes_pulled",
        "bytes_all", "bytes_per_worker.all", "busiest_server.bytes_all"}) {
    EXPECT_TRUE(JsonNumber(summary, key).has_value()) << key;
  }
  EXPECT_NE(summary.find("\"sync\": \"bsp\""), std::string::npos);
  EXPECT_EQ(*JsonNumber(summary, "max_staleness_served"), 0);
  EXPECT_EQ(*JsonNumber(summary, "bytes_all"),
            *JsonNumber(summary, "bytes_pushed") + *JsonNumber(summary, "bytes_pulled"));
  // The busiest server moved at least its share of what the servers moved.
  EXPECT_GE(2 * *JsonNumber(summary, "busiest_server.bytes_all"),
            *JsonNumber(summary, "server_bytes_in") + *JsonNumber(summary, "server_bytes_out"));
  // Where the steps went: seconds per step by part (on the CPU: no copies), and each worker's
  // totals and device.
  for (const char* part : {"batch", "upload", "compute", "compress", "download", "network"}) {
    const std::string key = std::string("step_seconds.") + part;
    ASSERT_TRUE(JsonNumber(summary, key).has_value()) << key << "\n" << summary;
    EXPECT_GE(*JsonNumber(summary, key), 0) << key;
    EXPECT_TRUE(JsonNumber(summary, std::string("worker_step_seconds.w1.") + part).has_value())
        << part << "\n"
        << summary;
  }
  EXPECT_GT(*JsonNumber(summary, "step_seconds.compute"), 0) << summary;
  EXPECT_GT(*JsonNumber(summary, "step_seconds.network"), 0) << summary;
  EXPECT_EQ(*JsonNumber(summary, "step_seconds.upload"), 0) << summary;
  EXPECT_EQ(*JsonNumber(summary, "step_seconds.download"), 0) << summary;
  EXPECT_EQ(JsonNumber(summary, "worker_step_seconds.w0.steps").value_or(0) +
                JsonNumber(summary, "worker_step_seconds.w1.steps").value_or(0),
            JsonNumber(summary, "steps"))
      << summary;
  EXPECT_NE(summary.find("\"w0\": {\"device\": \"cpu\""), std::string::npos) << summary;
  // metrics.csv: a header and rows from both workers, loss falling, each with the split of the
  // steps since the worker's previous row.
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_GT(lines.size(), 10u);
  EXPECT_EQ(lines[0],
            "wall_seconds,worker,clock,epoch,train_loss,examples,staleness,consensus,world_size,"
            "batch_s,upload_s,compute_s,compress_s,download_s,network_s,bytes,test_loss,test_auc,"
            "test_accuracy,eval_s");
  double compute = 0, bytes = 0;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::vector<std::string> f = absl::StrSplit(lines[i], ',');
    ASSERT_EQ(f.size(), 20u) << lines[i];
    // The split and the worker's bytes so far; the held-out columns stay empty without
    // --eval-every.
    for (size_t c = 9; c < 16; ++c) EXPECT_GE(std::stod(f[c]), 0) << lines[i];
    for (size_t c = 16; c < f.size(); ++c) EXPECT_EQ(f[c], "") << lines[i];
    compute += std::stod(f[11]);
    bytes = std::max(bytes, std::stod(f[15]));
  }
  EXPECT_GT(compute, 0);
  EXPECT_GT(bytes, 0);
  EXPECT_NE(r.output.find("AUC"), std::string::npos) << r.output;
}

// Parameters from params.tsv: key -> values.
std::map<std::string, std::vector<double>> ReadParams(const std::string& path) {
  std::map<std::string, std::vector<double>> params;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    std::vector<double>& v = params[f[0]];
    for (size_t i = 1; i < f.size(); ++i) v.push_back(std::stod(f[i]));
  }
  return params;
}

// The largest difference between two params.tsv files' values, absolute and relative (to the
// first's magnitude, at least 1e-3), and the sum of the first's magnitudes. A key of one that the
// other lacks, or rows of different widths, is a test failure.
struct ParamsDiff {
  double absolute = 0, relative = 0, moved = 0;
};
ParamsDiff CompareParams(const std::string& path_a, const std::string& path_b) {
  auto a = ReadParams(path_a), b = ReadParams(path_b);
  EXPECT_GT(a.size(), 1000u);
  EXPECT_EQ(a.size(), b.size());
  ParamsDiff d;
  for (const auto& [key, va] : a) {
    const auto& vb = b[key];
    EXPECT_EQ(va.size(), vb.size()) << key;
    for (size_t i = 0; i < std::min(va.size(), vb.size()); ++i) {
      d.absolute = std::max(d.absolute, std::abs(va[i] - vb[i]));
      d.relative = std::max(d.relative, std::abs(va[i] - vb[i]) / std::max(std::abs(va[i]), 1e-3));
      d.moved += std::abs(va[i]);
    }
  }
  return d;
}

TEST_F(LaunchTest, BspWithTwoWorkersEqualsOneWorkerWithTheUnionBatch) {
  const std::string one = TempDir("bsp1"), two = TempDir("bsp2");
  auto a = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--batch-size", "128",
                       "--train", Train(), "--test", Test(), "--epochs", "2", "--optimizer", "adam",
                       "--lr", "0.01", "--out", one});
  ASSERT_EQ(a.exit_code, 0) << a.output;
  // Update threads must not change a bit either (servers take the flag from the launcher).
  auto b = RunProcess({kLaunch, "--servers",   "2",     "--workers", "2",    "--batch-size",
                       "64",    "--train",     Train(), "--test",    Test(), "--epochs",
                       "2",     "--optimizer", "adam",  "--lr",      "0.01", "--update-threads",
                       "2",     "--out",       two});
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const ParamsDiff d = CompareParams(one + "/params.tsv", two + "/params.tsv");
  EXPECT_LE(d.absolute, 1e-5);
  EXPECT_GT(d.moved, 1.0);
}

// Both are synchronous SGD on the union batch: every all-reduce algorithm trains the model of
// the parameter servers under BSP, with Adam (momentum and l2 on the rows touched only), and
// with partitions of unequal length (20000 rows over 3 workers: 6667, 6667 and 6666, in batches
// of 3333: 3, 3 and 2 steps an epoch), where a worker out of data keeps answering the others'
// collectives.
TEST_F(LaunchTest, AllReduceTrainsTheModelOfBsp) {
  const std::string bsp = TempDir("ar_bsp");
  const std::vector<std::string> job = {
      "--workers", "3", "--batch-size", "3333", "--train", Train(), "--test", Test(),
      "--epochs",  "2", "--optimizer",  "adam", "--lr",    "0.01",  "--l2",   "0.0001"};
  std::vector<std::string> argv = {kLaunch, "--servers", "2", "--sync", "bsp", "--out", bsp};
  argv.insert(argv.end(), job.begin(), job.end());
  auto a = RunProcess(argv);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  for (const char* mode :
       {"allreduce:ring", "allreduce:doubling", "allreduce:hier", "allreduce:halving"}) {
    SCOPED_TRACE(mode);
    const std::string out = TempDir("ar");
    argv = {kLaunch, "--sync", mode, "--out", out};
    argv.insert(argv.end(), job.begin(), job.end());
    auto r = RunProcess(argv);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("syncline-ps"), std::string::npos);
    EXPECT_LE(CompareParams(bsp + "/params.tsv", out + "/params.tsv").relative, 1e-5);
  }
}

// Runs `job` once with each codec and checks that every run converges; returns the bytes each
// pushed, by codec.
// bytes_pushed by codec, and bytes_all under "all:" + codec; `pull` adds a run with
// --compress topk:0.01 --compress-pull topk:0.01, under "topk:0.01+pull".
std::map<std::string, double> PushedBytesByCodec(
    std::vector<std::string> job, const std::string& train, const std::string& test,
    bool pull = false, std::vector<std::string> codecs = {"none", "topk:0.01", "sign1", "fp16"}) {
  std::map<std::string, double> pushed;
  if (pull) codecs.push_back("topk:0.01+pull");
  for (const std::string& codec : codecs) {
    SCOPED_TRACE(codec);
    const std::string out = TempDir("codec_" + codec);
    std::vector<std::string> argv = job;
    const bool both = codec.ends_with("+pull");
    argv.insert(argv.end(), {"--compress", both ? "topk:0.01" : codec, "--batch-size", "1024",
                             "--train", train, "--test", test, "--epochs", "4", "--out", out});
    if (both) argv.insert(argv.end(), {"--compress-pull", "topk:0.01"});
    auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    const std::string summary = ReadFile(out + "/summary.json");
    EXPECT_GT(JsonNumber(summary, "test_auc").value_or(0), 0.8) << summary;
    pushed[codec] = JsonNumber(summary, "bytes_pushed").value_or(0);
    pushed["all:" + codec] = JsonNumber(summary, "bytes_all").value_or(0);
    pushed["compress:" + codec] = JsonNumber(summary, "step_seconds.compress").value_or(-1);
  }
  return pushed;
}

// Compressed all-reduce: top-K and sign1 blocks (with error feedback) are all-gathered, fp16
// goes on the wire. Each converges; top-K and sign1 move a small part of the bytes.
TEST_F(LaunchTest, CompressedAllReduceConvergesAndMovesFewerBytes) {
  auto pushed =
      PushedBytesByCodec({kLaunch, "--sync", "allreduce", "--workers", "3"}, Train(), Test());
  EXPECT_LT(pushed["topk:0.01"] * 10, pushed["none"]);
  EXPECT_LT(pushed["sign1"] * 10, pushed["none"]);
  // Encoding, decoding and error feedback take time of their own, apart from the network.
  EXPECT_GT(pushed["compress:topk:0.01"], 0);
  EXPECT_GT(pushed["compress:sign1"], 0);
  EXPECT_EQ(pushed["compress:none"], 0);
  // These sparse batches go as (key, gradient) pairs (--allreduce-rows auto): fp16 halves
  // the values, not the compact keys (measured 0.60).
  EXPECT_LT(pushed["fp16"], 0.7 * pushed["none"]);
  // Every row all-reduced: fp16 halves it all, and the pairs moved fewer bytes.
  auto dense = PushedBytesByCodec(
      {kLaunch, "--sync", "allreduce", "--workers", "3", "--allreduce-rows", "dense"}, Train(),
      Test(), /*pull=*/false, {"none", "fp16"});
  EXPECT_LT(dense["fp16"], 0.55 * dense["none"]);
  EXPECT_LT(pushed["none"], dense["none"]);
}

// Sparse rows stay sparse under every codec; top-K and sign1 keep a residual per row and send
// compact keys, and --compress-pull shrinks the pulls too.
TEST_F(LaunchTest, EveryCodecConvergesAndCompressionShrinksTheWholeJob) {
  auto pushed = PushedBytesByCodec({kLaunch, "--servers", "2", "--workers", "2"}, Train(), Test(),
                                   /*pull=*/true);
  // top-K: 1% of the entries each push, and once, at the last clock, the residuals left.
  EXPECT_LT(pushed["topk:0.01"] * 12, pushed["none"]);
  // sign1 sends every row: a compact key (a byte or two), a bit per value and a scale.
  EXPECT_LT(pushed["sign1"] * 5, pushed["none"]);
  // fp16: a key (8 bytes) and 2 bytes per value, against 4.
  EXPECT_LT(pushed["fp16"], 0.9 * pushed["none"]);
  // Encoding, decoding and error feedback take time of their own, apart from the network.
  EXPECT_GT(pushed["compress:topk:0.01"], 0);
  EXPECT_GT(pushed["compress:topk:0.01+pull"], 0);
  EXPECT_EQ(pushed["compress:none"], 0);
  // The whole job: pushes, pulls, requests and acknowledgements.
  EXPECT_LT(pushed["all:topk:0.01+pull"] * 5, pushed["all:none"]);
  EXPECT_LT(pushed["all:topk:0.01"], pushed["all:none"]);
}

TEST_F(LaunchTest, GossipPeersTrainWithoutServers) {
  // Push-sum's floor is lower: with peers finishing at different times some weight is lost
  // (docs/GOSSIP.md); measured AUC 0.72 against 0.87 for synchronous gossip on this data.
  for (const auto& [mode, floor] :
       {std::pair<const char*, double>{"gossip:ring", 0.8}, {"gossip:exp:async", 0.65}}) {
    SCOPED_TRACE(mode);
    const std::string out = TempDir("gossip");
    auto r = RunProcess({kLaunch, "--sync", mode, "--workers", "3", "--optimizer", "sgd", "--lr",
                         "1", "--batch-size", "64", "--train", Train(), "--test", Test(),
                         "--epochs", "2", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("syncline-ps"), std::string::npos);
    const std::string summary = ReadFile(out + "/summary.json");
    EXPECT_EQ(*JsonNumber(summary, "servers"), 0) << summary;
    ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
    EXPECT_GT(*JsonNumber(summary, "test_auc"), floor) << summary;
    EXPECT_NE(summary.find("\"nodes_down\": []"), std::string::npos) << summary;
  }
}

// CHOCO-SGD: gossip peers exchange top-K differences to public copies (docs/
// GOSSIP_COMPRESSION.md) and still train, on a fraction of the bytes.
TEST_F(LaunchTest, GossipPeersTrainOnCompressedDifferences) {
  std::map<std::string, double> sent;
  for (const char* codec : {"none", "topk:0.1"}) {
    SCOPED_TRACE(codec);
    const std::string out = TempDir(std::string("choco_") + codec);
    auto r = RunProcess({kLaunch, "--sync",       "gossip:ring", "--workers",
                         "3",     "--optimizer",  "sgd",         "--lr",
                         "1",     "--batch-size", "64",          "--train",
                         Train(), "--test",       Test(),        "--epochs",
                         "2",     "--compress",   codec,         "--out",
                         out});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string summary = ReadFile(out + "/summary.json");
    EXPECT_GT(JsonNumber(summary, "test_auc").value_or(0), 0.8) << summary;
    sent[codec] = JsonNumber(summary, "bytes_all").value_or(0);
  }
  EXPECT_LT(sent["topk:0.1"] * 2, sent["none"]);
}

TEST_F(LaunchTest, SoftmaxOnCsvReportsAccuracy) {
  const std::string dir = TempDir("softmax");
  auto g = RunProcess({kGen,
                       "--out",
                       dir + "/train.csv",
                       "--test-out",
                       dir + "/test.csv",
                       "--format",
                       "csv",
                       "--rows",
                       "3000",
                       "--test-rows",
                       "600",
                       "--features",
                       "20",
                       "--nnz",
                       "20",
                       "--values",
                       "gaussian",
                       "--classes",
                       "4",
                       "--seed",
                       "3"});
  ASSERT_EQ(g.exit_code, 0) << g.output;
  auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "2", "--model", "softmax",
                       "--classes", "4", "--train", dir + "/train.csv", "--test", dir + "/test.csv",
                       "--epochs", "5", "--batch-size", "50", "--out", dir + "/run"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string summary = ReadFile(dir + "/run/summary.json");
  ASSERT_TRUE(JsonNumber(summary, "test_accuracy").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_accuracy"), 0.5) << summary;  // chance is 0.25
}

TEST_F(LaunchTest, ADivergingJobStopsWithStatusDivergedAndExitCode3) {
  for (const char* sync : {"bsp", "asp"}) {
    SCOPED_TRACE(sync);
    const std::string out = TempDir(absl::StrCat("diverged_", sync));
    auto r = RunProcess({kLaunch, "--sync", sync, "--lr", "1e30", "--optimizer", "sgd", "--train",
                         Train(), "--out", out});
    EXPECT_EQ(r.exit_code, 3) << r.output;
    EXPECT_NE(r.output.find("diverged at step 10"), std::string::npos) << r.output;
    const std::string summary = ReadFile(out + "/summary.json");
    EXPECT_NE(summary.find("\"status\": \"diverged\""), std::string::npos) << summary;
  }
}

TEST_F(LaunchTest, BadInputGetsAClearMessageAndExitCode2) {
  const std::string dir = TempDir("bad");
  {
    std::ofstream bad(dir + "/bad.libsvm");
    bad << "1 3:1 7:1\n0 2:1\n1 4:x\n";
  }
  auto malformed = RunProcess({kLaunch, "--train", dir + "/bad.libsvm", "--out", dir + "/run"});
  EXPECT_EQ(malformed.exit_code, 2) << malformed.output;
  EXPECT_NE(malformed.output.find("bad.libsvm:3"), std::string::npos) << malformed.output;

  auto missing = RunProcess({kLaunch, "--train", dir + "/nope.libsvm", "--out", dir + "/run"});
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("nope.libsvm"), std::string::npos) << missing.output;

  {
    std::ofstream empty(dir + "/empty.libsvm");
    empty << "# a comment, and no example\n\n";
  }
  auto empty = RunProcess({kLaunch, "--train", dir + "/empty.libsvm", "--out", dir + "/run"});
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  EXPECT_NE(empty.output.find("empty.libsvm holds no examples"), std::string::npos) << empty.output;

  // A worker started by hand says which it is or joins: rank 0 by default would take over w0's
  // place in a running job.
  auto no_rank = RunProcess({kWorker, "--coordinator", "tcp://127.0.0.1:1"});
  EXPECT_EQ(no_rank.exit_code, 2) << no_rank.output;
  EXPECT_NE(no_rank.output.find("give --rank R (or SYNCLINE_RANK)"), std::string::npos)
      << no_rank.output;

  auto flag = RunProcess({kLaunch, "--servers", "x"});
  EXPECT_EQ(flag.exit_code, 2) << flag.output;
  EXPECT_NE(flag.output.find("--servers"), std::string::npos) << flag.output;

  auto sync = RunProcess({kLaunch, "--sync", "ssp:-1"});
  EXPECT_EQ(sync.exit_code, 2) << sync.output;

  auto help = RunProcess({kLaunch, "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.output.find("--train"), std::string::npos);
}

// A node that fails before it can tell the coordinator why (here: no free port for 4 nodes in a
// range of 2) is named with its own last error line, not only with its exit code.
TEST_F(LaunchTest, ANodeThatFailsBeforeRegisteringIsNamedWithItsError) {
  const std::string out = TempDir("ports");
  auto r = RunProcess({kLaunch, "--port-range", "40000-40001", "--train", Train(), "--out", out});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("syncline-launch: job failed: "), std::string::npos) << r.output;
  const std::string last_line = r.output.substr(r.output.rfind("syncline-launch: job failed: "));
  EXPECT_NE(last_line.find("no free port in 40000-40001"), std::string::npos) << r.output;
}

// The coordinator takes the first free port of --port-range, as the nodes do: its first port
// held by another program is no failure.
TEST_F(LaunchTest, TheCoordinatorTakesTheFirstFreePortOfTheRange) {
  const int held = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(held, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(40150);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // Taken already by someone else is as good for this test.
  (void)bind(held, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr));
  (void)listen(held, 1);
  const std::string dir = TempDir("coordinator_port");
  auto r = RunProcess(
      {kLaunch, "--train", Train(), "--port-range", "40150-40180", "--out", dir + "/run"});
  close(held);
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// A launch refused for its cluster settings (here a job key others can read) leaves the run
// folder's earlier results as they were.
TEST_F(LaunchTest, ARefusedLaunchLeavesTheEarlierRunsMetrics) {
  const std::string dir = TempDir("refused");
  auto first = RunProcess({kLaunch, "--train", Train(), "--out", dir + "/run"});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string metrics = ReadFile(dir + "/run/metrics.csv");
  ASSERT_GT(std::count(metrics.begin(), metrics.end(), '\n'), 2);
  {
    std::ofstream key(dir + "/open.key");
    key << "not a key\n";
  }
  std::filesystem::permissions(dir + "/open.key", std::filesystem::perms(0644));
  auto refused = RunProcess(
      {kLaunch, "--train", Train(), "--key-file", dir + "/open.key", "--out", dir + "/run"});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_EQ(ReadFile(dir + "/run/metrics.csv"), metrics);
}

// A remote shell that cannot start a node says why on its stderr, not in Syncline's log format:
// the launcher names the node with that line.
TEST_F(LaunchTest, ARemoteShellsOwnErrorNamesTheNodeItCouldNotStart) {
  const std::string dir = TempDir("rsh");
  const std::string rsh = dir + "/rsh";
  {
    std::ofstream script(rsh);
    script << "#!/bin/sh\necho \"rsh: cannot reach host $1\" >&2\nexit 255\n";
  }
  std::filesystem::permissions(rsh, std::filesystem::perms::owner_all);
  auto r = RunProcess({kLaunch, "--launcher", "ssh", "--hosts", "127.0.0.1:4", "--rsh", rsh,
                       "--train", Train(), "--out", dir + "/run"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  const size_t at = r.output.rfind("syncline-launch: job failed: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rsh: cannot reach host 127.0.0.1", at), std::string::npos) << r.output;
}

// A test feature past the training file's largest has no row on the servers: it counts as a
// zero weight, under every mode, instead of failing the job once training is over.
TEST_F(LaunchTest, TestFeaturesTheTrainingFileNeverHadCountAsZero) {
  const std::string dir = TempDir("unseen");
  {
    std::ofstream train(dir + "/train.libsvm");
    for (int i = 0; i < 200; ++i) train << (i % 2) << " " << 1 + i % 2 << ":1 3:0.5\n";
    std::ofstream test(dir + "/test.libsvm");
    test << "1 2:1 9:1\n0 1:1 3:1 40:2\n";
  }
  for (const char* sync : {"bsp", "asp", "gossip:ring"}) {
    SCOPED_TRACE(sync);
    const std::string out = dir + "/run_" + std::string(sync, 3);
    std::vector<std::string> argv = {kLaunch,
                                     "--workers",
                                     "2",
                                     "--sync",
                                     sync,
                                     "--train",
                                     dir + "/train.libsvm",
                                     "--test",
                                     dir + "/test.libsvm",
                                     "--batch-size",
                                     "20",
                                     "--out",
                                     out};
    for (const std::string& a : testing_util::ServersFlag(sync, 1)) argv.push_back(a);
    auto r = RunProcess(argv);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("2 features past the training file's 3 count as zero weights"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(JsonNumber(ReadFile(out + "/summary.json"), "test_examples"), 2);
  }
}

struct KillResult {
  std::string out;
  std::string output;
  std::vector<ExitEvent> exited;
  std::vector<std::pair<int, std::string>> children;
  testing_util::RunResult second;  // another launcher on the same --out, mid-run
};

// Starts a long job, SIGKILLs worker 1 once training is under way, and waits for the launcher.
// `extra` flags come last (a later flag wins); `workers` is how many the job has.
KillResult KillWorkerMidRun(const std::string& sync, const std::string& train,
                            const std::string& test, const std::string& epochs,
                            std::vector<std::string> extra = {}, int workers = 3) {
  KillResult k;
  k.out = TempDir("kill_" + sync.substr(0, 3));
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    k.output.append(line.data(), line.size());
    k.output += '\n';
  });
  std::vector<std::string> argv = {kLaunch,
                                   "--workers",
                                   absl::StrCat(workers),
                                   "--sync",
                                   sync,
                                   "--train",
                                   train,
                                   "--test",
                                   test,
                                   "--epochs",
                                   epochs,
                                   "--batch-size",
                                   "32",
                                   "--heartbeat-timeout",
                                   "2",
                                   "--out",
                                   k.out};
  for (const std::string& a : testing_util::ServersFlag(sync, 2)) argv.push_back(a);
  argv.insert(argv.end(), extra.begin(), extra.end());
  auto launcher = group.Start(ProcessSpec{"launch", argv});
  EXPECT_TRUE(launcher.ok());
  if (!launcher.ok()) return k;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && k.exited.empty()) {
    (void)group.Poll(absl::Milliseconds(50), &k.exited);
    const std::string csv = ReadFile(k.out + "/metrics.csv");
    if (std::count(csv.begin(), csv.end(), '\n') > 3) break;
  }
  EXPECT_TRUE(k.exited.empty()) << k.output;
  k.children = testing_util::Children(*launcher);
  const bool serverless = sync.starts_with("allreduce") || sync.starts_with("gossip");
  EXPECT_EQ(k.children.size(), workers + (serverless ? 0u : 2u)) << k.output;
  k.second = RunProcess({kLaunch, "--train", train, "--test", test, "--out", k.out});
  EXPECT_NE(testing_util::KillChildOfRank(*launcher, "syncline-worker", 1), 0) << k.output;
  testing_util::AwaitAnExit(group, absl::Seconds(60), &k.exited);
  return k;
}

TEST_F(LaunchTest, UnderBspTheLauncherStopsEverythingWhenAWorkerCrashes) {
  KillResult k = KillWorkerMidRun("bsp", Train(), Test(), "500");
  ASSERT_EQ(k.exited.size(), 1u) << "the launcher did not exit:\n" << k.output;
  EXPECT_NE(k.exited[0].exit_code, 0);
  EXPECT_NE(k.output.find("w1 killed by signal 9"), std::string::npos) << k.output;
  for (const auto& [pid, cmd] : k.children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
  EXPECT_NE(ReadFile(k.out + "/summary.json").find("\"status\": \"failed\""), std::string::npos);
  // One launcher per run folder: a second one refuses, touching nothing.
  EXPECT_EQ(k.second.exit_code, 2) << k.second.output;
  EXPECT_NE(k.second.output.find("is in use by another syncline-launch"), std::string::npos)
      << k.second.output;
}

// All-reduce is as synchronous as BSP: a worker lost in the middle stops the job, naming it, and
// nothing waits on its collectives.
TEST_F(LaunchTest, UnderAllReduceAWorkerThatDiesStopsTheJobNamingIt) {
  KillResult k = KillWorkerMidRun("allreduce:ring", Train(), Test(), "500");
  ASSERT_EQ(k.exited.size(), 1u) << "the launcher did not exit:\n" << k.output;
  EXPECT_NE(k.exited[0].exit_code, 0);
  EXPECT_NE(k.output.find("w1 killed by signal 9"), std::string::npos) << k.output;
  for (const auto& [pid, cmd] : k.children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
}

// The summary of a job that went on without the killed w1 and ended ok; empty (a failure
// recorded) when the launcher did not exit.
std::string SummaryOfAJobThatWentOnWithoutW1(const KillResult& k) {
  if (k.exited.size() != 1u) {
    ADD_FAILURE() << "the launcher did not exit:\n" << k.output;
    return "";
  }
  EXPECT_EQ(k.exited[0].exit_code, 0) << k.output;
  const std::string summary = ReadFile(k.out + "/summary.json");
  EXPECT_NE(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("w1 killed by signal 9"), std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "workers_left"), 1) << summary;
  return summary;
}

// examples_trained of a 2-epoch job on the 20,000 examples at batch 64 that lost w1: every
// example at least once and, at 10 ms a step and a heartbeat every 0.1 s, at most about 12
// batches twice. nullopt (a failure recorded) when the summary has no count.
std::optional<double> TrainedEveryExampleOfTwoEpochs(const std::string& summary) {
  const auto trained = JsonNumber(summary, "examples_trained");
  EXPECT_TRUE(trained.has_value()) << summary;
  if (!trained) return std::nullopt;
  EXPECT_GE(*trained, 2 * 20000) << summary;
  EXPECT_LE(*trained, 2 * 20000 + 20 * 64) << summary;
  return trained;
}

TEST_F(LaunchTest, UnderAspTheJobGoesOnWithoutACrashedWorker) {
  KillResult k = KillWorkerMidRun("asp", Train(), Test(), "3");
  const std::string summary = SummaryOfAJobThatWentOnWithoutW1(k);
  ASSERT_FALSE(summary.empty());
  ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.7) << summary;
  // Its remaining batches were handed to the two others: every example of the 3 epochs.
  EXPECT_GE(JsonNumber(summary, "examples_trained").value_or(0), 3 * 20000) << summary;
  for (const auto& [pid, cmd] : k.children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
}

// A gossip peer killed mid-run: the survivors drop it from their graphs and take over its
// remaining batches, so every example of both epochs is trained at least once (the workers
// count them; the killed one's up to its last report, here every step).
TEST_F(LaunchTest, UnderGossipAKilledPeersBatchesGoToTheSurvivors) {
  for (const char* sync : {"gossip:ring", "gossip:ring:async"}) {
    SCOPED_TRACE(sync);
    KillResult k = KillWorkerMidRun(
        sync, Train(), Test(), "2",
        {"--optimizer", "sgd", "--lr", "1", "--batch-size", "64", "--min-step-ms", "10",
         "--heartbeat-interval", "0.1", "--peer-timeout", "2", "--log-every", "1"});
    const std::string summary = SummaryOfAJobThatWentOnWithoutW1(k);
    ASSERT_FALSE(summary.empty());
    ASSERT_TRUE(TrainedEveryExampleOfTwoEpochs(summary).has_value());
    EXPECT_NE(k.output.find("takes"), std::string::npos) << k.output;
    ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
    EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.75) << summary;
    for (const auto& [pid, cmd] : k.children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
  }
}

// A job of 2 servers (none under gossip) and `workers` workers that takes one more
// (--max-workers workers + 1), at batch 64 and `step_ms` a step, over the shared data, with
// `extra` flags, and the joiners the test starts (syncline-worker --join), all in one process
// group whose output is kept by label. Every wait is bounded by one deadline.
class JoinableJob {
 public:
  JoinableJob(const std::string& name, const std::string& sync, const std::string& train,
              const std::string& test, const std::string& epochs, const std::string& step_ms,
              int workers = 2, const std::vector<std::string>& extra = {})
      : out_(TempDir(name)),
        group_([this](std::string_view label, OutputStream, std::string_view line) {
          lines_[std::string(label)].append(line.data(), line.size()).append("\n");
          output_.append(label.data(), label.size()).append(": ");
          output_.append(line.data(), line.size()).append("\n");
        }) {
    std::vector<std::string> argv = testing_util::ServersFlag(sync, 2);
    argv.insert(argv.begin(), kLaunch);
    for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
             {"--workers", absl::StrCat(workers)},
             {"--max-workers", absl::StrCat(workers + 1)},
             {"--sync", sync},
             {"--train", train},
             {"--test", test},
             {"--epochs", epochs},
             {"--batch-size", "64"},
             {"--min-step-ms", step_ms},
             {"--heartbeat-interval", "0.1"},
             {"--heartbeat-timeout", "1"},
             {"--log-every", "1"},
             {"--out", out_}}) {
      argv.push_back(flag);
      argv.push_back(value);
    }
    argv.insert(argv.end(), extra.begin(), extra.end());
    started_ = group_.Start(ProcessSpec{"launch", argv}).ok();
  }

  // Waits until metrics.csv has more than `rows` rows, the launcher still running; then the
  // coordinator's address, empty (a failure recorded) when that did not happen.
  std::string AddressOnceTraining(int rows) {
    while (started_ && absl::Now() < deadline_ && ended_.empty()) {
      Poll();
      const std::string csv = ReadFile(out_ + "/metrics.csv");
      if (std::count(csv.begin(), csv.end(), '\n') > rows) break;
    }
    std::string address = ReadFile(out_ + "/coordinator.address");
    while (!address.empty() && address.back() == '\n') address.pop_back();
    EXPECT_TRUE(ended_.empty() && !address.empty()) << output_;
    return address;
  }
  // Starts syncline-worker --join as `label`; its pid (0 when it could not start).
  int Join(const std::string& label, const std::string& address) {
    auto pid = group_.Start(ProcessSpec{label, {kWorker, "--coordinator", address, "--join"}});
    EXPECT_TRUE(pid.ok()) << pid.status();
    return pid.ok() ? *pid : 0;
  }
  // Starts "joiner" and, once it has joined, "late", which finds no rank left; waits for the
  // three exits: the job and the joiner end well, the late one with exit 2 naming the limit.
  void JoinOnceAndRefuseTheNext(const std::string& address) {
    ASSERT_NE(Join("joiner", address), 0);
    ASSERT_TRUE(WaitFor("joined at clock")) << output_;
    ASSERT_NE(Join("late", address), 0);
    WaitForExits(3);
    ASSERT_EQ(ended_.size(), 3u) << output_;
    EXPECT_EQ(ended_["launch"].exit_code, 0) << output_;
    EXPECT_EQ(ended_["joiner"].exit_code, 0) << output_;
    EXPECT_EQ(ended_["late"].exit_code, 2) << output_;
    EXPECT_NE(lines_["late"].find("had its --max-workers 3 workers"), std::string::npos)
        << lines_["late"];
  }
  // Waits until the output holds `text`.
  bool WaitFor(const std::string& text) {
    while (absl::Now() < deadline_ && output_.find(text) == std::string::npos) Poll();
    return output_.find(text) != std::string::npos;
  }
  // Waits until `n` processes have exited; their exits by label.
  const std::map<std::string, ExitEvent>& WaitForExits(size_t n) {
    while (absl::Now() < deadline_ && ended_.size() < n) Poll();
    return ended_;
  }
  const std::string& out() const { return out_; }
  const std::string& output() const { return output_; }
  std::string lines(const std::string& label) { return lines_[label]; }

 private:
  void Poll() {
    std::vector<ExitEvent> exited;
    (void)group_.Poll(absl::Milliseconds(20), &exited);
    for (const ExitEvent& e : exited) ended_[e.label] = e;
  }

  const std::string out_;
  std::string output_;
  std::map<std::string, std::string> lines_;
  std::map<std::string, ExitEvent> ended_;
  const absl::Time deadline_ = absl::Now() + absl::Seconds(120);
  ProcessGroup group_;
  bool started_ = false;
};

// The joiner's rows of metrics.csv (rank `joiner`, the job's last): how many, and the clock of
// the first. Each says the world grew to joiner + 1.
std::pair<int, int64_t> RowsOfJoiner(const std::string& out, int joiner) {
  int rows = 0;
  int64_t first_clock = -1;
  for (absl::string_view row : absl::StrSplit(ReadFile(out + "/metrics.csv"), '\n')) {
    const std::vector<std::string> f = absl::StrSplit(row, ',');
    if (f.size() != 20u || f[1] != absl::StrCat(joiner)) continue;
    if (rows++ == 0) first_clock = std::stoll(f[2]);
    EXPECT_EQ(f[8], absl::StrCat(joiner + 1)) << row;
  }
  return {rows, first_clock};
}

// A worker joins a running ASP (SSP, BSP) job by itself (syncline-worker --join): the
// coordinator gives it rank 2, the two workers still training cut their plans and give it one in
// three of their batches from there, it enters at their clock with the servers' current model, and
// its clocks appear in metrics.csv. The cuts are exact, so the job trains every example of both
// epochs exactly once. A second joiner finds no rank left and is refused, with exit code 2.
TEST_F(LaunchTest, AWorkerJoinsARunningAspJobAndTrainsAShareOfTheRest) {
  for (const std::string sync : {"asp", "ssp:2", "bsp"}) {
    SCOPED_TRACE(sync);
    JoinableJob job("join_" + sync.substr(0, 3), sync, Train(), Test(), "2", "10");
    const std::string address = job.AddressOnceTraining(20);
    ASSERT_FALSE(address.empty());
    EXPECT_NE(job.output().find("more workers may join: syncline-worker --coordinator " + address +
                                " --join"),
              std::string::npos)
        << job.output();
    ASSERT_NO_FATAL_FAILURE(job.JoinOnceAndRefuseTheNext(address));
    EXPECT_NE(job.lines("joiner").find("joining the running job as w2"), std::string::npos)
        << job.lines("joiner");

    const std::string summary = ReadFile(job.out() + "/summary.json");
    EXPECT_NE(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
    EXPECT_EQ(JsonNumber(summary, "workers_joined"), 1) << summary;
    EXPECT_EQ(JsonNumber(summary, "examples_trained"), 2 * 20000) << summary;
    ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
    EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.75) << summary;
    // The summary's steps are the iterations the three workers trained, as each logs them (the
    // joiner's from the clock it entered at; the job's output holds the joiner's lines too).
    int64_t trained = 0;
    const std::string& lines = job.output();
    for (size_t at = lines.find("trained "); at != std::string::npos;
         at = lines.find("trained ", at + 1)) {
      int64_t n = 0;
      if (std::sscanf(lines.c_str() + at, "trained %ld iterations", &n) == 1) trained += n;
    }
    EXPECT_EQ(JsonNumber(summary, "steps"), trained) << summary << job.output();
    const auto [rows, first_clock] = RowsOfJoiner(job.out(), 2);
    EXPECT_GT(rows, 5) << job.output();
    EXPECT_GT(first_clock, 1) << job.output();  // it entered at the others' clock
  }
}

// A worker joins a running all-reduce of 2 (--max-workers 3): at a step boundary the ring
// re-forms over the three, a member broadcasts it the model, the two give it one in three of
// their remaining batches, and it trains them. Every example of both epochs is in the model
// once (each worker's own count of what it summed), the summary lists the world growing from
// 2 to 3, and the test AUC stays within 0.01 of the run without the joiner. A second joiner
// finds no rank left, and one that asks after the job ended is told that nothing answers.
TEST_F(LaunchTest, AWorkerJoinsARunningAllReduceAndTrainsAShareOfTheRest) {
  JoinableJob clean("join_allreduce_clean", "allreduce", Train(), Test(), "2", "10");
  ASSERT_EQ(clean.WaitForExits(1).at("launch").exit_code, 0) << clean.output();
  const auto clean_auc = JsonNumber(ReadFile(clean.out() + "/summary.json"), "test_auc");
  ASSERT_TRUE(clean_auc.has_value()) << clean.output();

  JoinableJob job("join_allreduce", "allreduce", Train(), Test(), "2", "10");
  const std::string address = job.AddressOnceTraining(20);
  ASSERT_FALSE(address.empty());
  ASSERT_NO_FATAL_FAILURE(job.JoinOnceAndRefuseTheNext(address));
  // The joiner took the model from a member, and the members re-formed their ring with it.
  EXPECT_NE(job.lines("joiner").find("all-reduce: took the model of w"), std::string::npos)
      << job.lines("joiner");
  EXPECT_NE(ReadFile(job.out() + "/logs/w0.log").find("all-reduce re-formed over w0, w1, w2"),
            std::string::npos);

  const std::string summary = ReadFile(job.out() + "/summary.json");
  EXPECT_NE(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "workers_joined"), 1) << summary;
  EXPECT_EQ(JsonNumber(summary, "examples_trained"), 2 * 20000) << summary;
  EXPECT_NE(summary.find("\"world_sizes\": [[0, 2], ["), std::string::npos) << summary;
  EXPECT_NE(summary.find(", 3]]"), std::string::npos) << summary;
  // Each of the three models holds every example's gradient once: the members' and the
  // joiner's, which began from a member's.
  const std::string said = "the model holds the gradients of ";
  const std::string joiner_lines = job.lines("joiner");
  for (const std::string& log :
       {ReadFile(job.out() + "/logs/w0.log"), ReadFile(job.out() + "/logs/w1.log"), joiner_lines}) {
    const size_t at = log.rfind(said);
    ASSERT_NE(at, std::string::npos) << log;
    EXPECT_EQ(std::atof(log.c_str() + at + said.size()), 2 * 20000.0) << log;
  }
  const auto auc = JsonNumber(summary, "test_auc");
  ASSERT_TRUE(auc.has_value()) << summary;
  EXPECT_NEAR(*auc, *clean_auc, 0.01);
  const auto [rows, first_clock] = RowsOfJoiner(job.out(), 2);
  EXPECT_GT(rows, 5) << job.output();
  EXPECT_GT(first_clock, 1) << job.output();

  // The job has ended: nothing answers at its address any more.
  auto after = RunProcess({kWorker, "--coordinator", address, "--join", "--startup-timeout", "1"});
  EXPECT_NE(after.exit_code, 0) << after.output;
  EXPECT_NE(after.output.find("to the join request: is the job running?"), std::string::npos)
      << after.output;
}

// A peer joins a running gossip job of 3 (--max-workers 4), synchronous and push-sum: every
// peer takes it into its graph at the same step (the latest of the cuts), the joiner starts from
// its neighbours' models and trains one in four of the others' remaining batches. The cuts are
// exact, so every example of both epochs is trained exactly once. The AUC floor is the one the
// same job reaches without the join (UnderGossipAKilledPeersBatchesGoToTheSurvivors' flags:
// 0.83 synchronous, 0.80 push-sum, docs/FAULT_TOLERANCE.md).
TEST_F(LaunchTest, APeerJoinsARunningGossipJob) {
  for (const std::string sync : {"gossip:ring", "gossip:ring:async"}) {
    SCOPED_TRACE(sync);
    JoinableJob job(sync == "gossip:ring" ? "gjoin_sync" : "gjoin_async", sync, Train(), Test(),
                    "2", "10", 3, {"--optimizer", "sgd", "--lr", "1", "--peer-timeout", "2"});
    const std::string address = job.AddressOnceTraining(20);
    ASSERT_FALSE(address.empty());
    ASSERT_NE(job.Join("joiner", address), 0);
    ASSERT_TRUE(job.WaitFor("joined at clock")) << job.output();
    auto ended = job.WaitForExits(2);
    ASSERT_EQ(ended.size(), 2u) << job.output();
    EXPECT_EQ(ended["launch"].exit_code, 0) << job.output();
    EXPECT_EQ(ended["joiner"].exit_code, 0) << job.output();
    EXPECT_NE(job.lines("joiner").find("entered at step"), std::string::npos)
        << job.lines("joiner");

    const std::string summary = ReadFile(job.out() + "/summary.json");
    EXPECT_NE(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
    EXPECT_NE(summary.find("\"nodes_down\": []"), std::string::npos) << summary;
    EXPECT_EQ(JsonNumber(summary, "workers_joined"), 1) << summary;
    EXPECT_EQ(JsonNumber(summary, "examples_trained"), 2 * 20000) << summary;
    ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
    EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.75) << summary;
    const auto [rows, first_clock] = RowsOfJoiner(job.out(), 3);
    EXPECT_GT(rows, 5) << job.output();
    EXPECT_GT(first_clock, 1) << job.output();  // it entered at the others' step
  }
}

// A joiner killed while it trains leaves like any worker (its heartbeats stop): the rest of
// what it was given goes back to the two others, and every example of the three epochs is
// still trained, at least once.
TEST_F(LaunchTest, AJoinerThatDiesHandsItsShareBack) {
  JoinableJob job("join_kill", "asp", Train(), Test(), "3", "25");
  const std::string address = job.AddressOnceTraining(20);
  ASSERT_FALSE(address.empty());
  const int joiner = job.Join("joiner", address);
  ASSERT_NE(joiner, 0);
  ASSERT_TRUE(job.WaitFor("joined at clock")) << job.output();
  // A few of its iterations first.
  absl::SleepFor(absl::Milliseconds(500));
  ASSERT_EQ(kill(joiner, SIGKILL), 0);
  auto ended = job.WaitForExits(2);
  ASSERT_EQ(ended.size(), 2u) << job.output();
  EXPECT_EQ(ended["launch"].exit_code, 0) << job.output();
  EXPECT_NE(job.output().find("w2 left at clock"), std::string::npos) << job.output();
  const std::string summary = ReadFile(job.out() + "/summary.json");
  EXPECT_NE(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
  EXPECT_EQ(JsonNumber(summary, "workers_joined"), 1) << summary;
  EXPECT_EQ(JsonNumber(summary, "workers_left"), 1) << summary;
  const auto trained = JsonNumber(summary, "examples_trained");
  ASSERT_TRUE(trained.has_value()) << summary;
  EXPECT_GE(*trained, 3 * 20000) << summary;
  EXPECT_LE(*trained, 3 * 20000 + 20 * 64) << summary;
}

// BSP with --min-workers: a killed worker leaves the clock set, its batches go to the three
// others, and the job ends ok having trained every example of every epoch, at least once (the
// servers count the examples of the finished iterations; the few iterations the killed worker
// finished after its last heartbeat are trained again).
TEST_F(LaunchTest, UnderBspWithMinWorkersTheJobShrinksAndTrainsEveryExample) {
  KillResult k = KillWorkerMidRun("bsp", Train(), Test(), "2",
                                  {"--min-workers", "3", "--min-step-ms", "10", "--batch-size",
                                   "64", "--heartbeat-interval", "0.1"},
                                  4);
  const std::string summary = SummaryOfAJobThatWentOnWithoutW1(k);
  ASSERT_FALSE(summary.empty());
  const auto trained = TrainedEveryExampleOfTwoEpochs(summary);
  ASSERT_TRUE(trained.has_value());
  // The servers' count of the batches trained twice agrees with the examples counted twice.
  const auto redone = JsonNumber(summary, "steps_redone");
  ASSERT_TRUE(redone.has_value()) << summary;
  EXPECT_NEAR(*trained, 2 * 20000 + 64 * *redone, 64) << summary;
  ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.75) << summary;
  // The world shrank in metrics.csv, and the loss went on falling after it did.
  const std::vector<std::string> rows =
      absl::StrSplit(ReadFile(k.out + "/metrics.csv"), '\n', absl::SkipEmpty());
  ASSERT_GT(rows.size(), 3u);
  EXPECT_TRUE(rows[0].find(",world_size,") != std::string::npos) << rows[0];
  const std::vector<std::string> first = absl::StrSplit(rows[1], ',');
  const std::vector<std::string> last = absl::StrSplit(rows.back(), ',');
  ASSERT_EQ(last.size(), 20u) << rows.back();
  EXPECT_EQ(first[8], "4");
  EXPECT_EQ(last[8], "3");
  EXPECT_LT(std::stod(last[4]), std::stod(first[4])) << rows[1] << "\n" << rows.back();
  EXPECT_NE(k.output.find("takes"), std::string::npos) << k.output;
  for (const auto& [pid, cmd] : k.children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
}

// Two workers of four killed at seeded moments (the seed is logged; set SYNCLINE_CHAOS_SEED to
// replay one): the second departure hands over, with its own batches, its share of the
// first's. The job still trains every example of both epochs at least once.
TEST_F(LaunchTest, UnderBspTwoWorkersKilledAtSeededMomentsLeaveNoExampleUntrained) {
  uint64_t seed = 20261202;
  if (const char* s = std::getenv("SYNCLINE_CHAOS_SEED")) seed = std::strtoull(s, nullptr, 10);
  std::mt19937_64 rng(seed);
  std::vector<int> ranks = {0, 1, 2, 3};
  std::shuffle(ranks.begin(), ranks.end(), rng);
  std::uniform_int_distribution<int> pause_ms(50, 400);
  const int first_ms = pause_ms(rng), second_ms = pause_ms(rng);
  std::cerr << "chaos seed " << seed << ": kill w" << ranks[0] << " after " << first_ms
            << " ms, then w" << ranks[1] << " " << second_ms << " ms later\n";
  const std::string out = TempDir("chaos_bsp");
  std::string output;
  ProcessGroup group([&](std::string_view, OutputStream, std::string_view line) {
    output.append(line.data(), line.size());
    output += '\n';
  });
  auto launcher = group.Start(ProcessSpec{"launch", {kLaunch, "--servers",
                                                     "2",     "--workers",
                                                     "4",     "--min-workers",
                                                     "2",     "--sync",
                                                     "bsp",   "--train",
                                                     Train(), "--test",
                                                     Test(),  "--epochs",
                                                     "2",     "--batch-size",
                                                     "64",    "--min-step-ms",
                                                     "10",    "--heartbeat-interval",
                                                     "0.1",   "--heartbeat-timeout",
                                                     "2",     "--out",
                                                     out}});
  ASSERT_TRUE(launcher.ok());
  std::vector<ExitEvent> exited;
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline && exited.empty()) {
    (void)group.Poll(absl::Milliseconds(20), &exited);
    const std::string csv = ReadFile(out + "/metrics.csv");
    if (std::count(csv.begin(), csv.end(), '\n') > 4) break;
  }
  ASSERT_TRUE(exited.empty()) << output;
  const auto children = testing_util::Children(*launcher);
  for (int kill = 0; kill < 2; ++kill) {
    // Poll returns at every line of output: wait out the seeded pause whole.
    const absl::Time until = absl::Now() + absl::Milliseconds(kill == 0 ? first_ms : second_ms);
    while (absl::Now() < until && exited.empty()) (void)group.Poll(until - absl::Now(), &exited);
    ASSERT_TRUE(exited.empty()) << "the job ended before the kills: " << output;
    EXPECT_NE(testing_util::KillChildOfRank(*launcher, "syncline-worker", ranks[kill]), 0);
  }
  testing_util::AwaitAnExit(group, absl::Seconds(60), &exited);
  ASSERT_EQ(exited.size(), 1u) << "the launcher did not exit:\n" << output;
  EXPECT_EQ(exited[0].exit_code, 0) << output;
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_EQ(JsonNumber(summary, "workers_left"), 2) << summary;
  const auto trained = JsonNumber(summary, "examples_trained");
  ASSERT_TRUE(trained.has_value()) << summary;
  EXPECT_GE(*trained, 2 * 20000) << summary;
  EXPECT_LE(*trained, 2 * 20000 + 40 * 64) << summary;
  ASSERT_TRUE(JsonNumber(summary, "test_auc").has_value()) << summary;
  EXPECT_GT(*JsonNumber(summary, "test_auc"), 0.75) << summary;
  for (const auto& [pid, cmd] : children) EXPECT_FALSE(testing_util::Alive(pid)) << cmd;
}

// A run folder used again holds this run's results only: the earlier run's (here its
// params.tsv, which a run without a test set does not write) move to OUT/previous-run/.
TEST_F(LaunchTest, AReusedOutFolderHoldsThisRunsResultsOnly) {
  const std::string out = TempDir("reused");
  auto first = RunProcess({kLaunch, "--train", Train(), "--test", Test(), "--out", out});
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_FALSE(ReadFile(out + "/params.tsv").empty());
  auto second = RunProcess({kLaunch, "--train", Train(), "--out", out});
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/params.tsv"));
  EXPECT_FALSE(ReadFile(out + "/previous-run/params.tsv").empty());
  EXPECT_NE(ReadFile(out + "/summary.json").find("\"test\": \"\""), std::string::npos);
  const size_t moved = second.output.find("moved an earlier run's summary.json, metrics.csv");
  ASSERT_NE(moved, std::string::npos) << second.output;
  EXPECT_LT(second.output.find("params.tsv", moved), second.output.find('\n', moved));
}

// The coordinator's address is in OUT/coordinator.address while the job runs, not after; a
// joiner says where it asks, and for how long it waits.
TEST_F(LaunchTest, AJoinerSaysWhatItWaitsForAndTheAddressGoesWithTheJob) {
  const std::string out = TempDir("address");
  auto job = RunProcess({kLaunch, "--sync", "asp", "--workers", "2", "--max-workers", "3",
                         "--train", Train(), "--out", out});
  ASSERT_EQ(job.exit_code, 0) << job.output;
  EXPECT_NE(job.output.find("more workers may join"), std::string::npos) << job.output;
  EXPECT_FALSE(std::filesystem::exists(out + "/coordinator.address"));
  auto joiner = RunProcess(
      {kWorker, "--coordinator", "tcp://127.0.0.1:1", "--join", "--startup-timeout", "1"});
  EXPECT_NE(joiner.exit_code, 0) << joiner.output;
  EXPECT_NE(joiner.output.find("asking the coordinator at tcp://127.0.0.1:1 for a place in its "
                               "running job; waiting up to 1 s"),
            std::string::npos)
      << joiner.output;
}

// Flags that the mode ignores are refused up front (exit 2), before anything starts: workers
// of one's own need parameter servers, and all-reduce has none.
TEST_F(LaunchTest, FlagsTheModeIgnoresAreRefusedUpFront) {
  for (const char* sync : {"gossip:ring", "allreduce", "hybrid"}) {
    SCOPED_TRACE(sync);
    const std::string out = TempDir("external_refused");
    auto r = RunProcess({kLaunch, "--sync", sync, "--external-workers", "--out", out});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--external-workers is for --sync bsp, asp and ssp"), std::string::npos)
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(out + "/coordinator.address"));
  }
  auto servers = RunProcess({kLaunch, "--sync", "allreduce", "--servers", "3"});
  EXPECT_EQ(servers.exit_code, 2) << servers.output;
  EXPECT_NE(servers.output.find("--servers is for --sync bsp, asp, ssp, hybrid and fedavg"),
            std::string::npos)
      << servers.output;
  auto rounds = RunProcess({kLaunch, "--rounds", "5"});
  EXPECT_EQ(rounds.exit_code, 2) << rounds.output;
}

// 20k examples over 2 workers at batch 256 end at clock 40: a checkpoint every 100 steps never
// comes, and the launcher says so while the job runs.
TEST_F(LaunchTest, ACheckpointIntervalPastTheJobsEndIsSaid) {
  const std::string out = TempDir("checkpoint_past_end");
  auto r = RunProcess({kLaunch, "--train", Train(), "--checkpoint-every", "100", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("--checkpoint-every 100 is past the job's end: the workers stop at "
                          "clock 40"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(JsonNumber(ReadFile(out + "/summary.json"), "checkpoints_written"), 0);
  // A job shorter than --log-every reports no progress: it is said when the workers finish.
  auto quiet = RunProcess({kLaunch, "--train", Train(), "--checkpoint-every", "100", "--log-every",
                           "100", "--out", out});
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_NE(quiet.output.find("--checkpoint-every 100 is past the job's end"), std::string::npos)
      << quiet.output;
  auto fits = RunProcess({kLaunch, "--train", Train(), "--checkpoint-every", "20", "--out", out});
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_EQ(fits.output.find("past the job's end"), std::string::npos) << fits.output;
  EXPECT_EQ(JsonNumber(ReadFile(out + "/summary.json"), "checkpoints_written"), 2);
}

}  // namespace
}  // namespace syncline
