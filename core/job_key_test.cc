#include "core/job_key.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace syncline {
namespace {

class JobKeyTest : public testing::Test {
 protected:
  JobKeyTest() {
    std::string pattern = testing::TempDir() + "job_key_XXXXXX";
    dir_ = mkdtemp(pattern.data());
    path_ = dir_ + "/job.key";
  }
  ~JobKeyTest() override { std::filesystem::remove_all(dir_); }
  std::string dir_, path_;
};

TEST_F(JobKeyTest, SavedAndLoadedKeysDeriveTheSameEndpointKeys) {
  const JobKey key = JobKey::Generate();
  ASSERT_TRUE(key.Save(path_).ok());
  struct stat st = {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto loaded = JobKey::Load(path_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->PublicKeyFor("w3"), key.PublicKeyFor("w3"));
  EXPECT_EQ(loaded->SecretKeyFor("ps0"), key.SecretKeyFor("ps0"));
  EXPECT_EQ(key.PublicKeyFor("w3").size(), 32u);
  EXPECT_NE(key.PublicKeyFor("w3"), key.PublicKeyFor("w4"));
  EXPECT_NE(key.PublicKeyFor("w3"), JobKey::Generate().PublicKeyFor("w3"));
}

TEST_F(JobKeyTest, RefusesAKeyOthersMayReadOrThatIsNotAKey) {
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  chmod(path_.c_str(), 0644);
  auto readable = JobKey::Load(path_);
  EXPECT_EQ(readable.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(readable.status().message().find("chmod 600"), std::string::npos);
  std::ofstream(path_) << "syncline-job-key v1\nnot hex\n";
  chmod(path_.c_str(), 0600);
  EXPECT_EQ(JobKey::Load(path_).status().code(), absl::StatusCode::kInvalidArgument);
  std::ofstream(path_) << "hello\n";
  EXPECT_NE(JobKey::Load(path_).status().message().find("is not a job key"), std::string::npos);
  EXPECT_EQ(JobKey::Load(dir_ + "/none").status().code(), absl::StatusCode::kNotFound);
}

// The audit planted OUT/job.key.tmp -> a victim file, and Save wrote the key into the victim.
TEST_F(JobKeyTest, SaveNeverWritesThroughAPlantedLink) {
  const std::string victim = dir_ + "/victim";
  std::ofstream(victim) << "precious\n";
  std::filesystem::create_symlink(victim, path_ + ".tmp");
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  std::ifstream in(victim);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
  EXPECT_FALSE(std::filesystem::is_symlink(path_));
  EXPECT_TRUE(JobKey::Load(path_).ok());
  // A link at the key's own name is replaced, not followed, too.
  std::filesystem::remove(path_);
  std::filesystem::create_symlink(victim, path_);
  ASSERT_TRUE(JobKey::Generate().Save(path_).ok());
  in = std::ifstream(victim);
  std::getline(in, line);
  EXPECT_EQ(line, "precious");
}

TEST_F(JobKeyTest, AKeyThatIsNotARegularFileIsRefusedWithoutBlocking) {
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  const auto fifo = JobKey::Load(path_);
  EXPECT_FALSE(fifo.ok());
  EXPECT_NE(fifo.status().message().find("not a regular file"), std::string::npos) << fifo.status();
}

}  // namespace
}  // namespace syncline
