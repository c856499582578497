// AllReduceBackend: the SyncBackend of --sync allreduce, data-parallel SGD without servers.
// Every worker holds the whole model (num_features x row_dim dense rows, then the bias). Each
// iteration it adds its gradient sums into one buffer, all-reduces it (collective/
// communicator.h), and applies the summed gradient with the servers' update rules
// (optim/optimizer.h) and their weighting: scale 1 / (examples of every worker), applied to the
// rows any worker touched. So it trains the model of --sync bsp (synchronous SGD on the union
// batch), which the tests check to 1e-5.
//
// With --compress topk:R or sign1 the row gradients are compressed with error feedback and
// all-gathered instead (AllReduceOptions::codec): each rank sends (N-1) blocks.
//
// The buffer is [row gradients][bias gradient][examples][touched count per feature][workers
// still training]: the touched counts make the update the parameter server's (rows no worker
// saw in an iteration are left alone, so l2 and momentum leave them be), and the last element
// keeps a worker that has run out of data taking part in the collectives, with nothing to add,
// until every worker has.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_
#define SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "collective/communicator.h"
#include "compression/codec.h"
#include "optim/optimizer.h"
#include "worker/replicated_model.h"
#include "worker/sync_backend.h"
#include "worker/worker_node.h"

namespace syncline {

struct AllReduceOptions {
  Algorithm algorithm = Algorithm::kAuto;
  WireType wire = WireType::kFloat32;
  OptimizerConfig optimizer;
  // top-K or sign1: the row gradients are compressed with error feedback and all-gathered as
  // codec blocks (every rank's block has the same size), each rank adding every block in rank
  // order; the bias and the counts are all-reduced as they are. Rows updated: those some block
  // lists (top-K), or all (sign1), as the parameter servers do with such blocks.
  CodecSpec codec;
};

class AllReduceBackend : public SyncBackend {
 public:
  // `communicator` (over this worker's data endpoint) must outlive the backend.
  AllReduceBackend(std::unique_ptr<Communicator> communicator, AllReduceOptions options);

  absl::Status Init(const ParameterLayout& layout) override;
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override;
  // Adds the gradient sums into this iteration's buffer.
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  // All-reduces the buffer and applies the sum.
  absl::Status EndIteration(int64_t clock, float examples) override;
  // Takes part, adding nothing, until every worker has finished.
  absl::Status Finish() override;
  // Checkpoints: the whole model, its optimizer state and (compressed) the error-feedback
  // residual. Every worker saves after the same step, so restoring all of them continues
  // exactly.
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  uint64_t bytes_pushed() const override { return communicator_->counters().bytes_sent; }
  uint64_t bytes_pulled() const override { return communicator_->counters().bytes_received; }

  std::span<const float> parameters() const { return model_.parameters(); }

 private:
  // One all-reduce of the buffer; applies it. `training`: this worker still has data.
  absl::Status Round(bool training, float examples);

  std::unique_ptr<Communicator> communicator_;
  const AllReduceOptions options_;
  ReplicatedModel model_{"all-reduce"};
  std::vector<float> buffer_;
  size_t bias_at_ = 0, examples_at_ = 0, touched_at_ = 0, training_at_ = 0;
  bool finished_ = false;
  // Compressed all-reduce (options_.codec top-K or sign1).
  std::unique_ptr<Codec> codec_;
  ErrorFeedback feedback_;
  std::vector<std::byte> block_, blocks_;
  std::vector<float> small_;  // bias, examples, still training
};

// A communicator among every worker of the job over `endpoint` (this worker's data endpoint,
// or its side of one), hosts told apart by the address each listens on (for the hierarchical
// algorithm); connects to the workers of higher rank.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkers(const JobSpec& spec,
                                                             const NodeTable& table, int rank,
                                                             Endpoint& endpoint);
Algorithm AlgorithmOf(AllReduceAlgorithm algorithm);

// Builds an AllReduceBackend from the job spec: a communicator over every worker's data
// endpoint, hosts told apart by the address each listens on (for the hierarchical algorithm).
GossipBackendFactory MakeAllReduceBackendFactory();

// The backend factory of every serverless mode: gossip or all-reduce, as the spec says.
GossipBackendFactory MakeServerlessBackendFactory();

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_
