// TableConfig: what a parameter table is (dense or sparse, size, row width) and how the
// servers update it. Workers declare tables with it; servers validate what arrives.
#ifndef SYNCLINE_CORE_TABLE_CONFIG_H_
#define SYNCLINE_CORE_TABLE_CONFIG_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/syncline.capnp.h"
#include "syncline/options.h"

namespace syncline {

struct TableConfig {
  uint32_t id = 0;
  // Dense tables hold keys [0, num_keys) split into contiguous ranges; sparse tables hold any
  // key below num_keys (0: any 64-bit key), spread by hash, rows created on first touch.
  bool dense = true;
  uint64_t num_keys = 0;
  uint32_t dim = 1;  // floats per key
  OptimizerConfig optimizer;
  float init_scale = 0.0f;  // rows start uniform in [-init_scale, init_scale]; 0 = zeros
  uint64_t seed = 1;        // with (table, key), makes row initialisation agree everywhere
  uint64_t max_rows = 0;    // sparse: rows one shard may hold; 0 = kDefaultMaxRows
  bool operator==(const TableConfig&) const = default;

  static constexpr uint64_t kDefaultMaxRows = uint64_t{1} << 26;
  static constexpr uint64_t kMaxRowsLimit = (uint64_t{1} << 32) - 1;
  static constexpr uint32_t kMaxDim = 1 << 16;

  void ToWire(wire::TableSpec::Builder out) const;
  // Validates everything: a spec from the network is untrusted.
  static absl::StatusOr<TableConfig> FromWire(wire::TableSpec::Reader in);
};

// Writes the initial values of row `key` (config.dim floats): zeros, or uniform in
// [-init_scale, init_scale] from a counter-based generator of (seed, table id, key, i) alone, so
// every shard, every storage tier and every restart agrees.
void InitialRow(const TableConfig& config, uint64_t key, float* row);

}  // namespace syncline

#endif  // SYNCLINE_CORE_TABLE_CONFIG_H_
