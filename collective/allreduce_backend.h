// AllReduceBackend: the SyncBackend of --sync allreduce, data-parallel SGD without servers.
// Every worker holds the whole model (num_features x row_dim dense rows, then the bias). Each
// iteration it adds its gradient sums into one buffer, all-reduces it (collective/
// communicator.h, or NCCL when every worker has a GPU of its own: dense_collective.h), and applies
// the summed gradient with the servers' update rules (optim/optimizer.h) and their weighting: scale
// 1 / (examples of every worker), applied to the rows any worker touched. So it trains the model of
// --sync bsp (synchronous SGD on the union batch), which the tests check to 1e-5.
//
// With --compress topk:R or sign1 the row gradients are compressed with error feedback and
// all-gathered instead (AllReduceOptions::codec): each rank sends (N-1) blocks.
//
// Sparse batches (AllReduceOptions::rows): each step first all-reduces a small buffer (the
// bias gradient, the examples, the flag and every rank's count of touched rows), then, when
// it moves fewer bytes than all-reducing every row and its touched count, all-gathers each
// rank's touched rows as (key, gradient) pairs (Horovod's way with sparse tensors): every
// rank adds every rank's pairs in rank order, so all hold the same bits, and applies the rows
// some rank touched. Every rank decides from the same counts, so all take the same path.
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
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collective/communicator.h"
#include "collective/dense_collective.h"
#include "compression/codec.h"
#include "core/net.h"
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
  // Uncompressed rows: kAuto all-gathers (key, gradient) pairs when that moves fewer bytes,
  // else all-reduces every row; kDense always all-reduces (one collective a step, no count
  // exchange); kSparse always all-gathers.
  enum class Rows { kAuto, kDense, kSparse };
  Rows rows = Rows::kAuto;
};

class AllReduceBackend : public SyncBackend {
 public:
  // `communicator` reaches every worker (over this worker's data endpoint or the TCP plane);
  // `dense`, when given (NCCL: ConnectDenseCollective), takes the all-reduces of the whole
  // buffer, and `communicator` keeps the small sums and every all-gather.
  AllReduceBackend(std::unique_ptr<Communicator> communicator, AllReduceOptions options,
                   std::unique_ptr<DenseCollective> dense = nullptr);

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
  // Compressed (top-K, sign1): the rows, as one part (one block a rank).
  std::vector<GradientCompression> CompressionWanted() const override;
  // The rows' blocks come from `encoder` (a GPU model's, which keeps the row gradients and the
  // residual on its device); Update adds no row gradients. The bias is summed as it is.
  void SetEncoder(GradientTable table, GradientEncoder* encoder) override {
    if (table == GradientTable::kRows) encoder_ = encoder;
  }
  // Checkpoints: the whole model, its optimizer state and (compressed) the error-feedback
  // residual. Every worker saves after the same step, so restoring all of them continues
  // exactly.
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  // Compressed rounds: encoding with error feedback, and decoding the gathered blocks.
  absl::Duration TakeCodecTime() override {
    return std::exchange(codec_time_, absl::ZeroDuration());
  }
  uint64_t bytes_pushed() const override;
  uint64_t bytes_pulled() const override;

  std::span<const float> parameters() const { return model_.parameters(); }
  // Uncompressed rounds that all-gathered (key, gradient) pairs, and that all-reduced every row.
  uint64_t sparse_rounds() const { return sparse_rounds_; }
  uint64_t dense_rounds() const { return dense_rounds_; }

 private:
  // One all-reduce of the buffer; applies it. `training`: this worker still has data.
  absl::Status Round(bool training, float examples);
  // The uncompressed rows of a round after the count exchange (`counts`: per rank, its
  // touched rows and their compact keys' bytes): all-gathers the touched rows (`sparse`) or
  // all-reduces every row; leaves the summed rows in buffer_ and, sparse, the keys some rank
  // touched in union_ (ascending).
  absl::Status ExchangeRows(bool sparse, std::span<const float> counts);
  // The bias gradient, examples and flag of buffer_ into small_ (returns its size, where
  // callers may append), and small_'s first ones back after it was summed.
  size_t PackSmallSums();
  void UnpackSmallSums();
  // Applies buffer_'s rows of union_ (or of every touched key) and bias; clears the buffer.
  absl::Status Apply(bool by_union);

  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<DenseCollective> owned_dense_collective_;
  DenseCollective* dense_collective_;  // owned_dense_collective_, or communicator_
  const AllReduceOptions options_;
  ReplicatedModel model_{"all-reduce"};
  std::vector<float> buffer_;
  size_t bias_at_ = 0, examples_at_ = 0, touched_at_ = 0, training_at_ = 0;
  bool finished_ = false;
  // Compressed all-reduce (options_.codec top-K or sign1).
  std::unique_ptr<Codec> codec_;
  ErrorFeedback feedback_;
  GradientEncoder* encoder_ = nullptr;  // not owned; when set, it holds the residual
  absl::Duration codec_time_;           // since the last TakeCodecTime
  std::vector<std::byte> block_, blocks_;
  std::vector<float> small_;  // bias, examples, still training (and the counts of touched rows)
  // Sparse rounds: the keys this rank touched in the step, and those some rank touched.
  std::vector<uint64_t> step_keys_, union_, gathered_keys_;
  std::vector<std::byte> keys_block_;
  uint64_t sparse_rounds_ = 0, dense_rounds_ = 0;
};

// A communicator among every worker of the job over `endpoint` (this worker's data endpoint,
// or its side of one), hosts told apart by the address each listens on (for the hierarchical
// algorithm); connects to the workers of higher rank.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkers(const JobSpec& spec,
                                                             const NodeTable& table, int rank,
                                                             Endpoint& endpoint);
Algorithm AlgorithmOf(AllReduceAlgorithm algorithm);

// Where `--sync allreduce` workers' collectives travel.
struct CollectivePlane {
  // Offer a TcpTransport of their own (core/tcp_transport.h: no I/O thread between the socket
  // and the collective, docs/COLLECTIVES.md measures it against ZeroMQ). It neither encrypts
  // nor authenticates, so a job with a key keeps its collectives on the CURVE-encrypted data
  // endpoint (false).
  bool tcp = false;
  // The plane's listening port comes from these (the node's --ports); any: a free one.
  PortRange ports;
};

// As ConnectWorkers; then, with more than one worker, the workers trade the addresses of
// their TCP planes (each listening on the host of the address it registered) with an
// all-gather over `endpoint`. When every worker offers one, every pair connects both ways and
// the communicator runs over the plane and owns it; when any worker offers none (a key, no
// free port), all stay on `endpoint`, so the ranks always agree.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkersOverTcp(const JobSpec& spec,
                                                                    const NodeTable& table,
                                                                    int rank, Endpoint& endpoint,
                                                                    CollectivePlane plane);

// This rank's RankDevice from its resolved device (device/placement.h: "cpu" or "cuda:N") on
// `host`, and in *ordinal the CUDA ordinal (-1 for the CPU). A CUDA device that cannot be
// probed, or a build without NCCL, gives a CPU rank whose note says why.
RankDevice ProbeRankDevice(std::string_view device, std::string host, int* ordinal);

// How a rank's dense all-reduces travel: `nccl`, or the CPU communicator when it is null.
struct DensePlane {
  std::unique_ptr<DenseCollective> nccl;
  DenseChoice choice;
};

// Every rank calls it with its own RankDevice (`mine`) and CUDA ordinal: the ranks trade their
// devices over `cpu`, choose alike (ChooseDenseCollective), log a fallback, and when NCCL is
// chosen rank 0's NCCL id travels to every rank over `cpu` and each joins the NCCL
// communicator (waiting up to `timeout`). When any rank fails to make or join it, every rank
// falls back to the CPU collective, saying why; an error only when `cpu` itself fails.
absl::StatusOr<DensePlane> ConnectDenseCollective(Communicator& cpu, const RankDevice& mine,
                                                  int ordinal, absl::Duration timeout);

// ConnectDenseCollective for a worker computing on `device` (device/placement.h's resolved
// "cpu" or "cuda:N"), on this machine's host name, with the job's peer timeout. A job whose
// --device is cpu trades nothing and keeps the CPU communicator.
absl::StatusOr<DensePlane> ConnectDenseForWorker(const JobSpec& spec, Communicator& cpu,
                                                 std::string_view device);

// Builds an AllReduceBackend from the job spec: a communicator over every worker's data
// endpoint (or over `plane`), hosts told apart by the address each listens on (for the
// hierarchical algorithm).
ServerlessBackendFactory MakeAllReduceBackendFactory(CollectivePlane plane = {});

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_ALLREDUCE_BACKEND_H_
