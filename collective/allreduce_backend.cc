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
  if (layout.num_features == 0) {
    return absl::InvalidArgumentError(
        "all-reduce keeps the whole model: the number of features must be known");
  }
  if (layout.row_dim == 0 || layout.bias_dim == 0) {
    return absl::InvalidArgumentError("all-reduce: row_dim and bias_dim must be positive");
  }
  layout_ = layout;
  layout_.optimizer = options_.optimizer;
  bias_optimizer_ = options_.optimizer;
  bias_optimizer_.l2 = 0;  // the bias is not regularised, as on the servers
  state_floats_ = StateFloatsPerWeight(options_.optimizer.kind);
  const size_t row_floats = layout.num_features * layout.row_dim;
  params_.assign(row_floats + layout.bias_dim, 0.0f);
  row_state_.assign(row_floats * state_floats_, 0.0f);
  row_steps_.assign(layout.num_features, 0);
  bias_state_.assign(static_cast<size_t>(layout.bias_dim) * state_floats_, 0.0f);
  bias_at_ = row_floats;
  examples_at_ = bias_at_ + layout.bias_dim;
  touched_at_ = examples_at_ + 1;
  training_at_ = touched_at_ + layout.num_features;
  buffer_.assign(training_at_ + 1, 0.0f);
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                    std::span<float> rows, std::span<float> bias) {
  const uint32_t dim = layout_.row_dim;
  if (rows.size() != keys.size() * dim || bias.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError("all-reduce read: buffer sizes do not match the layout");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", keys[i], layout_.num_features));
    }
    std::copy_n(params_.data() + keys[i] * dim, dim, rows.data() + i * dim);
  }
  std::copy_n(params_.data() + bias_at_, layout_.bias_dim, bias.data());
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                      std::span<const float> row_grads,
                                      std::span<const float> bias_grad, float examples) {
  const uint32_t dim = layout_.row_dim;
  if (row_grads.size() != keys.size() * dim || bias_grad.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError("all-reduce update: gradient sizes do not match the layout");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    if (key >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", key, layout_.num_features));
    }
    float* dst = buffer_.data() + key * dim;
    for (uint32_t j = 0; j < dim; ++j) dst[j] += row_grads[i * dim + j];
    buffer_[touched_at_ + key] = 1.0f;
  }
  for (uint32_t j = 0; j < layout_.bias_dim; ++j) buffer_[bias_at_ + j] += bias_grad[j];
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Round(bool training, float examples) {
  buffer_[examples_at_] = training ? examples : 0.0f;
  buffer_[training_at_] = training ? 1.0f : 0.0f;
  const uint32_t dim = layout_.row_dim;
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
    for (uint64_t key = 0; key < layout_.num_features; ++key) {
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
    for (uint64_t key = 0; key < layout_.num_features; ++key) {
      if (buffer_[touched_at_ + key] == 0.0f) continue;
      ApplyUpdate(options_.optimizer, params_.data() + key * dim,
                  row_state_.data() + key * dim * state_floats_, buffer_.data() + key * dim, scale,
                  dim, ++row_steps_[key]);
    }
    ApplyUpdate(bias_optimizer_, params_.data() + bias_at_, bias_state_.data(),
                buffer_.data() + bias_at_, scale, layout_.bias_dim, ++bias_steps_);
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
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint64_t features = layout_.num_features;
  const uint32_t shape[3] = {layout_.row_dim, layout_.bias_dim,
                             static_cast<uint32_t>(state_floats_)};
  const std::span<const float> residual = feedback_.residual();
  const uint64_t residual_floats = residual.size();
  put(kStateMagic, 4);
  put(&features, 8);
  put(shape, sizeof(shape));
  put(&bias_steps_, 8);
  put(&residual_floats, 8);
  put(params_.data(), params_.size() * sizeof(float));
  put(row_state_.data(), row_state_.size() * sizeof(float));
  put(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  put(bias_state_.data(), bias_state_.size() * sizeof(float));
  put(residual.data(), residual.size() * sizeof(float));
  return out;
}

absl::Status AllReduceBackend::RestoreState(std::string_view state) {
  StateReader in(state);
  char magic[4];
  uint64_t features = 0, residual_floats = 0;
  uint32_t shape[3] = {0, 0, 0};
  int64_t bias_steps = 0;
  if (!in.Read(magic, 4) || std::memcmp(magic, kStateMagic, 4) != 0) {
    return absl::InvalidArgumentError(
        "the saved worker state is not an all-reduce worker's (was the checkpoint written with "
        "parameter servers or gossip?)");
  }
  if (!in.Read(&features, 8) || !in.Read(shape, sizeof(shape)) || !in.Read(&bias_steps, 8) ||
      !in.Read(&residual_floats, 8)) {
    return absl::DataLossError("the saved all-reduce state is truncated");
  }
  if (features != layout_.num_features || shape[0] != layout_.row_dim ||
      shape[1] != layout_.bias_dim || shape[2] != static_cast<uint32_t>(state_floats_) ||
      (residual_floats != 0 && residual_floats != bias_at_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the saved all-reduce model has %d features x %d + %d bias with %d state floats (and a "
        "residual of %d); this job's has %d x %d + %d with %d",
        features, shape[0], shape[1], shape[2], residual_floats, layout_.num_features,
        layout_.row_dim, layout_.bias_dim, state_floats_));
  }
  const size_t body =
      (params_.size() + row_state_.size() + bias_state_.size() + residual_floats) * sizeof(float) +
      row_steps_.size() * sizeof(int64_t);
  if (in.left() != body) {
    return absl::DataLossError(
        absl::StrFormat("the saved all-reduce state holds %d bytes of model and state, expected %d",
                        in.left(), body));
  }
  in.Read(params_.data(), params_.size() * sizeof(float));
  in.Read(row_state_.data(), row_state_.size() * sizeof(float));
  in.Read(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  in.Read(bias_state_.data(), bias_state_.size() * sizeof(float));
  std::vector<float> residual(residual_floats);
  in.Read(residual.data(), residual.size() * sizeof(float));
  if (residual.empty()) {
    feedback_.Reset();
  } else {
    feedback_.SetResidual(residual);
  }
  bias_steps_ = bias_steps;
  return absl::OkStatus();
}

GossipBackendFactory MakeAllReduceBackendFactory() {
  return [](const JobSpec& spec, const NodeTable& table, int rank,
            Endpoint& endpoint) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
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
    AllReduceOptions o;
    switch (spec.sync.algorithm) {
      case AllReduceAlgorithm::kAuto:
        o.algorithm = Algorithm::kAuto;
        break;
      case AllReduceAlgorithm::kRing:
        o.algorithm = Algorithm::kRing;
        break;
      case AllReduceAlgorithm::kDoubling:
        o.algorithm = Algorithm::kRecursiveDoubling;
        break;
      case AllReduceAlgorithm::kHierarchical:
        o.algorithm = Algorithm::kHierarchical;
        break;
    }
    o.wire = spec.training.codec.kind == CodecKind::kFp16 ? WireType::kFloat16 : WireType::kFloat32;
    o.codec = spec.training.codec;
    o.optimizer.kind = spec.training.optimizer;
    o.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
    o.optimizer.l2 = static_cast<float>(spec.training.l2);
    return std::unique_ptr<SyncBackend>(std::make_unique<AllReduceBackend>(
        std::make_unique<Communicator>(&endpoint, rank, peers, c), o));
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
