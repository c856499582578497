#include "launch/resume.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace syncline {
namespace {

namespace fs = std::filesystem;

// --resume compares the checkpoint's settings with the run's: the training file by what it is,
// not by how its path was written; everything else by its text.
TEST(ResumeTest, TheTrainingFileIsComparedByWhatItIsNotHowItIsWritten) {
  const fs::path dir = fs::path(testing::TempDir()) / "resume_same_setting";
  fs::create_directories(dir / "data");
  std::ofstream(dir / "data" / "train.tsv") << "x\n";
  std::ofstream(dir / "data" / "other.tsv") << "y\n";
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  EXPECT_TRUE(SameManifestSetting("train", (dir / "data/train.tsv").string(), "data/train.tsv"));
  EXPECT_TRUE(SameManifestSetting("train", "data/./train.tsv", "data/train.tsv"));
  EXPECT_FALSE(SameManifestSetting("train", "data/train.tsv", "data/other.tsv"));
  // Other settings compare as text.
  EXPECT_TRUE(SameManifestSetting("lr", "0.1", "0.1"));
  EXPECT_FALSE(SameManifestSetting("lr", "0.1", "0.10"));
  EXPECT_FALSE(SameManifestSetting("model", "data/train.tsv", (dir / "data/train.tsv").string()));
  fs::current_path(cwd);
  fs::remove_all(dir);
}

// Another user who can write the run folder can plant links that the run writes through
// (job.key.tmp -> a victim file): such a folder is refused, naming the fix.
TEST(ResumeTest, ARunFolderOthersCanWriteIsRefused) {
  const fs::path dir = fs::path(testing::TempDir()) / "resume_shared_folder";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::all);  // 0777
  const absl::Status s = LockFolder(dir.string());
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
  EXPECT_NE(s.message().find("chmod go-w"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(dir / ".syncline-launch.lock"));
  fs::permissions(dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  EXPECT_TRUE(CheckRunFolder(dir.string()).ok());
  // What another user left in it while they could write it is refused too.
  fs::create_symlink("/etc/passwd", dir / "summary.json");
  ASSERT_EQ(lchown((dir / "summary.json").c_str(), 12345, 12345), 0);
  const absl::Status left = CheckRunFolder(dir.string());
  EXPECT_EQ(left.code(), absl::StatusCode::kPermissionDenied) << left;
  EXPECT_NE(left.message().find("summary.json belongs to user 12345"), std::string::npos) << left;
  fs::remove_all(dir);
}

// The lock is 0600: with a readable lock another user could hold it (flock needs only a
// read-only descriptor) and block every launch; an older 0644 one is made 0600.
TEST(ResumeTest, TheLockIsPrivateAndNeverALink) {
  const fs::path dir = fs::path(testing::TempDir()) / "resume_lock_mode";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  std::ofstream(dir / ".syncline-launch.lock") << "";
  fs::permissions(dir / ".syncline-launch.lock", fs::perms::owner_read | fs::perms::owner_write |
                                                     fs::perms::group_read |
                                                     fs::perms::others_read);
  ASSERT_TRUE(LockFolder(dir.string()).ok());
  struct stat st = {};
  ASSERT_EQ(stat((dir / ".syncline-launch.lock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const fs::path other = fs::path(testing::TempDir()) / "resume_lock_link";
  fs::remove_all(other);
  fs::create_directories(other);
  fs::permissions(other, fs::perms::owner_all);
  fs::create_symlink(dir / "victim", other / ".syncline-launch.lock");
  const absl::Status s = LockFolder(other.string());
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(fs::exists(dir / "victim"));
  fs::remove_all(dir);
  fs::remove_all(other);
}

}  // namespace
}  // namespace syncline
