#include "launch/batch_script.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace syncline {
namespace {

namespace fs = std::filesystem;

BatchScript Script() {
  return {.launcher = "/opt/syncline/bin/syncline-launch",
          .args = {"--train", "it's here.libsvm", "--launcher", "slurm"},
          .working_dir = "/home/a b",
          .output = "/runs/x/slurm-%j.out",
          .tasks = 4};
}

TEST(BatchScriptTest, ArgumentsAreQuotedAndTheOutputDirectiveKeepsItsPattern) {
  absl::StatusOr<std::string> text = BatchScriptText(Script());
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("#SBATCH --ntasks=4\n"), std::string::npos) << *text;
  EXPECT_NE(text->find("#SBATCH --output=\"/runs/x/slurm-%%j.out\"\n"), std::string::npos) << *text;
  EXPECT_NE(text->find("cd '/home/a b' || exit 1\n"), std::string::npos) << *text;
  EXPECT_NE(text->find("exec '/opt/syncline/bin/syncline-launch' '--train' 'it'\\''s "
                       "here.libsvm' '--launcher' 'slurm'\n"),
            std::string::npos)
      << *text;
}

// The audit's `out = "runs/x\ntouch PWNED #"` put a command on a line of its own.
TEST(BatchScriptTest, NothingCanStartALineOfItsOwn) {
  BatchScript s = Script();
  s.output = "/runs/x\ntouch PWNED #/slurm-%j.out";
  EXPECT_NE(BatchScriptText(s).status().message().find("--out: holds the control character 0x0a"),
            std::string::npos);
  s = Script();
  s.output = "/runs/\"x/slurm-%j.out";
  EXPECT_NE(BatchScriptText(s).status().message().find("double quote"), std::string::npos);
  s = Script();
  s.args.push_back("--out=runs/x\ntouch PWNED");
  EXPECT_FALSE(BatchScriptText(s).ok());
  s = Script();
  s.working_dir = "/home/x\rtouch PWNED";
  EXPECT_FALSE(BatchScriptText(s).ok());
}

TEST(BatchScriptTest, TheScriptIsWrittenFreshAndPrivateNeverThroughALink) {
  const fs::path dir = fs::path(testing::TempDir()) / "batch_script_link";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "victim") << "precious\n";
  fs::create_symlink(dir / "victim", dir / "job.sbatch");
  ASSERT_TRUE(WriteBatchScript((dir / "job.sbatch").string(), "#!/bin/bash\n").ok());
  std::stringstream victim;
  victim << std::ifstream(dir / "victim").rdbuf();
  EXPECT_EQ(victim.str(), "precious\n");
  struct stat st = {};
  ASSERT_EQ(lstat((dir / "job.sbatch").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace syncline
