#include "launch/resume.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace syncline
