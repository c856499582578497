#include "ps/server_metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {
namespace {

// A server handles a request in microseconds to a second (a large dense push under BSP).
std::vector<double> RequestBuckets() {
  std::vector<double> bounds;
  for (double decade = 1e-5; decade < 10; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) bounds.push_back(decade * m);
  }
  return bounds;
}

const char* KindName(wire::MsgType kind) {
  switch (kind) {
    case wire::MsgType::DECLARE_TABLE:
      return "declare table";
    case wire::MsgType::PUSH:
      return "push";
    case wire::MsgType::PULL:
      return "pull";
    case wire::MsgType::PUSH_PULL:
      return "push-pull";
    case wire::MsgType::CLOCK:
      return "clock";
    case wire::MsgType::FINISH:
      return "finish";
    default:
      return "request";
  }
}

}  // namespace

void ServerMetrics::Follower::Follow(double total) {
  // A total below the last one is a shard made afresh (a rollback): all of it is new.
  counter->Add(total >= last ? total - last : total);
  last = total;
}

int ServerMetrics::KindIndex(wire::MsgType kind) {
  switch (kind) {
    case wire::MsgType::DECLARE_TABLE:
      return 0;
    case wire::MsgType::PUSH:
      return 1;
    case wire::MsgType::PULL:
      return 2;
    case wire::MsgType::PUSH_PULL:
      return 3;
    case wire::MsgType::CLOCK:
      return 4;
    case wire::MsgType::FINISH:
      return 5;
    default:
      return 6;
  }
}

ServerMetrics::ServerMetrics(MetricsRegistry* registry, TraceRecorder* trace, int64_t trace_first,
                             int64_t trace_end)
    : trace_(trace), trace_first_(trace_first), trace_end_(trace_end) {
  if (trace_ != nullptr) {
    requests_track_ = trace_->Track("requests");
    checkpoints_track_ = trace_->Track("checkpoint writer");
  }
  if (registry == nullptr) return;
  MetricsRegistry& r = *registry;
  series_ = std::make_unique<Series>();
  Series& s = *series_;
  for (size_t i = 0; i < kKinds.size(); ++i) {
    s.requests[i] = r.AddCounter("syncline_server_requests_total",
                                 "Requests this server handled, by kind.", {{"kind", kKinds[i]}});
  }
  for (size_t i = 0; i < kKinds.size(); ++i) {
    s.request_seconds[i] = r.AddHistogram(
        "syncline_server_request_duration_seconds",
        "Time this server spent handling a request, by kind, in seconds (a pull that waits for "
        "slower workers is counted to its parking; its wait is syncline_server_pull_wait_seconds).",
        RequestBuckets(), {{"kind", kKinds[i]}});
  }
  s.refused = r.AddCounter("syncline_server_refused_requests_total",
                           "Requests answered with an error (malformed, invalid, over a limit).");
  s.parked = r.AddGauge("syncline_server_parked_pulls", "Pulls waiting for slower workers now.");
  s.parked_total.counter = r.AddCounter("syncline_server_parked_pulls_total",
                                        "Pulls that had to wait for slower workers.");
  s.pull_wait = r.AddHistogram("syncline_server_pull_wait_seconds",
                               "How long a parked pull waited for slower workers, in seconds.",
                               DurationBuckets());
  s.staleness = r.AddHistogram(
      "syncline_server_served_staleness",
      "Iterations of updates that the values a pull was served may lack (its staleness).",
      {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 63});
  s.rows_in_memory =
      r.AddGauge("syncline_server_rows_in_memory", "Embedding rows in this server's memory tier.");
  s.rows_on_disk =
      r.AddGauge("syncline_server_rows_on_disk", "Embedding rows in this server's disk tier.");
  s.evictions.counter =
      r.AddCounter("syncline_server_evictions_total", "Embedding rows moved from memory to disk.");
  s.min_clock =
      r.AddGauge("syncline_server_min_clock", "The iterations every worker of its set finished.");
  s.checkpoints.counter =
      r.AddCounter("syncline_server_checkpoints_total", "Checkpoints this server captured.");
  s.checkpoint_pause.counter =
      r.AddCounter("syncline_server_checkpoint_pause_seconds_total",
                   "Time this server stopped serving to capture checkpoints, in seconds.");
  s.replies_dropped.counter =
      r.AddCounter("syncline_server_replies_dropped_total",
                   "Replies dropped because their peer stopped reading (--reply-backlog).");
}

void ServerMetrics::OnRequest(wire::MsgType kind, int64_t clock, absl::Time begin, absl::Time end,
                              bool refused) {
  if (series_) {
    const int k = KindIndex(kind);
    series_->requests[k]->Increment();
    series_->request_seconds[k]->Observe(absl::ToDoubleSeconds(end - begin));
    if (refused) series_->refused->Increment();
  }
  if (trace_ != nullptr && Traced(clock)) {
    trace_->Slice(requests_track_, KindName(kind), "request", begin, end,
                  absl::StrFormat("\"clock\":%d%s", clock, refused ? ",\"refused\":true" : ""));
  }
}

void ServerMetrics::OnParkedPull(const std::string& peer, int64_t clock, absl::Time parked,
                                 absl::Time answered) {
  if (series_) series_->pull_wait->Observe(absl::ToDoubleSeconds(answered - parked));
  if (trace_ != nullptr && Traced(clock)) {
    trace_->AsyncSlice(absl::StrCat("parked pull of ", peer), "parked pull", next_async_id_++,
                       parked, answered, absl::StrFormat("\"clock\":%d", clock));
  }
}

void ServerMetrics::OnCheckpointCapture(int64_t clock, absl::Time begin, absl::Time end) {
  if (trace_ == nullptr || !Traced(clock)) return;
  trace_->Slice(requests_track_, absl::StrCat("checkpoint ", clock, ": capture"), "checkpoint",
                begin, end);
  absl::MutexLock lock(&mu_);
  writing_[clock] = end;
}

void ServerMetrics::OnCheckpointWritten(int64_t clock) {
  if (trace_ == nullptr) return;
  absl::Time began;
  {
    absl::MutexLock lock(&mu_);
    auto it = writing_.find(clock);
    if (it == writing_.end()) return;
    began = it->second;
    writing_.erase(it);
  }
  trace_->Slice(checkpoints_track_, absl::StrCat("checkpoint ", clock, ": write"), "checkpoint",
                began, absl::Now());
}

void ServerMetrics::Publish(const ParameterServer& server) {
  if (!series_) return;
  Series& s = *series_;
  const ServerStats& stats = server.stats();
  s.parked->Set(static_cast<double>(server.parked_pulls()));
  s.parked_total.Follow(static_cast<double>(stats.parked));
  const std::vector<uint64_t>& counts = stats.staleness.counts();
  s.staleness_seen.resize(counts.size(), 0);
  for (size_t k = 0; k < counts.size(); ++k) {
    const uint64_t seen = s.staleness_seen[k];
    s.staleness->ObserveMany(static_cast<double>(k),
                             counts[k] >= seen ? counts[k] - seen : counts[k]);
    s.staleness_seen[k] = counts[k];
  }
  const ParameterServer::EmbeddingTotals totals = server.embedding_totals();
  s.rows_in_memory->Set(static_cast<double>(totals.stats.rows_in_memory));
  s.rows_on_disk->Set(static_cast<double>(totals.stats.rows_on_disk));
  s.evictions.Follow(static_cast<double>(totals.stats.evictions));
  const int64_t min_clock = server.clocks().MinClock();
  // A finished job's min clock is a sentinel, not a clock.
  if (min_clock >= 0 && min_clock != kAllFinished) {
    s.min_clock->Set(static_cast<double>(min_clock));
  }
  s.checkpoints.Follow(static_cast<double>(stats.checkpoints));
  s.checkpoint_pause.Follow(absl::ToDoubleSeconds(stats.checkpoint_pause));
  s.replies_dropped.Follow(static_cast<double>(stats.replies_dropped));
}

}  // namespace syncline
