// End-to-end tests of federated training and robust aggregation: real syncline-launch,
// syncline-ps and syncline-worker processes over ZeroMQ on loopback.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "data/dataset.h"
#include "data/partition.h"
#include "job/federated.h"
#include "job/privacy_plan.h"
#include "privacy/dp_random.h"
#include "privacy/secure_aggregation.h"
#include "testing/test_util.h"
#include "worker/federated_client.h"

namespace syncline {
namespace {

using testing_util::JsonNumber;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;
const std::string kGen = SYNCLINE_GEN_BIN;

// Shared data: 4-class softmax data with 20 dense features, 3000 training and 600 test rows.
class FederatedTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir("federated_data"));
    auto r = RunProcess({kGen,
                         "--out",
                         *dir_ + "/train.csv",
                         "--test-out",
                         *dir_ + "/test.csv",
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
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static std::string Train() { return *dir_ + "/train.csv"; }
  // Runs `common` into `plain`, then with `masking` flags added into `masked`; returns the
  // second run's output (both must succeed).
  static std::string RunPlainThenMasked(const std::string& plain, const std::string& masked,
                                        const std::vector<std::string>& common,
                                        const std::vector<std::string>& masking);
  static std::string Test() { return *dir_ + "/test.csv"; }
  // The softmax job on this data, with `extra` flags, into `out`.
  static std::vector<std::string> Job(const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> argv = {kLaunch,   "--model",     "softmax", "--classes", "4",
                                     "--train", Train(),       "--test",  Test(),      "--out",
                                     out,       "--optimizer", "sgd",     "--seed",    "5"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return argv;
  }
  static double Accuracy(const std::string& out) {
    const std::string summary = ReadFile(out + "/summary.json");
    return JsonNumber(summary, "test_accuracy").value_or(-1);
  }
  static std::string* dir_;
};
std::string* FederatedTest::dir_ = nullptr;

// The parameters of a params.tsv, one vector per line, by key ("bias" or the feature id).
std::map<std::string, std::vector<double>> ReadParams(const std::string& path) {
  std::map<std::string, std::vector<double>> params;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, '\t');
    std::vector<double>& values = params[std::string(fields[0])];
    for (size_t i = 1; i < fields.size(); ++i) {
      double v = 0;
      EXPECT_TRUE(absl::SimpleAtod(fields[i], &v)) << line;
      values.push_back(v);
    }
  }
  return params;
}

// How far two runs' params.tsv are apart (the largest coordinate difference) and how far the
// first moved from zero (the sum of its magnitudes); worst is infinite when their keys differ.
struct ParamsGap {
  double worst = 0;
  double moved = 0;
};
ParamsGap CompareParams(const std::string& a_dir, const std::string& b_dir) {
  const auto x = ReadParams(a_dir + "/params.tsv");
  const auto y = ReadParams(b_dir + "/params.tsv");
  ParamsGap gap;
  if (x.size() != y.size()) gap.worst = INFINITY;
  for (const auto& [key, values] : x) {
    if (!y.contains(key) || values.size() != y.at(key).size()) {
      ADD_FAILURE() << key << " differs in presence or size";
      gap.worst = INFINITY;
      continue;
    }
    for (size_t i = 0; i < values.size(); ++i) {
      gap.worst = std::max(gap.worst, std::abs(values[i] - y.at(key)[i]));
      gap.moved += std::abs(values[i]);
    }
  }
  return gap;
}

// With every client picked and one local SGD step per round, a round is a BSP clock of the
// same SGD: the client's delta n * (w - w') is lr times its gradient sum, and the servers'
// weighted mean of the deltas (SGD at --server-lr 1) is BSP's step on the union batch.
TEST_F(FederatedTest, OneLocalStepOfEveryClientIsABspStep) {
  const std::string bsp = TempDir("fed_bsp"), fed = TempDir("fed_one_step");
  // 3000 rows, iid over 3 workers: 1000 each, 10 steps of 100 per epoch, 2 epochs.
  const std::vector<std::string> common = {"--workers",   "3",   "--servers",    "2",
                                           "--lr",        "0.2", "--batch-size", "100",
                                           "--partition", "iid"};
  std::vector<std::string> a = common;
  a.insert(a.end(), {"--sync", "bsp", "--epochs", "2"});
  auto r = RunProcess(Job(bsp, a));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> b = common;
  b.insert(b.end(), {"--sync", "fedavg", "--rounds", "20", "--local-steps", "1"});
  r = RunProcess(Job(fed, b));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  const ParamsGap gap = CompareParams(bsp, fed);
  EXPECT_LE(gap.worst, 1e-5);
  EXPECT_GT(gap.moved, 1.0);  // the runs trained
  const std::string summary = ReadFile(fed + "/summary.json");
  EXPECT_NE(summary.find("\"sync\": \"fedavg\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"closed\": 20"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"short\": 0"), std::string::npos) << summary;
}

// Picked clients drop out (seeded): each such round ends at the timeout, the servers name the
// missing clients, and the summary lists exactly the rounds the seed makes short.
TEST_F(FederatedTest, ARoundWithAClientThatNeverAnswersClosesAtTheTimeoutNamingIt) {
  const std::string out = TempDir("fed_dropout");
  auto r = RunProcess(Job(out, {"--sync", "fedavg", "--workers", "4", "--servers", "1",
                                "--participation", "0.5", "--rounds", "8", "--local-epochs", "1",
                                "--lr", "0.1", "--client-dropout", "0.3", "--round-timeout", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<int64_t> expected;
  for (int64_t round = 0; round < 8; ++round) {
    std::vector<std::string> missing;
    for (int c : PickClients(5, round, 4, 0.5)) {
      if (ClientDropsOut(5, round, c, 0.3)) missing.push_back(absl::StrCat("w", c));
    }
    if (missing.empty()) continue;
    expected.push_back(round);
    EXPECT_NE(r.output.find(absl::StrCat("round ", round, " closed at the 1s timeout without ",
                                         absl::StrJoin(missing, ", "))),
              std::string::npos)
        << round << "\n"
        << r.output;
  }
  ASSERT_FALSE(expected.empty()) << "seed 5 drops no client: pick another seed for this test";
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_NE(summary.find(absl::StrCat("\"short_rounds\": [", absl::StrJoin(expected, ", "), "]")),
            std::string::npos)
      << summary;
  EXPECT_GT(Accuracy(out), 0.4) << summary;  // chance is 0.25
}

// Two of seven clients send their delta times -5: the weighted mean follows them away from the
// model, and the robust rules keep to the honest clients.
TEST_F(FederatedTest, MeanFollowsTheAttackersAndTheRobustRulesDoNot) {
  const std::vector<std::string> common = {"--sync",    "fedavg", "--workers",    "7",
                                           "--servers", "1",      "--rounds",     "6",
                                           "--lr",      "0.1",    "--batch-size", "50"};
  auto run = [&](const std::string& name, std::vector<std::string> extra) {
    const std::string out = TempDir(name);
    std::vector<std::string> flags = common;
    flags.insert(flags.end(), extra.begin(), extra.end());
    auto r = RunProcess(Job(out, flags));
    // A collapsing model may end as diverged (exit code 3); anything else is a failure.
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 3) << r.output;
    return r.exit_code == 0 ? Accuracy(out) : 0.0;
  };
  const double clean = run("fed_clean", {});
  ASSERT_GT(clean, 0.6);
  const std::vector<std::string> attack = {"--byzantine", "0,1:scale:-5"};
  std::vector<std::string> flags = attack;
  EXPECT_LT(run("fed_mean", flags), clean - 0.15);
  for (const char* rule : {"median", "trimmed-mean:0.3", "krum:2", "multi-krum:2:3"}) {
    SCOPED_TRACE(rule);
    flags = attack;
    flags.insert(flags.end(), {"--aggregate", rule});
    std::string folder = absl::StrCat("fed_", rule);
    std::replace(folder.begin(), folder.end(), ':', '_');
    EXPECT_GT(run(folder, flags), clean - 0.05);
  }
}

// BSP clocks take the rules too: one of three workers flips its gradient's sign.
TEST_F(FederatedTest, BspWithTheMedianTrainsPastASignFlippingWorker) {
  const std::string out = TempDir("bsp_median");
  auto r = RunProcess(
      Job(out, {"--sync", "bsp", "--workers", "3", "--servers", "2", "--epochs", "3", "--lr", "0.2",
                "--batch-size", "50", "--aggregate", "median", "--byzantine", "2:signflip"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("byzantine worker: sends crafted updates (--byzantine 2:signflip"),
            std::string::npos)
      << r.output;
  EXPECT_GT(Accuracy(out), 0.6) << r.output;
}

// Every worker takes its part of the same seeded split, and worker 0 writes the histograms.
TEST_F(FederatedTest, DirichletPartitionHistogramsMatchTheirSeed) {
  const std::string out = TempDir("fed_dirichlet");
  auto r = RunProcess(Job(out, {"--sync", "fedavg", "--workers", "4", "--servers", "1", "--rounds",
                                "2", "--partition", "dirichlet:0.3"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ReadOptions o;
  o.num_classes = 4;
  auto data = ReadDataset(Train(), o);
  ASSERT_TRUE(data.ok()) << data.status();
  auto parts = PartitionByLabel(data->labels, 4, 4,
                                PartitionSpec{.kind = PartitionKind::kDirichlet, .alpha = 0.3}, 5);
  ASSERT_TRUE(parts.ok()) << parts.status();
  EXPECT_EQ(ReadFile(out + "/label_histograms.tsv"),
            LabelHistogramsTsv(LabelHistograms(data->labels, 4, *parts)));
  size_t assigned = 0;
  for (const auto& part : *parts) assigned += part.size();
  EXPECT_EQ(assigned, 3000u);
}

TEST_F(FederatedTest, ARuleWithTooFewUpdatesIsRefusedUpFront) {
  const std::string out = TempDir("fed_bad");
  auto r = RunProcess(Job(out, {"--sync", "fedavg", "--workers", "6", "--participation", "0.5",
                                "--aggregate", "krum:1"}));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--aggregate=krum:1: krum:1 needs at least 2f+3 = 5 updates, has 3 "
                          "(clients per round)"),
            std::string::npos)
      << r.output;
}

// The ctr model's hashed ids stay sparse under fedavg: each client pulls and pushes the rows its
// own examples hold, and the servers keep them in their RocksDB-backed embedding tables (a
// budget of 2000 rows per server, so most live on disk). Two rounds of one local epoch train
// a model as good as two BSP epochs of the same clients (measured: AUC 0.60 and 0.57).
TEST(FederatedCtrTest, TheCtrModelTrainsFederatedOnEmbeddingTablesOnDisk) {
  const std::string data = TempDir("fed_ctr_data");
  auto gen = RunProcess({kGen, "criteo", "--rows", "30000", "--test-rows", "5000", "--seed", "2",
                         "--interaction", "2", "--out", data + "/train.txt", "--test-out",
                         data + "/test.txt"});
  ASSERT_EQ(gen.exit_code, 0) << gen.output;
  auto run = [&](const std::string& name, std::vector<std::string> sync) {
    const std::string out = TempDir(name);
    std::vector<std::string> argv = {kLaunch,
                                     "--servers",
                                     "2",
                                     "--workers",
                                     "3",
                                     "--model",
                                     "ctr",
                                     "--format",
                                     "criteo",
                                     "--train",
                                     data + "/train.txt",
                                     "--test",
                                     data + "/test.txt",
                                     "--optimizer",
                                     "adagrad",
                                     "--lr",
                                     "0.05",
                                     "--embedding-memory",
                                     "2000rows",
                                     "--out",
                                     out};
    argv.insert(argv.end(), sync.begin(), sync.end());
    auto r = RunProcess(argv);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return std::pair(r.output, ReadFile(out + "/summary.json"));
  };
  const auto [bsp_output, bsp] = run("fed_ctr_bsp", {"--sync", "bsp", "--epochs", "2"});
  const auto [output, fed] =
      run("fed_ctr", {"--sync", "fedavg", "--rounds", "2", "--local-epochs", "1"});
  EXPECT_NE(output.find("trains the "), std::string::npos) << output;
  EXPECT_GT(JsonNumber(fed, "test_auc").value_or(0), JsonNumber(bsp, "test_auc").value_or(1) - 0.02)
      << fed << bsp;
  EXPECT_GT(JsonNumber(fed, "embedding.rows_on_disk").value_or(0), 0) << fed;
  EXPECT_NE(fed.find("\"closed\": 2"), std::string::npos) << fed;
}

// DP-FedAvg with every client a round (q = 1), a clip no update reaches and noise of 1e-4 is
// FedAvg of equal clients: each pushes its unweighted delta, the servers divide the sum by the
// expected 3 clients. The summary states the privacy spent and metrics.csv its running epsilon.
TEST_F(FederatedTest, DpFedAvgWithAWideClipAndEveryClientIsFedAvgPlusItsNoise) {
  const std::string fed = TempDir("fed_plain"), dp = TempDir("fed_dp_wide");
  const std::vector<std::string> common = {
      "--sync", "fedavg", "--workers",    "3",   "--servers",   "2",   "--rounds",      "5",
      "--lr",   "0.2",    "--batch-size", "100", "--partition", "iid", "--local-steps", "1"};
  auto r = RunProcess(Job(fed, common));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> flags = common;
  flags.insert(flags.end(), {"--dp", "client", "--dp-clip", "1000", "--dp-noise-multiplier", "1e-7",
                             "--dp-noise-seed", "4"});
  r = RunProcess(Job(dp, flags));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const ParamsGap gap = CompareParams(fed, dp);
  // Noise of standard deviation 1e-4 a round, over 3: within 2e-4 * 5 rounds * a margin.
  EXPECT_LE(gap.worst, 2e-3);
  EXPECT_GT(gap.worst, 0);  // the noise is there
  EXPECT_GT(gap.moved, 1.0);
  const std::string summary = ReadFile(dp + "/summary.json");
  EXPECT_NE(summary.find("\"privacy\": {\"level\": \"client\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"sampling_rate\": 1,"), std::string::npos) << summary;
  const std::string csv = ReadFile(dp + "/metrics.csv");
  EXPECT_NE(csv.substr(0, csv.find('\n')).find(",epsilon"), std::string::npos) << csv;
}

// DP-FedAvg at a real noise level and DP-SGD under bsp and allreduce train past chance (4
// classes), each within the budget it was calibrated to.
TEST_F(FederatedTest, DpJobsTrainWithinTheirCalibratedBudget) {
  // DP-FedAvg, and the same under secure aggregation: the clients add the noise (distributed
  // DP); rounds that pick fewer than the threshold abort at once.
  // clang-format off
  const std::vector<std::string> dp_client = {
      "--sync", "fedavg", "--workers", "8", "--servers", "1", "--rounds", "8", "--lr", "0.2",
      "--batch-size", "50", "--participation", "0.5", "--dp", "client", "--dp-clip", "2",
      "--dp-noise-multiplier", "0.3"};
  // clang-format on
  std::vector<std::string> dp_client_secagg = dp_client;
  dp_client_secagg.insert(dp_client_secagg.end(),
                          {"--secure-aggregation", "on", "--round-timeout", "20"});
  const std::vector<std::pair<std::string, std::vector<std::string>>> jobs = {
      {"dp_client", dp_client},
      {"dp_client_secagg", dp_client_secagg},
      {"dp_bsp",
       {"--sync", "bsp", "--workers", "2", "--servers", "1", "--epochs", "3", "--lr", "0.5",
        "--batch-size", "50", "--dp", "example", "--dp-clip", "1", "--dp-epsilon", "8"}},
      {"dp_allreduce",
       {"--sync", "allreduce", "--workers", "2", "--epochs", "3", "--lr", "0.5", "--batch-size",
        "50", "--dp", "example", "--dp-clip", "1", "--dp-epsilon", "8", "--dp-noise-seed", "2"}}};
  for (const auto& [name, flags] : jobs) {
    SCOPED_TRACE(name);
    const std::string out = TempDir(name);
    auto r = RunProcess(Job(out, flags));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_GT(Accuracy(out), 0.5) << r.output;
    const std::string summary = ReadFile(out + "/summary.json");
    const double eps = JsonNumber(summary, "privacy.epsilon").value_or(-1);
    EXPECT_GT(eps, 0) << summary;
    if (name.rfind("dp_client", 0) != 0) {
      EXPECT_LE(eps, 8.0 + 1e-9) << summary;
    }
  }
}

// Distributed DP: --dp client under --secure-aggregation, every client picked, a clip no
// update reaches and almost no noise is DP-FedAvg with the servers' noise: the same model up to
// the clients' stochastic rounding (less than 1 / s per client and coordinate, s = (2^20 -
// sqrt(d)) / 100 here) and the noise. The summary names the mechanism and its accounting
// (sampling rate 1: no amplification, the server sees who takes part).
TEST_F(FederatedTest, DistributedDpUnderSecureAggregationIsDpFedAvg) {
  const std::string central = TempDir("fed_dp_central"), ddp = TempDir("fed_dp_distributed");
  // clang-format off
  const std::vector<std::string> common = {
      "--sync", "fedavg", "--workers", "3", "--servers", "1", "--rounds", "5", "--lr", "0.2",
      "--batch-size", "100", "--partition", "iid", "--local-steps", "1", "--dp", "client",
      "--dp-clip", "100", "--dp-noise-multiplier", "1e-6", "--dp-noise-seed", "4"};
  // clang-format on
  auto r = RunProcess(Job(central, common));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> flags = common;
  flags.insert(flags.end(), {"--secure-aggregation", "on"});
  r = RunProcess(Job(ddp, flags));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("secure aggregation unmasked the sum of w0, w1, w2"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("skellam, distributed"), std::string::npos) << r.output;
  const ParamsGap gap = CompareParams(central, ddp);
  // Rounding: 5 rounds of 3 clients' < 1e-4 over 3; noise 1e-4 a round over 3; a margin.
  EXPECT_LE(gap.worst, 2e-3);
  EXPECT_GT(gap.moved, 1.0);
  const std::string summary = ReadFile(ddp + "/summary.json");
  EXPECT_NE(summary.find("\"mechanism\": \"skellam, distributed"), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"sampling_rate\": 1,"), std::string::npos) << summary;
  EXPECT_GT(JsonNumber(summary, "privacy.epsilon").value_or(-1), 0) << summary;
}

// What --dp and --server-optimizer refuse before anything starts, each naming why.
TEST_F(FederatedTest, PrivacyOptionsRefuseWhatTheyCannotProtect) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--sync", "bsp", "--workers", "2", "--epochs", "50", "--dp", "example",
        "--dp-noise-multiplier", "0.5", "--dp-epsilon", "1"},
       "more than the budget"},
      {{"--sync", "asp", "--workers", "2", "--dp", "example", "--dp-epsilon", "3"},
       "is DP-SGD under --sync bsp or allreduce"},
      {{"--sync", "bsp", "--workers", "2", "--dp", "client", "--dp-epsilon", "3"},
       "it needs --sync fedavg"},
      {{"--sync", "bsp", "--workers", "2", "--dp-epsilon", "3"}, "--dp is off"},
      {{"--sync", "fedavg", "--workers", "4", "--secagg-neighbours", "2"},
       "needs --secure-aggregation"},
      {{"--sync", "bsp", "--workers", "2", "--server-optimizer", "adam"}, "server-optimizer"}};
  for (const auto& [flags, why] : cases) {
    SCOPED_TRACE(absl::StrJoin(flags, " "));
    auto r = RunProcess(Job(TempDir("dp_refused"), flags));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  }
}

std::string FederatedTest::RunPlainThenMasked(const std::string& plain, const std::string& masked,
                                              const std::vector<std::string>& common,
                                              const std::vector<std::string>& masking) {
  auto r = RunProcess(Job(plain, common));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> with = common;
  with.insert(with.end(), masking.begin(), masking.end());
  r = RunProcess(Job(masked, with));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

// The gap one masked round may leave from FedAvg's model: each coordinate of a client's update
// n (w_r - w_local) is quantised with a step of 2 C / (2^b - 1) (C = 2^20 weighted units, b the
// most bits for which W (2^b - 1) fits 2^32) and rounded stochastically (off by less than a
// step), so the round's mean update, and the model, moves by less than k step / N from
// FedAvg's (k clients, N = 3000 examples), plus 1e-6 of float32 rounding of weights near 1.
double OneRoundQuantisationBound(int workers) {
  int bits = 1;
  while (bits < 31 && workers * (std::ldexp(1.0, bits + 1) - 1) < std::ldexp(1.0, 32)) ++bits;
  const double step = 2.0 * (1 << 20) / (std::ldexp(1.0, bits) - 1);
  return workers * step / 3000 + 1e-6;
}

// --secure-aggregation: the servers see only the masked sum, so the model is FedAvg's up to the
// quantisation (exact for one round; OneRoundQuantisationBound), and over five rounds so is
// the accuracy.
TEST_F(FederatedTest, SecureAggregationGivesFedAvgsModelUpToTheQuantisation) {
  const std::string plain = TempDir("fed_plain"), masked = TempDir("fed_secagg");
  std::vector<std::string> common = {"--sync",    "fedavg", "--workers",    "4",
                                     "--servers", "1",      "--rounds",     "1",
                                     "--lr",      "0.1",    "--batch-size", "50"};
  const std::string output =
      RunPlainThenMasked(plain, masked, common, {"--secure-aggregation", "on"});
  EXPECT_NE(output.find("secure aggregation unmasked the sum of w0, w1, w2, w3 (3000 examples)"),
            std::string::npos)
      << output;
  const ParamsGap gap = CompareParams(plain, masked);
  EXPECT_LE(gap.worst, OneRoundQuantisationBound(4));
  EXPECT_GT(gap.moved, 1.0);
  const std::string plain5 = TempDir("fed_plain5"), masked5 = TempDir("fed_secagg5");
  common[7] = "5";
  RunPlainThenMasked(plain5, masked5, common, {"--secure-aggregation", "on"});
  EXPECT_NEAR(Accuracy(masked5), Accuracy(plain5), 0.01);
  EXPECT_GT(Accuracy(masked5), 0.5);
}

// Bell et al.'s sparse graph between real processes: 6 clients of 2 neighbours each (each
// pairs with 2 of the 5 others) give FedAvg's model up to the quantisation, and the server
// says the graph was used.
TEST_F(FederatedTest, SecureAggregationOverASparseNeighbourGraph) {
  const std::string plain = TempDir("fed_sparse_plain"), sparse = TempDir("fed_sparse");
  const std::vector<std::string> common = {"--sync",    "fedavg", "--workers",    "6",
                                           "--servers", "1",      "--rounds",     "1",
                                           "--lr",      "0.1",    "--batch-size", "50"};
  const std::string output = RunPlainThenMasked(
      plain, sparse, common, {"--secure-aggregation", "on", "--secagg-neighbours", "2"});
  EXPECT_NE(output.find("secure aggregation unmasked the sum of w0, w1, w2, w3, w4, w5"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("each client paired with 2 neighbours"), std::string::npos) << output;
  const ParamsGap gap = CompareParams(plain, sparse);
  EXPECT_LE(gap.worst, OneRoundQuantisationBound(6));
  EXPECT_GT(gap.moved, 1.0);
}

// The byte patterns a canary (kTestCanary, planted by the test hook SYNCLINE_TEST_CANARY) takes
// on its way to a server: the float bytes of each two neighbouring coordinates as the client
// computed them, and, under secure aggregation with `p`, the fixed-point integers each pair
// quantises to (either stochastic rounding of each: four pairs). Eight bytes each, so a chance
// match among B bytes of random-looking data has probability about B * patterns / 2^64 (below
// 1e-11 for a few MB).
struct CanaryPatterns {
  std::vector<std::string> floats, quantised;
};
CanaryPatterns CanaryEncodings(const SecAggParams& p) {
  CanaryPatterns patterns;
  constexpr size_t k = std::size(kTestCanary);
  const double levels = std::ldexp(1.0, p.bits) - 1;
  std::vector<std::array<uint32_t, 2>> rounded;
  for (float x : kTestCanary) {
    const double level = (static_cast<double>(x) + p.clip) / (2 * p.clip) * levels;
    rounded.push_back(
        {static_cast<uint32_t>(std::floor(level)), static_cast<uint32_t>(std::ceil(level))});
  }
  for (size_t i = 0; i + 1 < k; ++i) {
    patterns.floats.emplace_back(reinterpret_cast<const char*>(&kTestCanary[i]), 8);
    for (uint32_t a : rounded[i]) {
      for (uint32_t b : rounded[i + 1]) {
        const uint32_t pair[2] = {a, b};
        patterns.quantised.emplace_back(reinterpret_cast<const char*>(pair), 8);
      }
    }
  }
  // The quantiser itself must give one of these (else the search would look for the wrong
  // integers).
  DpRandom rounding(FreshDpKey(), DpStream::kRounding, {0});
  const std::vector<uint32_t> q = SecAggQuantise(kTestCanary, p, rounding);
  for (size_t i = 0; i < k; ++i) {
    EXPECT_TRUE(q[i] == rounded[i][0] || q[i] == rounded[i][1]) << i << ": " << q[i];
  }
  return patterns;
}

// What a server process received (every frame, SYNCLINE_AUDIT_RECEIVED_FRAMES), the job's log
// (servers' included) and every file the job wrote, of one run with the canary in w1's update.
struct CanaryRun {
  std::string received, log, files;
};
CanaryRun RunWithCanary(const std::vector<std::string>& argv, const std::string& out,
                        const std::string& audit) {
  ::setenv("SYNCLINE_ENABLE_TEST_HOOKS", "1", 1);
  ::setenv("SYNCLINE_TEST_CANARY", "1", 1);
  ::setenv("SYNCLINE_AUDIT_RECEIVED_FRAMES", audit.c_str(), 1);
  auto r = RunProcess(argv);
  ::unsetenv("SYNCLINE_AUDIT_RECEIVED_FRAMES");
  ::unsetenv("SYNCLINE_TEST_CANARY");
  ::unsetenv("SYNCLINE_ENABLE_TEST_HOOKS");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  CanaryRun run{.received = ReadFile(audit), .log = r.output};
  for (const auto& e : std::filesystem::recursive_directory_iterator(out)) {
    if (e.is_regular_file()) run.files += ReadFile(e.path().string());
  }
  return run;
}

// The canary a client plants in its update, in every encoding it could take, reaches neither
// the server's received bytes nor its log nor the job's files under --secure-aggregation; the
// same recording of the same job without it holds the float bytes (the check can fail).
TEST_F(FederatedTest, ACanaryInOneUpdateNeverReachesTheServerProcessUnderSecureAggregation) {
  JobSpec spec;
  spec.workers = 4;
  const CanaryPatterns patterns = CanaryEncodings(SecureAggregationParams(spec));
  const std::vector<std::string> common = {"--sync",    "fedavg", "--workers",    "4",
                                           "--servers", "1",      "--rounds",     "2",
                                           "--lr",      "0.1",    "--batch-size", "50"};
  // The hook is refused unless test hooks are enabled.
  const std::string refused = TempDir("fed_canary_refused");
  ::setenv("SYNCLINE_TEST_CANARY", "1", 1);
  auto r = RunProcess(Job(refused, common));
  ::unsetenv("SYNCLINE_TEST_CANARY");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("honoured only with SYNCLINE_ENABLE_TEST_HOOKS=1"), std::string::npos)
      << r.output;
  const std::string audits = TempDir("fed_canary_audit");
  const std::string plain = TempDir("fed_canary_plain");
  const CanaryRun control = RunWithCanary(Job(plain, common), plain, audits + "/plain.bin");
  ASSERT_GT(control.received.size(), 0u) << control.log;
  for (const std::string& pattern : patterns.floats) {
    EXPECT_NE(control.received.find(pattern), std::string::npos)
        << "the positive control: without secure aggregation the server receives the canary";
  }
  std::vector<std::string> on = common;
  on.insert(on.end(), {"--secure-aggregation", "on"});
  const std::string masked = TempDir("fed_canary_masked");
  const CanaryRun run = RunWithCanary(Job(masked, on), masked, audits + "/masked.bin");
  EXPECT_NE(run.log.find("secure aggregation unmasked the sum of w0, w1, w2, w3"),
            std::string::npos)
      << run.log;
  // The masked inputs arrived: two rounds of four clients' vectors at least.
  EXPECT_GT(run.received.size(), 2 * 4 * sizeof(uint32_t) * (20 * 4 + 4 + 1)) << run.log;
  std::vector<std::string> all = patterns.floats;
  all.insert(all.end(), patterns.quantised.begin(), patterns.quantised.end());
  for (const std::string& pattern : all) {
    EXPECT_EQ(run.received.find(pattern), std::string::npos) << "in what the server received";
    EXPECT_EQ(run.log.find(pattern), std::string::npos) << "in the job's log";
    EXPECT_EQ(run.files.find(pattern), std::string::npos) << "in the job's files";
  }
  // Nor as text, in the log or the files.
  for (float x : kTestCanary) {
    const std::string text = absl::StrFormat("%.8g", x);
    EXPECT_EQ(run.log.find(text), std::string::npos) << text;
    EXPECT_EQ(run.files.find(text), std::string::npos) << text;
  }
}

// Clients vanish before advertising keys, after sharing them and after uploading (a seeded
// stage each): the job finishes, rounds with t survivors are unmasked, the others end short.
TEST_F(FederatedTest, SecureAggregationFinishesUnderClientDropout) {
  const std::string out = TempDir("fed_secagg_dropout");
  auto r = RunProcess(Job(out, {"--sync", "fedavg", "--workers", "6", "--servers", "1", "--rounds",
                                "4", "--lr", "0.1", "--batch-size", "50", "--secure-aggregation",
                                "on", "--client-dropout", "0.3", "--round-timeout", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Seed 5's draws: every kind of loss happens, some rounds are unmasked (round 2 without w2
  // and w5) and some abort.
  EXPECT_NE(r.output.find("it sends nothing"), std::string::npos);
  EXPECT_NE(r.output.find("falls silent after 2 secure-aggregation stages"), std::string::npos);
  EXPECT_NE(r.output.find("falls silent after 3 secure-aggregation stages"), std::string::npos);
  EXPECT_NE(r.output.find("secure aggregation unmasked the sum of"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("of the threshold 4; nothing is revealed"), std::string::npos);
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_EQ(JsonNumber(summary, "closed"), 4) << summary;
  EXPECT_GT(Accuracy(out), 0.5);
}

TEST_F(FederatedTest, SecureAggregationRefusesWhatItCannotMask) {
  const std::vector<std::string> fed = {"--sync", "fedavg", "--secure-aggregation", "on"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--workers", "4", "--servers", "1", "--aggregate", "median"},
       "a robust rule needs every client's update"},
      {{"--workers", "4", "--servers", "1", "--aggregate", "krum:0"}, "--aggregate krum"},
      {{"--workers", "4", "--servers", "1", "--aggregate", "trimmed-mean:0.2"},
       "--aggregate trimmed-mean"},
      {{"--workers", "8", "--servers", "1", "--aggregate", "bulyan:1"}, "--aggregate bulyan"},
      {{"--workers", "4", "--servers", "1", "--compress", "topk:0.1"},
       "cannot be combined with --compress"},
      {{"--workers", "4", "--servers", "2"}, "needs --servers 1"},
      {{"--workers", "4", "--servers", "1", "--secagg-threshold", "5"},
       "the clients a round picks"},
      {{"--workers", "4", "--servers", "1", "--participation", "0.25"},
       "at least 2 clients a round"},
      {{"--workers", "6", "--servers", "1", "--secagg-neighbours", "3"},
       "an even number in [2, 4]"},
      {{"--workers", "6", "--servers", "1", "--secagg-neighbours", "2", "--secagg-threshold", "4"},
       "or in [2, 3]: a majority of the 3 clients who hold a client's shares"},
      {{"--workers", "6", "--servers", "1", "--secagg-neighbours", "4", "--secagg-threshold", "2"},
       "or in [3, 5]: a majority of the 5 clients who hold a client's shares"},
      {{"--workers", "2", "--servers", "1", "--secagg-neighbours", "2"},
       "with 2 workers every client already pairs with every other"},
      {{"--workers", "300", "--servers", "1"}, "at most 255 workers"},
      {{"--workers", "200", "--servers", "1", "--secagg-threshold", "2", "--dp", "client",
        "--dp-noise-multiplier", "400"},
       "200 clients and noise multiplier 400"}};
  for (const auto& [flags, why] : cases) {
    std::vector<std::string> all = fed;
    all.insert(all.end(), flags.begin(), flags.end());
    SCOPED_TRACE(absl::StrJoin(all, " "));
    auto r = RunProcess(Job(TempDir("secagg_refused"), all));
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(why), std::string::npos) << r.output;
  }
}

// The servers' adaptive rules train a federated model too, and differently from FedAvg's SGD.
TEST_F(FederatedTest, ServerOptimizersTrainTheRounds) {
  const std::vector<std::string> common = {"--sync",    "fedavg", "--workers",    "4",
                                           "--servers", "2",      "--rounds",     "6",
                                           "--lr",      "0.1",    "--batch-size", "50"};
  std::map<std::string, double> accuracy;
  for (const std::vector<std::string>& rule :
       {std::vector<std::string>{"--server-optimizer", "sgd"},
        {"--server-optimizer", "momentum:0.5", "--server-lr", "0.5"},
        {"--server-optimizer", "adam", "--server-lr", "0.05"},
        {"--server-optimizer", "yogi", "--server-lr", "0.05"},
        {"--server-optimizer", "adagrad", "--server-lr", "0.1"}}) {
    SCOPED_TRACE(rule[1]);
    std::string folder = absl::StrCat("fed_server_", rule[1]);
    std::replace(folder.begin(), folder.end(), ':', '_');
    const std::string out = TempDir(folder);
    std::vector<std::string> flags = common;
    flags.insert(flags.end(), rule.begin(), rule.end());
    auto r = RunProcess(Job(out, flags));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    accuracy[rule[1]] = Accuracy(out);
    EXPECT_GT(accuracy[rule[1]], 0.6) << r.output;
  }
  EXPECT_NE(accuracy["adam"], accuracy["sgd"]);
}

}  // namespace
}  // namespace syncline
