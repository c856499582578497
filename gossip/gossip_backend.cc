#include "gossip/gossip_backend.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "ps/optimizer.h"

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
