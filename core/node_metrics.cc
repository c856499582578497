#include "core/node_metrics.h"

#include <algorithm>

#include "core/version.h"

namespace syncline {

absl::StatusOr<std::unique_ptr<NodeMetrics>> NodeMetrics::Start(const NodeMetricsOptions& options) {
  std::unique_ptr<NodeMetrics> node(new NodeMetrics(options.ip));
  MetricsRegistry& r = node->registry_;
  r.AddGauge("syncline_build_info", "The node's build and role (always 1).",
             {{"version", kBuildVersion}, {"role", options.role}})
      ->Set(1);
  AddProcessMetrics(r);
  NodeMetrics* self = node.get();
  for (int role = 0; role < kPeerRoles; ++role) {
    const MetricLabels labels = {{"peer_role", PeerRoleName(static_cast<PeerRole>(role))}};
    r.AddCounterFunction("syncline_sent_bytes_total",
                         "Bytes this node sent, by the role of the peer they went to.", labels,
                         [self, role] { return self->Bytes(true, role); });
    r.AddCounterFunction("syncline_received_bytes_total",
                         "Bytes this node received, by the role of the peer they came from.",
                         labels, [self, role] { return self->Bytes(false, role); });
  }
  HttpServerOptions http;
  http.ip = options.ip;
  http.port = options.port;
  http.ports = options.ports;
  std::map<std::string, HttpPage> pages;
  pages["/metrics"] = HttpPage{.content_type = kMetricsContentType,
                               .body = [self] { return self->registry_.Exposition(); }};
  auto server = HttpServer::Start(http, std::move(pages));
  if (!server.ok()) return server.status();
  node->server_ = std::move(*server);
  return node;
}

NodeMetrics::~NodeMetrics() { server_.reset(); }

void NodeMetrics::CountTraffic(const TrafficCounters* counters) {
  absl::MutexLock lock(&mu_);
  traffic_.push_back(counters);
}

void NodeMetrics::Forget(const TrafficCounters* counters) {
  absl::MutexLock lock(&mu_);
  auto it = std::find(traffic_.begin(), traffic_.end(), counters);
  if (it == traffic_.end()) return;
  for (int role = 0; role < kPeerRoles; ++role) {
    forgotten_[1][role] += static_cast<double>((*it)->bytes_sent_to[role].load());
    forgotten_[0][role] += static_cast<double>((*it)->bytes_received_from[role].load());
  }
  traffic_.erase(it);
}

double NodeMetrics::Bytes(bool sent, int role) const {
  absl::MutexLock lock(&mu_);
  double total = forgotten_[sent ? 1 : 0][role];
  for (const TrafficCounters* c : traffic_) {
    total +=
        static_cast<double>(sent ? c->bytes_sent_to[role].load(std::memory_order_relaxed)
                                 : c->bytes_received_from[role].load(std::memory_order_relaxed));
  }
  return total;
}

}  // namespace syncline
