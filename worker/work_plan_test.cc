#include "worker/work_plan.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <variant>

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

// A plan of a worker that joins a job of `partitions` workers (it has no partition).
WorkPlan JoinerPlanOf(int self, int epochs, int partitions) {
  auto plan = WorkPlan::Create(self, epochs, Batches, partitions);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return *std::move(plan);
}

// Three workers and a joiner's plan, over `epochs`, the joiner created with partitions = 3.
std::vector<WorkPlan> ThreeAndAJoiner(int epochs) {
  std::vector<WorkPlan> plans;
  for (int w = 0; w < 3; ++w) plans.push_back(PlanOf(w, epochs));
  plans.push_back(JoinerPlanOf(3, epochs, 3));
  return plans;
}

// w3 joins three workers mid-epoch 0 at clock 5: w0 had prepared 3 iterations (of 10), w1 5
// (of 11), w2 7 (of 12).
const Arrival kJoin{3, 5, {{0, 3}, {1, 5}, {2, 7}}};

// Each donor gives every 4th batch from its cut on; the joiner's plan and the donors' hold
// every batch of every epoch exactly once, and a donor's iterations before its cut stay.
TEST(WorkPlanTest, AJoinerGetsAShareOfEveryDonorsRestExactlyOnce) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(3);
  std::vector<std::vector<WorkPlan::Located>> before(3);
  for (int w = 0; w < 3; ++w) {
    for (int64_t step = 0; step < kJoin.cuts[w].clock; ++step) {
      before[w].push_back(*plans[w].At(step));
    }
  }
  int64_t lost = 0, gained = 0;
  for (int w = 0; w < 4; ++w) {
    auto changed = plans[w].Arrive(kJoin);
    ASSERT_TRUE(changed.ok()) << changed.status();
    if (w < 3) {
      EXPECT_LT(*changed, 0) << "w" << w;
      lost -= *changed;
    } else {
      gained = *changed;
    }
  }
  EXPECT_EQ(lost, gained);
  // What remained after the cuts: 7 + 6 + 5 of epoch 0, and 33 of each later epoch.
  const int64_t rest = 7 + 6 + 5 + 2 * 33;
  EXPECT_LE(std::abs(gained - rest / 4), 2) << gained;
  EXPECT_EQ(gained, plans[3].total_steps() - kJoin.first_clock);
  for (int epoch = 0; epoch < 3; ++epoch) {
    auto count = Count(plans, {0, 1, 2, 3}, epoch);
    for (int p = 0; p < 3; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        EXPECT_EQ((count[{p, b}]), 1) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
    EXPECT_EQ(count.size(), 33u);
  }
  for (int w = 0; w < 3; ++w) {
    for (int64_t step = 0; step < kJoin.cuts[w].clock; ++step) {
      auto at = plans[w].At(step);
      ASSERT_TRUE(at.has_value());
      EXPECT_EQ(at->epoch, before[w][step].epoch);
      EXPECT_EQ(at->batch, before[w][step].batch) << "w" << w << " step " << step;
    }
  }
  // Donor 0 gives the first of its rest in epoch 0 (offset 0): its batches 3 and 7.
  const std::vector<BatchRef> w3 = plans[3].Epoch(3, 0);
  ASSERT_GE(w3.size(), 2u);
  EXPECT_EQ(w3[0], (BatchRef{0, 3}));
  EXPECT_EQ(w3[1], (BatchRef{0, 7}));
}

TEST(WorkPlanTest, AJoinersIterationsCountFromItsFirstClock) {
  WorkPlan joiner = JoinerPlanOf(3, 2, 3);
  EXPECT_EQ(joiner.total_steps(), 0);
  EXPECT_FALSE(joiner.At(0).has_value());
  auto gained = joiner.Arrive(kJoin);
  ASSERT_TRUE(gained.ok()) << gained.status();
  ASSERT_GT(*gained, 0);
  EXPECT_EQ(joiner.total_steps(), kJoin.first_clock + *gained);
  EXPECT_FALSE(joiner.At(kJoin.first_clock - 1).has_value());
  auto first = joiner.At(kJoin.first_clock);
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->epoch, 0);
  EXPECT_EQ(first->batch, (BatchRef{0, 3}));
  EXPECT_TRUE(joiner.At(joiner.total_steps() - 1).has_value());
  EXPECT_FALSE(joiner.At(joiner.total_steps()).has_value());
  auto last = joiner.At(joiner.total_steps() - 1);
  EXPECT_EQ(last->epoch, 1);
}

TEST(WorkPlanTest, ADonorWhosePlanEndedBeforeItsCutGivesNothing) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(1);
  // w0 had trained its whole epoch (10 batches); w1 and w2 had not.
  const Arrival a{3, 10, {{0, 10}, {1, 2}, {2, 4}}};
  std::vector<int64_t> changed;
  for (int w = 0; w < 4; ++w) {
    auto c = plans[w].Arrive(a);
    ASSERT_TRUE(c.ok()) << c.status();
    changed.push_back(*c);
  }
  EXPECT_EQ(changed[0], 0);
  EXPECT_EQ(plans[0].total_steps(), 10);
  EXPECT_EQ(changed[3], -(changed[1] + changed[2]));
  for (const BatchRef& b : plans[3].Epoch(3, 0)) EXPECT_NE(b.partition, 0);
  auto count = Count(plans, {0, 1, 2, 3}, 0);
  EXPECT_EQ(count.size(), 33u);
  for (const auto& [batch, n] : count) EXPECT_EQ(n, 1) << batch.first << ":" << batch.second;
}

// w1 leaves (w0 and w2 take its rest), then w3 joins: what the donors give it includes w1's
// batches they had taken; the joiner reads the sizes of every partition it holds.
TEST(WorkPlanTest, AJoinerAfterADepartureSharesWhatTheDonorsHadTaken) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(2);
  std::vector<int> asked;
  auto joiner = WorkPlan::Create(
      3, 2,
      [&](int p) -> absl::StatusOr<int64_t> {
        asked.push_back(p);
        return Batches(p);
      },
      3);
  ASSERT_TRUE(joiner.ok());
  plans[3] = *std::move(joiner);
  const Departure d{1, 4, {0, 2}};
  for (int w : {0, 2, 3}) ASSERT_TRUE(plans[w].Leave(d, 5).ok());
  const Arrival a{3, 9, {{0, 9}, {2, 9}}};
  for (int w : {0, 2, 3}) ASSERT_TRUE(plans[w].Arrive(a).ok());
  std::sort(asked.begin(), asked.end());
  EXPECT_EQ(asked, (std::vector<int>{0, 1, 2}));
  bool has_w1s = false;
  for (int e = 0; e < 2; ++e) {
    for (const BatchRef& b : plans[3].Epoch(3, e)) has_w1s = has_w1s || b.partition == 1;
  }
  EXPECT_TRUE(has_w1s);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto count = Count(plans, {0, 2, 3}, epoch);
    for (int p = 0; p < 3; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        const int expected = (p == 1 && epoch == 0 && b < 4) ? 0 : 1;
        EXPECT_EQ((count[{p, b}]), expected) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
  }
}

// The joiner leaves after 4 of its iterations (its clock: first_clock + 4): the rest of what it
// was given goes to the takers, once.
TEST(WorkPlanTest, AJoinersDepartureHandsBackWhatItWasGiven) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(2);
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(plans[w].Arrive(kJoin).ok());
  const std::vector<BatchRef> w3 = plans[3].Epoch(3, 0);
  ASSERT_GT(w3.size(), 4u);
  const int64_t rest = plans[3].total_steps() - (kJoin.first_clock + 4);
  const Departure d{3, kJoin.first_clock + 4, {0, 1, 2}};
  int64_t taken = 0;
  for (int w = 0; w < 3; ++w) {
    auto t = plans[w].Leave(d, kJoin.cuts[w].clock + 1);
    ASSERT_TRUE(t.ok()) << t.status();
    taken += *t;
  }
  EXPECT_EQ(taken, rest);
  std::set<std::pair<int, int64_t>> done;
  for (size_t i = 0; i < 4; ++i) done.insert({w3[i].partition, w3[i].batch});
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto count = Count(plans, {0, 1, 2}, epoch);
    for (int p = 0; p < 3; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        const int expected = epoch == 0 && done.contains({p, b}) ? 0 : 1;
        EXPECT_EQ((count[{p, b}]), expected) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
  }
  // A resumed joiner that hears its own departure ends where it left.
  WorkPlan resumed = JoinerPlanOf(3, 2, 3);
  ASSERT_TRUE(resumed.Arrive(kJoin).ok());
  ASSERT_TRUE(resumed.Leave(d, kJoin.first_clock + 4).ok());
  EXPECT_EQ(resumed.total_steps(), kJoin.first_clock + 4);
}

// After the arrival a donor leaves; the joiner is one of its takers; every worker computes
// the same plan for every other.
TEST(WorkPlanTest, ADonorsDepartureAfterAnArrivalIsSharedWithTheJoiner) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(2);
  for (int w = 0; w < 4; ++w) ASSERT_TRUE(plans[w].Arrive(kJoin).ok());
  const std::vector<BatchRef> w1 = plans[1].Epoch(1, 0);
  const Departure d{1, 8, {0, 2, 3}};
  int64_t joiner_took = 0;
  for (int w : {0, 2, 3}) {
    auto t = plans[w].Leave(d, w == 3 ? kJoin.first_clock + 1 : kJoin.cuts[w].clock + 1);
    ASSERT_TRUE(t.ok()) << t.status();
    if (w == 3) joiner_took = *t;
  }
  EXPECT_GT(joiner_took, 0);
  std::set<std::pair<int, int64_t>> done;
  for (size_t i = 0; i < 8; ++i) done.insert({w1[i].partition, w1[i].batch});
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto count = Count(plans, {0, 2, 3}, epoch);
    for (int p = 0; p < 3; ++p) {
      for (int64_t b = 0; b < 10 + p; ++b) {
        const int expected = epoch == 0 && done.contains({p, b}) ? 0 : 1;
        EXPECT_EQ((count[{p, b}]), expected) << "epoch " << epoch << " batch " << p << ":" << b;
      }
    }
  }
  for (int x : {0, 2, 3}) {  // w1 did not hear its own departure
    for (int w = 0; w < 4; ++w) {
      ASSERT_TRUE(plans[x].LoadSizesFor(w).ok());
      for (int e = 0; e < 2; ++e) {
        EXPECT_EQ(plans[x].Epoch(w, e), plans[w].Epoch(w, e)) << "w" << x << " on w" << w;
      }
    }
  }
}

// A second joiner takes a share of the first joiner's plan too.
TEST(WorkPlanTest, AJoinerCanDonateToALaterJoiner) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(2);
  plans.push_back(JoinerPlanOf(4, 2, 3));
  for (int w = 0; w < 5; ++w) ASSERT_TRUE(plans[w].Arrive(kJoin).ok());
  const Arrival second{4, 8, {{0, 6}, {1, 8}, {2, 9}, {3, 8}}};
  int64_t sum = 0;
  for (int w = 0; w < 5; ++w) {
    auto c = plans[w].Arrive(second);
    ASSERT_TRUE(c.ok()) << c.status();
    sum += *c;
    if (w == 3) {
      EXPECT_LT(*c, 0);
    }
  }
  EXPECT_EQ(sum, 0);
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto count = Count(plans, {0, 1, 2, 3, 4}, epoch);
    EXPECT_EQ(count.size(), 33u);
    for (const auto& [batch, n] : count) EXPECT_EQ(n, 1) << batch.first << ":" << batch.second;
  }
  for (int w = 0; w < 5; ++w) {
    ASSERT_TRUE(plans[4].LoadSizesFor(w).ok());
    EXPECT_EQ(plans[4].Epoch(w, 1), plans[w].Epoch(w, 1)) << w;
  }
}

// A donor that had appended a share late sees its plan otherwise than the joiner computes it:
// it drops only what the joiner is given, so no batch is skipped (some may be trained twice),
// and its iterations before the cut stay.
TEST(WorkPlanTest, ALateTakerThatDonatesSkipsNoBatch) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(3);
  // w1 (11 a pass) left after 6; w0 was at iteration 12 (its epoch 1), w2 at 4.
  const Departure d{1, 6, {0, 2}};
  ASSERT_TRUE(plans[0].Leave(d, 12).ok());
  ASSERT_TRUE(plans[2].Leave(d, 4).ok());
  ASSERT_TRUE(plans[3].Leave(d, 0).ok());
  std::vector<WorkPlan::Located> before;
  for (int64_t step = 0; step < 14; ++step) before.push_back(*plans[0].At(step));
  const Arrival a{3, 14, {{0, 14}, {2, 14}}};
  for (int w : {0, 2, 3}) ASSERT_TRUE(plans[w].Arrive(a).ok());
  for (int64_t step = 0; step < 14; ++step) {
    EXPECT_EQ(plans[0].At(step)->batch, before[step].batch) << step;
  }
  std::map<std::pair<int, int64_t>, int> count;
  for (int w : {0, 2, 3}) {
    for (int e = 0; e < 3; ++e) {
      for (const BatchRef& b : plans[w].Epoch(w, e)) ++count[{b.partition, b.batch}];
    }
  }
  for (int p = 0; p < 3; ++p) {
    for (int64_t b = 0; b < 10 + p; ++b) {
      EXPECT_GE((count[{p, b}]), p == 1 && b < 6 ? 2 : 3) << "batch " << p << ":" << b;
    }
  }
}

TEST(WorkPlanTest, ASavedPlanWithArrivalsRestoresTheSameBatches) {
  std::vector<WorkPlan> plans = ThreeAndAJoiner(2);
  const Departure left{2, 4, {0, 1}};
  const Arrival a{3, 6, {{0, 6}, {1, 7}}};
  const Departure later{0, 12, {1, 3}};
  for (int w : {0, 1, 3}) ASSERT_TRUE(plans[w].Leave(left, 5).ok());
  const std::string early = plans[1].Save();  // w1's checkpoint before the arrival
  for (int w : {0, 1, 3}) ASSERT_TRUE(plans[w].Arrive(a).ok());
  for (int w : {1, 3}) ASSERT_TRUE(plans[w].Leave(later, w == 3 ? 7 : 8).ok());
  const std::string saved = plans[3].Save();
  auto loaded = WorkPlan::Load(saved, 4);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_EQ(std::get<Arrival>((*loaded)[1].event), a);
  WorkPlan joiner = JoinerPlanOf(3, 2, 3);
  ASSERT_TRUE(joiner.Restore(*loaded, *loaded, 8).ok());
  EXPECT_EQ(joiner.total_steps(), plans[3].total_steps());
  for (int e = 0; e < 2; ++e) EXPECT_EQ(joiner.Epoch(3, e), plans[3].Epoch(3, e)) << e;
  EXPECT_EQ(joiner.Save(), saved);
  // w1 saved before the arrival: it hears the rest now.
  auto own = WorkPlan::Load(early, 4);
  ASSERT_TRUE(own.ok()) << own.status();
  WorkPlan w1 = PlanOf(1, 2);
  ASSERT_TRUE(w1.Restore(*own, *loaded, 7).ok());
  EXPECT_EQ(w1.total_steps(), plans[1].total_steps());
  for (int e = 0; e < 2; ++e) EXPECT_EQ(w1.Epoch(1, e), plans[1].Epoch(1, e)) << e;
  EXPECT_EQ(w1.Save(), plans[1].Save());
}

TEST(WorkPlanTest, ADamagedSavedPlanWithArrivalsIsRefusedNamingWhy) {
  WorkPlan plan = JoinerPlanOf(3, 1, 3);
  ASSERT_TRUE(plan.Arrive(kJoin).ok());
  const std::string saved = plan.Save();
  ASSERT_TRUE(WorkPlan::Load(saved, 4).ok());
  auto message = [](std::string_view bytes, int workers) {
    auto loaded = WorkPlan::Load(bytes, workers);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << loaded.status();
    return std::string(loaded.status().message());
  };
  EXPECT_NE(message(saved.substr(0, saved.size() - 1), 4).find("truncated"), std::string::npos);
  EXPECT_NE(message(saved.substr(0, 6), 4).find("truncated"), std::string::npos);
  EXPECT_NE(message(saved, 3).find("arrival 0 is not one of a job of 3"), std::string::npos);
  EXPECT_NE(message(saved + "x", 4).find("bytes after"), std::string::npos);
  auto put = [](std::string* out, auto value) {
    out->append(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  std::string huge = saved.substr(0, 4);  // the tag
  put(&huge, uint32_t{1u << 30});
  EXPECT_NE(message(huge, 4).find("events in a job of 4"), std::string::npos);
  std::string cuts = saved.substr(0, 4);
  put(&cuts, uint32_t{1});
  put(&cuts, uint8_t{1});
  put(&cuts, int32_t{3});
  put(&cuts, int64_t{5});
  put(&cuts, uint32_t{0xFFFFFFFFu});
  EXPECT_NE(message(cuts, 4).find("arrival 0 is not one"), std::string::npos);
  std::string donor = saved.substr(0, 4);
  put(&donor, uint32_t{1});
  put(&donor, uint8_t{1});
  put(&donor, int32_t{3});
  put(&donor, int64_t{5});
  put(&donor, uint32_t{1});
  put(&donor, int32_t{3});
  put(&donor, int64_t{0});
  EXPECT_NE(message(donor, 4).find("names donor 3"), std::string::npos);
  std::string kind = saved.substr(0, 4);
  put(&kind, uint32_t{1});
  put(&kind, uint8_t{7});
  EXPECT_NE(message(kind, 4).find("unknown kind 7"), std::string::npos);
  std::string twice = saved.substr(0, 4);
  put(&twice, uint32_t{2});
  for (int i = 0; i < 2; ++i) {
    put(&twice, uint8_t{1});
    put(&twice, int32_t{3});
    put(&twice, int64_t{5});
    put(&twice, uint32_t{0});
  }
  EXPECT_NE(message(twice, 4).find("w3 joins twice"), std::string::npos);
  // The format from before arrivals: a count, then departures.
  std::string old;
  put(&old, uint32_t{1});
  put(&old, int32_t{1});
  put(&old, int64_t{2});
  put(&old, int32_t{-1});
  put(&old, uint32_t{1});
  put(&old, int32_t{0});
  auto departures = WorkPlan::Load(old, 3);
  ASSERT_TRUE(departures.ok()) << departures.status();
  ASSERT_EQ(departures->size(), 1u);
  EXPECT_EQ(std::get<Departure>((*departures)[0].event), (Departure{1, 2, {0}}));
  WorkPlan taker = PlanOf(0, 1);
  ASSERT_TRUE(taker.Leave(Departure{1, 2, {0}}, 3).ok());
  EXPECT_EQ(taker.Save(), old);  // no arrival: still written that way
}

TEST(WorkPlanTest, AnArrivalThatCannotBeIsRefused) {
  WorkPlan plan = PlanOf(0, 2);
  auto code = [&](const Arrival& a) { return plan.Arrive(a).status().code(); };
  const auto invalid = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code({3, 5, {{0, 3}, {3, 2}}}), invalid);  // the joiner donates
  EXPECT_EQ(code({3, 5, {{0, 3}, {0, 4}}}), invalid);  // a donor twice
  EXPECT_EQ(code({3, 5, {{1, 3}, {0, 4}}}), invalid);  // out of rank order
  EXPECT_EQ(code({3, 5, {{0, -1}}}), invalid);         // a negative cut
  EXPECT_EQ(code({3, -1, {{0, 3}}}), invalid);         // a negative first clock
  EXPECT_EQ(code({-1, 5, {{0, 3}}}), invalid);         // no rank
  EXPECT_EQ(code({3, 5, {{-2, 3}}}), invalid);         // no donor
  WorkPlan known = JoinerPlanOf(4, 2, 3);
  EXPECT_EQ(known.Arrive({2, 5, {{0, 3}}}).status().code(), invalid);          // w2 has a partition
  EXPECT_EQ(known.Arrive({4, 5, {{0, 3}, {3, 1}}}).status().code(), invalid);  // w3 not joined
  ASSERT_TRUE(plan.Leave(Departure{1, 4, {0, 2}}, 5).ok());
  EXPECT_EQ(code({3, 5, {{0, 3}, {1, 3}}}), invalid);  // a donor that had left
  EXPECT_EQ(code({2, 5, {{0, 3}}}), invalid);          // the joiner was a taker
  EXPECT_EQ(plan.Save(), [] {
    WorkPlan same = PlanOf(0, 2);
    EXPECT_TRUE(same.Leave(Departure{1, 4, {0, 2}}, 5).ok());
    return same.Save();
  }());  // nothing refused was kept
  // Heard twice: the second changes nothing.
  ASSERT_TRUE(plan.Arrive({3, 5, {{0, 7}, {2, 7}}}).ok());
  const std::string once = plan.Save();
  const int64_t steps = plan.total_steps();
  auto again = plan.Arrive({3, 5, {{0, 7}, {2, 7}}});
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, 0);
  EXPECT_EQ(plan.Save(), once);
  EXPECT_EQ(plan.total_steps(), steps);
  // A worker that is neither donor nor joiner only keeps the event.
  WorkPlan other = PlanOf(1, 2);
  auto none = other.Arrive({3, 5, {{0, 7}, {2, 7}}});
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, 0);
  EXPECT_TRUE(other.changed());
  EXPECT_EQ(other.total_steps(), 22);
}

TEST(WorkPlanTest, AJoinerThatCannotReadADonorsPartitionIsAnErrorAndKeepsNothing) {
  auto plan = WorkPlan::Create(
      3, 1,
      [](int p) -> absl::StatusOr<int64_t> {
        if (p == 0) return 4;
        return absl::NotFoundError("no such file");
      },
      3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->Arrive(kJoin).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(plan->changed());
  EXPECT_EQ(plan->total_steps(), 0);
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
