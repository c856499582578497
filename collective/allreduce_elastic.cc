// AllReduceBackend's elastic rounds (ElasticOptions in allreduce_backend.h): a member lost
// mid-run leaves the collective at the next step boundary, and the others go on.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "collective/allreduce_backend.h"
#include "core/log.h"
#include "job/options.h"

namespace syncline {

namespace {

std::string Names(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ", ", [](std::string* out, int r) { absl::StrAppend(out, "w", r); });
}

// What each member tells the others when they meet: the clock of the first round it has not
// completed, the last completed round's flag, and the examples its model holds.
// A joiner (`fresh`) holds no model yet: its clock is no one's.
struct Standing {
  int64_t next_clock = 0;
  int64_t anyone_training = 0;
  double examples_summed = 0;
  int64_t fresh = 0;
};

}  // namespace

absl::Status AllReduceBackend::MakeElastic(ElasticOptions elastic, std::vector<int> members,
                                           uint64_t plan_events) {
  if (owned_dense_collective_ != nullptr) {
    return absl::InvalidArgumentError(
        "an elastic all-reduce (--min-workers) keeps its dense all-reduces on the CPU: NCCL "
        "cannot lose a rank");
  }
  if (codec_ != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("an elastic all-reduce (--min-workers) cannot be combined with --compress ",
                     CodecName(options_.codec),
                     ": a worker that takes over another's model would keep its own residual"));
  }
  if (static_cast<int>(members.size()) != communicator_->size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("elastic all-reduce: %d members named for a communicator of %d ranks",
                        members.size(), communicator_->size()));
  }
  elastic_ = std::move(elastic);
  members_ = std::move(members);
  met_at_ = plan_events;
  WatchMembership();
  return absl::OkStatus();
}

absl::Status AllReduceBackend::MakeElasticJoiner(ElasticOptions elastic, std::vector<int> members,
                                                 uint64_t plan_events) {
  if (auto s = MakeElastic(std::move(elastic), std::move(members), plan_events); !s.ok()) return s;
  fresh_ = true;
  return absl::OkStatus();
}

absl::Status AllReduceBackend::OnArrival(int worker, int64_t first_clock,
                                         std::span<const int> donors) {
  if (!elastic_ || members_[communicator_->rank()] != worker || catch_up_to_ >= 0) {
    return absl::OkStatus();
  }
  if (!elastic_error_.ok()) return elastic_error_;
  const absl::Time began = absl::Now();
  if (auto s = TakeTheModel(); !s.ok()) return s;
  if (next_clock_ > first_clock) {
    return absl::InternalError(absl::StrFormat(
        "elastic all-reduce: the members completed clock %d, past this joiner's first clock %d",
        next_clock_ - 1, first_clock));
  }
  catch_up_to_ = first_clock;
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "all-reduce: joined the ring of %s at clock %d with the model of clock %d in %s; answers "
      "%d rounds before its first",
      Names(members_), first_clock, next_clock_,
      absl::FormatDuration(absl::Trunc(absl::Now() - began, absl::Milliseconds(1))),
      first_clock - next_clock_);
  return absl::OkStatus();
}

absl::Status AllReduceBackend::TakeTheModel() {
  if (!fresh_) return absl::OkStatus();
  bool taken_over = false;
  absl::Status s = AgreeOnRounds({}, &taken_over);
  // A member left while they agreed: meet again without it (the joiner is still fresh).
  if (!s.ok() && AwaitNotice()) s = MeetAgain(&taken_over);
  if (!s.ok()) return s;
  if (fresh_) return absl::InternalError("elastic all-reduce: the joiner took no model");
  return absl::OkStatus();
}

absl::Status AllReduceBackend::CatchUp(int64_t clock) {
  if (catch_up_to_ < 0 || clock < catch_up_to_) return absl::OkStatus();
  // The rounds between the meeting and this joiner's first iteration: it adds nothing, but says
  // it trains, so that no member takes a round without a batch for the end of the job.
  while (next_clock_ < catch_up_to_) {
    if (auto s = ElasticRound(next_clock_, /*training=*/true, 0); !s.ok()) return s;
  }
  catch_up_to_ = -1;
  return absl::OkStatus();
}

bool AllReduceBackend::AwaitNotice() {
  // A peer that vanished fails a send at once: give the coordinator its notice time to say
  // that it left (a hung peer's takes a heartbeat timeout) before failing.
  const absl::Time deadline = absl::Now() + elastic_->notice_timeout;
  while (elastic_->plan_events() <= met_at_ && absl::Now() < deadline &&
         elastic_->interrupted().ok()) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  return elastic_->interrupted().ok() && elastic_->plan_events() > met_at_;
}

void AllReduceBackend::WatchMembership() {
  communicator_->StopWaitingWhen([this]() -> absl::Status {
    if (absl::Status s = elastic_->interrupted(); !s.ok()) return s;
    if (elastic_->plan_events() > met_at_) {
      return absl::UnavailableError("a worker left or joined the all-reduce");
    }
    return absl::OkStatus();
  });
}

std::optional<int64_t> AllReduceBackend::DepartureClock(int worker, int64_t clock) {
  if (!elastic_) return clock;
  // A joiner hears the departures before its own arrival: it takes the model, and the clocks
  // the members agreed on for them, first.
  if (fresh_ && elastic_error_.ok()) {
    if (absl::Status s = TakeTheModel(); !s.ok()) {
      SYNCLINE_LOG(ERROR) << "all-reduce: joining the ring: " << s;
      elastic_error_ = s;  // the next round fails with it
    }
  }
  if (auto it = departure_clocks_.find(worker); it != departure_clocks_.end()) return it->second;
  // A worker that is no member (it never was, or left before this timeline) has nothing of
  // this collective's to agree on.
  if (std::find(members_.begin(), members_.end(), worker) == members_.end()) return clock;
  // The trainer asks between steps: meet here, so that a worker past its last step still
  // learns what it takes over (a member between steps is never behind another).
  if (elastic_->plan_events() > met_at_ && elastic_error_.ok()) {
    bool taken_over = false;
    absl::Status s = MeetAgain(&taken_over);
    if (s.ok() && taken_over) {
      s = absl::InternalError("elastic all-reduce: a member between steps was behind another");
    }
    if (!s.ok()) {
      SYNCLINE_LOG(ERROR) << "all-reduce: meeting the workers still in the job: " << s;
      elastic_error_ = s;  // the next round fails with it
    }
    if (auto it = departure_clocks_.find(worker); it != departure_clocks_.end()) return it->second;
  }
  return std::nullopt;
}

absl::Status AllReduceBackend::ElasticRound(int64_t clock, bool training, float examples) {
  next_clock_ = clock;
  if (!elastic_) {
    absl::Status s = Round(training, examples);
    next_clock_ = clock + 1;
    return s;
  }
  if (!elastic_error_.ok()) return elastic_error_;
  // Round changes the buffer in place: a round redone over new members starts from this.
  saved_buffer_ = buffer_;
  saved_keys_ = step_keys_;
  while (true) {
    // A departure heard at the step boundary: the members meet before the round.
    if (elastic_->plan_events() > met_at_) {
      bool taken_over = false;
      if (absl::Status s = MeetAgain(&taken_over); !s.ok()) return s;
      if (taken_over) {
        return last_anyone_training_ ? absl::OkStatus()
                                     : absl::OutOfRangeError("every worker has finished");
      }
    }
    absl::Status s = Round(training, examples);
    if (s.ok() || absl::IsOutOfRange(s)) {
      next_clock_ = clock + 1;
      return s;
    }
    if (!AwaitNotice()) return s;
    SYNCLINE_LOG(WARNING) << "all-reduce round of clock " << clock
                          << " failed as a worker left: " << s.message();
    buffer_ = saved_buffer_;
    step_keys_ = saved_keys_;
    union_.clear();
  }
}

absl::Status AllReduceBackend::MeetAgain(bool* taken_over) {
  *taken_over = false;
  const absl::Time began = absl::Now();
  while (true) {
    const uint64_t events = elastic_->plan_events();
    absl::StatusOr<PeerMeeting> meeting = elastic_->meet(events);
    if (!meeting.ok()) {
      // Another departure or arrival came first: meet again, after it.
      if (absl::IsAborted(meeting.status()) && elastic_->interrupted().ok() &&
          elastic_->plan_events() > events) {
        continue;
      }
      return meeting.status();
    }
    std::vector<int> lost;
    for (int w : members_) {
      if (std::find(meeting->members.begin(), meeting->members.end(), w) ==
          meeting->members.end()) {
        lost.push_back(w);
      }
    }
    earlier_sent_ += communicator_->counters().bytes_sent;
    earlier_received_ += communicator_->counters().bytes_received;
    communicator_ = std::move(meeting->communicator);
    dense_collective_ = communicator_.get();
    members_ = std::move(meeting->members);
    met_at_ = events;
    WatchMembership();
    absl::Status agreed = AgreeOnRounds(lost, taken_over);
    if (agreed.ok()) {
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "all-reduce re-formed over %s (%d workers) in %s", Names(members_), members_.size(),
          absl::FormatDuration(absl::Trunc(absl::Now() - began, absl::Milliseconds(1))));
      return absl::OkStatus();
    }
    // Another member left while they agreed: meet again without it.
    if (!AwaitNotice()) return agreed;
  }
}

absl::Status AllReduceBackend::BroadcastBytes(std::string* bytes, int root) {
  uint64_t size = bytes->size();
  std::vector<float> header(2);
  std::memcpy(header.data(), &size, sizeof(size));
  if (auto s = communicator_->Broadcast(std::span<float>(header), root); !s.ok()) return s;
  std::memcpy(&size, header.data(), sizeof(size));
  std::vector<float> words((size + sizeof(float) - 1) / sizeof(float), 0.0f);
  if (communicator_->rank() == root && size > 0) std::memcpy(words.data(), bytes->data(), size);
  if (auto s = communicator_->Broadcast(std::span<float>(words), root); !s.ok()) return s;
  bytes->assign(reinterpret_cast<const char*>(words.data()), size);
  return absl::OkStatus();
}

absl::Status AllReduceBackend::AgreeOnRounds(const std::vector<int>& lost, bool* taken_over) {
  const int n = communicator_->size();
  Standing mine{next_clock_, last_anyone_training_ ? 1 : 0, examples_summed_, fresh_ ? 1 : 0};
  std::vector<std::byte> block(sizeof(Standing)), all;
  std::memcpy(block.data(), &mine, sizeof(Standing));
  if (auto s = communicator_->AllGatherBytes(block, &all); !s.ok()) return s;
  std::vector<Standing> standings(n);
  for (int r = 0; r < n; ++r) {
    std::memcpy(&standings[r], all.data() + r * sizeof(Standing), sizeof(Standing));
  }
  // A member can be one round ahead of another, never more: it completed a round only with
  // every member's contribution, so every member had completed the one before.
  int64_t newest = -1;
  for (const Standing& st : standings) {
    if (st.fresh == 0) newest = std::max(newest, st.next_clock);
  }
  if (newest < 0) {
    return absl::InternalError("elastic all-reduce: every member is a joiner without a model");
  }
  int root = -1;
  bool someone_behind = false, any_fresh = false;
  for (int r = 0; r < n; ++r) {
    if (standings[r].fresh != 0) {
      someone_behind = any_fresh = true;  // a joiner takes the model
      continue;
    }
    if (standings[r].next_clock == newest && root < 0) root = r;
    if (standings[r].next_clock < newest - 1) {
      return absl::InternalError(absl::StrFormat(
          "elastic all-reduce: w%d is at clock %d, more than one round behind clock %d",
          members_[r], standings[r].next_clock, newest));
    }
    someone_behind = someone_behind || standings[r].next_clock < newest;
  }
  // The round at `newest` was completed by no member: the lost workers finished `newest`
  // iterations, and their batches from there on are the others'.
  for (int w : lost) {
    departure_clocks_[w] = newest;
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "all-reduce: w%d left the collective; no member completed the round of clock %d, so its "
        "batches from there go to the workers still training",
        w, newest);
  }
  if (!someone_behind) return absl::OkStatus();
  // Those behind take the model (and optimizer state) of the first member ahead.
  std::string state;
  if (communicator_->rank() == root) {
    absl::StatusOr<std::string> saved = SaveState();
    if (!saved.ok()) return saved.status();
    state = *std::move(saved);
  }
  if (auto s = BroadcastBytes(&state, root); !s.ok()) return s;
  // A joiner hears the departures before its arrival from the coordinator, at the lost
  // workers' heartbeat clocks: it takes the clocks the members agreed on, so that it computes
  // every plan as they do.
  if (any_fresh) {
    std::string clocks;
    for (const auto& [w, clock] : departure_clocks_) {
      const int64_t pair[2] = {w, clock};
      clocks.append(reinterpret_cast<const char*>(pair), sizeof(pair));
    }
    if (auto s = BroadcastBytes(&clocks, root); !s.ok()) return s;
    for (size_t at = 0; fresh_ && at + 2 * sizeof(int64_t) <= clocks.size();
         at += 2 * sizeof(int64_t)) {
      int64_t pair[2];
      std::memcpy(pair, clocks.data() + at, sizeof(pair));
      departure_clocks_.try_emplace(static_cast<int>(pair[0]), pair[1]);
    }
  }
  if (!fresh_ && mine.next_clock == newest) return absl::OkStatus();
  if (auto s = RestoreState(state); !s.ok()) {
    return absl::DataLossError(absl::StrCat("elastic all-reduce: the model of w", members_[root],
                                            " does not restore: ", s.message()));
  }
  // This worker's round in progress is the one the root completed: it is over.
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  step_keys_.clear();
  union_.clear();
  examples_summed_ = standings[root].examples_summed;
  last_anyone_training_ = standings[root].anyone_training != 0;
  next_clock_ = newest;
  *taken_over = !fresh_;  // a joiner had no round in progress
  fresh_ = false;
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "all-reduce: took the model of w%d, which completed the round of clock %d", members_[root],
      newest - 1);
  return absl::OkStatus();
}

}  // namespace syncline
