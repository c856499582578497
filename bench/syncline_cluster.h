// SynclineCluster: a parameter-server job inside one process, for benchmarks. Every server is
// a ParameterServer serving its ZmqEndpoint on its own thread, and every node (server or
// worker) has its own ZmqTransport, i.e. its own zmq context and I/O thread, as a separate
// process would; nodes talk over tcp://127.0.0.1, so the sockets and code paths are those of a
// real job. Workers use KVClient on dense SGD tables under ASP (staleness -1), one table per
// request size, so that a request covers a whole table and splits over the servers the way a
// pushed tensor does. With Options::key, every transport of the cluster holds that one job key,
// so every connection is CURVE-encrypted and authenticated, as in a job off loopback.
//
// Thread-safety: construct and destroy from one thread; client(w) may be used by one thread
// at a time (threads that take over a client must be started after the previous user joined).
#ifndef SYNCLINE_BENCH_SYNCLINE_CLUSTER_H_
#define SYNCLINE_BENCH_SYNCLINE_CLUSTER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_client.h"
#include "core/job_key.h"
#include "core/zmq_transport.h"
#include "ps/server.h"

namespace syncline::bench {

class SynclineCluster {
 public:
  // Starts `servers` servers and `workers` workers and declares a table for each request size
  // in `request_bytes` (multiples of 4), updated by `options.optimizer`.
  struct Options {
    size_t max_piece_bytes = 0;  // KVClient's piece size when not 0
    int update_threads = 1;      // ServerOptions::update_threads
    OptimizerKind optimizer = OptimizerKind::kSgd;
    // With a key, every node's transport is keyed (ZmqOptions::key: CURVE, and the sealed data
    // path unless seal_data is false) and allows the ids of all the cluster's endpoints;
    // without one, plaintext.
    std::shared_ptr<const JobKey> key;
    // With a key: the data path sealed (ZmqOptions::seal_data, the default) or under CURVE.
    bool seal_data = true;
  };
  static absl::StatusOr<std::unique_ptr<SynclineCluster>> Create(
      int servers, int workers, const std::vector<size_t>& request_bytes, Options options);
  ~SynclineCluster();  // stops the servers

  int num_workers() const { return static_cast<int>(workers_.size()); }
  BenchClient& client(int worker) { return *workers_[worker].client; }

 private:
  struct ServerNode {
    std::unique_ptr<ZmqTransport> transport;
    std::unique_ptr<Endpoint> endpoint;
    std::unique_ptr<ParameterServer> server;
    std::thread thread;
  };
  struct WorkerNode {
    std::unique_ptr<ZmqTransport> transport;
    std::unique_ptr<Endpoint> endpoint;
    std::unique_ptr<BenchClient> client;
  };

  SynclineCluster() = default;

  std::vector<ServerNode> servers_;
  std::vector<WorkerNode> workers_;
  std::atomic<bool> stop_{false};
};

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_SYNCLINE_CLUSTER_H_
