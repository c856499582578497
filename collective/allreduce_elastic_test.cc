// Elastic all-reduce (ElasticOptions) with ranks as threads over the in-process transport: a
// rank that leaves mid-run is dropped at the next step, the others re-form and go on.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "collective/allreduce_backend.h"
#include "testing/inproc_ranks.h"

namespace syncline {
namespace {

constexpr uint32_t kDim = 2;
constexpr uint64_t kFeatures = 300;
constexpr int kSteps = 12;

ParameterLayout Layout() {
  ParameterLayout layout;
  layout.row_dim = kDim;
  layout.num_features = kFeatures;
  layout.bias_dim = 1;
  layout.optimizer.kind = OptimizerKind::kAdagrad;
  return layout;
}

AllReduceOptions Options() {
  AllReduceOptions o;
  o.rows = AllReduceOptions::Rows::kSparse;
  o.optimizer.kind = OptimizerKind::kAdagrad;
  o.optimizer.learning_rate = 0.1f;
  return o;
}

// Rank r's step: seeded random sparse gradients over 8 examples.
void Step(AllReduceBackend& b, int r, int step) {
  std::mt19937_64 rng(1000 * r + step);
  std::vector<uint64_t> keys;
  for (int i = 0; i < 15; ++i) keys.push_back(rng() % kFeatures);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<float> rows(keys.size() * kDim), bias(1), grads(keys.size() * kDim), bias_grad(1);
  ASSERT_TRUE(b.Read(step, keys, rows, bias).ok());
  for (float& g : grads) g = std::normal_distribution<float>(0, 1)(rng);
  bias_grad[0] = std::normal_distribution<float>(0, 1)(rng);
  ASSERT_TRUE(b.Update(step, keys, grads, bias_grad, 8).ok());
  ASSERT_TRUE(b.EndIteration(step, 8).ok());
}

// Rank r's elastic options: the coordinator's plan events are `events`, and the one meeting
// (after the first) is over `met`, the ranks of the job 0, 1, 2, where r is rank `in_met`;
// -1: r meets no one (a rank that left, or a joiner, which met them before).
ElasticOptions MeetingOf(InprocRanks& met, int r, int in_met, std::atomic<uint64_t>& events) {
  ElasticOptions e;
  e.meet = [&met, r, in_met](uint64_t plan_events) -> absl::StatusOr<PeerMeeting> {
    EXPECT_EQ(plan_events, 1u);
    EXPECT_GE(in_met, 0) << "w" << r << " meets no one";
    const int at = std::max(in_met, 0);
    return PeerMeeting{std::make_unique<Communicator>(met.endpoints[at].get(), at, met.ids),
                       {0, 1, 2}};
  };
  e.plan_events = [&events] { return events.load(); };
  e.interrupted = [] { return absl::OkStatus(); };
  e.notice_timeout = absl::Seconds(20);
  return e;
}

// 4 ranks; w3 trains `lost_after` steps and leaves (elastic: the coordinator's plan events go
// up; else it just stops training and answers the rest with nothing). The others train
// kSteps. Returns the survivors' parameters, their agreed departure clocks for w3, and their
// examples summed.
struct ElasticRun {
  std::vector<std::vector<float>> params;
  std::vector<std::optional<int64_t>> departure;
  std::vector<double> examples;
  std::vector<std::vector<int>> members;
};

ElasticRun Train(bool elastic, int lost_after) {
  InprocRanks ranks(4);
  InprocRanks met(3, "met");  // the meeting after the departure: w0, w1, w2
  EXPECT_TRUE(ranks.connected && met.connected);
  std::atomic<uint64_t> events{0};
  std::vector<std::unique_ptr<AllReduceBackend>> backends;
  for (int r = 0; r < 4; ++r) {
    backends.push_back(std::make_unique<AllReduceBackend>(
        std::make_unique<Communicator>(ranks.endpoints[r].get(), r, ranks.ids), Options()));
    if (!elastic) continue;
    EXPECT_TRUE(
        backends[r]->MakeElastic(MeetingOf(met, r, r < 3 ? r : -1, events), {0, 1, 2, 3}, 0).ok());
  }
  ElasticRun run;
  run.params.resize(3);
  run.departure.resize(3);
  run.examples.resize(3);
  run.members.resize(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      AllReduceBackend& b = *backends[r];
      ASSERT_TRUE(b.Init(Layout()).ok());
      for (int step = 0; step < (r == 3 ? lost_after : kSteps); ++step) Step(b, r, step);
      if (r == 3) {
        if (elastic) {
          events.store(1);  // the coordinator announces that w3 left
        } else {
          ASSERT_TRUE(b.Finish().ok());
        }
        return;
      }
      ASSERT_TRUE(b.Finish().ok());
      run.params[r].assign(b.parameters().begin(), b.parameters().end());
      run.departure[r] = b.DepartureClock(3, -1);
      run.examples[r] = b.examples_summed();
      run.members[r] = b.members();
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

// The survivors drop w3 at the step after its last, agree on that clock for its batches, and
// train the model of a job in which w3 stopped there (to float rounding: the sums of three
// ranks come in another order than those of four), every survivor with the same bits.
TEST(ElasticAllReduceTest, ALostRankIsDroppedAtTheNextStepAndTheOthersGoOn) {
  const ElasticRun elastic = Train(/*elastic=*/true, /*lost_after=*/5);
  const ElasticRun stopped = Train(/*elastic=*/false, /*lost_after=*/5);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("w", r));
    ASSERT_EQ(elastic.params[r], elastic.params[0]);
    EXPECT_EQ(elastic.departure[r], 5);
    EXPECT_EQ(elastic.members[r], (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(elastic.examples[r], 8.0 * (5 + 3 * kSteps));
  }
  ASSERT_EQ(elastic.params[0].size(), stopped.params[0].size());
  double worst = 0;
  for (size_t i = 0; i < elastic.params[0].size(); ++i) {
    worst = std::max(worst, std::abs(double{elastic.params[0][i]} - stopped.params[0][i]) /
                                (1e-3 + std::abs(double{stopped.params[0][i]})));
  }
  EXPECT_LT(worst, 1e-5);
}

// 2 ranks train kSteps; after their step `arrival_after` the coordinator announces w2, which
// meets them, takes their model by broadcast (OnArrival), answers their rounds with nothing up
// to `first_clock` and trains from there. Elastic: w2 joins that way; else the reference, three
// ranks from the start, w2 adding nothing before `first_clock`. Returns the three's parameters
// and examples summed.
ElasticRun TrainWithAJoiner(bool elastic, int arrival_after, int first_clock) {
  InprocRanks ranks(elastic ? 2 : 3);
  InprocRanks met(3, "met");  // the meeting after the arrival: w0, w1, w2
  EXPECT_TRUE(ranks.connected && met.connected);
  std::atomic<uint64_t> events{0};
  std::vector<std::unique_ptr<AllReduceBackend>> backends;
  for (int r = 0; r < 3; ++r) {
    const bool joiner = r == 2;
    Endpoint* endpoint = elastic && joiner ? met.endpoints[r].get() : ranks.endpoints[r].get();
    const std::vector<std::string>& ids = elastic && joiner ? met.ids : ranks.ids;
    backends.push_back(std::make_unique<AllReduceBackend>(
        std::make_unique<Communicator>(endpoint, r, ids), Options()));
    if (!elastic) continue;
    ElasticOptions e = MeetingOf(met, r, joiner ? -1 : r, events);
    EXPECT_TRUE(joiner ? backends[r]->MakeElasticJoiner(std::move(e), {0, 1, 2}, 1).ok()
                       : backends[r]->MakeElastic(std::move(e), {0, 1}, 0).ok());
  }
  ElasticRun run;
  run.params.resize(3);
  run.examples.resize(3);
  run.members.resize(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      AllReduceBackend& b = *backends[r];
      if (r == 2 && elastic) {
        // Bounded: w0 announces the arrival after a few steps.
        for (int i = 0; i < 20000 && events.load() == 0; ++i) absl::SleepFor(absl::Milliseconds(1));
        ASSERT_EQ(events.load(), 1u);
      }
      ASSERT_TRUE(b.Init(Layout()).ok());
      if (r == 2 && elastic) {
        const std::vector<int> donors = {0, 1};
        const absl::Status arrived = b.OnArrival(2, first_clock, donors);
        ASSERT_TRUE(arrived.ok()) << arrived;
      }
      for (int step = 0; step < kSteps; ++step) {
        if (r == 2 && step < first_clock) {
          if (elastic) continue;
          // The reference's w2 adds nothing before its first clock, as a joiner answers.
          ASSERT_TRUE(b.EndIteration(step, 0).ok());
          continue;
        }
        Step(b, r, step);
        if (r == 0 && elastic && step + 1 == arrival_after) events.store(1);
      }
      ASSERT_TRUE(b.Finish().ok());
      run.params[r].assign(b.parameters().begin(), b.parameters().end());
      run.examples[r] = b.examples_summed();
      run.members[r] = b.members();
    });
  }
  for (auto& t : threads) t.join();
  return run;
}

// A joiner enters the ring at a step boundary: every rank, the joiner too, ends with the same
// bits, which are those of a job of three from the start whose third rank added nothing before
// the joiner's first clock (a rank adding nothing adds exact zeros); every model holds each
// example once.
TEST(ElasticAllReduceTest, AJoinerTakesTheModelAndTrainsFromItsFirstClock) {
  const ElasticRun joined = TrainWithAJoiner(/*elastic=*/true, /*arrival_after=*/3, 7);
  const ElasticRun reference = TrainWithAJoiner(/*elastic=*/false, 3, 7);
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE(absl::StrCat("w", r));
    EXPECT_EQ(joined.members[r], (std::vector<int>{0, 1, 2}));
    EXPECT_EQ(joined.examples[r], 8.0 * (2 * kSteps + (kSteps - 7)));
    EXPECT_EQ(joined.params[r], reference.params[0]);
  }
}

// A departure, then a join: w2 of 3 leaves after 3 steps (the members w0, w1 meet without it),
// and after w0's step 6 w3 arrives (the three meet again). The joiner heard w2's departure
// from the coordinator at a heartbeat clock (1 here): it must take the clock the members agreed
// on (3) with the model, or it would compute w2's batches as others' and train some twice.
TEST(ElasticAllReduceTest, AJoinerTakesTheClocksTheMembersAgreedForEarlierDepartures) {
  InprocRanks ranks(3);
  InprocRanks without_w2(2, "a");  // after the departure: w0, w1
  InprocRanks with_w3(3, "b");     // after the arrival: w0, w1, w3
  ASSERT_TRUE(ranks.connected && without_w2.connected && with_w3.connected);
  std::atomic<uint64_t> events{0};
  auto elastic = [&](int r) {
    ElasticOptions e;
    e.meet = [&, r](uint64_t plan_events) -> absl::StatusOr<PeerMeeting> {
      EXPECT_LT(r, 2) << "w" << r << " meets no one";
      InprocRanks& met = plan_events == 1 ? without_w2 : with_w3;
      std::vector<int> members = plan_events == 1 ? std::vector<int>{0, 1} : std::vector{0, 1, 3};
      return PeerMeeting{std::make_unique<Communicator>(met.endpoints[r].get(), r, met.ids),
                         std::move(members)};
    };
    e.plan_events = [&events] { return events.load(); };
    e.interrupted = [] { return absl::OkStatus(); };
    e.notice_timeout = absl::Seconds(20);
    return e;
  };
  std::vector<std::unique_ptr<AllReduceBackend>> backends;
  for (int r = 0; r < 3; ++r) {
    backends.push_back(std::make_unique<AllReduceBackend>(
        std::make_unique<Communicator>(ranks.endpoints[r].get(), r, ranks.ids), Options()));
    ASSERT_TRUE(backends[r]->MakeElastic(elastic(r), {0, 1, 2}, 0).ok());
  }
  backends.push_back(std::make_unique<AllReduceBackend>(
      std::make_unique<Communicator>(with_w3.endpoints[2].get(), 2, with_w3.ids), Options()));
  ASSERT_TRUE(backends[3]->MakeElasticJoiner(elastic(3), {0, 1, 3}, 2).ok());
  std::vector<std::vector<float>> params(4);
  std::vector<double> examples(4);
  std::optional<int64_t> joiner_heard;
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      AllReduceBackend& b = *backends[r];
      if (r == 3) {
        // Bounded: w0 announces the arrival after its step 6.
        for (int i = 0; i < 20000 && events.load() < 2; ++i) absl::SleepFor(absl::Milliseconds(1));
        ASSERT_EQ(events.load(), 2u);
      }
      ASSERT_TRUE(b.Init(Layout()).ok());
      if (r == 3) {
        joiner_heard = b.DepartureClock(2, /*the coordinator's=*/1);
        ASSERT_TRUE(b.OnArrival(3, 9, std::vector<int>{0, 1}).ok());
      }
      for (int step = r == 3 ? 9 : 0; step < (r == 2 ? 3 : kSteps); ++step) {
        Step(b, r, step);
        if (r == 0 && step == 6) events.store(2);
      }
      if (r == 2) {
        events.store(1);  // w2 leaves
        return;
      }
      ASSERT_TRUE(b.Finish().ok());
      params[r].assign(b.parameters().begin(), b.parameters().end());
      examples[r] = b.examples_summed();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(backends[0]->DepartureClock(2, -1), 3);
  EXPECT_EQ(joiner_heard, 3);
  for (int r : {0, 1, 3}) {
    SCOPED_TRACE(absl::StrCat("w", r));
    EXPECT_EQ(examples[r], 8.0 * (3 + 2 * kSteps + (kSteps - 9)));
    EXPECT_EQ(params[r], params[0]);
    EXPECT_EQ(backends[r]->members(), (std::vector<int>{0, 1, 3}));
  }
}

// Top-K keeps a residual per rank: a model taken over from another rank would not match it.
TEST(ElasticAllReduceTest, ResidualCodecsAreRefusedNamingTheCodec) {
  InprocRanks ranks(2);
  AllReduceOptions o = Options();
  o.codec.kind = CodecKind::kTopK;
  o.codec.ratio = 0.1;
  AllReduceBackend b(std::make_unique<Communicator>(ranks.endpoints[0].get(), 0, ranks.ids), o);
  const absl::Status s = b.MakeElastic(ElasticOptions{}, {0, 1}, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_NE(s.message().find("--compress topk"), std::string::npos) << s;
}

}  // namespace
}  // namespace syncline
