// GossipBackend: a SyncBackend for jobs without parameter servers. Each worker holds the whole
// model (num_features x row_dim dense rows, then bias_dim bias floats, in one vector), takes a
// local optimizer step (ps/optimizer.h, with its own optimizer state) and then averages with its
// neighbours through a GossipMixer: synchronous D-PSGD, or push-sum when asynchronous (the
// optimizer then steps the push-sum estimate z = x / w directly).
//
// The model starts at zero on every node, like the parameter servers' tables (TableConfig's
// init_scale 0), so every replica starts identical. With 10k features of one float, a step
// sends 40 KB to each neighbour (fp16 20 KB; CHOCO topk:0.1 8 KB, sign1 1.3 KB).
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_GOSSIP_GOSSIP_BACKEND_H_
#define SYNCLINE_GOSSIP_GOSSIP_BACKEND_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/transport.h"
#include "gossip/gossip_mixer.h"
#include "gossip/gossip_options.h"
#include "gossip/topology.h"
#include "worker/replicated_model.h"
#include "worker/sync_backend.h"

namespace syncline {

class GossipBackend : public SyncBackend {
 public:
  // `endpoint` (this worker's data endpoint, connected to every peer) must outlive the backend
  // and is used by it alone.
  GossipBackend(Endpoint* endpoint, GossipOptions options);

  // Allocates the local model (dense rows; num_features must be known) and optimizer state.
  absl::Status Init(const ParameterLayout& layout) override;
  // Copies the local rows of `keys` and the bias; never waits.
  absl::Status Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override;
  // A local optimizer step with the gradient sums scaled by 1 / examples.
  absl::Status Update(int64_t clock, std::span<const uint64_t> keys,
                      std::span<const float> row_grads, std::span<const float> bias_grad,
                      float examples) override;
  // A joiner enters the graph at first_clock; this node, when it is the joiner, takes its
  // neighbours' models at its first Read (GossipMixer::Admit, Enter).
  void WatchDownWorkers(std::function<std::vector<int>()> take) override {
    mixer_.WatchDownPeers(std::move(take));
  }
  absl::Status OnArrival(int worker, int64_t first_clock, std::span<const int> donors) override {
    return mixer_.Admit(worker, first_clock, donors);
  }
  // The gossip round of step `clock`.
  absl::Status EndIteration(int64_t clock, float examples) override;
  // Tells the peers this worker leaves, so that they stop waiting for it.
  absl::Status Finish() override;
  // Checkpoints (synchronous gossip only): the whole local model, its optimizer state and the
  // next step, and with topk or sign1 the public copies of every edge (GossipMixer; 2 x the
  // model per peer mixed with). Every peer saves after the same step, so a restore of all of
  // them continues exactly. A state of another shape, or copies for another peer count or of
  // this node itself, is InvalidArgument and changes nothing. A checkpoint without copies
  // (codec none or fp16) restores under topk or sign1 with all copies restarting from zero;
  // one with copies restores under none or fp16 without them. Asynchronous gossip refuses
  // (push-sum weight in flight would be lost).
  absl::StatusOr<std::string> SaveState() const override;
  absl::Status RestoreState(std::string_view state) override;
  double TakeMeanStaleness() override { return 0; }
  uint64_t bytes_pushed() const override { return mixer_.bytes_sent(); }
  uint64_t bytes_pulled() const override { return mixer_.bytes_received(); }

  // Mean local consensus proxy since the last call: the distance between this worker's model
  // and the mean of the neighbour models it received (GossipMixer::TakeConsensusProxy).
  double TakeConsensusProxy() override { return mixer_.TakeConsensusProxy(); }
  absl::Duration TakeCodecTime() override { return mixer_.TakeCodecTime(); }
  // Mean bytes sent to one peer in one step since the last call.
  double TakeBytesPerPeerStep() { return mixer_.TakeBytesPerPeerStep(); }
  std::vector<int> dead_peers() const { return mixer_.dead_peers(); }
  // The whole local model: rows (num_features x row_dim), then the bias.
  std::span<const float> parameters() const { return model_.parameters(); }
  // Keeps `resources` (the endpoint of a generation's own, say) as long as this lives.
  void Own(std::shared_ptr<void> resources) { owned_ = std::move(resources); }

 private:
  std::shared_ptr<void> owned_;  // destroyed last: the mixer uses it
  const GossipOptions options_;
  GossipMixer mixer_;
  ReplicatedModel model_{"gossip"};
  int64_t next_step_ = 0;  // one past the last step gossiped
  bool finished_ = false;
};

}  // namespace syncline

#endif  // SYNCLINE_GOSSIP_GOSSIP_BACKEND_H_
