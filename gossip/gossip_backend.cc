#include "gossip/gossip_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "optim/optimizer.h"

namespace syncline {

GossipBackend::GossipBackend(Endpoint* endpoint, GossipOptions options)
    : options_(options), mixer_(endpoint, std::move(options)) {}

absl::Status GossipBackend::Init(const ParameterLayout& layout) {
  if (layout.num_features == 0) {
    return absl::InvalidArgumentError(
        "gossip keeps the whole model: the number of features "
        "must be known");
  }
  if (layout.row_dim == 0 || layout.bias_dim == 0) {
    return absl::InvalidArgumentError("gossip: row_dim and bias_dim must be positive");
  }
  layout_ = layout;
  layout_.optimizer = options_.optimizer;
  bias_optimizer_ = options_.optimizer;
  bias_optimizer_.l2 = 0;  // the bias is not regularised
  state_floats_ = StateFloatsPerWeight(options_.optimizer.kind);
  const size_t row_floats = layout.num_features * layout.row_dim;
  params_.assign(row_floats + layout.bias_dim, 0.0f);
  row_state_.assign(row_floats * state_floats_, 0.0f);
  row_steps_.assign(layout.num_features, 0);
  bias_state_.assign(static_cast<size_t>(layout.bias_dim) * state_floats_, 0.0f);
  bias_steps_ = 0;
  return mixer_.Init(params_.size());
}

absl::Status GossipBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                 std::span<float> rows, std::span<float> bias) {
  const uint32_t dim = layout_.row_dim;
  if (rows.size() != keys.size() * dim || bias.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError("gossip read: buffer sizes do not match the layout");
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", keys[i], layout_.num_features));
    }
    std::copy_n(params_.data() + keys[i] * dim, dim, rows.data() + i * dim);
  }
  std::copy_n(params_.data() + layout_.num_features * dim, layout_.bias_dim, bias.data());
  return absl::OkStatus();
}

absl::Status GossipBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                   std::span<const float> row_grads,
                                   std::span<const float> bias_grad, float examples) {
  const uint32_t dim = layout_.row_dim;
  if (!(examples > 0)) return absl::InvalidArgumentError("gossip update of no examples");
  if (row_grads.size() != keys.size() * dim || bias_grad.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError("gossip update: gradient sizes do not match the layout");
  }
  const float scale = 1.0f / examples;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t key = keys[i];
    if (key >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", key, layout_.num_features));
    }
    ApplyUpdate(options_.optimizer, params_.data() + key * dim,
                row_state_.data() + key * dim * state_floats_, row_grads.data() + i * dim, scale,
                dim, ++row_steps_[key]);
  }
  ApplyUpdate(bias_optimizer_, params_.data() + layout_.num_features * dim, bias_state_.data(),
              bias_grad.data(), scale, layout_.bias_dim, ++bias_steps_);
  return absl::OkStatus();
}

absl::Status GossipBackend::EndIteration(int64_t clock, float examples) {
  next_step_ = clock + 1;
  return mixer_.MixOnce(clock, params_);
}

namespace {
constexpr char kStateMagic[4] = {'G', 'S', 'P', '1'};
}  // namespace

absl::StatusOr<std::string> GossipBackend::SaveState() const {
  if (options_.asynchronous) {
    return absl::FailedPreconditionError(
        "asynchronous gossip does not checkpoint: push-sum weight in flight would be lost");
  }
  std::string out;
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint64_t features = layout_.num_features;
  const uint32_t shape[3] = {layout_.row_dim, layout_.bias_dim,
                             static_cast<uint32_t>(state_floats_)};
  put(kStateMagic, 4);
  put(&features, 8);
  put(shape, sizeof(shape));
  put(&next_step_, 8);
  put(&bias_steps_, 8);
  put(params_.data(), params_.size() * sizeof(float));
  put(row_state_.data(), row_state_.size() * sizeof(float));
  put(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  put(bias_state_.data(), bias_state_.size() * sizeof(float));
  return out;
}

absl::Status GossipBackend::RestoreState(std::string_view state) {
  if (options_.asynchronous) {
    return absl::FailedPreconditionError("asynchronous gossip does not restore checkpoints");
  }
  StateReader in(state);
  char magic[4];
  uint64_t features = 0;
  uint32_t shape[3] = {0, 0, 0};
  if (!in.Read(magic, 4) || std::memcmp(magic, kStateMagic, 4) != 0) {
    return absl::InvalidArgumentError(
        "the saved worker state is not a gossip peer's (was the checkpoint written with "
        "parameter servers?)");
  }
  int64_t next_step = 0, bias_steps = 0;
  if (!in.Read(&features, 8) || !in.Read(shape, sizeof(shape)) || !in.Read(&next_step, 8) ||
      !in.Read(&bias_steps, 8)) {
    return absl::DataLossError("the saved gossip state is truncated");
  }
  if (features != layout_.num_features || shape[0] != layout_.row_dim ||
      shape[1] != layout_.bias_dim || shape[2] != static_cast<uint32_t>(state_floats_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the saved gossip model has %d features x %d + %d bias with %d state floats; this job's "
        "has %d x %d + %d with %d",
        features, shape[0], shape[1], shape[2], layout_.num_features, layout_.row_dim,
        layout_.bias_dim, state_floats_));
  }
  // The shapes match the layout, so every vector keeps its size; check the total before
  // overwriting anything.
  const size_t body = (params_.size() + row_state_.size() + bias_state_.size()) * sizeof(float) +
                      row_steps_.size() * sizeof(int64_t);
  if (in.left() != body) {
    return absl::DataLossError(absl::StrFormat(
        "the saved gossip state holds %d bytes of model and state, expected %d", in.left(), body));
  }
  in.Read(params_.data(), params_.size() * sizeof(float));
  in.Read(row_state_.data(), row_state_.size() * sizeof(float));
  in.Read(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  in.Read(bias_state_.data(), bias_state_.size() * sizeof(float));
  next_step_ = next_step;
  bias_steps_ = bias_steps;
  return absl::OkStatus();
}

absl::Status GossipBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (options_.asynchronous) {
    if (auto s = mixer_.DrainIncoming(params_); !s.ok()) return s;
  }
  mixer_.Leave(next_step_);
  return absl::OkStatus();
}

}  // namespace syncline
