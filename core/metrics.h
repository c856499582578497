// MetricsRegistry: one node's metrics, written out in Prometheus's text exposition format
// (version 0.0.4) for its /metrics page (core/http_server.h serves it).
//
// The metric types are Prometheus's: a Counter only grows, a Gauge goes up and down, and a
// Histogram counts observations in fixed buckets (cumulative on the page, with _sum and
// _count), which, unlike a summary, can be aggregated across nodes (histogram_quantile over
// the sum of every worker's buckets). Names follow prometheus.io's conventions: a `syncline_`
// prefix, base units (`_seconds`, `_bytes`), `_total` on counters. Labels must be bounded: a
// role, a phase, a request kind; never a key, a step or a tensor. A series is made once, at
// set-up, and the hot path only touches its atomics: an Increment is one relaxed fetch_add.
//
// Nothing here is global: a node owns its registry and hands its metrics to the code that
// updates them, so that nodes running as threads of one test keep their own pages.
//
// Thread-safety: thread-safe. Counter, Gauge and Histogram may be updated from any thread
// while the page is written; the registry's own lists are guarded by a mutex.
#ifndef SYNCLINE_CORE_METRICS_H_
#define SYNCLINE_CORE_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace syncline {

// A series' labels, in the order they are written: {{"role", "worker"}, {"phase", "batch"}}.
using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class Counter {
 public:
  // `v` must be >= 0 (a negative or NaN one is dropped: a counter never falls).
  void Add(double v) {
    if (v > 0) value_.fetch_add(v, std::memory_order_relaxed);
  }
  void Increment() { Add(1); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, increasing (a +Inf bucket is always added).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v) { ObserveMany(v, 1); }
  // `n` observations of `v` at once (counts kept elsewhere, added to the page in batches).
  void ObserveMany(double v, uint64_t n);
  const std::vector<double>& bounds() const { return bounds_; }

  // The cumulative counts per bound, then +Inf; count is the +Inf bucket's, so the two agree
  // even while other threads observe.
  struct Snapshot {
    std::vector<uint64_t> cumulative;
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;

 private:
  const std::vector<double> bounds_;
  // Per bucket, not cumulative: bounds_.size() + 1 entries, the last one +Inf's.
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
};

// Bucket bounds: `count` bounds from `start`, each `factor` times the one before.
std::vector<double> ExponentialBuckets(double start, double factor, int count);
// Durations from 100 us to about 100 s (a step, a request, a checkpoint).
std::vector<double> DurationBuckets();

class MetricsRegistry {
 public:
  // At most this many series in all; past it a new series is not exported (and logged once),
  // as a bound on a page whose labels were, by mistake, not bounded.
  static constexpr size_t kMaxSeries = 20000;

  MetricsRegistry();
  ~MetricsRegistry();
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  // A series of the family `name` (made at its first series, with `help`); a family holds one
  // type. The pointer lives as long as the registry. A name or label that Prometheus would
  // refuse, or a family of another type under the name, is a programming error: logged, and
  // the series returned is not exported.
  Counter* AddCounter(absl::string_view name, absl::string_view help, MetricLabels labels = {});
  Gauge* AddGauge(absl::string_view name, absl::string_view help, MetricLabels labels = {});
  Histogram* AddHistogram(absl::string_view name, absl::string_view help,
                          std::vector<double> bounds, MetricLabels labels = {});
  // Series whose value is read when the page is written (the process's CPU time, bytes an
  // endpoint counted). `read` runs on the thread that writes the page, and must be safe there.
  void AddCounterFunction(absl::string_view name, absl::string_view help, MetricLabels labels,
                          std::function<double()> read);
  void AddGaugeFunction(absl::string_view name, absl::string_view help, MetricLabels labels,
                        std::function<double()> read);

  // The page: every family in the order made, each with its HELP and TYPE lines.
  std::string Exposition() const;

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series;
  struct Family;
  // The family `name` of `type`, made if new; null (logged) when the name, a label or the type
  // is wrong, or the registry is full.
  Family* FamilyFor(absl::string_view name, absl::string_view help, Type type,
                    const MetricLabels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Series& AddSeries(Family* family, MetricLabels labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A series of the family `name` (a detached one when FamilyFor refuses).
  Series& NewSeries(absl::string_view name, absl::string_view help, Type type, MetricLabels labels)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `metric` as a new series and returns it.
  template <typename M>
  M* Keep(absl::string_view name, absl::string_view help, Type type, MetricLabels labels,
          std::unique_ptr<M> metric);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Family>> families_ ABSL_GUARDED_BY(mu_);
  // Series refused (a bad name, a full registry): they work, but are not on the page.
  std::vector<std::unique_ptr<Series>> detached_ ABSL_GUARDED_BY(mu_);
  size_t series_ ABSL_GUARDED_BY(mu_) = 0;
  bool full_logged_ ABSL_GUARDED_BY(mu_) = false;
};

// Whether `name` is a valid metric name ([a-zA-Z_:][a-zA-Z0-9_:]*) or label name
// ([a-zA-Z_][a-zA-Z0-9_]*, not starting with "__").
bool ValidMetricName(absl::string_view name);
bool ValidLabelName(absl::string_view name);

// A number as the exposition format writes it: the shortest text that reads back as the same
// double; "+Inf", "-Inf", "NaN".
std::string MetricNumber(double v);

// The process's own series, under the names every Prometheus client library exports (so that
// the usual dashboards find them): process_cpu_seconds_total and process_resident_memory_bytes,
// read at each scrape.
void AddProcessMetrics(MetricsRegistry& registry);

}  // namespace syncline

#endif  // SYNCLINE_CORE_METRICS_H_
