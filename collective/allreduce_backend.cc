#include "collective/allreduce_backend.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/net.h"
#include "core/node_table.h"
#include "gossip/gossip_peer.h"

namespace syncline {

AllReduceBackend::AllReduceBackend(std::unique_ptr<Communicator> communicator,
                                   AllReduceOptions options)
    : communicator_(std::move(communicator)), options_(options) {
  if (options_.codec.kind == CodecKind::kTopK || options_.codec.kind == CodecKind::kSign1) {
    codec_ = Codec::Create(options_.codec);
  }
}

absl::Status AllReduceBackend::Init(const ParameterLayout& layout) {
  if (auto s = model_.Init(layout, options_.optimizer); !s.ok()) return s;
  bias_at_ = model_.row_floats();
  examples_at_ = bias_at_ + layout.bias_dim;
  touched_at_ = examples_at_ + 1;
  training_at_ = touched_at_ + layout.num_features;
  buffer_.assign(training_at_ + 1, 0.0f);
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                    std::span<float> rows, std::span<float> bias) {
  return model_.Read(keys, rows, bias);
}

absl::Status AllReduceBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                      std::span<const float> row_grads,
                                      std::span<const float> bias_grad, float examples) {
  if (auto s = model_.CheckUpdate(keys, row_grads, bias_grad); !s.ok()) return s;
  const uint32_t dim = model_.layout().row_dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    float* dst = buffer_.data() + keys[i] * dim;
    for (uint32_t j = 0; j < dim; ++j) dst[j] += row_grads[i * dim + j];
    buffer_[touched_at_ + keys[i]] = 1.0f;
  }
  for (size_t j = 0; j < bias_grad.size(); ++j) buffer_[bias_at_ + j] += bias_grad[j];
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Round(bool training, float examples) {
  buffer_[examples_at_] = training ? examples : 0.0f;
  buffer_[training_at_] = training ? 1.0f : 0.0f;
  const uint32_t dim = model_.layout().row_dim;
  const uint64_t features = model_.layout().num_features;
  if (codec_ != nullptr) {
    // The row gradients as codec blocks, all-gathered; the rest summed as it is.
    std::span<float> rows(buffer_.data(), bias_at_);
    feedback_.Compress(*codec_, rows, &block_);
    small_.assign(buffer_.begin() + bias_at_, buffer_.begin() + examples_at_ + 1);
    small_.push_back(buffer_[training_at_]);
    absl::Status s = communicator_->AllReduce(std::span<float>(small_), Algorithm::kAuto);
    if (s.ok()) s = communicator_->AllGatherBytes(block_, &blocks_);
    if (!s.ok()) return s;
    std::fill(rows.begin(), rows.end(), 0.0f);
    for (int r = 0; r < communicator_->size(); ++r) {
      std::span<const std::byte> b(blocks_.data() + r * block_.size(), block_.size());
      if (auto d = codec_->DecodeAdd(b, rows); !d.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("all-reduce: the block of w", r, " does not decode: ", d.message()));
      }
    }
    std::copy(small_.begin(), small_.end() - 1, buffer_.begin() + bias_at_);
    buffer_[training_at_] = small_.back();
    for (uint64_t key = 0; key < features; ++key) {
      bool any = codec_->spec().kind == CodecKind::kSign1;
      for (uint32_t j = 0; j < dim && !any; ++j) any = rows[key * dim + j] != 0.0f;
      buffer_[touched_at_ + key] = any ? 1.0f : 0.0f;
    }
  } else {
    absl::Status s =
        communicator_->AllReduce(std::span<float>(buffer_), options_.algorithm, options_.wire);
    if (!s.ok()) return s;
  }
  const float total = buffer_[examples_at_];
  if (total > 0) {
    const float scale = 1.0f / total;
    for (uint64_t key = 0; key < features; ++key) {
      if (buffer_[touched_at_ + key] != 0.0f)
        model_.ApplyRow(key, buffer_.data() + key * dim, scale);
    }
    model_.ApplyBias(buffer_.data() + bias_at_, scale);
  }
  const bool anyone_training = buffer_[training_at_] > 0;
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  return anyone_training ? absl::OkStatus() : absl::OutOfRangeError("every worker has finished");
}

absl::Status AllReduceBackend::EndIteration(int64_t clock, float examples) {
  absl::Status s = Round(/*training=*/true, examples);
  return absl::IsOutOfRange(s) ? absl::OkStatus() : s;  // (it trained: never out of range)
}

absl::Status AllReduceBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  // Others may have more steps (partitions of unequal size): keep answering their
  // collectives, adding nothing, until a round in which nobody trained.
  while (true) {
    absl::Status s = Round(/*training=*/false, 0);
    if (absl::IsOutOfRange(s)) return absl::OkStatus();
    if (!s.ok()) return s;
  }
}

namespace {
constexpr char kStateMagic[4] = {'A', 'R', 'D', '1'};
}  // namespace

absl::StatusOr<std::string> AllReduceBackend::SaveState() const {
  std::string out;
  const std::span<const float> residual = feedback_.residual();
  const int64_t header[1] = {static_cast<int64_t>(residual.size())};
  model_.Save(
      kStateMagic, header,
      std::string_view(reinterpret_cast<const char*>(residual.data()), residual.size_bytes()),
      &out);
  return out;
}

absl::Status AllReduceBackend::RestoreState(std::string_view state) {
  std::vector<int64_t> header;
  std::string_view tail;
  const size_t rows = bias_at_;
  absl::Status s = model_.Restore(
      state, kStateMagic, 1,
      [rows](std::span<const int64_t> h) {
        // A residual covers every row gradient, or is absent (uncompressed, or not yet made).
        // Any other count matches no length, and the state is refused as damaged.
        if (h[0] == 0) return size_t{0};
        return h[0] == static_cast<int64_t>(rows) ? rows * sizeof(float) : size_t{1} << 62;
      },
      "the saved worker state is not an all-reduce worker's (was the checkpoint written with "
      "parameter servers or gossip?)",
      &header, &tail);
  if (!s.ok()) return s;
  if (tail.empty()) {
    feedback_.Reset();
  } else {
    std::vector<float> residual(tail.size() / sizeof(float));
    std::memcpy(residual.data(), tail.data(), tail.size());
    feedback_.SetResidual(residual);
  }
  return absl::OkStatus();
}

Algorithm AlgorithmOf(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return Algorithm::kAuto;
    case AllReduceAlgorithm::kRing:
      return Algorithm::kRing;
    case AllReduceAlgorithm::kDoubling:
      return Algorithm::kRecursiveDoubling;
    case AllReduceAlgorithm::kHierarchical:
      return Algorithm::kHierarchical;
  }
  return Algorithm::kAuto;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkers(const JobSpec& spec,
                                                             const NodeTable& table, int rank,
                                                             Endpoint& endpoint) {
  std::vector<std::string> peers;
  std::vector<int> host_of_rank(table.num_workers, 0);
  std::map<std::string, int> hosts;
  for (int w = 0; w < table.num_workers; ++w) {
    peers.push_back(DataEndpointId(wire::Role::WORKER, w));
  }
  for (const NodeInfo& n : table.nodes) {
    if (n.role != wire::Role::WORKER || n.rank < 0 || n.rank >= table.num_workers) continue;
    auto hp = ParseTcpAddress(n.address);
    const std::string host = hp.ok() ? hp->host : n.address;
    host_of_rank[n.rank] = hosts.try_emplace(host, static_cast<int>(hosts.size())).first->second;
    // One connection per pair, opened by the lower rank (two ROUTERs connected both ways
    // under the same ids trip ZeroMQ); the higher rank answers over the one it accepted.
    if (n.rank > rank) {
      if (auto s = endpoint.Connect(n.id, n.address); !s.ok()) return s;
    }
  }
  CommunicatorOptions c;
  c.timeout = absl::Seconds(std::min(spec.timeouts.request_s, spec.timeouts.peer_s));
  c.host_of_rank = host_of_rank;
  return std::make_unique<Communicator>(&endpoint, rank, peers, c);
}

GossipBackendFactory MakeAllReduceBackendFactory() {
  return [](const JobSpec& spec, const NodeTable& table, int rank,
            Endpoint& endpoint) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    auto communicator = ConnectWorkers(spec, table, rank, endpoint);
    if (!communicator.ok()) return communicator.status();
    AllReduceOptions o;
    o.algorithm = AlgorithmOf(spec.sync.algorithm);
    o.wire = spec.training.codec.kind == CodecKind::kFp16 ? WireType::kFloat16 : WireType::kFloat32;
    o.codec = spec.training.codec;
    o.optimizer.kind = spec.training.optimizer;
    o.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
    o.optimizer.l2 = static_cast<float>(spec.training.l2);
    return std::unique_ptr<SyncBackend>(
        std::make_unique<AllReduceBackend>(std::move(*communicator), o));
  };
}

GossipBackendFactory MakeServerlessBackendFactory() {
  return [gossip = MakeGossipBackendFactory(), allreduce = MakeAllReduceBackendFactory()](
             const JobSpec& spec, const NodeTable& table, int rank,
             Endpoint& endpoint) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    return spec.sync.allreduce() ? allreduce(spec, table, rank, endpoint)
                                 : gossip(spec, table, rank, endpoint);
  };
}

}  // namespace syncline
