#include "launch/job_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "job/job_wire.h"
#include "job/options.h"
#include "launch/flag_modes.h"

namespace syncline {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// absl::string_view is not std::string_view in this Abseil build, and gmock's string matchers
// want the latter.
std::string Message(const absl::Status& status) { return std::string(status.message()); }

// Writes `content` to a fresh file in the test's temporary directory and returns its path.
std::string WriteFile(const std::string& name, const std::string& content) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::ofstream(path) << content;
  return path;
}

// `path` without "." and ".." parts and doubled slashes.
std::string Normal(const std::string& path) {
  return std::filesystem::path(path).lexically_normal().string();
}

// Parses `args` (without the program name) into `*config` through a fresh CLI::App.
absl::StatusOr<CommandLineAction> Parse(std::vector<std::string> args, JobConfig* config,
                                        std::string* help = nullptr) {
  CLI::App app("syncline-launch");
  if (absl::Status status = AddJobFlags(app, config); !status.ok()) return status;
  args.insert(args.begin(), "syncline-launch");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  absl::StatusOr<CommandLineAction> action =
      ParseJobCommandLine(static_cast<int>(argv.size()), argv.data(), app, config);
  if (help != nullptr) *help = app.help();
  return action;
}

TEST(JobConfigTest, DefaultsAreValidAndUnchangedByAnEmptyCommandLine) {
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({}, &config);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(*action, CommandLineAction::kRun);
  EXPECT_EQ(config.servers, 2);
  EXPECT_EQ(config.workers, 2);
  EXPECT_EQ(config.sync, "bsp");
  EXPECT_EQ(config.model, "logreg");
  EXPECT_EQ(config.classes, 2);
  EXPECT_EQ(config.train, "");
  EXPECT_EQ(config.test, "");
  EXPECT_EQ(config.format, "auto");
  EXPECT_EQ(config.index_base, "auto");
  EXPECT_EQ(config.epochs, 1);
  EXPECT_EQ(config.batch_size, 256);
  EXPECT_EQ(config.optimizer, "adagrad");
  EXPECT_DOUBLE_EQ(config.learning_rate, 0.1);
  EXPECT_DOUBLE_EQ(config.l2, 0.0);
  EXPECT_EQ(config.out, "runs/latest");
  EXPECT_EQ(config.seed, 1u);
  EXPECT_EQ(config.log_every, 10);
  EXPECT_DOUBLE_EQ(config.request_timeout_s, 60);
  EXPECT_DOUBLE_EQ(config.heartbeat_interval_s, 0.5);
  EXPECT_DOUBLE_EQ(config.heartbeat_timeout_s, 5);
  EXPECT_EQ(config.gen_rows, 20000);
  EXPECT_EQ(config.gen_test_rows, 4000);
  EXPECT_EQ(config.gen_features, 10000);
  EXPECT_EQ(config.gen_nnz, 20);
  EXPECT_EQ(config.job_file, "");
  EXPECT_TRUE(Validate(config).ok()) << Validate(config);
}

TEST(JobConfigTest, ParsesEveryFlag) {
  const std::string train = WriteFile("flags_train.svm", "1 1:0.5\n");
  const std::string test = WriteFile("flags_test.svm", "0 2:1\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({"--servers",
                                                    "3",
                                                    "--workers=5",
                                                    "--sync",
                                                    "ssp:4",
                                                    "--model",
                                                    "softmax",
                                                    "--classes",
                                                    "7",
                                                    "--train",
                                                    train,
                                                    "--test",
                                                    test,
                                                    "--format",
                                                    "libsvm",
                                                    "--index-base",
                                                    "0",
                                                    "--epochs",
                                                    "4",
                                                    "--batch-size",
                                                    "64",
                                                    "--optimizer",
                                                    "adam",
                                                    "--lr",
                                                    "0.01",
                                                    "--l2",
                                                    "1e-4",
                                                    "--out",
                                                    "/tmp/run",
                                                    "--seed",
                                                    "18446744073709551615",
                                                    "--log-every",
                                                    "5",
                                                    "--request-timeout",
                                                    "30",
                                                    "--heartbeat-interval",
                                                    "0.25",
                                                    "--heartbeat-timeout",
                                                    "2",
                                                    "--gen-rows",
                                                    "100",
                                                    "--gen-test-rows",
                                                    "0",
                                                    "--gen-features",
                                                    "50",
                                                    "--gen-nnz",
                                                    "5"},
                                                   &config);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(*action, CommandLineAction::kRun);
  EXPECT_EQ(config.servers, 3);
  EXPECT_EQ(config.workers, 5);
  EXPECT_EQ(config.sync, "ssp:4");
  EXPECT_EQ(config.model, "softmax");
  EXPECT_EQ(config.classes, 7);
  EXPECT_EQ(config.train, train);
  EXPECT_EQ(config.test, test);
  EXPECT_EQ(config.format, "libsvm");
  EXPECT_EQ(config.index_base, "0");
  EXPECT_EQ(config.epochs, 4);
  EXPECT_EQ(config.batch_size, 64);
  EXPECT_EQ(config.optimizer, "adam");
  EXPECT_DOUBLE_EQ(config.learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(config.l2, 1e-4);
  EXPECT_EQ(config.out, "/tmp/run");
  EXPECT_EQ(config.seed, 18446744073709551615u);
  EXPECT_EQ(config.log_every, 5);
  EXPECT_DOUBLE_EQ(config.request_timeout_s, 30);
  EXPECT_DOUBLE_EQ(config.heartbeat_interval_s, 0.25);
  EXPECT_DOUBLE_EQ(config.heartbeat_timeout_s, 2);
  EXPECT_EQ(config.gen_rows, 100);
  EXPECT_EQ(config.gen_test_rows, 0);
  EXPECT_EQ(config.gen_features, 50);
  EXPECT_EQ(config.gen_nnz, 5);
  EXPECT_TRUE(Validate(config).ok()) << Validate(config);
}

TEST(JobConfigTest, RepeatedFlagKeepsTheLastValue) {
  JobConfig config;
  ASSERT_TRUE(Parse({"--workers", "3", "--workers", "4"}, &config).ok());
  EXPECT_EQ(config.workers, 4);
}

TEST(JobConfigTest, FlagErrorsAreReported) {
  JobConfig config;
  absl::StatusOr<CommandLineAction> bad_value = Parse({"--servers", "two"}, &config);
  ASSERT_FALSE(bad_value.ok());
  EXPECT_EQ(bad_value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(bad_value.status()), HasSubstr("two"));

  for (const char* seed : {"-1", "18446744073709551616"}) {
    absl::StatusOr<CommandLineAction> bad_seed = Parse({"--seed", seed}, &config);
    ASSERT_FALSE(bad_seed.ok()) << seed;
    EXPECT_THAT(Message(bad_seed.status()), HasSubstr(seed));
  }

  absl::StatusOr<CommandLineAction> unknown = Parse({"--severs", "2"}, &config);
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(Message(unknown.status()), HasSubstr("--severs"));

  absl::StatusOr<CommandLineAction> stray = Parse({"job.txt"}, &config);
  ASSERT_FALSE(stray.ok());
  EXPECT_THAT(Message(stray.status()), HasSubstr("job.txt"));
}

TEST(JobConfigTest, HelpIsToldApartFromErrors) {
  JobConfig config;
  std::string help;
  absl::StatusOr<CommandLineAction> action = Parse({"--workers", "3", "--help"}, &config, &help);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(*action, CommandLineAction::kShowHelp);
  EXPECT_THAT(help, HasSubstr("--batch-size"));
  EXPECT_THAT(help, HasSubstr("Examples per worker step"));
  EXPECT_THAT(help, HasSubstr("--config"));

  action = Parse({"-h"}, &config);
  ASSERT_TRUE(action.ok());
  EXPECT_EQ(*action, CommandLineAction::kShowHelp);
}

TEST(JobConfigTest, JobFileSetsValues) {
  const std::string path = WriteFile("sets.toml", R"(# a small job
servers = 3
workers = 4
sync = "ssp:3"
batch-size = 64
lr = 1            # an integer is fine for a real-valued option
l2 = 0.5
index-base = 1    # and for the index base
seed = 42
out = "runs/toml"
)");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(*action, CommandLineAction::kRun);
  EXPECT_EQ(config.job_file, path);
  EXPECT_EQ(config.servers, 3);
  EXPECT_EQ(config.workers, 4);
  EXPECT_EQ(config.sync, "ssp:3");
  EXPECT_EQ(config.batch_size, 64);
  EXPECT_DOUBLE_EQ(config.learning_rate, 1.0);
  EXPECT_DOUBLE_EQ(config.l2, 0.5);
  EXPECT_EQ(config.index_base, "1");
  EXPECT_EQ(config.seed, 42u);
  // Relative to the job file's folder, not to where the launcher runs.
  EXPECT_EQ(config.out, Normal(absl::StrCat(::testing::TempDir(), "/runs/toml")));
  EXPECT_EQ(config.epochs, 1);  // not in the file: default
  EXPECT_TRUE(Validate(config).ok()) << Validate(config);
}

TEST(JobConfigTest, JobFilePathsAreRelativeToItsFolderAndFlagPathsToTheCurrentOne) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/paths");
  std::filesystem::create_directories(dir + "/data");
  std::ofstream(dir + "/data/train.libsvm") << "1 1:1\n";
  std::ofstream(dir + "/data/test.libsvm") << "0 2:1\n";
  const std::string path = WriteFile("paths/job.toml", R"(train = "data/train.libsvm"
test = "./data/test.libsvm"
out = "../runs/x"
checkpoint-dir = "/abs/ckpt"
)");
  JobConfig config;
  ASSERT_TRUE(Parse({path}, &config).ok());
  EXPECT_EQ(config.train, Normal(dir + "/data/train.libsvm"));
  EXPECT_EQ(config.test, Normal(dir + "/data/test.libsvm"));
  EXPECT_EQ(config.out, Normal(absl::StrCat(::testing::TempDir(), "/runs/x")));
  EXPECT_EQ(config.checkpoint_dir, "/abs/ckpt");  // absolute: as it is
  EXPECT_TRUE(Validate(config).ok()) << Validate(config);
  // Where each came from.
  EXPECT_EQ(config.given.at("train").file, path);
  EXPECT_EQ(config.given.at("train").line, 1);
  EXPECT_EQ(config.given.at("out").line, 3);

  JobConfig flags;
  ASSERT_TRUE(Parse({path, "--out", "runs/y"}, &flags).ok());
  EXPECT_EQ(flags.out, "runs/y");
  EXPECT_TRUE(flags.given.at("out").file.empty());
  EXPECT_EQ(flags.given.count("epochs"), 0u);
}

TEST(JobConfigTest, AnErrorAboutAJobFileValueNamesItsFileAndLine) {
  const std::string path = WriteFile("bad_value.toml", "servers = 2\n\nworkers = 0\n");
  JobConfig config;
  ASSERT_TRUE(Parse({path}, &config).ok());
  EXPECT_EQ(Message(Validate(config)), absl::StrCat(path, ":3: workers = 0: must be in [1, 4096]"));
  const std::string missing = WriteFile("missing_train.toml", "\ntrain = \"no/such.libsvm\"\n");
  JobConfig missing_train;
  ASSERT_TRUE(Parse({missing}, &missing_train).ok());
  EXPECT_THAT(Message(Validate(missing_train)), StartsWith(absl::StrCat(missing, ":2: train = ")));
  // The same value by flag names the flag, as before.
  JobConfig by_flag;
  ASSERT_TRUE(Parse({"--workers", "0"}, &by_flag).ok());
  EXPECT_EQ(Message(Validate(by_flag)), "--workers=0: must be in [1, 4096]");
}

TEST(JobConfigTest, AMistypedFlagOrKeyGetsTheClosestName) {
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({"--severs", "2"}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()), HasSubstr("--severs (did you mean '--servers'?)"));
  action = Parse({"--wrokers=3", "--chekpoint-every", "5"}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()),
              HasSubstr("(did you mean '--workers' for --wrokers, '--checkpoint-every' for "
                        "--chekpoint-every?)"));
  action = Parse({"--no-such-thing-at-all", "1"}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()), Not(HasSubstr("did you mean")));
  const std::string path = WriteFile("typo.toml", "sever = 2\n");
  action = Parse({path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_EQ(Message(action.status()),
            absl::StrCat(path, ":1: unknown key 'sever' (did you mean 'servers'?)"));
}

// The audit's job file: `out` with a newline put "touch PWNED" on a line of job.sbatch of its
// own. No option's text may hold a control character, from a job file or a flag.
TEST(JobConfigTest, ControlCharactersInAnyTextOptionAreRefusedNamingIt) {
  const std::string path = WriteFile("inject.toml", "out = \"runs/x\\ntouch PWNED #\"\n");
  JobConfig config;
  ASSERT_TRUE(Parse({path}, &config).ok());
  const absl::Status s = Validate(config);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(absl::StrCat(path, ":1: out: holds the control character 0x0a")),
            std::string::npos)
      << s;
  JobConfig flags;
  ASSERT_TRUE(Parse({"--train", "a\tb.libsvm"}, &flags).ok());
  EXPECT_NE(Validate(flags).message().find("--train: holds the control character 0x09"),
            std::string::npos)
      << Validate(flags);
}

TEST(JobConfigTest, ConfigFlagNamesTheJobFile) {
  const std::string path = WriteFile("by_flag.job", "epochs = 9\n");
  JobConfig config;
  ASSERT_TRUE(Parse({"--config", path}, &config).ok());
  EXPECT_EQ(config.epochs, 9);
}

TEST(JobConfigTest, FlagsWinOverTheJobFileWhereverTheyAppear) {
  const std::string path = WriteFile("override.toml", "workers = 4\nepochs = 3\nlr = 0.5\n");
  JobConfig config;
  ASSERT_TRUE(Parse({"--workers", "8", path, "--lr=0.25"}, &config).ok());
  EXPECT_EQ(config.workers, 8);
  EXPECT_DOUBLE_EQ(config.learning_rate, 0.25);
  EXPECT_EQ(config.epochs, 3);
}

TEST(JobConfigTest, UnknownKeyIsAnErrorWithFileAndLine) {
  const std::string path = WriteFile("unknown.toml", "workers = 4\nbatch_size = 8\nfoo = 1\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_EQ(action.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Message(action.status()),
            absl::StrCat(path, ":2: unknown key 'batch_size' (did you mean 'batch-size'?)\n", path,
                         ":3: unknown key 'foo'"));
}

TEST(JobConfigTest, WrongTypeIsAnErrorWithFileAndLine) {
  const std::string path = WriteFile("type.toml", "\nservers = \"two\"\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_EQ(Message(action.status()),
            absl::StrCat(path, ":2: servers: expected an integer, got a string"));
}

TEST(JobConfigTest, WrongTypeIsAnErrorEvenWhenAFlagOverridesIt) {
  const std::string path = WriteFile("type_overridden.toml", "sync = 3\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({"--sync", "asp", path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()), HasSubstr("sync: expected a string, got an integer"));
}

TEST(JobConfigTest, OutOfRangeIntegerIsAnError) {
  const std::string path = WriteFile("range.toml", "workers = 10000000000\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()),
              HasSubstr(":1: workers: value 10000000000 is out of range"));
}

TEST(JobConfigTest, TomlSyntaxErrorNamesFileAndLine) {
  const std::string path = WriteFile("syntax.toml", "servers = 2\nworkers = = 3\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()), StartsWith(absl::StrCat(path, ":2: ")));
}

TEST(JobConfigTest, MissingJobFileIsAnError) {
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({"/nonexistent/job.toml"}, &config);
  ASSERT_FALSE(action.ok());
  EXPECT_THAT(Message(action.status()), HasSubstr("/nonexistent/job.toml"));
}

TEST(JobConfigTest, JobFileMayBeGivenOnlyOnce) {
  const std::string path = WriteFile("once.toml", "");
  JobConfig config;
  EXPECT_FALSE(Parse({"--config", path, path}, &config).ok());
}

TEST(JobConfigTest, AddingTheFlagsTwiceIsAnError) {
  CLI::App app;
  JobConfig config;
  ASSERT_TRUE(AddJobFlags(app, &config).ok());
  EXPECT_FALSE(AddJobFlags(app, &config).ok());
}

struct ValidateCase {
  std::string name;
  std::function<void(JobConfig&)> change;
  std::string message;
};

void PrintTo(const ValidateCase& c, std::ostream* os) { *os << c.name; }

class ValidateTest : public ::testing::TestWithParam<ValidateCase> {};

TEST_P(ValidateTest, RejectsTheBadValueNamingFlagAndValue) {
  JobConfig config;
  GetParam().change(config);
  const absl::Status status = Validate(config);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    EveryCheck, ValidateTest,
    ::testing::Values(
        ValidateCase{"servers", [](JobConfig& c) { c.servers = 0; }, "--servers=0: must be >= 1"},
        ValidateCase{"workers", [](JobConfig& c) { c.workers = -1; },
                     "--workers=-1: must be in [1, 4096]"},
        ValidateCase{"workers_many", [](JobConfig& c) { c.workers = 100000; },
                     "--workers=100000: must be in [1, 4096]"},
        ValidateCase{"servers_many", [](JobConfig& c) { c.servers = 5000; },
                     "--servers=5000: must be in [1, 4096]"},
        ValidateCase{"sync_name", [](JobConfig& c) { c.sync = "bulk"; },
                     "--sync='bulk': must be bsp, asp, ssp:S with an integer staleness S >= 0, "
                     "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
                     "hybrid[:asp|:ssp:S] or fedavg"},
        ValidateCase{"sync_allreduce", [](JobConfig& c) { c.sync = "allreduce:tree"; },
                     "--sync='allreduce:tree': unknown all-reduce algorithm 'tree' in "
                     "'allreduce:tree' (want ring, doubling, halving, hier or auto)"},
        ValidateCase{"sync_negative", [](JobConfig& c) { c.sync = "ssp:-1"; },
                     "--sync='ssp:-1': must be bsp, asp, ssp:S with an integer staleness S >= 0, "
                     "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
                     "hybrid[:asp|:ssp:S] or fedavg"},
        ValidateCase{"sync_empty", [](JobConfig& c) { c.sync = "ssp:"; },
                     "--sync='ssp:': must be bsp, asp, ssp:S with an integer staleness S >= 0, "
                     "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
                     "hybrid[:asp|:ssp:S] or fedavg"},
        ValidateCase{"sync_text", [](JobConfig& c) { c.sync = "ssp:x"; },
                     "--sync='ssp:x': must be bsp, asp, ssp:S with an integer staleness S >= 0, "
                     "gossip:ring|exp|random[:async], allreduce[:ring|doubling|halving|hier|auto], "
                     "hybrid[:asp|:ssp:S] or fedavg"},
        ValidateCase{"max_reply", [](JobConfig& c) { c.max_reply = "100rows"; },
                     "--max-reply=100rows: must be a size in bytes, e.g. 512MiB or 2GiB"},
        ValidateCase{"max_parked_small", [](JobConfig& c) { c.max_parked = "4KiB"; },
                     "--max-parked=4096: must be >= 1048576"},
        ValidateCase{"max_table_memory", [](JobConfig& c) { c.max_table_memory = "lots"; },
                     "--max-table-memory=lots: must be auto or a size in bytes, e.g. 8GiB"},
        ValidateCase{"max_stores", [](JobConfig& c) { c.max_stores = 0; },
                     "--max-stores=0: must be in [1, 1024]"},
        ValidateCase{"read_ahead", [](JobConfig& c) { c.read_ahead = "auto"; },
                     "--read-ahead='auto': must be on or off"},
        ValidateCase{"model", [](JobConfig& c) { c.model = "cnn"; },
                     "--model='cnn': must be one of logreg, softmax, ctr, mlp"},
        ValidateCase{"ctr_needs_criteo",
                     [](JobConfig& c) {
                       c.model = "ctr";
                       c.format = "libsvm";
                     },
                     "--model=ctr: needs Criteo data: --format criteo, or a .tsv --train file"},
        ValidateCase{"embedding_dim", [](JobConfig& c) { c.embedding_dim = 0; },
                     "--embedding-dim=0: must be in [1, 256]"},
        ValidateCase{"hidden",
                     [](JobConfig& c) {
                       c.model = "mlp";
                       c.hidden = "256,5000";
                     },
                     "--hidden=256,5000: every width must be in [1, 4096]"},
        ValidateCase{"hidden_text", [](JobConfig& c) { c.hidden = "256;128"; },
                     "--hidden=256;128: hidden layer widths '256;128': must be integers "
                     "separated by commas, e.g. 256,128"},
        ValidateCase{"hidden_layers",
                     [](JobConfig& c) {
                       c.model = "mlp";
                       c.hidden = "8,8,8,8,8,8,8,8,8";
                     },
                     "--hidden=8,8,8,8,8,8,8,8,8: at most 8 hidden layers"},
        ValidateCase{"hidden_ctr",
                     [](JobConfig& c) {
                       c.model = "ctr";
                       c.format = "criteo";
                       c.hidden = "64,32";
                     },
                     "--hidden=64,32: the ctr model has one hidden layer: give one width"},
        ValidateCase{"device", [](JobConfig& c) { c.device = "gpu"; },
                     "--device=gpu: must be auto, cpu, cuda or cuda:N (N a device number >= 0)"},
        ValidateCase{"criteo_fedavg_compress",
                     [](JobConfig& c) {
                       c.format = "criteo";
                       c.sync = "fedavg";
                       c.compress = "sign1";
                     },
                     "--compress=sign1: federated clients of Criteo data push their rows' deltas "
                     "as they are or as fp16; top-K and sign1 of them are not built"},
        ValidateCase{"compress_pull", [](JobConfig& c) { c.compress_pull = "topk:2"; },
                     "--compress-pull=topk:2: bad codec \"topk:2\": ratio \"2\" is not a number "
                     "in (0, 1] (expected none, fp16, sign1, sign1:CHUNK with 1 <= CHUNK <= "
                     "16777216, or topk:RATIO with 0 < RATIO <= 1)"},
        ValidateCase{"compress_pull_fedavg",
                     [](JobConfig& c) {
                       c.sync = "fedavg";
                       c.compress_pull = "fp16";
                     },
                     "--compress-pull=fp16: is not built for federated rounds (clients pull once "
                     "a round)"},
        ValidateCase{"min_workers", [](JobConfig& c) { c.min_workers = 3; },
                     "--min-workers=3: must be in [0, 2]"},
        ValidateCase{"min_workers_hybrid", [](JobConfig& c) { c.sync = "hybrid", c.min_workers = 1; },
                     "--min-workers=1: is for --sync bsp, ssp, asp, gossip and allreduce: in this "
                     "mode every step needs every worker"},
        ValidateCase{"min_workers_allreduce_topk",
                     [](JobConfig& c) {
                       c.sync = "allreduce";
                       c.min_workers = 1;
                       c.compress = "topk:0.1";
                     },
                     "--min-workers=1: cannot be combined with an all-reduce of --compress "
                     "topk:0.1: a worker that takes over another's model after a departure would "
                     "keep its own residual; use none or fp16"},
        ValidateCase{"max_restarts_push_sum",
                     [](JobConfig& c) {
                       c.sync = "gossip:ring:async";
                       c.max_restarts = 2;
                     },
                     "--max-restarts=2: is for --sync bsp, ssp, asp, allreduce, hybrid and "
                     "synchronous gossip: federated rounds and push-sum weight in flight are in "
                     "no checkpoint to roll back to"},
        ValidateCase{"max_restarts_without_checkpoints", [](JobConfig& c) { c.max_restarts = 1; },
                     "--max-restarts=1: needs checkpoints to roll back to: add "
                     "--checkpoint-every N or --checkpoint-seconds S"},
        ValidateCase{"max_restarts_negative", [](JobConfig& c) { c.max_restarts = -1; },
                     "--max-restarts=-1: must be in [0, 1000]"},
        ValidateCase{"max_workers_topk_allreduce",
                     [](JobConfig& c) {
                       c.sync = "allreduce";
                       c.compress = "topk:0.1";
                       c.max_workers = 4;
                     },
                     "--max-workers=4: cannot be combined with an all-reduce of --compress "
                     "topk:0.1: a joiner takes the others' model but has no residual of its own "
                     "to match it; use none or fp16"},
        ValidateCase{"max_workers_choco_gossip",
                     [](JobConfig& c) {
                       c.sync = "gossip:ring";
                       c.compress = "topk:0.1";
                       c.max_workers = 4;
                     },
                     "--max-workers=4: cannot be combined with gossip's compressed differences "
                     "(--compress topk:0.1, CHOCO): a joiner has no public copies to start from; "
                     "use --compress none or fp16"},
        ValidateCase{"max_workers_below_workers", [](JobConfig& c) { c.max_workers = 1; },
                     "--max-workers=1: must be in [2, 4096]"},
        ValidateCase{"max_workers_with_checkpoints",
                     [](JobConfig& c) {
                       c.sync = "asp";
                       c.max_workers = 3;
                       c.checkpoint_every = 10;
                     },
                     "--max-workers=3: cannot be combined with checkpoints, --resume or "
                     "--max-restarts yet: a checkpoint does not hold a joined worker's part"},
        ValidateCase{"consensus_step", [](JobConfig& c) { c.consensus_step = 0.5; },
                     "--consensus-step=0.5: is for synchronous gossip with --compress topk:R or "
                     "sign1"},
        ValidateCase{"pull_copy_rows", [](JobConfig& c) { c.pull_copy_rows = 0; },
                     "--pull-copy-rows=0: must be between 1 and 2^40"},
        ValidateCase{"criteo_gossip",
                     [](JobConfig& c) {
                       c.model = "ctr";
                       c.sync = "gossip:ring";
                     },
                     "--sync=gossip:ring: serverless workers hold the whole model and need a "
                     "bounded feature count; Criteo ids are 64-bit hashes"},
        ValidateCase{"classes",
                     [](JobConfig& c) {
                       c.model = "softmax";
                       c.classes = 1;
                     },
                     "--classes=1: must be >= 2"},
        ValidateCase{"classes_logreg", [](JobConfig& c) { c.classes = 10; },
                     "--classes=10: needs --model softmax or mlp (logreg is binary)"},
        ValidateCase{"format", [](JobConfig& c) { c.format = "json"; },
                     "--format='json': must be one of auto, libsvm, csv, criteo"},
        ValidateCase{"index_base", [](JobConfig& c) { c.index_base = "2"; },
                     "--index-base='2': must be one of auto, 0, 1"},
        ValidateCase{"epochs", [](JobConfig& c) { c.epochs = 0; }, "--epochs=0: must be >= 1"},
        ValidateCase{"batch_size", [](JobConfig& c) { c.batch_size = 0; },
                     "--batch-size=0: must be >= 1"},
        ValidateCase{"optimizer", [](JobConfig& c) { c.optimizer = "rmsprop"; },
                     "--optimizer='rmsprop': must be one of sgd, adagrad, adam, ftrl, momentum, yogi"},
        ValidateCase{"embedding_memory", [](JobConfig& c) { c.embedding_memory = "2"; },
                     "--embedding-memory=2: memory budget '2': give a unit (B, KiB, MiB, GiB, "
                     "TiB, KB, MB, GB, TB or rows) (examples: 2GiB, 512MiB, 1000000rows)"},
        ValidateCase{"embedding_memory_tiny", [](JobConfig& c) { c.embedding_memory = "1B"; },
                     "--embedding-memory=1B: a byte budget must be at least 1MiB (the tier's "
                     "rows, their bookkeeping and its index; give rows, e.g. 100rows, for a tiny "
                     "tier)"},
        ValidateCase{"embedding_memory_rows",
                     [](JobConfig& c) { c.embedding_memory = "18446744073709551615rows"; },
                     "--embedding-memory=18446744073709551615rows: memory budget "
                     "'18446744073709551615rows': at most 2863311530 rows (examples: 2GiB, "
                     "512MiB, 1000000rows)"},
        ValidateCase{"embedding_admit", [](JobConfig& c) { c.embedding_admit_after = -1; },
                     "--embedding-admit-after=-1: must be >= 0"},
        ValidateCase{"checkpoint_every", [](JobConfig& c) { c.checkpoint_every = -5; },
                     "--checkpoint-every=-5: must be >= 0"},
        ValidateCase{"checkpoint_keep", [](JobConfig& c) { c.checkpoint_keep = 0; },
                     "--checkpoint-keep=0: must be >= 1"},
        ValidateCase{"update_threads", [](JobConfig& c) { c.update_threads = 0; },
                     "--update-threads=0: must be in [1, 64]"},
        ValidateCase{"lr", [](JobConfig& c) { c.learning_rate = 0; },
                     "--lr=0: must be a positive number"},
        ValidateCase{"peer_timeout", [](JobConfig& c) { c.peer_timeout_s = 0; },
                     "--peer-timeout=0: must be a positive number"},
        ValidateCase{"lr_nan", [](JobConfig& c) { c.learning_rate = std::nan(""); },
                     "--lr=nan: must be a positive number"},
        ValidateCase{"l2", [](JobConfig& c) { c.l2 = -0.5; }, "--l2=-0.5: must be a number >= 0"},
        ValidateCase{"out", [](JobConfig& c) { c.out = ""; }, "--out='': must name a directory"},
        ValidateCase{"log_every", [](JobConfig& c) { c.log_every = 0; },
                     "--log-every=0: must be >= 1"},
        ValidateCase{"request_timeout", [](JobConfig& c) { c.request_timeout_s = -1; },
                     "--request-timeout=-1: must be a positive number"},
        ValidateCase{"heartbeat_interval", [](JobConfig& c) { c.heartbeat_interval_s = 0; },
                     "--heartbeat-interval=0: must be a positive number"},
        ValidateCase{"heartbeat_timeout", [](JobConfig& c) { c.heartbeat_timeout_s = 0; },
                     "--heartbeat-timeout=0: must be a positive number"},
        // Heartbeat settings travel as int32 milliseconds: a day is the most they may be.
        ValidateCase{"heartbeat_timeout_long",
                     [](JobConfig& c) { c.heartbeat_timeout_s = 100000; },
                     "--heartbeat-timeout=100000: must be at most 86400"},
        ValidateCase{"heartbeat_order", [](JobConfig& c) { c.heartbeat_timeout_s = 0.5; },
                     "--heartbeat-timeout=0.5: must be more than --heartbeat-interval (0.5)"},
        ValidateCase{"gen_rows", [](JobConfig& c) { c.gen_rows = 0; },
                     "--gen-rows=0: must be >= 1"},
        ValidateCase{"gen_test_rows", [](JobConfig& c) { c.gen_test_rows = -1; },
                     "--gen-test-rows=-1: must be >= 0"},
        ValidateCase{"gen_features", [](JobConfig& c) { c.gen_features = 0; },
                     "--gen-features=0: must be >= 1"},
        ValidateCase{"gen_nnz", [](JobConfig& c) { c.gen_nnz = 0; }, "--gen-nnz=0: must be >= 1"},
        ValidateCase{"gen_nnz_above_features", [](JobConfig& c) { c.gen_nnz = 20000; },
                     "--gen-nnz=20000: must be <= --gen-features (10000)"},
        // With --train no data is generated: its flags are not checked (the file is, first).
        ValidateCase{"gen_flags_with_train",
                     [](JobConfig& c) {
                       c.gen_features = 5;
                       c.train = "/nonexistent/train.svm";
                     },
                     "--train=/nonexistent/train.svm: cannot read: No such file or directory"},
        ValidateCase{"train_missing", [](JobConfig& c) { c.train = "/nonexistent/train.svm"; },
                     "--train=/nonexistent/train.svm: cannot read: No such file or directory"},
        ValidateCase{"train_directory", [](JobConfig& c) { c.train = "/tmp"; },
                     "--train=/tmp: not a regular file"},
        ValidateCase{"test_without_train", [](JobConfig& c) { c.test = "/etc/passwd"; },
                     "--test=/etc/passwd: needs --train (synthetic data brings its own test "
                     "set)"},
        ValidateCase{"test_missing",
                     [](JobConfig& c) {
                       c.train = "/etc/passwd";
                       c.test = "/nonexistent/test.svm";
                     },
                     "--test=/nonexistent/test.svm: cannot read: No such file or directory"}),
    [](const ::testing::TestParamInfo<ValidateCase>& info) { return info.param.name; });

TEST(JobConfigTest, FlagsToSpecToWireToSpecGivesAnEqualSpec) {
  const std::string train = WriteFile("roundtrip_train.svm", "1 1:0.5\n0 2:1\n");
  const std::string test = WriteFile("roundtrip_test.svm", "0 2:1\n");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({"--servers",
                                                    "3",
                                                    "--workers",
                                                    "4",
                                                    "--sync",
                                                    "ssp:2",
                                                    "--model",
                                                    "softmax",
                                                    "--classes",
                                                    "5",
                                                    "--train",
                                                    train,
                                                    "--test",
                                                    test,
                                                    "--format",
                                                    "libsvm",
                                                    "--index-base",
                                                    "1",
                                                    "--epochs",
                                                    "3",
                                                    "--batch-size",
                                                    "32",
                                                    "--optimizer",
                                                    "adam",
                                                    "--lr",
                                                    "0.03",
                                                    "--l2",
                                                    "0.001",
                                                    "--compress",
                                                    "topk:0.05",
                                                    "--seed",
                                                    "99",
                                                    "--log-every",
                                                    "5",
                                                    "--request-timeout",
                                                    "20",
                                                    "--heartbeat-interval",
                                                    "0.2",
                                                    "--heartbeat-timeout",
                                                    "2",
                                                    "--straggler",
                                                    "1:3",
                                                    "--jitter",
                                                    "0.2:4",
                                                    "--delay",
                                                    "3:15",
                                                    "--min-step-ms",
                                                    "2",
                                                    "--embedding-memory",
                                                    "64MiB",
                                                    "--embedding-admit-after",
                                                    "2",
                                                    "--embedding-expire-steps",
                                                    "9",
                                                    "--update-threads",
                                                    "2",
                                                    "--checkpoint-every",
                                                    "10",
                                                    "--checkpoint-seconds",
                                                    "4",
                                                    "--checkpoint-keep",
                                                    "5",
                                                    "--out",
                                                    "/tmp/rt-out"},
                                                   &config);
  ASSERT_TRUE(action.ok()) << action.status();
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sync.kind, SyncKind::kSsp);
  EXPECT_EQ(spec->sync.staleness, 2);
  EXPECT_EQ(spec->model.kind, ModelKind::kSoftmax);
  EXPECT_EQ(spec->data.index_base, IndexBase::kOne);
  EXPECT_EQ(spec->training.optimizer, OptimizerKind::kAdam);
  EXPECT_EQ(spec->training.codec.kind, CodecKind::kTopK);
  EXPECT_DOUBLE_EQ(spec->training.codec.ratio, 0.05);
  EXPECT_EQ(spec->slowness.straggler_rank, 1);
  EXPECT_EQ(spec->slowness.delay_rank, 3);
  EXPECT_EQ(spec->embedding.memory_bytes, uint64_t{64} << 20);
  EXPECT_EQ(spec->embedding.dir, "/tmp/rt-out/embeddings");
  EXPECT_EQ(spec->checkpoint.dir, "/tmp/rt-out/checkpoints");
  EXPECT_EQ(spec->data.params_out, "/tmp/rt-out/params.tsv");
  absl::StatusOr<JobSpec> back = JobSpecFromBytes(JobSpecToBytes(*spec));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == *spec);
}

TEST(JobConfigTest, GossipSpecsHaveNoServers) {
  JobConfig config;
  config.sync = "gossip:exp";
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->servers, 0);
  EXPECT_TRUE(spec->sync.gossip());
  EXPECT_EQ(spec->sync.topology, GossipTopology::kExponential);
}

// --sync hybrid keeps the servers (the embeddings live there, under --embedding-sync) and
// all-reduces the dense layers among the workers.
TEST(JobConfigTest, HybridKeepsServersAndTakesTheEmbeddingsConsistencyModel) {
  JobConfig config;
  ASSERT_TRUE(
      Parse({"--sync", "hybrid", "--embedding-sync", "ssp:2", "--servers", "2"}, &config).ok());
  absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->sync.hybrid());
  EXPECT_EQ(spec->servers, 2);
  EXPECT_EQ(spec->sync.server_staleness(), 2);
  EXPECT_EQ(SyncModeName(spec->sync), "hybrid:ssp:2");
  config = JobConfig();
  config.sync = "hybrid";
  spec = BuildJobSpec(config);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->sync.server_staleness(), -1);  // asp unless told
  for (const auto& [sync, embedding, why] :
       {std::tuple<const char*, const char*, const char*>{"bsp", "asp", "is for --sync hybrid"},
        {"hybrid:ssp:1", "asp", "is given twice"},
        {"hybrid", "bsp", "must be asp or ssp:S"},
        {"hybrid", "ssp:-2", "must be asp or ssp:S"}}) {
    config = JobConfig();
    config.sync = sync;
    config.embedding_sync = embedding;
    EXPECT_THAT(Message(Validate(config)), HasSubstr(why)) << sync << " " << embedding;
  }
  config = JobConfig();
  config.sync = "hybrid:bsp";
  EXPECT_THAT(Message(Validate(config)), HasSubstr("asp or ssp:S"));
}

TEST(JobConfigTest, ValidateAcceptsTheSyncForms) {
  JobConfig config;
  for (const char* sync : {"bsp", "asp", "ssp:0", "ssp:12", "hybrid", "hybrid:ssp:3"}) {
    config.sync = sync;
    EXPECT_TRUE(Validate(config).ok()) << sync;
  }
}

TEST(JobConfigTest, CtrOptionsComeFromFlagsAndTheJobFile) {
  const std::string path = WriteFile("ctr.toml", R"(model = "ctr"
format = "criteo"
embedding-dim = 16
)");
  JobConfig config;
  absl::StatusOr<CommandLineAction> action = Parse({path, "--hidden", "32"}, &config);
  ASSERT_TRUE(action.ok()) << action.status();
  EXPECT_EQ(config.model, "ctr");
  EXPECT_EQ(config.embedding_dim, 16);
  EXPECT_EQ(config.hidden, "32");
  EXPECT_TRUE(Validate(config).ok()) << Validate(config);
}

TEST(JobConfigTest, MlpWidthsAndTheDeviceComeFromTheJobFileInAnyForm) {
  for (const auto& [line, widths] : {std::pair{"hidden = [512, 64, 32]", std::vector{512, 64, 32}},
                                     std::pair{"hidden = \"100,10\"", std::vector{100, 10}},
                                     std::pair{"hidden = 48", std::vector{48}}}) {
    const std::string path = WriteFile(
        "mlp.toml", absl::StrCat("model = \"mlp\"\nclasses = 10\ndevice = \"cpu\"\n", line, "\n"));
    JobConfig config;
    absl::StatusOr<CommandLineAction> action = Parse({path}, &config);
    ASSERT_TRUE(action.ok()) << line << ": " << action.status();
    absl::StatusOr<JobSpec> spec = BuildJobSpec(config);
    ASSERT_TRUE(spec.ok()) << line << ": " << spec.status();
    EXPECT_EQ(spec->model.kind, ModelKind::kMlp);
    EXPECT_EQ(spec->model.hidden, widths) << line;
    EXPECT_EQ(spec->device, DeviceSpec{.kind = DeviceKind::kCpu});
  }
  const std::string bad = WriteFile("bad_mlp.toml", "hidden = [256, \"128\"]\n");
  JobConfig config;
  EXPECT_THAT(std::string(Parse({bad}, &config).status().message()),
              HasSubstr("hidden: expected an array of integers"));

  // Without --hidden the spec carries the model's default widths; --device defaults to auto.
  JobConfig defaults;
  defaults.model = "mlp";
  defaults.classes = 10;
  absl::StatusOr<JobSpec> spec = BuildJobSpec(defaults);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model.hidden, (std::vector<int>{256, 128}));
  EXPECT_EQ(spec->device, DeviceSpec{});
  JobConfig cuda;
  cuda.device = "cuda:1";
  spec = BuildJobSpec(cuda);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->device, (DeviceSpec{.kind = DeviceKind::kCuda, .index = 1}));
}

TEST(JobConfigTest, CriteoDataIsTheFormatFlagOrATsvFileOrWhatCtrGenerates) {
  JobConfig config;
  EXPECT_FALSE(UsesCriteoData(config));
  config.model = "ctr";
  EXPECT_TRUE(UsesCriteoData(config));  // No --train: the launcher generates Criteo data.
  config.train = "day_0.TSV";
  EXPECT_TRUE(UsesCriteoData(config));
  config.train = "day_0.txt";
  EXPECT_FALSE(UsesCriteoData(config));
  config.format = "criteo";
  EXPECT_TRUE(UsesCriteoData(config));
}

// The job of `args` as the launcher reads it, and the launcher's verdict on its flags.
// (--external-workers, the launcher's own flag, as the launcher records it.)
absl::StatusOr<std::vector<std::string>> Check(std::vector<std::string> args) {
  JobConfig config;
  const auto external = std::find(args.begin(), args.end(), "--external-workers");
  if (external != args.end()) {
    args.erase(external);
    config.given["external-workers"] = {};
  }
  auto action = Parse(args, &config);
  if (!action.ok()) return action.status();
  absl::StatusOr<SyncMode> sync = ParseSyncMode(config.sync);
  if (!sync.ok()) return sync.status();
  return CheckFlagsApply(*sync, config);
}

TEST(FlagModesTest, AFlagForAnotherModeOnTheCommandLineIsRefusedNamingWhereItApplies) {
  auto servers = Check({"--sync", "allreduce", "--servers", "3"});
  ASSERT_FALSE(servers.ok());
  EXPECT_EQ(servers.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(servers.status()),
              HasSubstr("--servers is for --sync bsp, asp, ssp, hybrid and fedavg, not allreduce "
                        "(gossip and allreduce have no parameter servers)"));
  // --rounds without fedavg, and --epochs under it (the mode by default, too).
  EXPECT_THAT(Message(Check({"--rounds", "5"}).status()),
              HasSubstr("--rounds is for --sync fedavg, not bsp"));
  EXPECT_THAT(Message(Check({"--sync", "fedavg", "--epochs", "3"}).status()),
              HasSubstr("--epochs is for --sync bsp, asp, ssp, gossip, allreduce and hybrid, not "
                        "fedavg"));
  for (const char* sync : {"gossip:ring", "allreduce", "hybrid", "fedavg"}) {
    SCOPED_TRACE(sync);
    EXPECT_THAT(Message(Check({"--sync", sync, "--external-workers"}).status()),
                HasSubstr("--external-workers is for --sync bsp, asp and ssp"));
  }
  EXPECT_THAT(Message(Check({"--sync", "asp", "--aggregate", "median"}).status()),
              HasSubstr("--aggregate is for --sync bsp and fedavg, not asp"));
}

TEST(FlagModesTest, FlagsOfTheModeOrOfEveryModePass) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {},
           {"--sync", "allreduce", "--workers", "4", "--epochs", "2"},
           {"--sync", "fedavg", "--rounds", "5", "--servers", "1"},
           {"--sync", "gossip:ring", "--peer-timeout", "3", "--consensus-step", "0.5"},
           {"--sync", "ssp:2", "--read-ahead", "on", "--servers", "3"},
           {"--external-workers", "--sync", "asp"},
       }) {
    SCOPED_TRACE(testing::PrintToString(args));
    auto warnings = Check(args);
    ASSERT_TRUE(warnings.ok()) << warnings.status();
    EXPECT_THAT(*warnings, IsEmpty());
  }
}

TEST(FlagModesTest, AHarmlessMismatchIsAWarning) {
  auto warnings =
      Check({"--sync", "bsp", "--read-ahead", "on", "--train", "/dev/null", "--gen-rows", "100"});
  ASSERT_TRUE(warnings.ok()) << warnings.status();
  EXPECT_THAT(*warnings,
              ElementsAre(HasSubstr("--read-ahead is for --sync asp, ssp and hybrid, not bsp"),
                          HasSubstr("--gen-rows shapes generated data, and --train is given: "
                                    "ignored")));
}

// A job file may hold settings of other modes than the one the command line picks: those are
// ignored with a warning. The same mismatch within the file is refused.
TEST(FlagModesTest, AJobFilesSettingForAnotherModeThanTheCommandLinesIsAWarning) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/modes.toml");
  std::ofstream(path) << "servers = 3\nepochs = 2\n";
  auto warnings = Check({path, "--sync", "allreduce"});
  ASSERT_TRUE(warnings.ok()) << warnings.status();
  EXPECT_THAT(*warnings,
              ElementsAre(absl::StrCat(
                  path,
                  ":1: servers is for --sync bsp, asp, ssp, hybrid and fedavg, not "
                  "allreduce (gossip and allreduce have no parameter servers): ignored")));
  std::ofstream(path) << "sync = \"allreduce\"\nservers = 3\n";
  auto refused = Check({path});
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(Message(refused.status()), HasSubstr(absl::StrCat(path, ":2: servers is for")));
}

TEST(FlagModesTest, TheDocsTableHasARowPerFlagAndAColumnPerMode) {
  const std::string md = FlagModesMarkdown();
  EXPECT_THAT(md, HasSubstr("| flag | bsp | asp | ssp | gossip | allreduce | hybrid | fedavg |"));
  EXPECT_THAT(md, HasSubstr("| `--servers` | ✓ | ✓ | ✓ | | | ✓ | ✓ | refused:"));
  EXPECT_THAT(md, HasSubstr("| `--rounds` | | | | | | | ✓ | refused:"));
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// A --dp-* flag without --dp would train without the privacy its user asked for: refused.
// An explicit --dp off keeps a job file's DP settings quiet, for a non-private baseline.
TEST(JobConfigTest, DpSettingsWithoutDpAreRefusedUnlessDpIsTurnedOff) {
  JobConfig alone;
  ASSERT_TRUE(Parse({"--dp-epsilon", "3"}, &alone).ok());
  absl::StatusOr<JobSpec> spec = BuildJobSpec(alone);
  EXPECT_THAT(spec.status().message(), ::testing::HasSubstr("--dp is off"));
  const std::string path = WriteFile("dp.toml", "dp = \"example\"\ndp-epsilon = 3\n");
  JobConfig off;
  ASSERT_TRUE(Parse({path, "--dp", "off"}, &off).ok());
  spec = BuildJobSpec(off);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->privacy.on());
}

}  // namespace
}  // namespace syncline
