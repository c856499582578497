#include "gossip/gossip_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"

namespace syncline {

GossipBackend::GossipBackend(Endpoint* endpoint, GossipOptions options)
    : options_(options), mixer_(endpoint, std::move(options)) {}

absl::Status GossipBackend::Init(const ParameterLayout& layout) {
  if (auto s = model_.Init(layout, options_.optimizer); !s.ok()) return s;
  return mixer_.Init(model_.parameters().size());
}

absl::Status GossipBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                 std::span<float> rows, std::span<float> bias) {
  return model_.Read(keys, rows, bias);
}

absl::Status GossipBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                   std::span<const float> row_grads,
                                   std::span<const float> bias_grad, float examples) {
  if (!(examples > 0)) return absl::InvalidArgumentError("gossip update of no examples");
  if (auto s = model_.CheckUpdate(keys, row_grads, bias_grad); !s.ok()) return s;
  const float scale = 1.0f / examples;
  const uint32_t dim = model_.layout().row_dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    model_.ApplyRow(keys[i], row_grads.data() + i * dim, scale);
  }
  model_.ApplyBias(bias_grad.data(), scale);
  return absl::OkStatus();
}

absl::Status GossipBackend::EndIteration(int64_t clock, float examples) {
  next_step_ = clock + 1;
  return mixer_.MixOnce(clock, model_.parameters());
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
  const int64_t header[1] = {next_step_};
  model_.Save(kStateMagic, header, {}, &out);
  return out;
}

absl::Status GossipBackend::RestoreState(std::string_view state) {
  if (options_.asynchronous) {
    return absl::FailedPreconditionError("asynchronous gossip does not restore checkpoints");
  }
  std::vector<int64_t> header;
  std::string_view tail;
  absl::Status s = model_.Restore(
      state, kStateMagic, 1, [](std::span<const int64_t>) { return size_t{0}; },
      "the saved worker state is not a gossip peer's (was the checkpoint written with "
      "parameter servers?)",
      &header, &tail);
  if (!s.ok()) return s;
  next_step_ = header[0];
  return absl::OkStatus();
}

absl::Status GossipBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (options_.asynchronous) {
    if (auto s = mixer_.DrainIncoming(model_.parameters()); !s.ok()) return s;
  }
  mixer_.Leave(next_step_);
  return absl::OkStatus();
}

}  // namespace syncline
