// EmbeddingStore: one shard's sparse embedding table (64-bit ids -> `dim` floats plus the
// optimizer state and update count of each row) in two tiers: a memory tier bounded by a
// budget, whose least-recently-used rows are evicted to a RocksDB tier on disk and come back
// on access.
//
// - Rows start from a counter-based generator of (seed, table, id): every shard and every
//   restart agrees, and the values equal ShardTable's for the same TableConfig.
// - Admission (optional): an id gets a row only once a count-min sketch has seen it
//   `admit_after` times; until then reads return the initial values without storing them and
//   updates are dropped (both counted).
// - Expiry (optional): AdvanceStep() is called once per clock; a row not read or updated for
//   more than `expire_after_steps` steps is deleted from both tiers (counted).
// - Every RocksDB call's status becomes an absl::Status naming the path and the operation; a
//   damaged value on disk is DataLoss naming the id and is never used.
// - The memory tier holds at most memory_capacity_rows() rows and memory_bytes() bytes, which
//   never exceed the budget. The index (a RowIndex) starts small and doubles with the rows
//   until the tier is half full, when it takes its whole share of the budget (one last rehash;
//   while a rehash runs, the old and new arrays are both held, which the rows not yet
//   allocated cover). RocksDB's own memory (memtables, block cache)
//   is bounded separately by the rocksdb_* options.
// - Rows in memory reach the disk only when evicted or by FlushAll(); a store destroyed without
//   FlushAll() loses the updates of its memory tier (a checkpoint, later, is the durable copy).
//   Evictions skip RocksDB's write-ahead log unless `disk_wal` is set; FlushAll() flushes the
//   memtables, so after it returns every row is in RocksDB's table files.
//
// Thread-safety: thread-compatible (the server's single thread owns it).
#ifndef SYNCLINE_EMBEDDINGS_EMBEDDING_STORE_H_
#define SYNCLINE_EMBEDDINGS_EMBEDDING_STORE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/table_config.h"
#include "embeddings/admission_sketch.h"
#include "embeddings/row_codec.h"
#include "embeddings/row_index.h"

namespace rocksdb {
class DB;
class Env;
class Snapshot;
struct ReadOptions;
struct WriteOptions;
}  // namespace rocksdb

namespace syncline {

struct EmbeddingStoreOptions {
  // Directory of this store's RocksDB instance (one per store). Required.
  std::string path;
  // Create the database when `path` holds none. Default true; when false, a missing database
  // is an error.
  bool create_if_missing = true;

  // Memory tier budget: at most this many rows (0: no row limit). Default 2^20.
  uint64_t max_memory_rows = uint64_t{1} << 20;
  // Memory tier budget in bytes, counting rows, their bookkeeping and the index (0: no byte
  // limit). Default 0. At least one of the two limits must be set; both apply when both are.
  uint64_t max_memory_bytes = 0;

  // Admission: an id gets a row at its admit_after-th sighting, a sighting being a Read (each
  // id of a call counts once per occurrence). A training step reads each id of its batch once
  // (the pull) and then updates it (the push), so it counts once; an Apply to an id without a
  // row drops the update and is no sighting. 0 or 1: at the first touch, Read or Apply.
  // Default 0.
  uint32_t admit_after = 0;
  // Count-min sketch for admission: counters per row (a power of two), rows, hash seed.
  // Defaults: 2^18 x 4 (4 MiB), seed 1. Allocated only when admit_after > 1.
  uint32_t sketch_width = uint32_t{1} << 18;
  uint32_t sketch_depth = 4;
  uint64_t sketch_seed = 1;
  // Halve the sketch's counts every this many steps, so that old sightings fade (0: never).
  // Default 0.
  int64_t sketch_halve_steps = 0;

  // Expiry: rows not touched (read or updated) for more than this many steps are deleted
  // (0: never). Default 0. With expiry on, a read of a row loaded from disk marks it to be
  // written again when evicted (its last-touched step changed).
  int64_t expire_after_steps = 0;
  // Rows on disk are swept for expiry every this many steps (0: every expire_after_steps
  // steps). Between sweeps an expired row on disk is found when it is next loaded, and deleted
  // then. Rows in memory expire at the AdvanceStep() that makes them due. Default 0.
  int64_t expiry_sweep_steps = 0;

  // Write evictions through RocksDB's write-ahead log. Default false (the memory tier is not
  // durable either; FlushAll() makes everything durable).
  bool disk_wal = false;
  // RocksDB's block cache and write buffer (memtable) sizes. Defaults 32 MiB each.
  uint64_t rocksdb_block_cache_bytes = uint64_t{32} << 20;
  uint64_t rocksdb_write_buffer_bytes = uint64_t{32} << 20;
  // The RocksDB environment (file system); null: rocksdb::Env::Default(). Not owned.
  rocksdb::Env* env = nullptr;
  // Log a warning when the store is destroyed with changed rows that never reached RocksDB
  // (they are lost). A server whose store is scratch space (checkpoints are the durable copy)
  // turns it off. Default true.
  bool warn_unflushed = true;
  // Restore: a snapshot file (sorted key/values as EmbeddingSnapshot::ForEachEntry writes them,
  // in RocksDB's SST format) whose rows replace whatever the database at `path` held: the
  // database is destroyed and the file ingested (copied, the source is left as it is). Empty:
  // open the database as it is.
  std::string restore_from;
};

struct EmbeddingStoreStats {
  uint64_t rows_in_memory = 0;
  uint64_t rows_on_disk = 0;     // rows with a copy in RocksDB (some of them also in memory)
  uint64_t admitted = 0;         // rows created after admission (or at first touch without it)
  uint64_t rejected = 0;         // touches of ids not yet admitted
  uint64_t dropped_updates = 0;  // updates of ids not yet admitted (part of `rejected`)
  uint64_t expired = 0;          // rows deleted by expiry
  uint64_t memory_hits = 0;      // touches served from the memory tier
  uint64_t disk_hits = 0;        // touches that loaded a row from RocksDB
  uint64_t evictions = 0;        // rows moved out of the memory tier to make room
  uint64_t disk_writes = 0;      // rows written to RocksDB (evictions of changed rows, flushes)
  uint64_t memory_bytes = 0;     // bytes the memory tier holds now

  // Sums every count (a server's totals over its tables).
  EmbeddingStoreStats& operator+=(const EmbeddingStoreStats& o) {
    rows_in_memory += o.rows_in_memory;
    rows_on_disk += o.rows_on_disk;
    admitted += o.admitted;
    rejected += o.rejected;
    dropped_updates += o.dropped_updates;
    expired += o.expired;
    memory_hits += o.memory_hits;
    disk_hits += o.disk_hits;
    evictions += o.evictions;
    disk_writes += o.disk_writes;
    memory_bytes += o.memory_bytes;
    return *this;
  }
};

// One row as ForEachRow shows it; the spans are valid during the call only.
struct EmbeddingRow {
  uint64_t id = 0;
  std::span<const float> weights;  // dim floats
  std::span<const float> state;    // StateFloatsPerWeight(kind) * dim floats
  int64_t step = 0;                // updates applied to this row
  int64_t last_touch = 0;          // the store step of the last read or update
};

class EmbeddingStore;

// A point-in-time copy of an EmbeddingStore for a checkpoint. Capture() takes it on the
// store's thread at the cost of copying the memory tier's changed rows (clean rows equal their
// disk copy) and pinning a RocksDB snapshot of the disk tier; ForEachEntry() may then run on
// any thread while the store goes on serving. The store must outlive its snapshots.
class EmbeddingSnapshot {
 public:
  ~EmbeddingSnapshot();
  EmbeddingSnapshot(const EmbeddingSnapshot&) = delete;
  EmbeddingSnapshot& operator=(const EmbeddingSnapshot&) = delete;

  // Calls put(key, value) for the step record, every row of both tiers and the admission
  // sketch's counters (when the store admits after N > 1 sightings) in ascending key order, in
  // the store's own RocksDB format, so that the entries form a file the store can ingest
  // (EmbeddingStoreOptions::restore_from). Stops at the first error.
  absl::Status ForEachEntry(
      absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> put) const;
  // Rows copied from the memory tier.
  uint64_t memory_rows() const { return memory_ids_.size(); }
  int64_t step() const { return step_; }

 private:
  friend class EmbeddingStore;
  EmbeddingSnapshot() = default;

  const EmbeddingStore* store_ = nullptr;
  const rocksdb::Snapshot* db_snapshot_ = nullptr;
  int64_t step_ = 0;
  std::vector<uint64_t> memory_ids_;  // ascending
  std::string memory_values_;         // their encoded values, value_size() bytes each
  std::string sketch_;                // the admission sketch's counters; empty without one
};

class EmbeddingStore {
 public:
  // Opens (or creates) the store of sparse table `table` at options.path. InvalidArgument for
  // a dense table, a bad dim or a budget below one row; the RocksDB error, with the path, when
  // the database cannot be opened. Counts the table's rows on disk (one scan).
  static absl::StatusOr<std::unique_ptr<EmbeddingStore>> Open(const TableConfig& table,
                                                              const EmbeddingStoreOptions& options);
  ~EmbeddingStore();
  EmbeddingStore(const EmbeddingStore&) = delete;
  EmbeddingStore& operator=(const EmbeddingStore&) = delete;

  const TableConfig& config() const { return config_; }
  const EmbeddingStoreOptions& options() const { return options_; }
  // The most rows the memory tier holds, from the budget.
  uint64_t memory_capacity_rows() const { return capacity_; }
  // The current step (AdvanceStep() calls since the store was created, kept by FlushAll()).
  int64_t step() const { return step_; }

  // Copies the weights of `ids` into `out` (ids.size() * dim floats), creating admitted rows
  // that do not exist yet. Without `create` (an evaluation's read) a missing row reads as its
  // initial values and is neither created nor counted as a sighting. InvalidArgument (nothing
  // changed) for an id >= num_keys when the table has a key limit.
  absl::Status Read(std::span<const uint64_t> ids, float* out, bool create = true);
  // Applies a gradient sum (ids.size() * dim floats) with `scale` (1 / examples) through the
  // table's optimizer; repeated ids are applied one after the other, like ShardTable. `held`
  // (empty, or one per id): each row's sum holds that many pushes and is applied as that many
  // steps, with `spread` (empty or one per id) scaling their squares (optim/optimizer.h
  // ApplyHeldUpdate).
  absl::Status Apply(std::span<const uint64_t> ids, const float* grad_sum, float scale,
                     std::span<const uint16_t> held = {}, std::span<const float> spread = {});

  // Ends a step: expires rows, sweeps the disk tier and ages the sketch when due.
  absl::Status AdvanceStep();

  // Calls fn for every row of both tiers, in ascending id order, without changing the store;
  // stops at the first error (fn's or the disk's). Consistent when nothing else touches the
  // store meanwhile. Rows due for expiry but not yet swept are skipped.
  absl::Status ForEachRow(absl::FunctionRef<absl::Status(const EmbeddingRow&)> fn) const;
  // Writes every changed row of the memory tier and the current step to RocksDB and flushes
  // RocksDB's memtables; the rows stay in memory.
  absl::Status FlushAll();

  EmbeddingStoreStats stats() const;

  // A snapshot of every row for a checkpoint; see EmbeddingSnapshot.
  std::unique_ptr<EmbeddingSnapshot> Capture() const;

 private:
  friend class EmbeddingSnapshot;
  static constexpr uint32_t kNone = ~uint32_t{0};
  static constexpr uint32_t kBlockRows = 4096;

  // Bookkeeping of one memory slot.
  struct SlotMeta {
    uint64_t id = 0;
    int64_t step = 0;
    int64_t last_touch = 0;
    uint64_t touched = 0;   // the store's touch count at this row's last touch
    uint32_t prev = kNone;  // LRU list: towards the most recently used
    uint32_t next = kNone;  // towards the least recently used
    bool dirty = false;     // differs from its copy on disk (or has none)
    bool on_disk = false;   // RocksDB holds a copy
  };
  struct Block {
    std::unique_ptr<SlotMeta[]> meta;
    std::unique_ptr<float[]> floats;
  };

  EmbeddingStore(const TableConfig& table, const EmbeddingStoreOptions& options);
  absl::Status Init();
  absl::Status CheckIds(std::span<const uint64_t> ids) const;

  SlotMeta& meta(uint32_t slot) const { return blocks_[slot / kBlockRows].meta[slot % kBlockRows]; }
  float* floats(uint32_t slot) const {
    return blocks_[slot / kBlockRows].floats.get() + (slot % kBlockRows) * shape_.floats();
  }
  // Cache prefetches for Read and Apply (see kPrefetchAhead): the bookkeeping and the first
  // `row_bytes` of the floats of `id`'s row when memory holds it; every lookup of the first ids;
  // then, at id i, the lookup of id i + 2 * kPrefetchAhead and the row of id i + kPrefetchAhead.
  void PrefetchRow(uint64_t id, size_t row_bytes) const;
  void PrefetchFirst(std::span<const uint64_t> ids, size_t row_bytes) const;
  void PrefetchAhead(std::span<const uint64_t> ids, size_t i, size_t row_bytes) const;
  // For index_'s lookups: whether a slot holds `id`.
  auto Holds(uint64_t id) const {
    return [this, id](uint32_t slot) { return meta(slot).id == id; };
  }
  bool Contains(uint64_t id) const { return index_.Find(id, Holds(id)) != RowIndex::kNone; }
  // The slot of `id`, loading or creating the row; kNone when the id is not admitted.
  // The slot of `id`: in memory, loaded from disk, or a new row; kNone when admission keeps it
  // out (a `sighting` counts towards admission; see EmbeddingStoreOptions::admit_after), or,
  // without `create`, when there is no row.
  absl::StatusOr<uint32_t> Acquire(uint64_t id, bool sighting, bool create = true);
  // A free slot, evicting the least recently used row when the tier is full.
  absl::StatusOr<uint32_t> FreeSlot();
  void LinkFront(uint32_t slot);
  void Unlink(uint32_t slot);
  void Touch(uint32_t slot);
  // Links every row in memory into the LRU list, oldest touch last.
  void BuildLruList();
  bool Expired(int64_t last_touch) const;
  absl::Status WriteRow(uint32_t slot);
  absl::Status DeleteFromDisk(uint64_t id);
  absl::Status ExpireMemory();
  absl::Status SweepDisk();

  const TableConfig config_;
  const EmbeddingStoreOptions options_;
  const RowShape shape_;
  uint64_t capacity_ = 0;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<rocksdb::WriteOptions> write_options_;
  std::unique_ptr<AdmissionSketch> sketch_;

  RowIndex index_;  // id -> slot
  std::vector<Block> blocks_;
  std::vector<uint32_t> free_slots_;
  uint32_t used_slots_ = 0;  // slots ever handed out
  // The LRU list is kept only once it is needed: from the first eviction, or from the start
  // when rows expire. Until then a touch only stamps the row with touch_count_, and
  // BuildLruList() orders the rows by their stamps: a table that fits its budget pays no
  // relinking (three scattered writes per touch).
  bool lru_linked_ = false;
  uint64_t touch_count_ = 0;
  uint32_t lru_head_ = kNone;  // most recently used
  uint32_t lru_tail_ = kNone;  // least recently used
  uint64_t block_bytes_ = 0;

  int64_t step_ = 0;
  EmbeddingStoreStats stats_;
  std::string key_buffer_;
  std::string value_buffer_;
};

// The initial weights of row `id` of `table` (dim floats): uniform in
// [-init_scale, init_scale] from a counter-based generator of (seed, table id, id), the same
// values as ShardTable's rows; zeros when init_scale is 0.
void InitialEmbeddingRow(const TableConfig& table, uint64_t id, float* weights);

}  // namespace syncline

#endif  // SYNCLINE_EMBEDDINGS_EMBEDDING_STORE_H_
