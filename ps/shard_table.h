// ShardTable: one server's shard of one parameter table, with its optimizer state and the
// per-clock gradient aggregates that BSP applies once every worker has finished a clock.
//
// Dense shards own a contiguous key range and store its weights in blocks of about 1 MiB (a
// whole number of rows each), so a range push is one vectorised update per block. A pull
// reply may reference a block instead of copying it (ShareRange); a write to a block that a
// reply still references copies the block first (copy-on-write), so a reply always carries the
// values of the moment it was answered, and a block nobody references is updated in place.
// Sparse shards map 64-bit keys to rows created on
// first touch (initialised from a seed, the table id and the key, so every shard and every
// restart agrees) and are bounded by max_rows.
//
// Every method that takes keys or ranges from the network validates them first and returns
// InvalidArgument without touching state when they are wrong.
//
// Thread-safety: thread-compatible (the server's single thread owns it). Frames returned by
// ShareRange may be read and released from any thread.
#ifndef SYNCLINE_PS_SHARD_TABLE_H_
#define SYNCLINE_PS_SHARD_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/frame.h"
#include "core/sharding.h"
#include "core/table_config.h"
#include "embeddings/embedding_store.h"
#include "ps/update_pool.h"
#include "syncline/options.h"

namespace syncline {

// A point-in-time copy of one shard of a table, for a checkpoint (ShardTable::Capture).
struct TableSnapshot {
  TableConfig config;
  // Dense: the shard's weights, optimizer state and update count.
  std::vector<float> weights;
  std::vector<float> state;
  int64_t step = 0;
  // Sparse rows kept in memory, ascending by id, each encoded as the embedding store encodes
  // rows (embeddings/row_codec.h), so both kinds of sparse table write the same file.
  std::vector<uint64_t> row_ids;
  std::string row_values;
  // Sparse rows kept in an embedding store.
  std::unique_ptr<EmbeddingSnapshot> store;

  // Sparse tables: calls put(key, value) for every entry of the table's snapshot file, in
  // ascending key order (the store's RocksDB format).
  absl::Status ForEachSparseEntry(
      absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> put) const;
};

class ShardTable {
 public:
  // Bytes of a dense weight block: the unit of copy-on-write. KVClient cuts ranges into pieces
  // of the same size (KVClientOptions::max_piece_bytes), so a piece lies in one block.
  static constexpr size_t kDenseBlockBytes = size_t{1} << 20;

  // With `store_options` (sparse tables only; ignored for dense ones) the rows live in an
  // EmbeddingStore opened at store_options->path; errors name that path. `dense_block_bytes`
  // (rounded down to whole rows, at least one) is for tests.
  static absl::StatusOr<std::unique_ptr<ShardTable>> Create(
      const TableConfig& config, int shard, int num_shards,
      const EmbeddingStoreOptions* store_options = nullptr,
      size_t dense_block_bytes = kDenseBlockBytes);

  const TableConfig& config() const { return config_; }
  // Dense updates of at least 2 * kMinFloatsPerUpdateTask values are shared out over `pool`
  // (not owned; null: the calling thread does them all).
  static constexpr size_t kMinFloatsPerUpdateTask = size_t{1} << 15;
  void set_update_pool(UpdatePool* pool) { update_pool_ = pool; }
  // Dense: the key range this shard owns.
  KeyRange range() const { return range_; }
  // Rows held in memory.
  uint64_t rows() const;
  // The embedding store of a sparse table kept in one; null otherwise.
  EmbeddingStore* store() const { return store_.get(); }
  // Ends one clock: the store's expiry and sketch ageing. A no-op without a store.
  absl::Status AdvanceStep();

  // Checkpoints. Capture copies the table's state (for a store: its changed memory rows and a
  // RocksDB snapshot); the copy may be written from another thread.
  std::unique_ptr<TableSnapshot> Capture() const;
  // Restore of a dense shard from Capture's weights, state and step; InvalidArgument when the
  // sizes do not match this shard.
  absl::Status LoadDense(std::span<const float> weights, std::span<const float> state,
                         int64_t step);
  // Restore of one sparse row kept in memory from its encoded value (DataLoss when damaged).
  absl::Status LoadRow(uint64_t id, std::string_view value);

  // Validation of untrusted requests.
  absl::Status CheckKeys(std::span<const uint64_t> keys) const;
  absl::Status CheckRange(KeyRange range) const;

  // Copies the values of `keys` (sparse) or `range` (dense) into `out`, creating missing
  // sparse rows; without `create` (an evaluation's read) a missing row reads as its initial
  // values and is not created. `out` holds keys.size() * dim floats.
  absl::Status Read(std::span<const uint64_t> keys, float* out, bool create = true);
  void ReadRange(KeyRange range, float* out) const;
  // Dense: the values of `range` as a frame. A range inside one block that covers at least a
  // quarter of it references the block (no copy; a later write copies the block instead, see
  // the class comment); other ranges are copied.
  Frame ShareRange(KeyRange range) const;
  // Dense blocks copied because a write found them referenced by a frame from ShareRange.
  uint64_t block_copies() const { return block_copies_; }

  // Applies a gradient sum with the given scale (1 / examples) through the optimizer. `held`
  // (empty, or one per key) counts the pushes each row's sum holds (a compressed sparse push,
  // compression/sparse_rows.h): a row is applied as that many steps, with `spread` (one per
  // key, with held) scaling their squares (optim/optimizer.h ApplyHeldUpdate).
  absl::Status Apply(std::span<const uint64_t> keys, const float* grad_sum, float scale,
                     std::span<const uint16_t> held = {}, std::span<const float> spread = {});
  void ApplyRange(KeyRange range, const float* grad_sum, float scale);

  // BSP: records a worker's gradient sum for `clock`. Sums are combined in worker-rank order
  // when the clock is applied, so a BSP run is bitwise reproducible whatever order the pushes
  // arrived in.
  // `held` and `spread` as for Apply; a row of the clock's aggregate is applied as the most
  // steps any worker's contribution to it holds (the clocks its sums span), with the spread
  // that makes those steps add the squares every contribution stands for
  // (sum of spread * |G|^2 / held over the contributions).
  void Accumulate(int64_t clock, int worker, std::span<const uint64_t> keys, const float* grad_sum,
                  std::span<const uint16_t> held = {}, std::span<const float> spread = {});
  void AccumulateRange(int64_t clock, int worker, KeyRange range, const float* grad_sum);
  // Applies the aggregates of clocks below `min_clock`, in clock order, scaling each by
  // scale_of(clock), and drops them.
  template <typename ScaleOf>
  absl::Status ApplyAggregates(int64_t min_clock, ScaleOf scale_of) {
    while (!aggregates_.empty() && aggregates_.begin()->first < min_clock) {
      auto node = aggregates_.extract(aggregates_.begin());
      if (auto s = ApplyAggregate(node.mapped(), scale_of(node.key())); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  size_t pending_aggregates() const { return aggregates_.size(); }
  // DP-FedAvg (--dp client), dense tables only: applies clocks (rounds) from `from` to before
  // `to` in order, each the sum of its contributions (zero where there are none: a round
  // without clients is a release too) plus add_noise(clock, sum) and scaled by `scale`, and
  // drops them. FailedPrecondition for a sparse table.
  absl::Status ApplyNoisyAggregates(
      int64_t from, int64_t to, float scale,
      const std::function<void(int64_t clock, std::span<float> sum)>& add_noise);
  // The same with a Byzantine-robust rule (ps/robust_aggregate.h): each worker's update is its
  // contributions divided by examples_of(clock, worker), the rule combines them, per key over
  // the updates holding that key for a sparse table, and the result is applied with scale 1,
  // as one step (held counts are not used: the rules compare updates, not their spans).
  // Keys (sparse) or clocks (dense) with fewer updates than the rule needs are left unchanged;
  // returns how many.
  absl::StatusOr<uint64_t> ApplyRobustAggregates(
      int64_t min_clock, const AggregateRule& rule,
      const std::function<double(int64_t clock, int worker)>& examples_of);
  // Forgets what `worker` pushed for `clock` (a federated round closed without it).
  void DropContributions(int64_t clock, int worker);
  // The same for every clock from `clock` on: a worker lost under BSP before finishing them.
  void DropContributionsFrom(int64_t clock, int worker);

 private:
  // One push kept for a BSP clock: sparse keys, or a dense range, and its gradient sum.
  struct Contribution {
    std::vector<uint64_t> keys;
    KeyRange range;
    std::vector<float> values;
    std::vector<uint16_t> held;  // empty: one push per row
    std::vector<float> spread;   // with held
  };
  // A clock's contributions by worker rank, each worker's in arrival order.
  using Aggregate = std::map<int, std::vector<Contribution>>;

  ShardTable(const TableConfig& config, int shard, int num_shards, size_t dense_block_bytes);
  // Dense: adds one worker's contributions of a clock into `sum`, this shard's range_.size() *
  // dim floats.
  void AddToShard(const std::vector<Contribution>& contributions, float* sum) const;
  absl::StatusOr<uint64_t> ApplyRobustAggregate(
      int64_t clock, Aggregate& aggregate, const AggregateRule& rule,
      const std::function<double(int64_t clock, int worker)>& examples_of);
  absl::StatusOr<uint32_t> RowOf(uint64_t key);
  // Dense: calls f(block, offset in block, offset in shard, floats) for each part of the
  // `n` weights at shard offset `offset`, block by block.
  template <typename F>
  void ForEachBlockPart(size_t offset, size_t n, F f) const {
    while (n > 0) {
      const size_t block = offset / block_floats_;
      const size_t in_block = offset % block_floats_;
      const size_t part = std::min(n, block_floats_ - in_block);
      f(block, in_block, offset, part);
      offset += part;
      n -= part;
    }
  }
  // Dense: block `block`, ready to be written (copied first if a frame references it).
  float* WritableBlock(size_t block);
  // Dense: the weights of the row at `row` (shard-relative), writable.
  float* WritableDenseRow(size_t row);
  void InitRow(uint64_t key, float* row) const;
  // Applies one clock's aggregate; it may use the contributions' buffers (they are spent).
  absl::Status ApplyAggregate(Aggregate& aggregate, float scale);
  // ApplyAggregate of pushes of increasing keys: merged in one pass (a tournament tree over
  // the pushes' next rows), without the hash map the general case needs. The sums are the general
  // case's to the bit; the rows are applied in increasing key order rather than in order of first
  // appearance, which only moves what depends on the order of touches (which rows an
  // embedding store evicts or its sketch admits first, and where a full table stops):
  // deterministically either way.
  absl::Status ApplySortedAggregate(Aggregate& aggregate, bool any_held, float scale);
  // What row i of `c` adds to its key's held count (the most pushes any contribution holds)
  // and squares (spread * |G|^2 / held: what the pushes behind it would have added).
  static void AddRowTerms(const Contribution& c, size_t i, uint32_t dim, uint16_t* held,
                          double* squares);
  // Applies a clock's summed rows; with held counts, each row's steps and the spread that
  // makes them add its squares.
  absl::Status ApplySums(std::span<const uint64_t> keys, const float* sum, bool any_held,
                         std::span<const uint16_t> held, std::span<const double> squares,
                         float scale);

  const TableConfig config_;
  const int shard_;
  const int num_shards_;
  const int state_floats_;
  KeyRange range_;
  // Sparse: the rows' weights, flat. Dense: empty; the weights live in blocks_.
  std::vector<float> weights_;
  // Dense: dense_floats_ weights in blocks of block_floats_ (the last one may be shorter).
  std::vector<std::shared_ptr<float[]>> blocks_;
  UpdatePool* update_pool_ = nullptr;
  size_t block_floats_ = 0;
  size_t dense_floats_ = 0;
  uint64_t block_copies_ = 0;
  // Sparse: per row; dense: laid out rule by rule over the whole shard ([m... | v...]).
  std::vector<float> state_;
  std::vector<int64_t> steps_;  // sparse: per row; dense: one for the shard
  absl::flat_hash_map<uint64_t, uint32_t> sparse_rows_;
  std::map<int64_t, Aggregate> aggregates_;
  // ApplySortedAggregate's merged keys and sums, kept between clocks (at most every row a
  // clock's pushes held, which the pushes themselves held until then).
  std::vector<uint64_t> merge_keys_;
  std::vector<float> merge_sums_;
  std::unique_ptr<EmbeddingStore> store_;
};

}  // namespace syncline

#endif  // SYNCLINE_PS_SHARD_TABLE_H_
