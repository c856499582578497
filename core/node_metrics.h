// NodeMetrics: a node's /metrics page. It holds the node's MetricsRegistry (core/metrics.h),
// serves it over HttpServer (core/http_server.h) from the moment it starts, and fills in what
// every node has: syncline_build_info, the process's CPU time and resident memory, and the
// bytes its endpoints moved by the peer's role. The node's own code adds its series (worker,
// server, coordinator) to registry().
//
// A node without --metrics-port has no NodeMetrics at all, and its code checks for null: it
// pays nothing.
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_CORE_NODE_METRICS_H_
#define SYNCLINE_CORE_NODE_METRICS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "core/http_server.h"
#include "core/metrics.h"
#include "core/net.h"
#include "core/transport.h"

namespace syncline {

// The content type of the text exposition format.
inline constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

struct NodeMetricsOptions {
  // Where to serve: an IPv4 address (the node's data address's host) and a port (0: the first
  // free one in `ports`, or any free one).
  std::string ip = "127.0.0.1";
  int port = 0;
  PortRange ports;
  // The node's role as syncline_build_info's label says it: "coordinator", "server", "worker".
  std::string role;
};

class NodeMetrics {
 public:
  // Starts serving /metrics. Unavailable (naming the address) when the port is taken.
  static absl::StatusOr<std::unique_ptr<NodeMetrics>> Start(const NodeMetricsOptions& options);
  ~NodeMetrics();

  MetricsRegistry& registry() { return registry_; }
  int port() const { return server_->port(); }
  const std::string& ip() const { return ip_; }

  // Adds the bytes an endpoint counts to the node's syncline_sent_bytes_total and
  // syncline_received_bytes_total (by peer_role). `counters` must outlive this, or be taken
  // back with Forget first.
  void CountTraffic(const TrafficCounters* counters);
  // What a forgotten endpoint counted stays in the totals: counters never fall.
  void Forget(const TrafficCounters* counters);

 private:
  explicit NodeMetrics(std::string ip) : ip_(std::move(ip)) {}
  double Bytes(bool sent, int role) const;

  const std::string ip_;
  MetricsRegistry registry_;
  mutable absl::Mutex mu_;
  std::vector<const TrafficCounters*> traffic_ ABSL_GUARDED_BY(mu_);
  // [sent?][role]: bytes of endpoints forgotten.
  double forgotten_[2][kPeerRoles] ABSL_GUARDED_BY(mu_) = {};
  // Last: stopped first, before anything its pages read goes.
  std::unique_ptr<HttpServer> server_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_NODE_METRICS_H_
