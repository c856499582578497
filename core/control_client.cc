#include "core/control_client.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "core/log.h"

namespace syncline {

absl::StatusOr<std::unique_ptr<ControlClient>> ControlClient::Connect(
    Transport& transport, const ControlOptions& options) {
  auto endpoint = transport.CreateEndpoint(ControlEndpointId(options.role, options.rank));
  if (!endpoint.ok()) return endpoint.status();
  Endpoint& ep = **endpoint;
  if (auto s = ep.Connect(kCoordinatorId, options.coordinator_address); !s.ok()) return s;

  MessageBuilder b(wire::MsgType::REGISTER);
  b.header().setRole(options.role);
  b.header().setRank(options.rank);
  auto reg = b.header().getBody().initRegister();
  reg.setDataAddress(options.data_address);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  reg.setHost(host);
  reg.setPid(static_cast<int32_t>(getpid()));
  reg.setVersion(options.version);
  reg.setWorldSize(options.world_size);
  reg.setMetricsPort(static_cast<uint16_t>(options.metrics_port));
  const absl::Time deadline = absl::Now() + options.startup_timeout;
  if (auto s = ep.Send(kCoordinatorId, b.Finish(), deadline); !s.ok()) return s;

  while (true) {
    auto reply = ep.Receive(deadline);
    if (!reply.ok()) {
      if (absl::IsDeadlineExceeded(reply.status())) {
        return absl::DeadlineExceededError(absl::StrFormat(
            "no answer from the coordinator at %s within %s: is it running, did every node of "
            "the job start, and does this node have the job's key (--key-file; a node with "
            "another job's key, or none where the job has one, is never answered)?",
            options.coordinator_address, absl::FormatDuration(options.startup_timeout)));
      }
      return reply.status();
    }
    if (auto s = reply->Parse(); !s.ok()) {
      SYNCLINE_LOG(WARNING) << "ignoring a malformed control message: " << s;
      continue;
    }
    auto h = reply->header();
    if (h.getType() == wire::MsgType::ERROR || h.getType() == wire::MsgType::ABORT) {
      return StatusFromHeader(h);
    }
    if (h.getType() != wire::MsgType::REGISTERED || !h.getBody().isNodeTable()) continue;
    auto table = NodeTable::FromWire(h.getBody().getNodeTable());
    if (!table.ok()) return table.status();
    return std::unique_ptr<ControlClient>(
        new ControlClient(std::move(*endpoint), options, std::move(*table)));
  }
}

ControlClient::ControlClient(std::unique_ptr<Endpoint> endpoint, ControlOptions options,
                             NodeTable table)
    : endpoint_(std::move(endpoint)), options_(std::move(options)), table_(std::move(table)) {
  generation_ = table_.generation;
  resumed_ = table_.generation;
  thread_ = std::thread([this] { Loop(); });
}

ControlClient::~ControlClient() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void ControlClient::ReportReady() {
  Send(MakeSimple(wire::MsgType::READY, options_.role, options_.rank));
}

absl::Status ControlClient::WaitForStart(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return started_ || !health_.ok(); };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError("the coordinator did not start the job in time");
  }
  return health_;
}

absl::StatusOr<Command> ControlClient::WaitForCommand(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !commands_.empty() || !health_.ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError("no command from the coordinator in time");
  }
  if (!commands_.empty()) {
    Command c = commands_.front();
    commands_.pop_front();
    return c;
  }
  return health_;
}

void ControlClient::Send(Message message) {
  absl::MutexLock lock(&mu_);
  outbox_.push_back(std::move(message));
}

MessageBuilder ControlClient::FromThisNode(wire::MsgType type) const {
  MessageBuilder b(type);
  b.header().setRole(options_.role);
  b.header().setRank(options_.rank);
  return b;
}

namespace {

void SetStepSeconds(const StepSeconds& s, wire::StepSeconds::Builder out) {
  out.setSteps(s.steps);
  out.setBatch(s.batch);
  out.setUpload(s.upload);
  out.setCompute(s.compute);
  out.setCompress(s.compress);
  out.setDownload(s.download);
  out.setNetwork(s.network);
}

}  // namespace

void ControlClient::ReportProgress(const ProgressReport& p) {
  MessageBuilder b = FromThisNode(wire::MsgType::PROGRESS);
  auto progress = b.header().getBody().initProgress();
  progress.setClock(p.clock);
  progress.setEpoch(p.epoch);
  progress.setTrainLoss(p.train_loss);
  progress.setExamples(p.examples);
  progress.setTotalSteps(p.total_steps);
  progress.setStaleness(p.staleness);
  progress.setConsensus(p.consensus);
  SetStepSeconds(p.step_seconds, progress.initStepSeconds());
  progress.setBytes(p.bytes);
  Send(b.Finish());
}

void ControlClient::ReportWorkerDone(const WorkerDoneReport& r) {
  MessageBuilder b = FromThisNode(wire::MsgType::WORKER_DONE);
  auto stats = b.header().getBody().initWorkerStats();
  stats.setSteps(r.steps);
  stats.setStepsTrained(r.steps_trained);
  stats.setExamples(r.examples);
  stats.setBytesPushed(r.bytes_pushed);
  stats.setBytesPulled(r.bytes_pulled);
  SetStepSeconds(r.step_seconds, stats.initStepSeconds());
  stats.setDevice(r.device);
  stats.setExamplesInModel(r.examples_in_model);
  Send(b.Finish());
}

void ControlClient::ReportResult(const EvaluationReport& r) {
  Send(EvaluationMessage(wire::MsgType::RESULT, -1, r));
}

void ControlClient::ReportHeldOut(int64_t clock, const EvaluationReport& r) {
  Send(EvaluationMessage(wire::MsgType::HELD_OUT, clock, r));
}

Message ControlClient::EvaluationMessage(wire::MsgType type, int64_t clock,
                                         const EvaluationReport& r) const {
  MessageBuilder b = FromThisNode(type);
  b.header().setClock(clock);
  auto e = b.header().getBody().initEvaluation();
  e.setLoss(r.loss);
  e.setAuc(r.auc);
  e.setAccuracy(r.accuracy);
  e.setExamples(r.examples);
  e.setSeconds(r.seconds);
  return b.Finish();
}

void ControlClient::ReportCheckpointed(int64_t clock, const absl::Status& status) {
  Send(MakeCheckpointed(options_.role, options_.rank, clock, status));
}

void ControlClient::ReportAbort(const absl::Status& status, absl::Duration flush) {
  MessageBuilder b = FromThisNode(wire::MsgType::ABORT);
  b.header().setStatusCode(static_cast<int32_t>(status.code()));
  b.header().setMessage(std::string(status.message()));
  Send(b.Finish());
  (void)Flush(absl::Now() + flush);
}

absl::Status ControlClient::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (outbox_.empty() && in_flight_ == 0) || stop_;
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError("control messages not sent in time");
  }
  return absl::OkStatus();
}

absl::Status ControlClient::health() const {
  absl::MutexLock lock(&mu_);
  return health_;
}

std::vector<int> ControlClient::TakeDownWorkers() {
  absl::MutexLock lock(&mu_);
  return std::exchange(down_workers_, {});
}

std::vector<ControlClient::PlanEvent> ControlClient::TakePlanEvents() {
  absl::MutexLock lock(&mu_);
  return std::exchange(plan_events_, {});
}

absl::StatusOr<bool> ControlClient::AwaitRelease() {
  Send(MakeSimple(wire::MsgType::WORKER_IDLE, options_.role, options_.rank));
  absl::MutexLock lock(&mu_);
  auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return released_ || !plan_events_.empty() || cut_request_.has_value() ||
           (rollback_ && rollback_->generation > generation_) || !health_.ok();
  };
  mu_.Await(absl::Condition(&woken));
  if (!health_.ok()) return health_;
  if (rollback_ && rollback_->generation > generation_) {
    return absl::AbortedError(absl::StrFormat(
        "the job rolls back to checkpoint %d while this worker waited to be released",
        rollback_->clock));
  }
  return released_ && plan_events_.empty() && !cut_request_.has_value();
}

std::optional<int> ControlClient::TakeCutRequest() {
  absl::MutexLock lock(&mu_);
  return std::exchange(cut_request_, std::nullopt);
}

void ControlClient::ReportArrivalTaken(int worker) {
  MessageBuilder b = FromThisNode(wire::MsgType::ARRIVAL);
  b.header().setClock(worker);
  Send(b.Finish());
}

void ControlClient::ReportCut(int64_t clock) {
  MessageBuilder b = FromThisNode(wire::MsgType::CUT);
  b.header().setClock(clock);
  Send(b.Finish());
}

std::vector<int64_t> ControlClient::TakeCheckpointRequests() {
  absl::MutexLock lock(&mu_);
  return std::exchange(checkpoint_requests_, {});
}

std::optional<ControlClient::Rollback> ControlClient::PendingRollback() const {
  absl::MutexLock lock(&mu_);
  if (rollback_ && rollback_->generation > generation_) return rollback_;
  return std::nullopt;
}

std::optional<ControlClient::Rollback> ControlClient::WaitForRollback(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (rollback_ && rollback_->generation > generation_) || !health_.ok();
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  if (rollback_ && rollback_->generation > generation_) return rollback_;
  return std::nullopt;
}

void ControlClient::ReportRolledBack(uint32_t generation) {
  {
    absl::MutexLock lock(&mu_);
    generation_ = std::max(generation_, generation);
  }
  MessageBuilder b = FromThisNode(wire::MsgType::ROLLED_BACK);
  b.header().setGeneration(generation);
  // A worker's clock when it stopped: the iterations the rollback undid, with the checkpoint's.
  b.header().setClock(clock_.load(std::memory_order_relaxed));
  Send(b.Finish());
}

absl::Status ControlClient::WaitForResume(uint32_t generation, absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return resumed_ >= generation || (rollback_ && rollback_->generation > generation) ||
           !health_.ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "the coordinator did not resume the job after the rollback (generation %d) in time",
        generation));
  }
  return health_;
}

uint32_t ControlClient::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

uint64_t ControlClient::PlanEventsHeard() const {
  absl::MutexLock lock(&mu_);
  return plan_events_heard_;
}

void ControlClient::ReportPeerAddress(uint32_t generation, uint64_t plan_events,
                                      const std::string& address) {
  MessageBuilder b = FromThisNode(wire::MsgType::PEER_ADDRESS);
  b.header().setGeneration(generation);
  b.header().setClock(static_cast<int64_t>(plan_events));
  b.header().setMessage(address);
  Send(b.Finish());
}

absl::StatusOr<std::vector<std::string>> ControlClient::AwaitPeerAddresses(uint32_t generation,
                                                                           uint64_t plan_events,
                                                                           absl::Time deadline) {
  const std::pair<uint32_t, uint64_t> meeting(generation, plan_events);
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return (peer_addresses_ && peer_addresses_->key() >= meeting) ||
           (rollback_ && rollback_->generation > generation) || plan_events_heard_ > plan_events ||
           !health_.ok();
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&done), deadline)) {
    return absl::DeadlineExceededError(absl::StrFormat(
        "the coordinator did not hand out the peers' addresses (generation %d, after %d workers "
        "left or joined) in time",
        generation, plan_events));
  }
  if (!health_.ok()) return health_;
  if (peer_addresses_ && peer_addresses_->key() == meeting) return peer_addresses_->addresses;
  if (rollback_ && rollback_->generation > generation) {
    return absl::AbortedError(absl::StrFormat(
        "the job rolls back again (generation %d) before the peers of generation %d met",
        rollback_->generation, generation));
  }
  return absl::AbortedError(absl::StrFormat(
      "another worker left or joined (%d such events now) before the peers met after %d",
      plan_events_heard_, plan_events));
}

void ControlClient::Handle(Message& message) {
  if (auto s = message.Parse(); !s.ok()) {
    SYNCLINE_LOG(WARNING) << "ignoring a malformed control message from " << message.peer() << ": "
                          << s;
    return;
  }
  auto h = message.header();
  absl::MutexLock lock(&mu_);
  switch (h.getType()) {
    case wire::MsgType::START:
      started_ = true;
      break;
    case wire::MsgType::HEARTBEAT: {
      // The coordinator's answer echoes the heartbeat's send time (requestId) with its own.
      const int64_t sent = static_cast<int64_t>(h.getRequestId());
      const int64_t now = absl::ToUnixMicros(absl::Now());
      const int64_t round_trip = now - sent;
      const int64_t best = best_round_trip_us_.load(std::memory_order_relaxed);
      if (sent > 0 && h.getWallMicros() > 0 && round_trip >= 0 &&
          (best < 0 || round_trip <= best)) {
        best_round_trip_us_.store(round_trip, std::memory_order_relaxed);
        clock_offset_us_.store(h.getWallMicros() - (sent + now) / 2, std::memory_order_relaxed);
      }
      break;
    }
    case wire::MsgType::EVALUATE:
      commands_.push_back(Command::kEvaluate);
      break;
    case wire::MsgType::SHUTDOWN:
      commands_.push_back(Command::kShutdown);
      break;
    case wire::MsgType::RELEASE:
      released_ = true;
      break;
    case wire::MsgType::CHECKPOINT:
      checkpoint_requests_.push_back(h.getClock());
      break;
    case wire::MsgType::ROLLBACK:
      if (h.getClock() < 0) break;
      if (!rollback_ || h.getGeneration() > rollback_->generation) {
        rollback_ = Rollback{h.getGeneration(), h.getClock(), h.getMessage()};
        released_ = false;  // the timeline that was released is undone
        // Requests of the timeline being undone; the new one asks again.
        checkpoint_requests_.clear();
        SYNCLINE_LOG(WARNING) << "rolling back to checkpoint " << h.getClock() << " ("
                              << h.getMessage().cStr() << "): a node is being replaced";
      }
      break;
    case wire::MsgType::RESUME:
      resumed_ = std::max(resumed_, h.getGeneration());
      break;
    case wire::MsgType::PEER_ADDRESS: {
      if (!h.getBody().isNodeTable() || h.getClock() < 0) break;
      PeerMeeting meeting{h.getGeneration(), static_cast<uint64_t>(h.getClock()), {}};
      if (peer_addresses_ && meeting.key() <= peer_addresses_->key()) break;
      const int workers = table_.MaxWorkers();
      std::vector<std::string> addresses(workers);
      bool valid = true;
      for (auto n : h.getBody().getNodeTable().getNodes()) {
        valid =
            valid && n.getRole() == wire::Role::WORKER && n.getRank() >= 0 && n.getRank() < workers;
        if (valid) addresses[n.getRank()] = n.getAddress();
      }
      if (!valid) {
        SYNCLINE_LOG(WARNING) << "ignoring a malformed peerAddress message";
        break;
      }
      meeting.addresses = std::move(addresses);
      peer_addresses_ = std::move(meeting);
      break;
    }
    case wire::MsgType::NODE_DOWN:
      if (h.getBody().isNodeDown()) {
        auto d = h.getBody().getNodeDown();
        SYNCLINE_LOG(WARNING) << RoleName(d.getRole()) << " " << d.getRank()
                              << " is down: " << d.getReason().cStr();
        if (d.getRole() != wire::Role::WORKER) break;
        ++plan_events_heard_;  // the coordinator counts every worker's nodeDown it sends
        down_workers_.push_back(d.getRank());
        // The coordinator names only workers of the job; anything else is dropped whole.
        const int workers = table_.MaxWorkers();
        WorkerLeft left{d.getRank(), d.getClock(), {}};
        bool valid = left.worker >= 0 && left.worker < workers && left.clock >= 0 &&
                     d.getTakers().size() <= static_cast<unsigned>(workers);
        for (int32_t t : d.getTakers()) {
          valid = valid && t >= 0 && t < workers && t != left.worker &&
                  (left.takers.empty() || t > left.takers.back());
          left.takers.push_back(t);
        }
        if (valid) {
          plan_events_.push_back(std::move(left));
        } else {
          SYNCLINE_LOG(WARNING) << "ignoring the hand-over of a malformed nodeDown message";
        }
      }
      break;
    case wire::MsgType::CUT:
      if (h.getRank() >= table_.num_workers && h.getRank() < table_.MaxWorkers()) {
        cut_request_ = h.getRank();
      }
      break;
    case wire::MsgType::ARRIVAL:
      if (h.getBody().isArrival()) {
        ++plan_events_heard_;
        auto a = h.getBody().getArrival();
        const int workers = table_.MaxWorkers();
        WorkerArrived arrived{a.getWorker(), a.getFirstClock(), {}};
        bool valid = arrived.worker >= table_.num_workers && arrived.worker < workers &&
                     arrived.first_clock >= 0 && a.getDonors().size() == a.getCuts().size() &&
                     a.getDonors().size() <= static_cast<unsigned>(workers);
        for (unsigned i = 0; valid && i < a.getDonors().size(); ++i) {
          const int donor = a.getDonors()[i];
          const int64_t cut = a.getCuts()[i];
          valid = donor >= 0 && donor < workers && donor != arrived.worker && cut >= 0 &&
                  (arrived.cuts.empty() || donor > arrived.cuts.back().first);
          arrived.cuts.emplace_back(donor, cut);
        }
        if (valid) {
          SYNCLINE_LOG(INFO) << "w" << arrived.worker << " joins at clock " << arrived.first_clock
                             << " (" << arrived.cuts.size() << " donors)";
          plan_events_.push_back(std::move(arrived));
        } else {
          SYNCLINE_LOG(WARNING) << "ignoring a malformed arrival message";
        }
      }
      break;
    case wire::MsgType::ABORT:
    case wire::MsgType::ERROR:
      if (health_.ok()) {
        health_ = absl::AbortedError(absl::StrCat("job aborted: ", h.getMessage().cStr()));
      }
      break;
    default:
      break;
  }
}

void ControlClient::Loop() {
  const absl::Duration interval = table_.heartbeat_interval;
  absl::Time next_heartbeat = absl::Now();
  absl::Time last_heard = absl::Now();
  while (true) {
    std::deque<Message> outgoing;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      outgoing.swap(outbox_);
      in_flight_ = outgoing.size();
    }
    const absl::Time now = absl::Now();
    if (now >= next_heartbeat) {
      MessageBuilder heartbeat = FromThisNode(wire::MsgType::HEARTBEAT);
      heartbeat.header().setClock(clock_.load(std::memory_order_relaxed));
      const int64_t sent = absl::ToUnixMicros(absl::Now());
      heartbeat.header().setRequestId(static_cast<uint64_t>(sent));
      heartbeat.header().setWallMicros(sent);
      outgoing.push_back(heartbeat.Finish());
      next_heartbeat = now + interval;
    }
    for (Message& m : outgoing) {
      if (auto s = endpoint_->Send(kCoordinatorId, std::move(m), now + absl::Seconds(5)); !s.ok()) {
        SYNCLINE_LOG(WARNING) << "control message not sent: " << s;
      }
    }
    {
      absl::MutexLock lock(&mu_);
      in_flight_ = 0;
    }
    // Short receive timeouts keep queued reports moving without a wake-up channel.
    auto message =
        endpoint_->Receive(std::min(next_heartbeat, absl::Now() + absl::Milliseconds(20)));
    if (message.ok()) {
      last_heard = absl::Now();
      Handle(*message);
    } else if (!absl::IsDeadlineExceeded(message.status())) {
      SYNCLINE_LOG(WARNING) << "control receive failed: " << message.status();
    }
    if (absl::Now() - last_heard > table_.heartbeat_timeout) {
      absl::MutexLock lock(&mu_);
      if (health_.ok()) {
        health_ = absl::UnavailableError(absl::StrFormat(
            "lost contact with the coordinator at %s: nothing heard for %s",
            options_.coordinator_address, absl::FormatDuration(absl::Now() - last_heard)));
      }
    }
  }
}

absl::StatusOr<int> RequestJoin(Transport& transport, const std::string& coordinator,
                                absl::Duration timeout, const std::string& version) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status last = absl::DeadlineExceededError("no attempt made");
  for (int attempt = 0; absl::Now() < deadline; ++attempt) {
    if (attempt > 0) absl::SleepFor(absl::Milliseconds(500));
    // A fresh endpoint each time: a coordinator that still holds a previous joiner's
    // connection under the same id would not hear this one.
    auto endpoint = transport.CreateEndpoint(kJoinerControlId);
    if (!endpoint.ok()) return endpoint.status();
    Endpoint& ep = **endpoint;
    if (auto s = ep.Connect(kCoordinatorId, coordinator); !s.ok()) return s;
    MessageBuilder b(wire::MsgType::JOIN);
    b.header().setRole(wire::Role::WORKER);
    b.header().setRank(-1);
    b.header().setRequestId(static_cast<uint64_t>(attempt) + 1);
    auto reg = b.header().getBody().initRegister();
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    reg.setHost(host);
    reg.setPid(static_cast<int32_t>(getpid()));
    reg.setVersion(version);
    const absl::Time until = std::min(deadline, absl::Now() + absl::Seconds(5));
    if (auto s = ep.Send(kCoordinatorId, b.Finish(), until); !s.ok()) {
      last = s;
      continue;
    }
    while (true) {
      auto reply = ep.Receive(until);
      if (!reply.ok()) {
        last = absl::DeadlineExceededError(absl::StrFormat(
            "no answer from the coordinator at %s to the join request: is the job running?",
            coordinator));
        // Said once, so that a joiner of a job that has ended does not wait in silence.
        if (attempt == 0) SYNCLINE_LOG(WARNING) << last.message() << " (asking again)";
        break;
      }
      if (!reply->Parse().ok()) continue;
      auto h = reply->header();
      if (h.getType() == wire::MsgType::JOIN && h.getRank() >= 0) return h.getRank();
      if (h.getType() != wire::MsgType::ERROR) continue;
      last = StatusFromHeader(h);
      if (!absl::IsUnavailable(last)) {
        return absl::Status(
            last.code(), absl::StrCat("the job refused to let this worker join: ", last.message()));
      }
      SYNCLINE_LOG(INFO) << "the job cannot take this worker yet (" << last.message()
                         << "); asking again";
      break;
    }
  }
  return absl::Status(last.code(),
                      absl::StrCat("could not join the job within ", absl::FormatDuration(timeout),
                                   ": ", last.message()));
}

}  // namespace syncline
