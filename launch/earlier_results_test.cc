#include "launch/earlier_results.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::string Slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(EarlierResultsTest, AnEarlierRunsResultsMoveAsideAndOnlyThose) {
  testing_util::ScopedTempDir dir("earlier_results");
  const fs::path out = dir.path();
  std::ofstream(out / "params.tsv") << "logreg\n";
  std::ofstream(out / "summary.json") << "{}\n";
  fs::create_directories(out / "logs");
  std::ofstream(out / "logs" / "w3.log") << "a worker this run does not have\n";
  fs::create_directories(out / "data");
  std::ofstream(out / "data" / "train.libsvm") << "1 1:1\n";
  std::ofstream(out / "job.key") << "key\n";
  auto moved = SetAsideEarlierResults(out.string());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_THAT(*moved, ElementsAre("summary.json", "params.tsv", "logs"));
  EXPECT_FALSE(fs::exists(out / "params.tsv"));
  EXPECT_FALSE(fs::exists(out / "logs"));
  EXPECT_EQ(Slurp(out / "previous-run" / "params.tsv"), "logreg\n");
  EXPECT_TRUE(fs::exists(out / "previous-run" / "logs" / "w3.log"));
  // What is not a result stays: the data, the key.
  EXPECT_TRUE(fs::exists(out / "data" / "train.libsvm"));
  EXPECT_TRUE(fs::exists(out / "job.key"));

  // The next run replaces the previous run's, and a folder without results is left alone.
  std::ofstream(out / "params.tsv") << "ctr\n";
  moved = SetAsideEarlierResults(out.string());
  ASSERT_TRUE(moved.ok()) << moved.status();
  EXPECT_THAT(*moved, ElementsAre("params.tsv"));
  EXPECT_EQ(Slurp(out / "previous-run" / "params.tsv"), "ctr\n");
  EXPECT_FALSE(fs::exists(out / "previous-run" / "summary.json"));
  moved = SetAsideEarlierResults(out.string());
  ASSERT_TRUE(moved.ok());
  EXPECT_THAT(*moved, IsEmpty());
  EXPECT_TRUE(fs::exists(out / "previous-run" / "params.tsv"));
}

}  // namespace
}  // namespace syncline
