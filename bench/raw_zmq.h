// The raw ZeroMQ baseline that Syncline's parameter-server figures are compared with: the same
// socket pattern as ZmqTransport (ROUTER to ROUTER over tcp, routing ids named at connect,
// frames of 4 KiB and more sent without a copy, one zmq context with one I/O thread per node)
// and nothing else: a 24-byte binary header instead of Cap'n Proto, no tables, no update, no
// validation, and a pull reply is not copied out of the received message.
//
// A RawServer answers a push with a header-only acknowledgement, a pull with a buffer of the
// requested size, a push-pull with both.
//
// Thread-safety: a RawServer serves on its own thread between construction and destruction;
// a RawClient is thread-compatible.
#ifndef SYNCLINE_BENCH_RAW_ZMQ_H_
#define SYNCLINE_BENCH_RAW_ZMQ_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "bench/bench_client.h"

namespace syncline::bench {

class RawServer {
 public:
  // Binds tcp://127.0.0.1 on a free port as routing id `id`; pulls may ask for up to
  // `max_reply_bytes`.
  static absl::StatusOr<std::unique_ptr<RawServer>> Create(std::string id, size_t max_reply_bytes);
  ~RawServer();  // stops serving and joins the thread

  const std::string& id() const { return id_; }
  const std::string& address() const { return address_; }

 private:
  RawServer(std::string id, size_t max_reply_bytes);
  void Serve();

  const std::string id_;
  std::string address_;
  // What pulls receive; never changes once serving, so replies reference it without a copy.
  std::vector<std::byte> reply_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class RawClient : public BenchClient {
 public:
  // Connects as worker `rank` ("w<rank>") to every server; pushes may carry up to `max_bytes`.
  static absl::StatusOr<std::unique_ptr<RawClient>> Create(
      int rank, const std::vector<const RawServer*>& servers, size_t max_bytes);

  absl::StatusOr<uint64_t> Start(Op op, size_t bytes) override;
  absl::Status Wait(uint64_t id, absl::Time deadline) override;

 private:
  RawClient(int rank, const std::vector<const RawServer*>& servers, size_t max_bytes);

  std::vector<std::string> server_ids_;
  std::vector<std::byte> values_;               // what pushes send
  absl::flat_hash_map<uint64_t, int> pending_;  // request id -> replies still to come
  uint64_t next_id_ = 1;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

// `servers` raw servers ("ps<s>") and `workers` clients ("w<w>") connected to all of them,
// each with its own zmq context, as SynclineCluster arranges Syncline's nodes.
struct RawCluster {
  static absl::StatusOr<RawCluster> Create(int servers, int workers, size_t max_bytes);

  std::vector<std::unique_ptr<RawServer>> servers;
  std::vector<std::unique_ptr<RawClient>> clients;  // after the servers: destroyed first
};

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_RAW_ZMQ_H_
