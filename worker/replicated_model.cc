#include "worker/replicated_model.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/table_config.h"
#include "worker/ps_backend.h"

namespace syncline {

uint64_t ReplicatedModelBytes(const ParameterLayout& layout, OptimizerKind optimizer) {
  const uint64_t floats_per_weight = 1 + static_cast<uint64_t>(StateFloatsPerWeight(optimizer));
  // Per row: its weights with their state, and its step count.
  const uint64_t row_bytes = layout.row_dim * floats_per_weight * sizeof(float) + sizeof(int64_t);
  uint64_t rows = 0, total = 0;
  if (__builtin_mul_overflow(layout.num_features, row_bytes, &rows) ||
      __builtin_add_overflow(rows, layout.bias_dim * floats_per_weight * sizeof(float), &total)) {
    return std::numeric_limits<uint64_t>::max();
  }
  return total;
}

uint64_t ReplicatedModelLimit() {
  return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) *
         static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE)) / 2;
}

absl::Status CheckReplicatedModelFits(const ParameterLayout& layout, OptimizerKind optimizer,
                                      const std::string& where, uint64_t limit) {
  const uint64_t bytes = ReplicatedModelBytes(layout, optimizer);
  if (bytes <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "%s: its largest feature id makes %d features, and a worker that keeps the whole model "
      "(gossip, all-reduce) would need %s for it, over the limit of %d MiB (half of this "
      "machine's memory): renumber the features densely, or let servers shard the model "
      "(--sync bsp, ssp or asp)",
      where, layout.num_features,
      bytes == std::numeric_limits<uint64_t>::max() ? std::string("more than 2^64 bytes")
                                                    : absl::StrFormat("%d MiB", bytes >> 20),
      limit >> 20));
}

absl::Status ReplicatedModel::Init(const ParameterLayout& layout,
                                   const OptimizerConfig& optimizer) {
  if (layout.num_features == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, " keeps the whole model: the number of features must be known"));
  }
  if (absl::Status s = CheckReplicatedModelFits(layout, optimizer.kind, who_); !s.ok()) return s;
  if (layout.row_dim == 0 || layout.bias_dim == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, ": row_dim and bias_dim must be positive"));
  }
  layout_ = layout;
  layout_.optimizer = optimizer;
  row_optimizer_ = optimizer;
  bias_optimizer_ = optimizer;
  bias_optimizer_.l2 = 0;  // the bias is not regularised, as on the servers
  state_floats_ = StateFloatsPerWeight(optimizer.kind);
  // The values the parameter servers would start these tables from (PsBackend declares
  // them so), so that a replicated model trains the model of --sync bsp from its first step,
  // and every replica starts equal.
  params_.assign(row_floats() + layout.bias_dim, 0.0f);
  TableConfig rows;
  rows.id = PsBackend::kRowsTable;
  rows.dim = layout.row_dim;
  rows.seed = layout.seed;
  rows.init_scale = layout.row_init_scale;
  if (rows.init_scale > 0) {
    for (uint64_t key = 0; key < layout.num_features; ++key) {
      InitialRow(rows, key, &params_[key * layout.row_dim]);
    }
  }
  TableConfig bias;
  bias.id = PsBackend::kBiasTable;
  bias.dim = 1;
  bias.seed = layout.seed;
  bias.init_scale = layout.bias_init_scale;
  if (bias.init_scale > 0) {
    for (uint32_t k = 0; k < layout.bias_dim; ++k) InitialRow(bias, k, &params_[row_floats() + k]);
  }
  row_state_.assign(row_floats() * state_floats_, 0.0f);
  row_steps_.assign(layout.num_features, 0);
  bias_state_.assign(static_cast<size_t>(layout.bias_dim) * state_floats_, 0.0f);
  bias_steps_ = 0;
  return absl::OkStatus();
}

absl::Status ReplicatedModel::Read(std::span<const uint64_t> keys, std::span<float> rows,
                                   std::span<float> bias) const {
  const uint32_t dim = layout_.row_dim;
  if (rows.size() != keys.size() * dim || bias.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, " read: buffer sizes do not match the layout"));
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i] >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", keys[i], layout_.num_features));
    }
    std::copy_n(params_.data() + keys[i] * dim, dim, rows.data() + i * dim);
  }
  std::copy_n(params_.data() + row_floats(), layout_.bias_dim, bias.data());
  return absl::OkStatus();
}

absl::Status ReplicatedModel::CheckUpdate(std::span<const uint64_t> keys,
                                          std::span<const float> row_grads,
                                          std::span<const float> bias_grad) const {
  if (row_grads.size() != keys.size() * layout_.row_dim || bias_grad.size() != layout_.bias_dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(who_, " update: gradient sizes do not match the layout"));
  }
  for (uint64_t key : keys) {
    if (key >= layout_.num_features) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the model", key, layout_.num_features));
    }
  }
  return absl::OkStatus();
}

void ReplicatedModel::ApplyRow(uint64_t key, const float* grad, float scale) {
  const uint32_t dim = layout_.row_dim;
  ApplyUpdate(row_optimizer_, params_.data() + key * dim,
              row_state_.data() + key * dim * state_floats_, grad, scale, dim, ++row_steps_[key]);
}

void ReplicatedModel::ApplyBias(const float* grad, float scale) {
  ApplyUpdate(bias_optimizer_, params_.data() + row_floats(), bias_state_.data(), grad, scale,
              layout_.bias_dim, ++bias_steps_);
}

void ReplicatedModel::Save(const char (&magic)[4], std::span<const int64_t> header,
                           std::string_view tail, std::string* out) const {
  const auto put = [out](const void* p, size_t n) {
    if (n > 0) out->append(static_cast<const char*>(p), n);  // an empty tail may be null
  };
  const uint64_t features = layout_.num_features;
  const uint32_t shape[3] = {layout_.row_dim, layout_.bias_dim,
                             static_cast<uint32_t>(state_floats_)};
  put(magic, 4);
  put(&features, 8);
  put(shape, sizeof(shape));
  put(header.data(), header.size_bytes());
  put(&bias_steps_, 8);
  put(params_.data(), params_.size() * sizeof(float));
  put(row_state_.data(), row_state_.size() * sizeof(float));
  put(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  put(bias_state_.data(), bias_state_.size() * sizeof(float));
  put(tail.data(), tail.size());
}

absl::Status ReplicatedModel::Restore(
    std::string_view state, const char (&magic)[4], int header_fields,
    const std::function<size_t(std::span<const int64_t>)>& tail_bytes, const std::string& not_mine,
    std::vector<int64_t>* header, std::string_view* tail) {
  StateReader in(state);
  char found[4];
  uint64_t features = 0;
  uint32_t shape[3] = {0, 0, 0};
  if (!in.Read(found, 4) || std::memcmp(found, magic, 4) != 0) {
    return absl::InvalidArgumentError(not_mine);
  }
  header->assign(header_fields, 0);
  int64_t bias_steps = 0;
  if (!in.Read(&features, 8) || !in.Read(shape, sizeof(shape)) ||
      !in.Read(header->data(), header->size() * sizeof(int64_t)) || !in.Read(&bias_steps, 8)) {
    return absl::DataLossError(absl::StrCat("the saved ", who_, " state is truncated"));
  }
  if (features != layout_.num_features || shape[0] != layout_.row_dim ||
      shape[1] != layout_.bias_dim || shape[2] != static_cast<uint32_t>(state_floats_)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the saved %s model has %d features x %d + %d bias with %d state floats; this job's "
        "has %d x %d + %d with %d",
        who_, features, shape[0], shape[1], shape[2], layout_.num_features, layout_.row_dim,
        layout_.bias_dim, state_floats_));
  }
  // The shapes match the layout, so every vector keeps its size; check the total before
  // overwriting anything.
  const size_t extra = tail_bytes(*header);
  const size_t body = (params_.size() + row_state_.size() + bias_state_.size()) * sizeof(float) +
                      row_steps_.size() * sizeof(int64_t) + extra;
  if (in.left() != body) {
    return absl::DataLossError(
        absl::StrFormat("the saved %s state holds %d bytes of model and state, expected %d", who_,
                        in.left(), body));
  }
  in.Read(params_.data(), params_.size() * sizeof(float));
  in.Read(row_state_.data(), row_state_.size() * sizeof(float));
  in.Read(row_steps_.data(), row_steps_.size() * sizeof(int64_t));
  in.Read(bias_state_.data(), bias_state_.size() * sizeof(float));
  bias_steps_ = bias_steps;
  *tail = state.substr(state.size() - extra);
  return absl::OkStatus();
}

}  // namespace syncline
