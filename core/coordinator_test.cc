#include "core/coordinator.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <variant>
#include <vector>

#include "core/control_client.h"
#include "core/inproc_transport.h"

namespace syncline {
namespace {

class RecordingObserver : public CoordinatorObserver {
 public:
  void OnProgress(int worker, wire::Progress::Reader p) override {
    last_clock = p.getClock();
    auto t = p.getStepSeconds();
    progress_split = {static_cast<double>(t.getSteps()),
                      t.getBatch(),
                      t.getUpload(),
                      t.getCompute(),
                      t.getCompress(),
                      t.getDownload(),
                      t.getNetwork()};
  }
  void OnWorkerDone(int worker, wire::WorkerStats::Reader s) override {
    ++done;
    done_steps_timed = s.getStepSeconds().getSteps();
    done_network = s.getStepSeconds().getNetwork();
    done_device = s.getDevice().cStr();
  }
  void OnEvaluation(int worker, wire::Evaluation::Reader e) override { auc = e.getAuc(); }
  void OnServerStats(int server, wire::ServerStats::Reader s) override { ++server_stats; }
  void OnNodeDown(wire::Role role, int rank, const std::string& reason) override {
    down_reason = reason;
  }
  void OnRecovered(int64_t clock, absl::Duration took, int64_t undone) override {
    recovered_clock = clock;
    steps_undone = undone;
  }
  int64_t last_clock = -1;
  // The last progress report's split: steps, then the seconds of batch, upload, compute,
  // compress, download and network.
  std::vector<double> progress_split;
  int done = 0;
  int64_t done_steps_timed = -1;
  double done_network = -1;
  std::string done_device;
  double auc = -1;
  int server_stats = 0;
  std::string down_reason;
  std::atomic<int64_t> recovered_clock{-1};
  std::atomic<int64_t> steps_undone{-1};
};

absl::Time Soon() { return absl::Now() + absl::Seconds(10); }

CoordinatorOptions SmallJob() {
  CoordinatorOptions o;
  o.num_servers = 1;
  o.num_workers = 1;
  o.heartbeat_interval = absl::Milliseconds(20);
  o.heartbeat_timeout = absl::Milliseconds(500);
  o.startup_timeout = absl::Seconds(10);
  return o;
}

// An ASP job of `n` workers and no servers that hands a lost worker's batches over and does not
// evaluate.
CoordinatorOptions AspHandOverJob(int n) {
  CoordinatorOptions o = SmallJob();
  o.num_servers = 0;
  o.num_workers = n;
  o.staleness = -1;
  o.hand_over = true;
  o.evaluate = false;
  return o;
}

// Waits (bounded) until `c` has a rollback order.
std::optional<ControlClient::Rollback> AwaitRollback(ControlClient& c) {
  return c.WaitForRollback(Soon());
}

// A coordinator at inproc://c running Run() on a thread over an in-process transport; the test
// plays the nodes. Each Start() is a new job: a new transport, observer and coordinator. The
// fixture aborts and joins a job the test left running (an assertion that failed early).
class CoordinatorTest : public ::testing::Test {
 protected:
  ~CoordinatorTest() override { Stop(); }

  // Starts a job with `options` whose events observer_ records (none when `observe` is false);
  // the status of creating its coordinator.
  absl::Status Start(const CoordinatorOptions& options, bool observe = true) {
    Stop();
    coordinator_.reset();
    observer_ = std::make_unique<RecordingObserver>();
    transport_ = std::make_unique<InprocTransport>();
    auto coordinator = Coordinator::Create(*transport_, "inproc://c", options,
                                           observe ? observer_.get() : nullptr);
    if (!coordinator.ok()) return coordinator.status();
    coordinator_ = std::move(*coordinator);
    run_ = std::thread([this] { result_ = coordinator_->Run(); });
    return absl::OkStatus();
  }

  // Waits for Run() to return; what it returned.
  absl::Status Join() {
    run_.join();
    return result_;
  }

  // Connects workers 0..n-1 at once (registration waits for all of them), reports them ready
  // and waits for the start. Empty when one could not join (the failure is recorded).
  std::vector<std::unique_ptr<ControlClient>> StartWorkers(int n) {
    std::vector<std::unique_ptr<ControlClient>> w(n);
    std::vector<std::thread> joins;
    for (int r = 0; r < n; ++r) {
      joins.emplace_back([&, r] {
        auto c = ControlClient::Connect(*transport_,
                                        {coordinator_->address(), wire::Role::WORKER, r, ""});
        EXPECT_TRUE(c.ok()) << c.status();
        if (c.ok()) w[r] = std::move(*c);
      });
    }
    for (std::thread& t : joins) t.join();
    for (const auto& c : w) {
      if (!c) return {};
    }
    for (auto& c : w) c->ReportReady();
    for (auto& c : w) {
      if (auto s = c->WaitForStart(Soon()); !s.ok()) {
        ADD_FAILURE() << s;
        return {};
      }
    }
    return w;
  }

  // Waits (bounded) until the job trains, when the coordinator takes restarts.
  void WaitForTraining() {
    const absl::Time deadline = Soon();
    while (!coordinator_->CanRestart() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  // A job of `n` workers and no servers that may restart `restarts` nodes and does not
  // evaluate, its workers registered and training (empty when it could not start).
  // 4 workers without servers, under BSP with --min-workers 3 (batches handed over).
  std::vector<std::unique_ptr<ControlClient>> FourWorkersAtLeastThree() {
    CoordinatorOptions options = SmallJob();
    options.num_servers = 0;
    options.num_workers = 4;
    options.staleness = 0;
    options.min_workers = 3;
    options.hand_over = true;
    options.evaluate = false;
    if (!Start(options).ok()) return {};
    return StartWorkers(4);
  }

  std::vector<std::unique_ptr<ControlClient>> TrainWorkersOnly(int n, int restarts) {
    CoordinatorOptions options = SmallJob();
    options.num_servers = 0;
    options.num_workers = n;
    options.max_restarts = restarts;
    options.evaluate = false;
    if (!Start(options).ok()) return {};
    std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(n);
    if (static_cast<int>(w.size()) == n) WaitForTraining();
    return w;
  }

  std::unique_ptr<InprocTransport> transport_;
  std::unique_ptr<RecordingObserver> observer_;
  std::unique_ptr<Coordinator> coordinator_;

 private:
  void Stop() {
    if (!run_.joinable()) return;
    coordinator_->Abort("test over");
    run_.join();
  }

  std::thread run_;
  absl::Status result_;
};

TEST_F(CoordinatorTest, RunsTheWholeProtocol) {
  ASSERT_TRUE(Start(SmallJob()).ok());

  std::thread server([&] {
    ControlOptions o{coordinator_->address(), wire::Role::SERVER, 0, "inproc://ps0"};
    auto c = ControlClient::Connect(*transport_, o);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ((*c)->table().num_workers, 1);
    ASSERT_EQ((*c)->table().Servers().size(), 1u);
    EXPECT_EQ((*c)->table().Servers()[0]->address, "inproc://ps0");
    (*c)->ReportReady();
    auto cmd = (*c)->WaitForCommand(Soon());
    ASSERT_TRUE(cmd.ok());
    EXPECT_EQ(*cmd, Command::kShutdown);
    MessageBuilder b(wire::MsgType::SERVER_STATS);
    b.header().getBody().initServerStats().setRequests(5);
    (*c)->Send(b.Finish());
    ASSERT_TRUE((*c)->Flush(Soon()).ok());
  });

  ControlOptions o{coordinator_->address(), wire::Role::WORKER, 0, ""};
  auto worker = ControlClient::Connect(*transport_, o);
  ASSERT_TRUE(worker.ok()) << worker.status();
  (*worker)->ReportReady();
  ASSERT_TRUE((*worker)->WaitForStart(Soon()).ok());
  MessageBuilder p(wire::MsgType::PROGRESS);
  p.header().getBody().initProgress().setClock(17);
  (*worker)->Send(p.Finish());
  MessageBuilder d(wire::MsgType::WORKER_DONE);
  d.header().getBody().initWorkerStats().setSteps(17);
  (*worker)->Send(d.Finish());
  auto cmd = (*worker)->WaitForCommand(Soon());
  ASSERT_TRUE(cmd.ok());
  ASSERT_EQ(*cmd, Command::kEvaluate);
  MessageBuilder r(wire::MsgType::RESULT);
  r.header().getBody().initEvaluation().setAuc(0.75);
  (*worker)->Send(r.Finish());
  cmd = (*worker)->WaitForCommand(Soon());
  ASSERT_TRUE(cmd.ok());
  EXPECT_EQ(*cmd, Command::kShutdown);

  server.join();
  const absl::Status result = Join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(observer_->last_clock, 17);
  EXPECT_EQ(observer_->done, 1);
  EXPECT_DOUBLE_EQ(observer_->auc, 0.75);
  EXPECT_EQ(observer_->server_stats, 1);
}

TEST_F(CoordinatorTest, SilentNodeIsReportedByNameAndBspJobAborts) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.num_workers = 2;
  ASSERT_TRUE(Start(options).ok());

  std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(2);
  ASSERT_EQ(w.size(), 2u);
  std::unique_ptr<ControlClient>& w0 = w[0];
  w[1].reset();  // w1 goes silent: its heartbeats stop
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(observer_->down_reason.find("w1"), std::string::npos) << observer_->down_reason;
  // The surviving worker learns that the job is over.
  const absl::Time deadline = Soon();
  while (w0->health().ok() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(w0->health().code(), absl::StatusCode::kAborted);
}

// Nodes heartbeat from the moment the job's table reaches them, not from their registration: a
// node that registered long before the last one (a slow launcher, a busy machine) is not lost
// at the start.
TEST_F(CoordinatorTest, ANodeThatRegisteredLongBeforeTheLastIsNotLostAtTheStart) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.num_workers = 2;
  ASSERT_TRUE(Start(options).ok());
  std::unique_ptr<ControlClient> early;
  std::thread first([&] {
    auto c =
        ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, 0, ""});
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) early = std::move(*c);
  });
  absl::SleepFor(3 * options.heartbeat_timeout);
  auto late =
      ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, 1, ""});
  first.join();
  ASSERT_TRUE(late.ok()) << late.status();
  ASSERT_NE(early, nullptr);
  for (ControlClient* c : {early.get(), late->get()}) c->ReportReady();
  for (ControlClient* c : {early.get(), late->get()}) ASSERT_TRUE(c->WaitForStart(Soon()).ok());
  absl::SleepFor(2 * options.heartbeat_timeout);
  EXPECT_EQ(observer_->down_reason, "");
  EXPECT_TRUE(early->health().ok()) << early->health();
}

// A worker's step split reaches the coordinator's observer as sent: the seconds since its last
// report with each progress report, its totals and its device with its statistics.
TEST_F(CoordinatorTest, ReportsCarryTheWorkersStepSplit) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.evaluate = false;
  ASSERT_TRUE(Start(options).ok());
  std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(1);
  ASSERT_EQ(w.size(), 1u);
  w[0]->ReportProgress({.clock = 10,
                        .step_seconds = {.steps = 10,
                                         .batch = 0.5,
                                         .upload = 0.25,
                                         .compute = 2,
                                         .compress = 0.75,
                                         .download = 0.125,
                                         .network = 1.5}});
  w[0]->ReportWorkerDone(
      {.steps = 10, .step_seconds = {.steps = 10, .network = 3}, .device = "cuda:1"});
  auto command = w[0]->WaitForCommand(Soon());
  ASSERT_TRUE(command.ok()) << command.status();
  EXPECT_EQ(*command, Command::kShutdown);
  const absl::Status result = Join();
  EXPECT_TRUE(result.ok()) << result;
  EXPECT_EQ(observer_->last_clock, 10);
  EXPECT_EQ(observer_->progress_split, (std::vector<double>{10, 0.5, 0.25, 2, 0.75, 0.125, 1.5}));
  EXPECT_EQ(observer_->done_steps_timed, 10);
  EXPECT_EQ(observer_->done_network, 3);
  EXPECT_EQ(observer_->done_device, "cuda:1");
}

// Under ASP a worker that fails on its own (and says so) is dropped, as a killed one is; one
// that rejects its input stops the job.
TEST_F(CoordinatorTest, UnderAspAWorkerThatFailsIsDroppedButBadInputStopsTheJob) {
  for (const absl::StatusCode code :
       {absl::StatusCode::kUnavailable, absl::StatusCode::kInvalidArgument}) {
    SCOPED_TRACE(absl::StatusCodeToString(code));
    CoordinatorOptions options = SmallJob();
    options.num_servers = 0;
    options.num_workers = 2;
    options.staleness = -1;
    options.evaluate = false;
    ASSERT_TRUE(Start(options).ok());
    std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(2);
    ASSERT_EQ(w.size(), 2u);
    w[1]->ReportAbort(absl::Status(code, "w1 gave up"));
    w[1].reset();
    if (code == absl::StatusCode::kInvalidArgument) {
      const absl::Status result = Join();
      EXPECT_FALSE(result.ok());
      EXPECT_NE(result.message().find("w1 gave up"), std::string::npos) << result;
      continue;
    }
    // w0 finishes; the job ends ok without w1.
    w[0]->ReportWorkerDone({.steps = 5});
    auto command = w[0]->WaitForCommand(Soon());
    ASSERT_TRUE(command.ok()) << command.status();
    EXPECT_EQ(*command, Command::kShutdown);
    const absl::Status result = Join();
    EXPECT_TRUE(result.ok()) << result;
    EXPECT_NE(observer_->down_reason.find("w1 gave up"), std::string::npos)
        << observer_->down_reason;
  }
}

// With --min-workers a BSP job goes on without a lost worker: the others hear the clock it had
// reached and who takes its batches (the workers still training, not those done); below the
// minimum the job stops, naming it.
TEST_F(CoordinatorTest, UnderBspWithMinWorkersALostWorkersBatchesGoToThoseStillTraining) {
  std::vector<std::unique_ptr<ControlClient>> w = FourWorkersAtLeastThree();
  ASSERT_EQ(w.size(), 4u);
  w[0]->ReportWorkerDone({.steps = 5});
  w[3]->SetClock(7);
  absl::SleepFor(absl::Milliseconds(100));  // a heartbeat carries the clock
  w[3].reset();
  std::vector<ControlClient::WorkerLeft> left;
  const absl::Time deadline = Soon();
  while (left.empty() && absl::Now() < deadline) {
    for (auto& e : w[1]->TakePlanEvents()) {
      left.push_back(std::get<ControlClient::WorkerLeft>(std::move(e)));
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].worker, 3);
  EXPECT_EQ(left[0].clock, 6);  // one before the heartbeat's: its clock messages may not have left
  EXPECT_EQ(left[0].takers, (std::vector<int>{1, 2}));
  EXPECT_TRUE(w[1]->health().ok());
  // A second loss leaves 2 workers (w0 done, w1): fewer than 3.
  w[2].reset();
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(result.message().find("2 workers left, fewer than --min-workers 3"), std::string::npos)
      << result;
  EXPECT_NE(result.message().find("w2"), std::string::npos) << result;
}

// Under ASP with hand-over, a worker that has trained its plan waits, idle, while others train:
// one lost after that still has takers (the idle worker among them), and both survivors are
// released once neither trains (before, a worker lost within a heartbeat timeout of the
// others' end left its batches untrained).
TEST_F(CoordinatorTest, UnderAspAWorkerLostAfterAnotherFinishedItsPlanStillHasTakers) {
  CoordinatorOptions options = AspHandOverJob(3);
  ASSERT_TRUE(Start(options).ok());
  std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(3);
  ASSERT_EQ(w.size(), 3u);
  absl::StatusOr<bool> first = absl::UnknownError("not asked");
  std::thread idle([&] { first = w[0]->AwaitRelease(); });  // w0 has trained its plan
  w[2]->SetClock(9);
  absl::SleepFor(absl::Milliseconds(100));  // a heartbeat carries the clock
  w[2].reset();
  idle.join();
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FALSE(*first);  // not released: batches came
  std::vector<ControlClient::PlanEvent> events = w[0]->TakePlanEvents();
  ASSERT_EQ(events.size(), 1u);
  const auto& left = std::get<ControlClient::WorkerLeft>(events[0]);
  EXPECT_EQ(left.worker, 2);
  EXPECT_EQ(left.takers, (std::vector<int>{0, 1}));
  size_t heard = 0;  // w1 hears the departure too
  for (const absl::Time deadline = Soon(); heard == 0 && absl::Now() < deadline;) {
    heard = w[1]->TakePlanEvents().size();
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_EQ(heard, 1u);
  // w0 trains its share and waits again; w1 finishes: both are released.
  absl::StatusOr<bool> second = absl::UnknownError("not asked");
  std::thread idle_again([&] { second = w[0]->AwaitRelease(); });
  absl::StatusOr<bool> last = w[1]->AwaitRelease();
  idle_again.join();
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_TRUE(*last);
  EXPECT_TRUE(*second);
  for (int r : {0, 1}) w[r]->ReportWorkerDone({.steps = 5});
  EXPECT_TRUE(Join().ok());
}

// A worker lost after it registered but before it reported ready does not hold the start of
// a job that goes on without it (it used to wait out the startup timeout, then fail).
TEST_F(CoordinatorTest, UnderAspAWorkerLostBeforeItIsReadyDoesNotHoldTheStart) {
  CoordinatorOptions options = AspHandOverJob(3);
  options.startup_timeout = absl::Seconds(30);
  ASSERT_TRUE(Start(options).ok());
  std::vector<std::unique_ptr<ControlClient>> w(3);
  std::vector<std::thread> joins;
  for (int r = 0; r < 3; ++r) {
    joins.emplace_back([&, r] {
      auto c =
          ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, r, ""});
      ASSERT_TRUE(c.ok()) << c.status();
      w[r] = std::move(*c);
    });
  }
  for (std::thread& t : joins) t.join();
  ASSERT_TRUE(w[0] && w[1] && w[2]);
  coordinator_->ReportLost(wire::Role::WORKER, 1, "w1 killed by signal 9");
  w[1].reset();
  for (int r : {0, 2}) w[r]->ReportReady();
  const absl::Time before = absl::Now();
  for (int r : {0, 2}) ASSERT_TRUE(w[r]->WaitForStart(Soon()).ok());
  EXPECT_LT(absl::Now() - before, absl::Seconds(10));
  for (int r : {0, 2}) w[r]->ReportWorkerDone({.steps = 5});
  EXPECT_TRUE(Join().ok());
  EXPECT_NE(observer_->down_reason.find("w1 killed"), std::string::npos) << observer_->down_reason;
}

// An elastic all-reduce meets again after each departure: a meeting is named by the
// generation and the plan events heard, an address for a meeting the membership has moved
// past is no one's, and the members are the workers still in the job (the lost one's address
// is "").
TEST_F(CoordinatorTest, AfterADepartureTheWorkersStillInTheJobMeetWithoutIt) {
  std::vector<std::unique_ptr<ControlClient>> w = FourWorkersAtLeastThree();
  ASSERT_EQ(w.size(), 4u);
  w[0]->ReportPeerAddress(0, 0, "tcp://before:1");  // of the membership before the departure
  w[2].reset();
  const absl::Time deadline = Soon();
  while (absl::Now() < deadline && (w[0]->PlanEventsHeard() < 1 || w[1]->PlanEventsHeard() < 1 ||
                                    w[3]->PlanEventsHeard() < 1)) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (int r : {0, 1, 3}) ASSERT_EQ(w[r]->PlanEventsHeard(), 1u) << "w" << r;
  // A meeting that the departure overtook ends for those waiting on it.
  EXPECT_TRUE(absl::IsAborted(w[0]->AwaitPeerAddresses(0, 0, Soon()).status()));
  w[0]->ReportPeerAddress(0, 1, "tcp://a:1");
  w[1]->ReportPeerAddress(0, 1, "tcp://b:2");
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      w[0]->AwaitPeerAddresses(0, 1, absl::Now() + absl::Milliseconds(200)).status()));
  w[3]->ReportPeerAddress(0, 1, "tcp://d:4");
  for (int r : {0, 1, 3}) {
    absl::StatusOr<std::vector<std::string>> got = w[r]->AwaitPeerAddresses(0, 1, Soon());
    ASSERT_TRUE(got.ok()) << "w" << r << ": " << got.status();
    EXPECT_EQ(*got, (std::vector<std::string>{"tcp://a:1", "tcp://b:2", "", "tcp://d:4"}));
  }
  for (int r : {0, 1, 3}) w[r]->ReportWorkerDone({.steps = 40});
  const absl::Status result = Join();
  EXPECT_TRUE(result.ok()) << result;
}

// A worker that heartbeats but trains no more (a hang in its compute) is named by the clock
// its heartbeats carry, before the workers that wait for it time out blaming a server.
TEST_F(CoordinatorTest, AWorkerStuckWhileOthersWaitIsNamedWithItsClock) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.num_workers = 2;
  options.staleness = 0;
  options.stuck_timeout = absl::Milliseconds(300);
  ASSERT_TRUE(Start(options).ok());
  std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(2);
  ASSERT_EQ(w.size(), 2u);
  const absl::Time start = absl::Now();
  w[0]->SetClock(5);  // waits at clock 5 for w1
  w[1]->SetClock(4);  // alive, but never gets further
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded) << result;
  EXPECT_NE(result.message().find("w1 (pid"), std::string::npos) << result;
  EXPECT_NE(result.message().find("stuck at clock 4"), std::string::npos) << result;
  EXPECT_NE(result.message().find("while 1 worker waits"), std::string::npos) << result;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A node the launcher saw exit before it registered (an unknown host, a missing binary) fails
// the job at once with the launcher's reason, whatever the mode: no job starts without it.
TEST_F(CoordinatorTest, ANodeLostBeforeRegisteringFailsTheStartNamingIt) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.num_workers = 2;
  options.staleness = -1;  // ASP: a lost worker would be dropped once the job runs
  options.startup_timeout = absl::Seconds(60);
  ASSERT_TRUE(Start(options).ok());
  const absl::Time start = absl::Now();
  coordinator_->ReportLost(wire::Role::WORKER, 1, "w1 exited with code 255");
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kUnavailable) << result;
  EXPECT_NE(result.message().find("w1 exited with code 255"), std::string::npos) << result;
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "waited for the startup timeout";
}

TEST_F(CoordinatorTest, RejectsRanksOutsideTheJob) {
  ASSERT_TRUE(Start(SmallJob(), /*observe=*/false).ok());
  auto bad =
      ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, 5, ""});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("outside this job"), std::string::npos);
  // The fixture aborts the job.
}

TEST_F(CoordinatorTest, RefusesANodeOfAnotherBuildNamingBothVersions) {
  ASSERT_TRUE(Start(SmallJob(), /*observe=*/false).ok());
  ControlOptions other{coordinator_->address(), wire::Role::WORKER, 0, ""};
  other.version = "0.0.1+wire.000000000000";
  auto refused = ControlClient::Connect(*transport_, other);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(refused.status().message());
  EXPECT_NE(message.find("0.0.1+wire.000000000000"), std::string::npos) << message;
  EXPECT_NE(message.find(kBuildVersion), std::string::npos) << message;
  // The fixture aborts the job.
}

// mpirun -np 3 for a job of 4 nodes: the first rank to register says so, and the job stops
// then, naming both sizes, instead of waiting out the startup timeout for a rank that will
// never come.
TEST_F(CoordinatorTest, AWorldOfTheWrongSizeFailsAtOnceNamingBothSizes) {
  CoordinatorOptions o = SmallJob();
  o.num_servers = 2;
  o.num_workers = 2;
  o.startup_timeout = absl::Seconds(60);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(Start(o, /*observe=*/false).ok());
  ControlOptions c{coordinator_->address(), wire::Role::SERVER, 0, "inproc://ps0"};
  c.world_size = 3;
  auto client = ControlClient::Connect(*transport_, c);
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kFailedPrecondition) << result;
  EXPECT_NE(result.message().find("started as one of 3 ranks, but this job has 4 nodes"),
            std::string::npos)
      << result;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The node is told too.
  EXPECT_FALSE(client.ok());
  EXPECT_NE(client.status().message().find("one of 3 ranks"), std::string::npos) << client.status();
}

// The same node with the right world size is let in (a world size of 0 means "not started as
// a world", as for nodes the launcher starts one by one).
TEST_F(CoordinatorTest, TheRightWorldSizeIsAccepted) {
  ASSERT_TRUE(Start(SmallJob(), /*observe=*/false).ok());
  std::thread abort_later([&] {
    absl::SleepFor(absl::Milliseconds(300));
    coordinator_->Abort("test over");
  });
  ControlOptions server{coordinator_->address(), wire::Role::SERVER, 0, "inproc://ps0"};
  server.world_size = 2;
  std::thread s([&] { EXPECT_TRUE(ControlClient::Connect(*transport_, server).ok()); });
  ControlOptions worker{coordinator_->address(), wire::Role::WORKER, 0, ""};
  worker.world_size = 2;
  EXPECT_TRUE(ControlClient::Connect(*transport_, worker).ok());
  s.join();
  const absl::Status result = Join();
  abort_later.join();
  EXPECT_EQ(result.message(), "test over");
}

// In-place recovery: a failed worker's replacement registers under its id and restores the
// checkpoint every other node rolls back to; the job resumes once all of them have.
TEST_F(CoordinatorTest, ARestartRollsEveryNodeBackAndResumesOnceAllHaveRestored) {
  std::vector<std::unique_ptr<ControlClient>> w = TrainWorkersOnly(3, /*restarts=*/1);
  ASSERT_EQ(w.size(), 3u);
  // Restarts are taken once the job trains.
  ASSERT_TRUE(coordinator_->CanRestart());
  w[2]->SetClock(31);
  w[1].reset();  // its process died
  ASSERT_TRUE(coordinator_->Restart(wire::Role::WORKER, 1, "w1 killed", 20, "ckpt/20"));
  EXPECT_FALSE(coordinator_->CanRestart());  // --max-restarts 1, spent
  EXPECT_FALSE(coordinator_->Restart(wire::Role::WORKER, 0, "w0 killed", 20, "ckpt/20"));
  for (int r : {0, 2}) {
    std::optional<ControlClient::Rollback> back = AwaitRollback(*w[r]);
    ASSERT_TRUE(back.has_value()) << "w" << r;
    EXPECT_EQ(back->generation, 1u);
    EXPECT_EQ(back->clock, 20);
    EXPECT_EQ(back->dir, "ckpt/20");
  }
  // The replacement gets its table once every other node has rolled back (a server busy
  // restoring may not have let go of the failed node's connection yet): it joins at the
  // rollback's generation, told what to restore.
  w[0]->ReportRolledBack(1);
  w[2]->ReportRolledBack(1);
  auto replacement =
      ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, 1, ""});
  ASSERT_TRUE(replacement.ok()) << replacement.status();
  EXPECT_EQ((*replacement)->table().generation, 1u);
  EXPECT_EQ((*replacement)->table().restore, "ckpt/20");
  EXPECT_FALSE((*replacement)->PendingRollback().has_value());
  // Nobody resumes before every node has restored: the replacement too.
  EXPECT_FALSE(w[0]->WaitForResume(1, absl::Now() + absl::Milliseconds(200)).ok());
  (*replacement)->ReportReady();
  EXPECT_TRUE(w[0]->WaitForResume(1, Soon()).ok());
  EXPECT_TRUE(w[2]->WaitForResume(1, Soon()).ok());
  EXPECT_TRUE((*replacement)->WaitForStart(Soon()).ok());
  EXPECT_FALSE(w[0]->PendingRollback().has_value());
  EXPECT_EQ(w[0]->generation(), 1u);
  EXPECT_EQ(observer_->recovered_clock.load(), 20);
  EXPECT_EQ(observer_->steps_undone.load(), 11);  // w2 had reached clock 31
  for (ControlClient* c : {w[0].get(), replacement->get(), w[2].get()}) {
    c->ReportWorkerDone({.steps = 40});
  }
  const absl::Status result = Join();
  EXPECT_TRUE(result.ok()) << result;
}

// After a rollback the workers of a collective meet on endpoints of the new generation: each
// tells the coordinator where its own listens, and once every worker has, every worker gets
// all of them. An address of another generation is no one's; a rollback during the meeting
// ends it for those waiting, and the next generation meets afresh.
TEST_F(CoordinatorTest, TheWorkersOfAGenerationGetEveryWorkersAddressOnceAllHaveSentTheirs) {
  std::vector<std::unique_ptr<ControlClient>> w = TrainWorkersOnly(3, /*restarts=*/2);
  ASSERT_EQ(w.size(), 3u);
  // w1 fails and is replaced (generation g); every node resumes.
  auto replace_w1 = [&](uint32_t g) {
    w[1].reset();
    ASSERT_TRUE(coordinator_->Restart(wire::Role::WORKER, 1, "w1 killed", 20, "ckpt/20"));
    for (int r : {0, 2}) {
      ASSERT_TRUE(AwaitRollback(*w[r]).has_value());
      w[r]->ReportRolledBack(g);
    }
    auto replacement =
        ControlClient::Connect(*transport_, {coordinator_->address(), wire::Role::WORKER, 1, ""});
    ASSERT_TRUE(replacement.ok()) << replacement.status();
    w[1] = *std::move(replacement);
    w[1]->ReportReady();
    for (int r : {0, 1, 2}) ASSERT_TRUE(w[r]->WaitForResume(g, Soon()).ok()) << "w" << r;
  };
  replace_w1(1);
  w[0]->ReportPeerAddress(0, 0, "tcp://stale:1");  // of the undone timeline: no one's
  w[0]->ReportPeerAddress(1, 0, "tcp://a:1");
  w[2]->ReportPeerAddress(1, 0, "tcp://c:3");
  EXPECT_TRUE(absl::IsDeadlineExceeded(
      w[0]->AwaitPeerAddresses(1, 0, absl::Now() + absl::Milliseconds(200)).status()));
  // The replacement fails again before it has sent its own: the meeting of generation 1 ends.
  replace_w1(2);
  EXPECT_TRUE(absl::IsAborted(w[0]->AwaitPeerAddresses(1, 0, Soon()).status()));
  w[0]->ReportPeerAddress(2, 0, "tcp://a:4");
  w[1]->ReportPeerAddress(2, 0, "tcp://b:5");
  w[2]->ReportPeerAddress(2, 0, "tcp://c:6");
  for (int r : {0, 1, 2}) {
    absl::StatusOr<std::vector<std::string>> got = w[r]->AwaitPeerAddresses(2, 0, Soon());
    ASSERT_TRUE(got.ok()) << "w" << r << ": " << got.status();
    EXPECT_EQ(*got, (std::vector<std::string>{"tcp://a:4", "tcp://b:5", "tcp://c:6"}));
  }
  for (ControlClient* c : {w[0].get(), w[1].get(), w[2].get()}) {
    c->ReportWorkerDone({.steps = 40});
  }
  const absl::Status result = Join();
  EXPECT_TRUE(result.ok()) << result;
}

// A replacement that never comes: the rollback fails within the startup timeout, naming whom
// it waited for, and every node hears why.
TEST_F(CoordinatorTest, ARollbackThatCannotFinishIsNamedAndNeverHangs) {
  CoordinatorOptions options = SmallJob();
  options.num_servers = 0;
  options.num_workers = 2;
  options.max_restarts = 3;
  options.evaluate = false;
  options.startup_timeout = absl::Milliseconds(600);
  ASSERT_TRUE(Start(options).ok());
  std::vector<std::unique_ptr<ControlClient>> w = StartWorkers(2);
  ASSERT_EQ(w.size(), 2u);
  WaitForTraining();
  w[1].reset();
  ASSERT_TRUE(coordinator_->Restart(wire::Role::WORKER, 1, "w1 killed", 10, "ckpt/10"));
  ASSERT_TRUE(AwaitRollback(*w[0]).has_value());
  w[0]->ReportRolledBack(1);
  EXPECT_FALSE(w[0]->WaitForResume(1, Soon()).ok());  // the job was aborted
  const absl::Status result = Join();
  EXPECT_EQ(result.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(result.message().find("waiting for w1 (its replacement has not registered)"),
            std::string::npos)
      << result;
}

// Polls `take` (bounded) until it gives something.
template <typename Take>
auto AwaitSome(Take take) {
  const absl::Time deadline = Soon();
  auto got = take();
  while (got.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(2));
    got = take();
  }
  return got;
}

// A worker joins: it gets the next rank, every worker still training is asked for its cut,
// and the arrival comes after the departures before it, in the same order for every worker;
// the joiner hears them all right after its table. A second joiner finds no rank left.
TEST_F(CoordinatorTest, AJoinerGetsARankAndEveryWorkerHearsItsArrivalAfterEarlierDepartures) {
  CoordinatorOptions o = SmallJob();
  o.num_servers = 0;
  o.num_workers = 3;
  o.max_workers = 4;
  o.staleness = -1;
  o.min_workers = 1;
  o.hand_over = true;
  o.evaluate = false;
  ASSERT_TRUE(Start(o).ok());
  auto w = StartWorkers(3);
  ASSERT_EQ(w.size(), 3u);
  // w1 leaves first: its departure names w0 and w2 as takers.
  coordinator_->ReportLost(wire::Role::WORKER, 1, "w1 gone");
  for (int r : {0, 2}) {
    auto events = AwaitSome([&] { return w[r]->TakePlanEvents(); });
    ASSERT_EQ(events.size(), 1u);
    ASSERT_TRUE(std::holds_alternative<ControlClient::WorkerLeft>(events[0]));
    EXPECT_EQ(std::get<ControlClient::WorkerLeft>(events[0]).takers, (std::vector<int>{0, 2}));
  }
  auto rank = RequestJoin(*transport_, coordinator_->address(), absl::Seconds(10));
  ASSERT_TRUE(rank.ok()) << rank.status();
  EXPECT_EQ(*rank, 3);
  std::unique_ptr<ControlClient> joiner;
  std::thread registering([&] {
    auto c = ControlClient::Connect(*transport_,
                                    {coordinator_->address(), wire::Role::WORKER, *rank, ""});
    EXPECT_TRUE(c.ok()) << c.status();
    if (c.ok()) joiner = std::move(*c);
  });
  // The two still training are asked for their cuts (w1 is gone); the arrival waits for both.
  for (int r : {0, 2}) {
    auto asked = AwaitSome([&] {
      auto c = w[r]->TakeCutRequest();
      return c ? std::vector<int>{*c} : std::vector<int>{};
    });
    ASSERT_EQ(asked, std::vector<int>{3});
    w[r]->ReportCut(20 + r);
  }
  registering.join();
  ASSERT_NE(joiner, nullptr);
  bool in_table = false;
  for (const NodeInfo& n : joiner->table().nodes)
    in_table |= n.role == wire::Role::WORKER && n.rank == 3;
  EXPECT_TRUE(in_table);
  EXPECT_EQ(joiner->table().MaxWorkers(), 4);
  // The joiner hears the departure, then its own arrival; the others the arrival.
  auto heard = AwaitSome([&] { return joiner->TakePlanEvents(); });
  if (heard.size() < 2) {
    auto more = AwaitSome([&] { return joiner->TakePlanEvents(); });
    heard.insert(heard.end(), more.begin(), more.end());
  }
  ASSERT_EQ(heard.size(), 2u);
  ASSERT_TRUE(std::holds_alternative<ControlClient::WorkerLeft>(heard[0]));
  EXPECT_EQ(std::get<ControlClient::WorkerLeft>(heard[0]).worker, 1);
  ASSERT_TRUE(std::holds_alternative<ControlClient::WorkerArrived>(heard[1]));
  const auto& arrived = std::get<ControlClient::WorkerArrived>(heard[1]);
  EXPECT_EQ(arrived.worker, 3);
  EXPECT_EQ(arrived.first_clock, 20);
  EXPECT_EQ(arrived.cuts, (std::vector<std::pair<int, int64_t>>{{0, 20}, {2, 22}}));
  for (int r : {0, 2}) {
    auto events = AwaitSome([&] { return w[r]->TakePlanEvents(); });
    ASSERT_EQ(events.size(), 1u);
    ASSERT_TRUE(std::holds_alternative<ControlClient::WorkerArrived>(events[0]));
    EXPECT_EQ(std::get<ControlClient::WorkerArrived>(events[0]).cuts, arrived.cuts);
  }
  // No rank is left for another.
  auto late = RequestJoin(*transport_, coordinator_->address(), absl::Seconds(10));
  EXPECT_TRUE(absl::IsResourceExhausted(late.status())) << late.status();
  // The joiner starts once ready, and the job ends when it is done too.
  joiner->ReportReady();
  ASSERT_TRUE(joiner->WaitForStart(Soon()).ok());
  for (int r : {0, 2}) w[r]->ReportWorkerDone({.steps = 30});
  joiner->ReportWorkerDone({.steps = 5});
  EXPECT_TRUE(Join().ok());
}

// A job without --max-workers refuses a joiner for good.
TEST_F(CoordinatorTest, AJobWithoutMaxWorkersRefusesAJoiner) {
  CoordinatorOptions o = SmallJob();
  o.num_servers = 0;
  o.staleness = -1;
  o.evaluate = false;
  ASSERT_TRUE(Start(o).ok());
  auto w = StartWorkers(1);
  ASSERT_EQ(w.size(), 1u);
  auto rank = RequestJoin(*transport_, coordinator_->address(), absl::Seconds(10));
  EXPECT_TRUE(absl::IsFailedPrecondition(rank.status())) << rank.status();
  EXPECT_NE(rank.status().message().find("takes no joins"), std::string::npos) << rank.status();
  w[0]->ReportWorkerDone({.steps = 1});
  EXPECT_TRUE(Join().ok());
}

}  // namespace
}  // namespace syncline
