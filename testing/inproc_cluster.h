// InprocCluster: parameter-server shards serving on their own threads over the in-process
// transport, as in a real job but inside one test process. For tests only.
//
// Thread-safety: WorkerEndpoint() may be called from any thread.
#ifndef SYNCLINE_TESTING_INPROC_CLUSTER_H_
#define SYNCLINE_TESTING_INPROC_CLUSTER_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/inproc_transport.h"
#include "ps/server.h"

namespace syncline {

class InprocCluster {
 public:
  InprocCluster(int servers, int workers, int64_t staleness) {
    for (int s = 0; s < servers; ++s) {
      ids_.push_back("ps" + std::to_string(s));
      endpoints_.push_back(*transport_.CreateEndpoint(ids_.back()));
      ServerOptions o;
      o.rank = s;
      o.num_servers = servers;
      o.num_workers = workers;
      o.staleness = staleness;
      servers_.push_back(std::make_unique<ParameterServer>(endpoints_.back().get(), o));
    }
    for (auto& server : servers_) {
      threads_.emplace_back([this, s = server.get()] {
        while (!stop_.load()) (void)s->ServeUntil(absl::Now() + absl::Milliseconds(5));
      });
    }
  }
  ~InprocCluster() {
    stop_.store(true);
    for (auto& t : threads_) t.join();
  }

  // The data endpoint of worker `rank` ("w<rank>"); one at a time per rank.
  std::unique_ptr<Endpoint> WorkerEndpoint(int rank) {
    return *transport_.CreateEndpoint("w" + std::to_string(rank));
  }
  const std::vector<std::string>& server_ids() const { return ids_; }
  // Only between runs: the servers' threads read it.
  const ParameterServer& server(int s) const { return *servers_[s]; }

 private:
  InprocTransport transport_;
  std::vector<std::string> ids_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::vector<std::unique_ptr<ParameterServer>> servers_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
};

}  // namespace syncline

#endif  // SYNCLINE_TESTING_INPROC_CLUSTER_H_
