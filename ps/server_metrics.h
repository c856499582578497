// ServerMetrics: what a parameter server shows of its work while it serves: its series on the
// node's /metrics page (core/node_metrics.h) and, with --trace on, its requests, parked pulls
// and checkpoints in the trace (core/trace.h).
//
// Requests are counted as they are handled (RequestObserver); the rest is copied from the
// server's statistics by Publish, which the node calls between its serving rounds: the server
// keeps them on its own thread, and a shard made afresh (a rollback) starts them again, which
// the series absorb (a counter never falls).
//
// Series (every name has the syncline_server_ prefix):
//   requests_total{kind}, refused_requests_total      handled, and answered with an error
//   request_duration_seconds{kind}                    histogram of a request's handling
//   parked_pulls, parked_pulls_total                  pulls waiting for slower workers
//   pull_wait_seconds                                 histogram of a parked pull's wait
//   served_staleness                                  histogram of the staleness (in clocks)
//                                                     of the values a pull was served
//   rows_in_memory, rows_on_disk, evictions_total     the embedding tables (--embedding-*)
//   min_clock                                         the clock every worker has finished
//   checkpoints_total, checkpoint_pause_seconds_total
//   replies_dropped_total                             replies of peers that stopped reading
//
// Thread-safety: the RequestObserver calls and Publish come from the server's thread,
// OnCheckpointWritten from its checkpoint writer's; the page is written from the metrics
// server's (the series are atomics).
#ifndef SYNCLINE_PS_SERVER_METRICS_H_
#define SYNCLINE_PS_SERVER_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/metrics.h"
#include "core/trace.h"
#include "ps/request_observer.h"
#include "ps/server.h"

namespace syncline {

class ServerMetrics : public RequestObserver {
 public:
  // `registry` (may be null: no page) and `trace` (may be null: no trace; else what concerns
  // clocks [trace_first, trace_end) goes into it) must outlive this.
  ServerMetrics(MetricsRegistry* registry, TraceRecorder* trace, int64_t trace_first,
                int64_t trace_end);

  void OnRequest(wire::MsgType kind, int64_t clock, absl::Time begin, absl::Time end,
                 bool refused) override;
  void OnParkedPull(const std::string& peer, int64_t clock, absl::Time parked,
                    absl::Time answered) override;
  void OnCheckpointCapture(int64_t clock, absl::Time begin, absl::Time end) override;
  // The writer finished checkpoint `clock` (ServerOptions::on_checkpoint).
  void OnCheckpointWritten(int64_t clock);

  // Copies the server's statistics onto the page.
  void Publish(const ParameterServer& server);

 private:
  // The kinds of requests counted apart; anything else is "other".
  static constexpr std::array<const char*, 7> kKinds = {
      "declare_table", "push", "pull", "push_pull", "clock", "finish", "other"};
  static int KindIndex(wire::MsgType kind);
  // A counter that follows a total kept elsewhere, which may start again from 0.
  struct Follower {
    Counter* counter = nullptr;
    double last = 0;
    void Follow(double total);
  };
  bool Traced(int64_t clock) const { return clock >= trace_first_ && clock < trace_end_; }

  struct Series {
    std::array<Counter*, kKinds.size()> requests{};
    std::array<Histogram*, kKinds.size()> request_seconds{};
    Counter* refused = nullptr;
    Gauge* parked = nullptr;
    Follower parked_total;
    Histogram* pull_wait = nullptr;
    Histogram* staleness = nullptr;
    std::vector<uint64_t> staleness_seen;  // the counts already on the page, per bucket
    Gauge* rows_in_memory = nullptr;
    Gauge* rows_on_disk = nullptr;
    Follower evictions;
    Gauge* min_clock = nullptr;
    Follower checkpoints;
    Follower checkpoint_pause;
    Follower replies_dropped;
  };
  std::unique_ptr<Series> series_;  // null without a registry
  TraceRecorder* const trace_;
  const int64_t trace_first_;
  const int64_t trace_end_;
  int requests_track_ = 0;
  int checkpoints_track_ = 0;
  uint64_t next_async_id_ = 1;
  absl::Mutex mu_;
  // Checkpoint clock -> when its capture ended, until the writer is done with it.
  std::map<int64_t, absl::Time> writing_ ABSL_GUARDED_BY(mu_);
};

}  // namespace syncline

#endif  // SYNCLINE_PS_SERVER_METRICS_H_
