#include "launch/checkpoint_tracker.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "testing/scoped_temp_dir.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

class CheckpointTrackerTest : public testing::Test {
 protected:
  CheckpointTrackerOptions Options(int keep = 3) {
    return {.root = root_, .servers = 2, .workers = 2, .keep = keep, .job = {{"sync", "bsp"}}};
  }
  // As a node does: its receipt is written (an empty one) before it reports its part.
  void Part(CheckpointTracker& t, wire::Role role, int rank, int64_t clock,
            absl::Status status = absl::OkStatus()) {
    const std::string dir = CheckpointDir(root_, clock);
    fs::create_directories(dir);
    if (status.ok()) {
      const std::string node = (role == kServerRole ? "ps" : "w") + std::to_string(rank);
      ASSERT_TRUE(WriteReceipt(dir, NodeReceipt{.node = node, .clock = clock}).ok());
    }
    t.OnCheckpointed(role, rank, clock, status);
  }
  static constexpr auto kServerRole = wire::Role::SERVER;
  bool Visible(int64_t clock) { return fs::exists(CheckpointDir(root_, clock) + "/MANIFEST"); }

  testing_util::ScopedTempDir tmp_{"tracker"};
  const std::string root_ = tmp_.path();
};

constexpr auto kServer = wire::Role::SERVER;
constexpr auto kWorker = wire::Role::WORKER;

TEST_F(CheckpointTrackerTest, TheManifestComesAfterTheLastPart) {
  CheckpointTracker t(Options());
  Part(t, kServer, 0, 10);
  Part(t, kWorker, 0, 10);
  Part(t, kWorker, 1, 10);
  t.Flush();
  EXPECT_FALSE(Visible(10));
  EXPECT_FALSE(t.Resolved(10));
  Part(t, kServer, 1, 10);
  t.Flush();
  EXPECT_TRUE(Visible(10));
  EXPECT_TRUE(t.Resolved(10));
  EXPECT_EQ(t.checkpoints_written(), 1);
  EXPECT_EQ(t.last_clock(), 10);
  auto manifest = ReadManifest(CheckpointDir(root_, 10));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->nodes, (std::vector<std::string>{"ps0", "ps1", "w0", "w1"}));
}

// The audit's job: every checkpoint failed ("Too many open files") and the job said "ok".
TEST_F(CheckpointTrackerTest, AJobWhoseCheckpointsAllFailedHasAFailingVerdict) {
  CheckpointTracker t(Options());
  EXPECT_TRUE(t.Verdict().ok());  // none asked for yet
  Part(t, kServer, 0, 2, absl::ResourceExhaustedError("ps0-table-1.sst: Too many open files"));
  Part(t, kServer, 0, 4, absl::ResourceExhaustedError("ps0-table-1.sst: Too many open files"));
  // A request the workers outran is a miss, not a failure.
  Part(t, kServer, 1, 6, absl::FailedPreconditionError("every worker had finished clock 6"));
  t.Flush();
  EXPECT_EQ(t.checkpoints_written(), 0);
  EXPECT_EQ(t.checkpoints_failed(), 2);
  const absl::Status verdict = t.Verdict();
  EXPECT_TRUE(absl::IsFailedPrecondition(verdict)) << verdict;
  EXPECT_NE(verdict.message().find("Too many open files"), std::string::npos) << verdict;
  EXPECT_NE(verdict.message().find("2 failed, none written"), std::string::npos) << verdict;
  // One that is written makes the job resumable: the verdict is OK again.
  for (auto [role, rank] : {std::pair{kServer, 0}, {kServer, 1}, {kWorker, 0}, {kWorker, 1}}) {
    Part(t, role, rank, 8);
  }
  t.Flush();
  EXPECT_TRUE(t.Verdict().ok());
}

TEST_F(CheckpointTrackerTest, OnlyMissedCheckpointsAreNotAFailure) {
  CheckpointTracker t(Options());
  Part(t, kServer, 0, 6, absl::FailedPreconditionError("every worker had finished clock 6"));
  t.Flush();
  EXPECT_EQ(t.checkpoints_failed(), 0);
  EXPECT_TRUE(t.Verdict().ok());
}

TEST_F(CheckpointTrackerTest, AWorkerThatFinishedBeforeTheClockDoesNotHoldItBack) {
  CheckpointTracker t(Options());
  t.OnWorkerGone(1, 8);   // finished after 8 clocks: never reaches 10
  t.OnWorkerGone(0, 30);  // finished after 30: it must write 10 first
  Part(t, kServer, 0, 10);
  Part(t, kServer, 1, 10);
  t.Flush();
  EXPECT_FALSE(Visible(10));
  Part(t, kWorker, 0, 10);
  t.Flush();
  EXPECT_TRUE(Visible(10));
  EXPECT_EQ(ReadManifest(CheckpointDir(root_, 10))->nodes,
            (std::vector<std::string>{"ps0", "ps1", "w0"}));
}

TEST_F(CheckpointTrackerTest, APartThatFailedLeavesTheCheckpointIncomplete) {
  CheckpointTracker t(Options());
  Part(t, kServer, 0, 10);
  Part(t, kWorker, 0, 10, absl::FailedPreconditionError("outran"));
  EXPECT_TRUE(t.Resolved(10));
  Part(t, kServer, 1, 10);
  Part(t, kWorker, 0, 10);
  Part(t, kWorker, 1, 10);
  t.Flush();
  EXPECT_FALSE(Visible(10));
  EXPECT_EQ(t.checkpoints_written(), 0);
  EXPECT_EQ(t.last_clock(), -1);
}

TEST_F(CheckpointTrackerTest, AMissReportedByANodeThatWroteItIsIgnored) {
  CheckpointTracker t(Options());
  Part(t, kServer, 0, 20);
  Part(t, kServer, 0, 20, absl::FailedPreconditionError("a late request for a periodic one"));
  Part(t, kServer, 1, 20);
  Part(t, kWorker, 0, 20);
  Part(t, kWorker, 1, 20);
  t.Flush();
  EXPECT_TRUE(Visible(20));
  // ... and so is one that comes after the checkpoint completed.
  Part(t, kWorker, 1, 20, absl::FailedPreconditionError("late"));
  EXPECT_EQ(t.checkpoints_written(), 1);
}

TEST_F(CheckpointTrackerTest, KeepsTheNewestK) {
  {
    CheckpointTracker t(Options(/*keep=*/2));
    for (int64_t clock : {10, 20, 30, 40}) {
      for (int r = 0; r < 2; ++r) {
        Part(t, kServer, r, clock);
        Part(t, kWorker, r, clock);
      }
    }
  }  // the destructor finishes the manifests and deletions
  EXPECT_FALSE(fs::exists(CheckpointDir(root_, 10)));
  EXPECT_FALSE(fs::exists(CheckpointDir(root_, 20)));
  EXPECT_TRUE(Visible(30));
  EXPECT_TRUE(Visible(40));
}

}  // namespace
}  // namespace syncline

namespace syncline {
namespace {

// A rollback to checkpoint 10: checkpoint 20, completed on the timeline undone, is unpublished
// (its parts are written again on the new one), parts of 30 already in are forgotten, and both
// complete anew from the new timeline's parts.
TEST_F(CheckpointTrackerTest, ARollbackUnpublishesAndForgetsTheCheckpointsPastItsClock) {
  CheckpointTracker t(Options());
  for (int64_t clock : {10, 20}) {
    for (int r = 0; r < 2; ++r) {
      Part(t, kServer, r, clock);
      Part(t, kWorker, r, clock);
    }
  }
  Part(t, kServer, 0, 30);
  Part(t, kWorker, 0, 30);
  t.Flush();
  ASSERT_TRUE(Visible(20));
  EXPECT_EQ(t.last_clock(), 20);
  t.OnRollback(10);
  t.Flush();
  EXPECT_TRUE(Visible(10));
  EXPECT_FALSE(Visible(20));
  EXPECT_FALSE(t.Resolved(20));
  EXPECT_EQ(t.last_clock(), 10);
  // The new timeline's parts: 30 needs every one of them again.
  for (int r = 0; r < 2; ++r) Part(t, kServer, r, 20);
  Part(t, kWorker, 0, 20);
  Part(t, kServer, 1, 30);
  Part(t, kWorker, 1, 30);
  t.Flush();
  EXPECT_FALSE(Visible(20));
  EXPECT_FALSE(Visible(30));
  Part(t, kWorker, 1, 20);
  t.Flush();
  EXPECT_TRUE(Visible(20));
  EXPECT_EQ(t.last_clock(), 20);
}

}  // namespace
}  // namespace syncline
