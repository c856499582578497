#include "core/table_config.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "core/sharding.h"

namespace syncline {

void TableConfig::ToWire(wire::TableSpec::Builder out) const {
  out.setId(id);
  out.setKind(dense ? wire::TableKind::DENSE : wire::TableKind::SPARSE);
  out.setNumKeys(num_keys);
  out.setDim(dim);
  out.setOptimizer(static_cast<wire::OptimizerKind>(static_cast<int>(optimizer.kind)));
  out.setLearningRate(optimizer.learning_rate);
  out.setL2(optimizer.l2);
  out.setInitScale(init_scale);
  out.setSeed(seed);
  out.setMaxRows(max_rows);
  out.setL1(optimizer.l1);
  out.setFtrlBeta(optimizer.ftrl_beta);
  out.setEpsilon(optimizer.epsilon);
  out.setBeta1(optimizer.beta1);
  out.setBeta2(optimizer.beta2);
}

absl::StatusOr<TableConfig> TableConfig::FromWire(wire::TableSpec::Reader in) {
  TableConfig c;
  c.id = in.getId();
  const auto kind = in.getKind();
  if (kind != wire::TableKind::DENSE && kind != wire::TableKind::SPARSE) {
    return absl::InvalidArgumentError(absl::StrFormat("table %d: unknown kind", c.id));
  }
  c.dense = kind == wire::TableKind::DENSE;
  c.num_keys = in.getNumKeys();
  c.dim = in.getDim();
  const auto opt = in.getOptimizer();
  if (opt != wire::OptimizerKind::SGD && opt != wire::OptimizerKind::ADAGRAD &&
      opt != wire::OptimizerKind::ADAM && opt != wire::OptimizerKind::FTRL &&
      opt != wire::OptimizerKind::MOMENTUM && opt != wire::OptimizerKind::YOGI) {
    return absl::InvalidArgumentError(absl::StrFormat("table %d: unknown optimizer", c.id));
  }
  c.optimizer.kind = static_cast<OptimizerKind>(static_cast<int>(opt));
  c.optimizer.learning_rate = in.getLearningRate();
  c.optimizer.l2 = in.getL2();
  c.optimizer.l1 = in.getL1();
  c.optimizer.ftrl_beta = in.getFtrlBeta();
  c.optimizer.epsilon = in.getEpsilon();
  c.optimizer.beta1 = in.getBeta1();
  c.optimizer.beta2 = in.getBeta2();
  c.init_scale = in.getInitScale();
  c.seed = in.getSeed();
  c.max_rows = in.getMaxRows() == 0 ? kDefaultMaxRows : in.getMaxRows();
  // A shard indexes its rows with 32 bits: more would alias.
  if (c.max_rows > kMaxRowsLimit) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table %d: max_rows %d is above a shard's limit of %d", c.id, c.max_rows, kMaxRowsLimit));
  }
  if (c.dim == 0 || c.dim > kMaxDim) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: dim %d is outside [1, %d]", c.id, c.dim, kMaxDim));
  }
  // Divided, not multiplied: num_keys * dim wraps around in 64 bits for hostile sizes.
  if (c.dense && (c.num_keys == 0 || c.num_keys > (uint64_t{1} << 34) / c.dim)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: a dense table needs 1 to 2^34 values, not %d keys x %d", c.id,
                        c.num_keys, c.dim));
  }
  if (!std::isfinite(c.optimizer.learning_rate) || c.optimizer.learning_rate <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat("table %d: learning rate must be > 0", c.id));
  }
  if (!std::isfinite(c.optimizer.l2) || c.optimizer.l2 < 0 || !std::isfinite(c.init_scale) ||
      c.init_scale < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: l2 and init scale must be finite and >= 0", c.id));
  }
  if (!(c.optimizer.epsilon > 0) || !std::isfinite(c.optimizer.epsilon)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: epsilon must be finite and > 0", c.id));
  }
  if (!(c.optimizer.beta1 >= 0 && c.optimizer.beta1 < 1) ||
      !(c.optimizer.beta2 >= 0 && c.optimizer.beta2 < 1)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: Adam's beta1 and beta2 must be in [0, 1)", c.id));
  }
  if (!std::isfinite(c.optimizer.l1) || c.optimizer.l1 < 0 ||
      !std::isfinite(c.optimizer.ftrl_beta) || c.optimizer.ftrl_beta < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: FTRL's l1 and beta must be finite and >= 0", c.id));
  }
  return c;
}

void InitialRow(const TableConfig& config, uint64_t key, float* row) {
  if (config.init_scale == 0) {
    std::fill(row, row + config.dim, 0.0f);
    return;
  }
  const uint64_t base =
      MixKey(config.seed ^ MixKey(config.id + 0x9e3779b97f4a7c15ULL) ^ MixKey(key));
  for (uint32_t i = 0; i < config.dim; ++i) {
    const uint64_t bits = MixKey(base + i);
    const float unit = static_cast<float>(bits >> 40) * (1.0f / static_cast<float>(1 << 24));
    row[i] = (2.0f * unit - 1.0f) * config.init_scale;
  }
}

}  // namespace syncline
