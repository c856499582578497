// HybridBackend: the SyncBackend of --sync hybrid, the split Persia makes of a recommendation
// model. The embedding rows stay on the parameter servers (a PsBackend, under the servers'
// ASP or SSP bound: --embedding-sync), so tables too large to replicate still train and reads
// do not wait for the servers' clock barrier (every step still waits for the dense all-reduce,
// which keeps the workers within a step of each other); the dense layers (the bias table: a ctr
// model's MLP, a linear model's bias) are replicated on every worker and all-reduced every step,
// then applied with the servers' rule and weighting (scale 1 / the examples of every worker), so
// they train as under BSP.
//
// A step: Read pulls the rows through the servers' gate and copies the replica's dense
// layers; Update pushes the row gradients and adds the dense gradient into the buffer
// [dense gradient][examples][still training]; EndIteration ends the servers' clock, then
// all-reduces the buffer and applies it; Finish tells the servers, then keeps taking part,
// adding nothing, until every worker has finished (partitions of unequal size).
//
// The replica starts as the servers' bias table would (InitialRow of the same table config),
// so a hybrid job of one worker trains the model of --sync bsp (uncompressed: under --compress
// BSP compresses a large bias table, which this all-reduces as it is). The worker's KVClient and
// the Communicator share its data endpoint through an EndpointSplit (core/endpoint_split.h).
//
// Checkpoints: magic "HYB1", u64 length and the rows backend's state, u32 dense floats, u32
// state floats, i64 steps, the dense layers and their optimizer state.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_COLLECTIVE_HYBRID_BACKEND_H_
#define SYNCLINE_COLLECTIVE_HYBRID_BACKEND_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "collective/allreduce_backend.h"
#include "collective/communicator.h"
#include "collective/planes.h"
#include "optim/optimizer.h"
#include "worker/sync_backend.h"
#include "worker/worker_node.h"

namespace syncline {

class HybridBackend : public SyncBackend {
 public:
  // `rows` keeps the rows on the servers and leaves the bias alone (PsBackend after
  // KeepBiasElsewhere); `communicator` reaches every worker and all-reduces the dense layers'
  // buffer unless `dense` (NCCL: ConnectDenseCollective) is given. The dense layers take the
  // layout's optimizer without l2, as the servers' bias table does.
  HybridBackend(std::unique_ptr<SyncBackend> rows, std::unique_ptr<Communicator> communicator,
                Algorithm algorithm, std::unique_ptr<DenseCollective> dense = nullptr);

  absl::Status Init(const ParameterLayout& layout) override;
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override;
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  void SetFinalClock(int64_t clock) override { rows_->SetFinalClock(clock); }
  // The rows' per-row error feedback, which a GPU model may keep (the dense layers are
  // all-reduced uncompressed).
  std::optional<RowCompression> RowCompressionWanted() const override {
    return rows_->RowCompressionWanted();
  }
  void SetRowEncoder(RowGradientEncoder* encoder) override { rows_->SetRowEncoder(encoder); }
  std::optional<PullDecoding> PullDecodingWanted() const override {
    return rows_->PullDecodingWanted();
  }
  void SetPullDecoder(PulledRowDecoder* decoder) override { rows_->SetPullDecoder(decoder); }
  absl::Status EndIteration(int64_t clock, float examples) override;
  absl::Status Finish() override;
  void Settle(absl::Duration max_wait) override { rows_->Settle(max_wait); }
  double TakeMeanStaleness() override { return rows_->TakeMeanStaleness(); }
  // The rows' (the dense layers are all-reduced uncompressed).
  absl::Duration TakeCodecTime() override { return rows_->TakeCodecTime(); }
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  uint64_t bytes_pushed() const override {
    return rows_->bytes_pushed() + communicator_->counters().bytes_sent +
           (owned_dense_collective_ != nullptr ? owned_dense_collective_->counters().bytes_sent
                                               : 0);
  }
  uint64_t bytes_pulled() const override {
    return rows_->bytes_pulled() + communicator_->counters().bytes_received +
           (owned_dense_collective_ != nullptr ? owned_dense_collective_->counters().bytes_received
                                               : 0);
  }

  std::span<const float> dense_layers() const { return dense_; }

 private:
  // One all-reduce of the buffer; applies it. OutOfRange when nobody trained in it.
  absl::Status Round(bool training, float examples);

  std::unique_ptr<SyncBackend> rows_;
  std::unique_ptr<Communicator> communicator_;
  std::unique_ptr<DenseCollective> owned_dense_collective_;
  DenseCollective* dense_collective_;  // owned_dense_collective_, or communicator_
  const Algorithm algorithm_;
  OptimizerConfig optimizer_;
  std::vector<float> dense_;
  std::vector<float> state_;
  int64_t steps_ = 0;
  std::vector<float> buffer_;  // [dense gradient][examples][still training]
  bool finished_ = false;
};

// The HybridBackend of a --sync hybrid worker (worker/worker_node.h); its dense all-reduce
// takes the workers' TCP plane when every worker offers one (ConnectWorkersOverTcp).
HybridBackendFactory MakeHybridBackendFactory(CollectivePlane plane = {});

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_HYBRID_BACKEND_H_
