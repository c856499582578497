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

}  // namespace
}  // namespace syncline
