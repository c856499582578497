// PrometheusTargets: how a Prometheus server finds a running job's /metrics pages. The launcher
// keeps OUT/prometheus/targets.json, a file_sd target list (one target per node, labelled
// job, run, role, rank and node), up to date as nodes register, are replaced or leave, and
// writes OUT/prometheus/prometheus.yml beside it, ready to run:
//
//   prometheus --config.file OUT/prometheus/prometheus.yml --storage.tsdb.path OUT/prometheus/data
//
// Both files are written whole to a temporary file and renamed, so Prometheus (which watches the
// target file) never reads half of one. A node that leaves stays listed for `linger` (two scrape
// intervals and a second by default), so that Prometheus scrapes it down once and records its
// `up` as 0 before the target goes; at the job's end every target goes.
//
// Live metrics are scraped, never pushed: a Pushgateway would keep the last values of a dead
// node as if it were alive, and hide `up` (prometheus.io, "When to use the Pushgateway").
//
// Thread-safety: thread-safe. A thread of its own drops targets whose linger has passed.
#ifndef SYNCLINE_LAUNCH_PROMETHEUS_TARGETS_H_
#define SYNCLINE_LAUNCH_PROMETHEUS_TARGETS_H_

#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace syncline {

struct PrometheusTargetsOptions {
  std::string dir;               // OUT/prometheus
  std::string run;               // the `run` label: the run folder as given (--out)
  std::string job = "syncline";  // the `job` label and the scrape config's job_name
  absl::Duration scrape_interval = absl::Seconds(5);
  // How long a node that left stays listed (down); default: two scrape intervals and a second.
  absl::Duration linger = absl::ZeroDuration();
};

class PrometheusTargets {
 public:
  // Writes prometheus.yml and an empty target list. Errors: the folder or files cannot be
  // written.
  static absl::StatusOr<std::unique_ptr<PrometheusTargets>> Create(
      PrometheusTargetsOptions options);
  ~PrometheusTargets();

  // Node `node` ("w3", "coordinator") of `role` and `rank` serves /metrics at host:port: listed
  // (again, at its new address, when it was replaced).
  void Add(const std::string& node, const std::string& role, int rank, const std::string& host,
           int port);
  // Node `node` left (lost, finished and gone): unlisted once its linger has passed.
  void Remove(const std::string& node);
  // The job ended: every target goes, now.
  void Clear();

  std::string targets_path() const;
  std::string config_path() const;

 private:
  explicit PrometheusTargets(PrometheusTargetsOptions options);
  void Write() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Sweep();

  struct Target {
    std::string role;
    int rank = 0;
    std::string address;  // host:port
    absl::Time leaves = absl::InfiniteFuture();
  };
  const PrometheusTargetsOptions options_;
  absl::Mutex mu_;
  std::map<std::string, Target> targets_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread sweeper_;
};

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_PROMETHEUS_TARGETS_H_
