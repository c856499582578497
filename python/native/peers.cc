#include "python/native/peers.h"

#include <algorithm>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "client/peer_context.h"
#include "collective/communicator.h"
#include "collective/planes.h"
#include "compression/codec.h"

namespace syncline::python {
namespace {

// All-reduce with the job's algorithm and codec: none and fp16 sum as they travel; top-K and
// sign1 encode each worker's buffer plus its residual, all-gather the blocks and add them up in
// rank order, so that every worker ends with the same bits (as syncline-worker's all-reduce
// does with its row gradients).
class Peers : public PeerCollectives {
 public:
  Peers(std::unique_ptr<Communicator> communicator, Algorithm algorithm, CodecSpec codec)
      : communicator_(std::move(communicator)), algorithm_(algorithm), spec_(codec) {
    if (codec.kind == CodecKind::kTopK || codec.kind == CodecKind::kSign1) {
      codec_ = Codec::Create(codec);
    }
  }

  absl::Status AllReduce(std::span<float> data, bool compress, uint32_t residual) override {
    if (!compress || spec_.kind == CodecKind::kNone) {
      return communicator_->AllReduce(data, algorithm_, WireType::kFloat32);
    }
    if (codec_ == nullptr) {  // fp16
      return communicator_->AllReduce(data, algorithm_, WireType::kFloat16);
    }
    ErrorFeedback& feedback = feedback_[residual];
    feedback.Compress(*codec_, data, &block_);
    if (auto s = communicator_->AllGatherBytes(block_, &blocks_); !s.ok()) return s;
    std::fill(data.begin(), data.end(), 0.0f);
    for (int r = 0; r < communicator_->size(); ++r) {
      std::span<const std::byte> b(blocks_.data() + r * block_.size(), block_.size());
      if (auto d = codec_->DecodeAdd(b, data); !d.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("all-reduce: the block of w", r, " does not decode: ", d.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Broadcast(std::span<float> data, int root) override {
    return communicator_->Broadcast(data, root);
  }

  uint64_t bytes_sent() const override { return communicator_->counters().bytes_sent; }
  uint64_t bytes_received() const override { return communicator_->counters().bytes_received; }

 private:
  std::unique_ptr<Communicator> communicator_;
  const Algorithm algorithm_;
  const CodecSpec spec_;
  std::unique_ptr<Codec> codec_;  // top-K or sign1
  absl::flat_hash_map<uint32_t, ErrorFeedback> feedback_;
  std::vector<std::byte> block_, blocks_;
};

}  // namespace

PeerConnector CommunicatorPeers() {
  return [](const PeerContext& c) -> absl::StatusOr<std::unique_ptr<PeerCollectives>> {
    // An unencrypted job's collectives take a TCP plane of their own, as syncline-worker's.
    CollectivePlane plane;
    plane.tcp = !c.encrypted;
    plane.ports = c.ports;
    auto communicator = ConnectWorkersOverTcp(c.spec, c.table, c.rank, c.endpoint, plane);
    if (!communicator.ok()) return communicator.status();
    return std::unique_ptr<PeerCollectives>(std::make_unique<Peers>(
        std::move(*communicator), AlgorithmOf(c.spec.sync.algorithm), c.spec.training.codec));
  };
}

}  // namespace syncline::python
