// End-to-end checks of the holes a keyed-job audit found (issue 46, docs/SECURITY.md): what a
// job does with checkpoints that all fail, plaintext off loopback, hostile job files and
// checkpoint files, huge feature ids, run folders others could write, and file modes.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/job_key.h"
#include "testing/interfaces.h"
#include "testing/launch_fixture.h"
#include "testing/test_util.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;
using testing_util::ReadFile;
using testing_util::RunProcess;
using testing_util::TempDir;

const std::string kLaunch = SYNCLINE_LAUNCH_BIN;

class SecurityLaunchTest : public testing_util::GeneratedDataTest<SecurityLaunchTest> {
 public:
  static constexpr char kDataFolder[] = "security_data";
};

// A folder under `base` whose path is `length` bytes long (made of nested folders).
std::string FolderOfLength(const std::string& base, size_t length) {
  std::string path = base;
  while (path.size() < length) {
    const size_t room = length - path.size() - 1;  // the slash
    path += "/" + std::string(std::min<size_t>(room, 200), 'd');
  }
  fs::create_directories(path);
  return path;
}

// The audit's job said "ok" with every checkpoint failed. Here the checkpoint folder's path
// leaves no room (PATH_MAX) for the names of the files inside a checkpoint, though the
// launcher's lock fits: every checkpoint fails, the job still trains to its end.
TEST_F(SecurityLaunchTest, AJobWhoseCheckpointsAllFailedIsNotOk) {
  const std::string out = TempDir("all_checkpoints_fail");
  // root/.syncline-launch.lock fits in 4095 bytes; root/ckpt-000000000010/ps0/table-0.sst not.
  const std::string root = FolderOfLength(out + "/ckpt", 4066);
  auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--sync", "bsp", "--train",
                       Train(), "--epochs", "1", "--checkpoint-every", "20", "--checkpoint-dir",
                       root, "--out", out});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("every checkpoint failed"), std::string::npos) << r.output;
  const std::string summary = ReadFile(out + "/summary.json");
  EXPECT_NE(summary.find("\"status\": \"checkpoints_failed\""), std::string::npos) << summary;
  EXPECT_NE(summary.find("\"checkpoints_written\": 0"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("\"status\": \"ok\""), std::string::npos) << summary;
}

// The audit: --coordinator-interface lo --interface v0 wrote no key, and the nodes listened
// off loopback in plaintext. Any listen address off loopback now takes a key (or --insecure).
TEST_F(SecurityLaunchTest, NodesListeningOffLoopbackGetAKeyThoughTheCoordinatorIsOnLoopback) {
  const auto off = testing_util::OffLoopbackInterface();
  if (!off) GTEST_SKIP() << "no interface with an IPv4 address off loopback";
  const std::string out = TempDir("off_loopback_nodes");
  auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--train", Train(), "--epochs",
                       "1", "--coordinator-interface", "lo", "--interface", *off, "--out", out});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(out + "/job.key")) << r.output;
  EXPECT_EQ(r.output.find("listening at tcp://127."), std::string::npos) << r.output;
}

// The audit's job file put `touch PWNED` on a line of job.sbatch of its own.
TEST_F(SecurityLaunchTest, AJobFileCannotInjectCommandsIntoTheBatchScript) {
  const std::string dir = TempDir("sbatch_injection");
  const std::string job = dir + "/job.toml";
  std::ofstream(job) << "out = \"" << dir << "/x\\ntouch " << dir << "/PWNED #\"\n";
  auto r = RunProcess({kLaunch, job, "--train", Train(), "--sbatch"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // Named as the job file has it: "job.toml:1: out: holds ...".
  EXPECT_NE(r.output.find(job + ":1: out: holds the control character 0x0a"), std::string::npos)
      << r.output;
  for (const auto& entry : fs::recursive_directory_iterator(dir)) {
    EXPECT_NE(entry.path().filename(), "job.sbatch") << entry.path();
  }
  EXPECT_FALSE(fs::exists(dir + "/PWNED"));
}

// "1 1000000000000:1" made every gossip and all-reduce worker abort on bad_alloc (exit 1).
TEST_F(SecurityLaunchTest, AHugeFeatureIdIsBadInputNamingTheFileLineAndLimit) {
  const std::string dir = TempDir("huge_feature_id");
  const std::string data = dir + "/huge.libsvm";
  std::ofstream(data) << "0 1:1 2:1\n1 1000000000000:1\n0 3:1\n1 2:1\n";
  for (const char* sync : {"gossip:ring", "allreduce"}) {
    SCOPED_TRACE(sync);
    auto r = RunProcess(
        {kLaunch, "--sync", sync, "--workers", "2", "--train", data, "--out", dir + "/run"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("huge.libsvm:2: its largest feature id makes 1000000000000 features"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("over the limit of"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output;
  }
}

// Another user who can write the run folder can plant links that the run writes through.
TEST_F(SecurityLaunchTest, ARunFolderOthersCanWriteIsRefused) {
  const std::string out = TempDir("shared_run_folder");
  fs::permissions(out, fs::perms::all);
  auto r = RunProcess({kLaunch, "--train", Train(), "--out", out});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("may be written by other users (mode 0777)"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out + "/summary.json"));
}

mode_t ModeOf(const fs::path& p) {
  struct stat st = {};
  return lstat(p.c_str(), &st) == 0 ? st.st_mode & 07777 : 07777;
}

// The lock was 0644 (another user could hold it and block launches), checkpoint files were
// 0644, and stores, logs and generated data followed the umask: every user could read the
// model. A run's files are its user's alone, whatever the umask it was started with.
TEST_F(SecurityLaunchTest, ARunsFilesAreItsUsersAlone) {
  const std::string out = TempDir("private_files");
  fs::remove_all(out);  // the launcher makes it
  const mode_t old_umask = umask(0);
  auto r = RunProcess({kLaunch, "--servers", "1", "--workers", "1", "--epochs", "1", "--gen-rows",
                       "2000", "--embedding-memory", "100rows", "--checkpoint-every", "10", "--out",
                       out});
  umask(old_umask);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ModeOf(out), 0700u);
  int files = 0, folders = 0;
  for (const auto& entry : fs::recursive_directory_iterator(out)) {
    const mode_t mode = ModeOf(entry.path());
    if (entry.is_directory()) {
      ++folders;
      EXPECT_EQ(mode, 0700u) << entry.path();
    } else if (entry.is_regular_file()) {
      ++files;
      EXPECT_EQ(mode & 077, 0u) << entry.path() << " has mode " << std::oct << mode;
    }
  }
  EXPECT_GT(folders, 3);
  EXPECT_GT(files, 10);
  EXPECT_EQ(ModeOf(out + "/.syncline-launch.lock"), 0600u);
  EXPECT_EQ(ModeOf(out + "/summary.json"), 0600u);
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// Runs `job` once without a key into `plain` and once with a fresh key file into `keyed`.
void RunPlainAndKeyed(const std::vector<std::string>& job, const std::string& plain,
                      const std::string& keyed) {
  const std::string key_file = keyed + "/given.key";
  ASSERT_TRUE(JobKey::Generate().Save(key_file).ok());
  std::vector<std::string> argv = job;
  argv.insert(argv.end(), {"--out", plain});
  auto a = RunProcess(argv);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  argv = job;
  argv.insert(argv.end(), {"--out", keyed, "--key-file", key_file});
  auto b = RunProcess(argv);
  ASSERT_EQ(b.exit_code, 0) << b.output;
}

// A keyed job's all-reduce runs over the sealed TCP plane (not CURVE's data endpoints) and
// trains bit for bit the model of the same job without a key.
TEST_F(SecurityLaunchTest, AKeyedAllReduceJobIsSealedAndTrainsThePlaintextModel) {
  const std::string plain = TempDir("sealed_plain");
  const std::string keyed = TempDir("sealed_keyed");
  const std::vector<std::string> job = {
      kLaunch,   "--sync",      "allreduce:hier", "--workers", "3",
      "--train", Train(),       "--test",         Test(),      "--epochs",
      "1",       "--optimizer", "adam",           "--lr",      "0.01"};
  RunPlainAndKeyed(job, plain, keyed);
  if (HasFatalFailure()) return;
  for (const std::string& out : {plain, keyed}) {
    const std::string log = ReadFile(out + "/logs/w1.log");
    EXPECT_NE(
        log.find(out == keyed ? "collectives over sealed TCP" : "collectives over direct TCP"),
        std::string::npos)
        << log;
  }
  const std::string want = ReadFile(plain + "/params.tsv");
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(ReadFile(keyed + "/params.tsv"), want);
}

// A keyed parameter-server job's pushes and pulls travel sealed (not under CURVE) and train
// bit for bit the model of the same job without a key.
TEST_F(SecurityLaunchTest, AKeyedParameterServerJobIsSealedAndTrainsThePlaintextModel) {
  const std::string plain = TempDir("ps_sealed_plain");
  const std::string keyed = TempDir("ps_sealed_keyed");
  const std::vector<std::string> job = {kLaunch,  "--servers", "2",       "--workers",   "2",
                                        "--sync", "bsp",       "--train", Train(),       "--test",
                                        Test(),   "--epochs",  "1",       "--optimizer", "adam",
                                        "--lr",   "0.01"};
  RunPlainAndKeyed(job, plain, keyed);
  if (HasFatalFailure()) return;
  const std::string log = ReadFile(keyed + "/logs/w1.log");
  for (const char* server : {"ps0", "ps1"}) {
    EXPECT_NE(log.find(absl::StrCat("w1: data to ", server, " sealed")), std::string::npos) << log;
  }
  EXPECT_EQ(ReadFile(plain + "/logs/w1.log").find("sealed"), std::string::npos);
  const std::string want = ReadFile(plain + "/params.tsv");
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(ReadFile(keyed + "/params.tsv"), want);
}

}  // namespace
}  // namespace syncline
