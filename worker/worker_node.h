// WorkerNode: one worker as a node of a job. It joins the job (the coordinator hands it the
// JobSpec), reads its partition of the training data, trains it in sync with the others through
// a SyncBackend (the parameter servers, or gossip or all-reduce peers through
// `serverless_backend`), writes its part of checkpoints, and when the coordinator asks, evaluates
// the final model on the test set: what syncline-worker runs, and what a test runs on a thread over
// any Transport.
//
// Thread-safety: Run() is called once, from one thread.
#ifndef SYNCLINE_WORKER_WORKER_NODE_H_
#define SYNCLINE_WORKER_WORKER_NODE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/node_table.h"
#include "core/peer_rendezvous.h"
#include "core/transport.h"
#include "job/node_join.h"
#include "worker/sync_backend.h"

namespace syncline {

// Makes the backend of a serverless (gossip, all-reduce) job for worker `rank`, whose data
// endpoint `endpoint` is bound and listed in `table`; the factory connects it to the peers it
// needs: over `endpoint` in generation 0, over endpoints of their own that `rendezvous` finds
// after a rollback (worker/peer_rendezvous.h), whose Interrupted() also ends the backend's
// waits for peers. `device` is where the worker computes, as device/placement.h resolved it
// ("cpu", "cuda:N"): the collectives take NCCL from it (collective/dense_collective.h).
// `layout` is the model the backend will be initialised with (SyncBackend::Init): what the
// factory needs to bound the messages its peers may send.
using ServerlessBackendFactory = std::function<absl::StatusOr<std::unique_ptr<SyncBackend>>(
    const JobSpec& spec, const ParameterLayout& layout, const NodeTable& table, int rank,
    Endpoint& endpoint, const std::string& device, PeerRendezvous& rendezvous)>;

// Makes the backend of a --sync hybrid worker from `rows` (a PsBackend that keeps the bias
// elsewhere) and `peers`, the side of its data endpoint that hears the other workers (the
// other side is its KVClient's); the factory connects it to the peers it needs. `device` and
// `layout`, `rendezvous` as above.
using HybridBackendFactory = std::function<absl::StatusOr<std::unique_ptr<SyncBackend>>(
    const JobSpec& spec, const ParameterLayout& layout, const NodeTable& table, int rank,
    Endpoint& peers, std::unique_ptr<SyncBackend> rows, const std::string& device,
    PeerRendezvous& rendezvous)>;

class WorkerNode {
 public:
  // Without `serverless_backend` (or `hybrid_backend`), a job whose spec says gossip (hybrid)
  // fails with FailedPrecondition.
  WorkerNode(Transport& transport, NodeOptions options,
             ServerlessBackendFactory serverless_backend = nullptr,
             HybridBackendFactory hybrid_backend = nullptr)
      : transport_(transport),
        options_(std::move(options)),
        serverless_backend_(std::move(serverless_backend)),
        hybrid_backend_(std::move(hybrid_backend)) {}

  NodeExit Run();

 private:
  Transport& transport_;
  const NodeOptions options_;
  const ServerlessBackendFactory serverless_backend_;
  const HybridBackendFactory hybrid_backend_;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_WORKER_NODE_H_
