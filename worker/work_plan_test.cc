#include "worker/work_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "core/crc32c.h"
#include "gtest/gtest.h"
#include "worker/worker_checkpoint.h"

namespace syncline {
namespace {

// Partitions of unequal sizes: worker p has 10 + p batches per epoch.
absl::StatusOr<int64_t> Batches(int p) { return 10 + p; }

WorkPlan PlanOf(int self, int epochs) {
  auto plan = WorkPlan::Create(self, epochs, Batches);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Every batch that the surviving workers' plans hold in `epoch`, counted.
std::map<std::pair<int, int64_t>, int> Count(const std::vector<WorkPlan>& plans,
                                             const std::vector<int>& survivors, int epoch) {
  std::map<std::pair<int, int64_t>, int> count;
  for (int w : survivors) {
    for (const BatchRef& b : plans[w].Epoch(w, epoch)) ++count[{b.partition, b.batch}];
  }
  return count;
}

TEST(WorkPlanTest, WithoutDeparturesAWorkerTrainsItsOwnPartitionEveryEpoch) {
  WorkPlan plan = PlanOf(2, 3);
  EXPECT_EQ(plan.total_steps(), 36);
  auto at = plan.At(13);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->epoch, 1);
  EXPECT_EQ(at->batch, (BatchRef{2, 1}));
  EXPECT_FALSE(plan.At(36).has_value());
}

// Four workers, w1 leaves mid-epoch 0 after 4 iterations (of 11): its 7 remaining batches and
// every later epoch of it are split among w0, w2, w3; every batch of every epoch is trained
// exactly once by the survivors plus what w1 finished.
TEST(WorkPlanTest, ALeaversRemainingBatchesAndLaterEpochsAreSharedExactlyOnce) {
  std::vector<WorkPlan> plans;
  for (int w = 0; w < 4; ++w) plans.push_back(PlanOf(w, 3));
  const Departure d{1, 4, {0, 2, 3}};
  int64_t taken = 0, most = 0, least = 1 << 30;
  for (int w : {0, 2, 3}) {
    auto t = plans[w].Leave(d, /*next_step=*/5);
    ASSERT_TRUE(t.ok()) << t.status();
    taken += *t;
    most = std::max(most, *t);
    least = std::min(least, *t);
  }
  EXPECT_EQ(taken, 7 + 11 + 11);
  // The odd batch of each segment goes round: shares differ by at most one batch in all.
  EXPECT_LE(most - least, 1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto count = Count(plans, {0, 2, 3}, epoch);
    for (int p = 0; p < 4; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        const int expected = (p == 1 && epoch == 0 && b < 4) ? 0 : 1;
        EXPECT_EQ((count[{p, b}]), expected) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
  }
  // The shares follow the takers' order: w0 takes w1's 5th, 8th, 11th batch of epoch 0.
  const std::vector<BatchRef> w0 = plans[0].Epoch(0, 0);
  ASSERT_EQ(w0.size(), 13u);
  EXPECT_EQ(w0[10], (BatchRef{1, 4}));
  EXPECT_EQ(w0[11], (BatchRef{1, 7}));
  EXPECT_EQ(w0[12], (BatchRef{1, 10}));
}

// A second departure hands over the leaver's own batches and the share of the first leaver's
// that it had taken; still nothing is skipped or repeated.
TEST(WorkPlanTest, ASecondDepartureHandsOverWhatTheFirstGave) {
  std::vector<WorkPlan> plans;
  for (int w = 0; w < 4; ++w) plans.push_back(PlanOf(w, 2));
  const Departure first{3, 2, {0, 1, 2}};
  for (int w : {0, 1, 2}) ASSERT_TRUE(plans[w].Leave(first, 3).ok());
  // w2 leaves in epoch 0 after 12 iterations: its 12 own batches, and one of w3's.
  const Departure second{2, 12, {0, 1}};
  for (int w : {0, 1}) ASSERT_TRUE(plans[w].Leave(second, 13).ok());
  // What the leavers trained before they left.
  std::set<std::pair<int, int64_t>> done;
  for (int64_t b = 0; b < 2; ++b) done.insert({3, b});
  const std::vector<BatchRef> w2 = plans[2].Epoch(2, 0);
  for (size_t i = 0; i < 12; ++i) done.insert({w2[i].partition, w2[i].batch});
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto count = Count(plans, {0, 1}, epoch);
    for (int p = 0; p < 4; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        const int expected = epoch == 0 && done.contains({p, b}) ? 0 : 1;
        EXPECT_EQ((count[{p, b}]), expected) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
  }
}

// A taker already in the next epoch when it hears appends the rest to the epoch it is in,
// never to one it has passed, and also takes the leaver's epochs up to that one.
TEST(WorkPlanTest, ALateTakerAppendsToTheEpochItIsIn) {
  WorkPlan plan = PlanOf(0, 3);
  // w1 (11 batches a pass) left in epoch 0 after 6; w0 is at iteration 12, in its epoch 1.
  auto taken = plan.Leave(Departure{1, 6, {0}}, 12);
  ASSERT_TRUE(taken.ok());
  EXPECT_EQ(*taken, 5 + 11 + 11);
  EXPECT_EQ(plan.Epoch(0, 0).size(), 10u);  // passed: unchanged
  const std::vector<BatchRef> e1 = plan.Epoch(0, 1);
  ASSERT_EQ(e1.size(), 10u + 5 + 11);
  EXPECT_EQ(e1[10], (BatchRef{1, 6}));
  EXPECT_EQ(e1[15], (BatchRef{1, 0}));
  EXPECT_EQ(plan.Epoch(0, 2).size(), 21u);
  auto at = plan.At(12);
  ASSERT_TRUE(at.has_value());
  EXPECT_EQ(at->batch, (BatchRef{0, 2}));  // iteration 12 is what it was
}

// Takers that append in different epochs (one had passed the leaver's epoch, one had not)
// still split every segment of the leaver's batches the same way: none is skipped.
TEST(WorkPlanTest, ALateAndAnOnTimeTakerSplitTheSameBatches) {
  std::vector<WorkPlan> plans;
  for (int w = 0; w < 3; ++w) plans.push_back(PlanOf(w, 2));
  // w2 (12 batches a pass) leaves after 9; w0 (10 a pass) is at iteration 10, in its epoch 1;
  // w1 (11 a pass) is at iteration 10, still in epoch 0.
  const Departure d{2, 9, {0, 1}};
  ASSERT_TRUE(plans[0].Leave(d, 10).ok());
  ASSERT_TRUE(plans[1].Leave(d, 10).ok());
  std::map<std::pair<int, int64_t>, int> count;
  for (int w : {0, 1}) {
    for (int e = 0; e < 2; ++e) {
      for (const BatchRef& b : plans[w].Epoch(w, e)) ++count[{b.partition, b.batch}];
    }
  }
  for (int64_t b = 0; b < 12; ++b) {
    EXPECT_EQ((count[{2, b}]), b < 9 ? 1 : 2) << "w2's batch " << b;  // rest once, epoch 1 once
  }
}

TEST(WorkPlanTest, DeparturesAfterTheEndOrHeardTwiceChangeNothing) {
  WorkPlan plan = PlanOf(0, 1);
  auto finished = plan.Leave(Departure{1, 11, {0}}, 3);  // w1 had trained its whole plan
  ASSERT_TRUE(finished.ok());
  EXPECT_EQ(*finished, 0);
  auto again = plan.Leave(Departure{1, 11, {0}}, 3);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  auto not_taker = plan.Leave(Departure{2, 0, {3}}, 3);
  ASSERT_TRUE(not_taker.ok());
  EXPECT_EQ(*not_taker, 0);
  EXPECT_EQ(plan.total_steps(), 10);
}

// A checkpoint keeps the departures a worker had heard; a resumed worker's plan is the one it
// had, including a share it appended late to a later epoch.
TEST(WorkPlanTest, ASavedPlanRestoresTheSameBatches) {
  WorkPlan plan = PlanOf(0, 3);
  ASSERT_TRUE(plan.Leave(Departure{1, 6, {0, 2}}, 12).ok());  // late: appended to epoch 1
  ASSERT_TRUE(plan.Leave(Departure{3, 20, {0, 2}}, 25).ok());
  const std::string saved = plan.Save();
  auto loaded = WorkPlan::Load(saved, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 2u);
  EXPECT_EQ((*loaded)[0].applied_epoch, 1);
  WorkPlan resumed = PlanOf(0, 3);
  ASSERT_TRUE(resumed.Restore(*loaded, *loaded, 30).ok());
  EXPECT_EQ(resumed.total_steps(), plan.total_steps());
  for (int e = 0; e < 3; ++e) EXPECT_EQ(resumed.Epoch(0, e), plan.Epoch(0, e)) << e;
  EXPECT_EQ(resumed.Save(), saved);
}

// A departure that reached the others' checkpoints but not this worker's is heard at the
// resumed clock; the leaver itself, resumed, has nothing left after the clock it left at.
TEST(WorkPlanTest, RestoreHearsWhatOnlyOthersSavedAndALeaverEndsWhereItLeft) {
  WorkPlan other = PlanOf(2, 2);
  ASSERT_TRUE(other.Leave(Departure{1, 4, {0, 2}}, 5).ok());
  auto all = WorkPlan::Load(other.Save(), 3);
  ASSERT_TRUE(all.ok());
  WorkPlan late = PlanOf(0, 2);
  ASSERT_TRUE(late.Restore({}, *all, 6).ok());
  WorkPlan heard = PlanOf(0, 2);
  ASSERT_TRUE(heard.Leave(Departure{1, 4, {0, 2}}, 6).ok());
  EXPECT_EQ(late.total_steps(), heard.total_steps());
  WorkPlan leaver = PlanOf(1, 2);
  ASSERT_TRUE(leaver.Restore({}, *all, 10).ok());
  EXPECT_EQ(leaver.total_steps(), 4);
  EXPECT_FALSE(leaver.At(4).has_value());
}

TEST(WorkPlanTest, ADamagedSavedPlanIsRefusedNamingWhy) {
  WorkPlan plan = PlanOf(0, 1);
  ASSERT_TRUE(plan.Leave(Departure{1, 2, {0, 2}}, 3).ok());
  const std::string saved = plan.Save();
  EXPECT_TRUE(WorkPlan::Load("", 3).ok());  // a version-1 state: no departures
  EXPECT_EQ(WorkPlan::Load("ab", 3).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(WorkPlan::Load(saved.substr(0, saved.size() - 1), 3).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_NE(WorkPlan::Load(saved, 2).status().message().find("taker 2"), std::string::npos)
      << WorkPlan::Load(saved, 2).status();
  EXPECT_NE(WorkPlan::Load(saved + "x", 3).status().message().find("bytes after"),
            std::string::npos);
  auto empty = WorkPlan::Load(PlanOf(0, 1).Save(), 3);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST(WorkPlanTest, APartitionThatCannotBeReadIsAnError) {
  auto plan = WorkPlan::Create(0, 1, [](int p) -> absl::StatusOr<int64_t> {
    if (p == 0) return 4;
    return absl::NotFoundError("no such file");
  });
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->Leave(Departure{1, 0, {0}}, 0).status().code(), absl::StatusCode::kNotFound);
}

// The state file went to version 2 with the plan; a version-1 file (no plan) still reads,
// and a version-2 file keeps its plan.
TEST(WorkerCheckpointTest, ReadsVersionOneFilesAndKeepsThePlanOfVersionTwo) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("wstate_" + std::to_string(::getpid()))).string();
  std::filesystem::create_directories(dir);
  std::string v1 = "SYWS";
  const uint32_t version = 1;
  const int64_t clock = 42;
  const std::string state = "residuals";
  const uint64_t length = state.size();
  v1.append(reinterpret_cast<const char*>(&version), 4);
  v1.append(reinterpret_cast<const char*>(&clock), 8);
  v1.append(reinterpret_cast<const char*>(&length), 8);
  v1 += state;
  const uint32_t crc = Crc32c(v1.data(), v1.size());
  v1.append(reinterpret_cast<const char*>(&crc), 4);
  std::ofstream(dir + "/w3.state", std::ios::binary) << v1;
  auto read = ReadWorkerCheckpoint(dir, 3);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->clock, 42);
  EXPECT_EQ(read->state, "residuals");
  EXPECT_TRUE(read->plan.empty());

  WorkPlan plan = PlanOf(0, 1);
  ASSERT_TRUE(plan.Leave(Departure{1, 2, {0}}, 3).ok());
  ASSERT_TRUE(WriteWorkerCheckpoint(dir, 0, {7, "s", plan.Save()}).ok());
  auto v2 = ReadWorkerCheckpoint(CheckpointDir(dir, 7), 0);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->state, "s");
  EXPECT_EQ(v2->plan, plan.Save());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace syncline
