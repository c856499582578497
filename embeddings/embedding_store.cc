#include "embeddings/embedding_store.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/prefetch.h"
#include "core/sharding.h"
#include "optim/optimizer.h"
#include "rocksdb/cache.h"
#include "rocksdb/db.h"
#include "rocksdb/filter_policy.h"
#include "rocksdb/options.h"
#include "rocksdb/table.h"
#include "rocksdb/write_batch.h"

namespace syncline {
namespace {

// Rows written per RocksDB batch by FlushAll and the expiry sweep.
constexpr size_t kBatchRows = 1024;

// Read and Apply touch three places per id, each a likely cache miss in a table larger than the
// caches: the index slot, the row's bookkeeping and its floats, and each depends on the one
// before. They are fetched in two stages ahead of the id in hand: the index slot of the id
// 2 * kPrefetchAhead on, then (its slot now cached) the bookkeeping and floats of the row
// kPrefetchAhead on, so that about this many misses of each kind are in flight.
constexpr size_t kPrefetchAhead = 8;
// Of a row's floats, at most this many bytes are fetched ahead (the rest streams behind them).
constexpr size_t kPrefetchRowBytes = 256;

// Rows the index is first sized for (it grows from there; see Init).
constexpr uint64_t kInitialIndexRows = 1 << 16;

absl::Status DiskError(const std::string& path, const char* operation, const rocksdb::Status& s) {
  const std::string message =
      absl::StrCat("embedding store ", path, ": RocksDB ", operation, " failed: ", s.ToString());
  if (s.IsCorruption()) return absl::DataLossError(message);
  if (s.IsNotFound()) return absl::NotFoundError(message);
  if (s.IsInvalidArgument()) return absl::InvalidArgumentError(message);
  if (s.IsNotSupported()) return absl::UnimplementedError(message);
  if (s.IsNoSpace()) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

std::string MetaKey(uint32_t table) {
  std::string key = RowKeyPrefix(table);
  key[0] = 'm';
  return key;
}

// The admission sketch's record: after every row key ('r'), so a snapshot writes it last.
std::string SketchKey(uint32_t table) {
  std::string key = RowKeyPrefix(table);
  key[0] = 's';
  return key;
}

}  // namespace

void InitialEmbeddingRow(const TableConfig& table, uint64_t id, float* weights) {
  InitialRow(table, id, weights);
}

EmbeddingStore::EmbeddingStore(const TableConfig& table, const EmbeddingStoreOptions& options)
    : config_(table),
      options_(options),
      shape_{table.dim, static_cast<uint32_t>(StateFloatsPerWeight(table.optimizer.kind))},
      write_options_(std::make_unique<rocksdb::WriteOptions>()),
      // Expiry walks the list from its oldest end at every step.
      lru_linked_(options.expire_after_steps > 0) {
  write_options_->disableWAL = !options.disk_wal;
}

EmbeddingStore::~EmbeddingStore() {
  if (!options_.warn_unflushed) return;
  uint64_t dirty = 0;
  index_.ForEachSlot([&](uint32_t slot) { dirty += meta(slot).dirty ? 1 : 0; });
  if (dirty > 0) {
    SYNCLINE_LOG(WARNING) << "embedding store " << options_.path << ": closing with " << dirty
                          << " changed rows in memory that were not flushed";
  }
}

absl::StatusOr<std::unique_ptr<EmbeddingStore>> EmbeddingStore::Open(
    const TableConfig& table, const EmbeddingStoreOptions& options) {
  if (table.dense) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d is dense; an embedding store holds sparse tables", table.id));
  }
  if (table.dim == 0 || table.dim > TableConfig::kMaxDim) {
    return absl::InvalidArgumentError(absl::StrFormat("table %d: dim %d is outside [1, %d]",
                                                      table.id, table.dim, TableConfig::kMaxDim));
  }
  if (options.path.empty()) {
    return absl::InvalidArgumentError("embedding store: options.path is empty");
  }
  if (options.max_memory_rows == 0 && options.max_memory_bytes == 0) {
    return absl::InvalidArgumentError(
        "embedding store: set max_memory_rows or max_memory_bytes (the memory tier needs a "
        "budget)");
  }
  std::unique_ptr<EmbeddingStore> store(new EmbeddingStore(table, options));
  if (auto s = store->Init(); !s.ok()) return s;
  return store;
}

absl::Status EmbeddingStore::Init() {
  // The memory tier's size, from the budget. Everything it will ever allocate is sized here:
  // the index once, blocks of rows as they fill up to capacity_.
  const uint64_t row_bytes = sizeof(SlotMeta) + shape_.floats() * sizeof(float);
  const uint64_t per_row = row_bytes + sizeof(uint32_t);  // + its free-list entry
  uint64_t rows = options_.max_memory_rows ? options_.max_memory_rows
                                           : std::numeric_limits<uint32_t>::max() - 1;
  // Slots are 32-bit, and RowIndex finds homes by a 32-bit tag: past 2^32 entries (2/3 of
  // that in rows) its upper half would never be a home.
  rows = std::min<uint64_t>(rows, RowIndex::kMostRows);
  auto total = [&](uint64_t c) {
    const uint64_t blocks = (c + kBlockRows - 1) / kBlockRows;
    return c * per_row + blocks * sizeof(Block) + RowIndex::BytesFor(c);
  };
  if (options_.max_memory_bytes != 0) {
    rows = std::min<uint64_t>(rows, options_.max_memory_bytes / per_row);
    for (uint64_t t = rows ? total(rows) : 0; rows > 0 && t > options_.max_memory_bytes;
         t = rows ? total(rows) : 0) {
      // The index shrinks (or stays) with the rows, so one step past the excess fits.
      rows -= std::min(rows, (t - options_.max_memory_bytes + per_row - 1) / per_row);
    }
    if (rows == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "embedding store %s: max_memory_bytes %d is below one row (%d bytes with the index)",
          options_.path, options_.max_memory_bytes, total(1)));
    }
  }
  capacity_ = rows;
  // The index starts small and grows with the rows (FreeSlot), so that a table far below its
  // budget keeps a compact index: lookups into one sized for the whole budget miss the caches
  // and the TLB far more often (the 2+2 ctr job ran 6% faster with a budget near its rows).
  index_.Reserve(std::min<uint64_t>(capacity_, kInitialIndexRows));
  blocks_.reserve((capacity_ + kBlockRows - 1) / kBlockRows);
  free_slots_.reserve(capacity_);

  rocksdb::Options db_options;
  db_options.create_if_missing = options_.create_if_missing;
  if (options_.env != nullptr) db_options.env = options_.env;
  db_options.write_buffer_size = options_.rocksdb_write_buffer_bytes;
  db_options.compression = rocksdb::kNoCompression;  // float rows do not compress
  rocksdb::BlockBasedTableOptions table_options;
  table_options.block_cache = rocksdb::NewLRUCache(options_.rocksdb_block_cache_bytes);
  // Most misses of a new id look for a row that is not there: a Bloom filter answers them
  // without reading a block.
  table_options.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  db_options.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table_options));
  rocksdb::Status s;
  if (!options_.restore_from.empty()) {
    s = rocksdb::DestroyDB(options_.path, db_options);
    if (!s.ok()) return DiskError(options_.path, "DestroyDB (before a restore)", s);
    db_options.create_if_missing = true;
  }
  rocksdb::DB* db = nullptr;
  s = rocksdb::DB::Open(db_options, options_.path, &db);
  if (!s.ok()) return DiskError(options_.path, "Open", s);
  db_.reset(db);
  if (!options_.restore_from.empty()) {
    rocksdb::IngestExternalFileOptions ingest;
    ingest.move_files = false;  // the checkpoint keeps its copy
    ingest.verify_checksums_before_ingest = true;
    s = db_->IngestExternalFile({options_.restore_from}, ingest);
    if (!s.ok()) {
      return DiskError(options_.path,
                       absl::StrCat("IngestExternalFile (", options_.restore_from, ")").c_str(), s);
    }
  }

  std::string meta;
  s = db_->Get(rocksdb::ReadOptions(), MetaKey(config_.id), &meta);
  if (s.ok()) {
    if (meta.size() != sizeof(step_)) {
      return absl::DataLossError(
          absl::StrFormat("embedding store %s: table %d's step record has %d bytes, expected 8",
                          options_.path, config_.id, meta.size()));
    }
    std::memcpy(&step_, meta.data(), sizeof(step_));
  } else if (!s.IsNotFound()) {
    return DiskError(options_.path, "Get (step)", s);
  }

  const std::string prefix = RowKeyPrefix(config_.id);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    ++stats_.rows_on_disk;
  }
  if (!it->status().ok()) return DiskError(options_.path, "Iterate (count rows)", it->status());
  if (options_.admit_after > 1) {
    sketch_ = std::make_unique<AdmissionSketch>(options_.sketch_width, options_.sketch_depth,
                                                options_.sketch_seed);
    // The counts of a checkpoint or a flushed store carry on, so that a resumed run admits
    // each id at the same sighting as an uninterrupted one.
    std::string counts;
    s = db_->Get(rocksdb::ReadOptions(), SketchKey(config_.id), &counts);
    if (s.ok()) {
      if (auto loaded = sketch_->Load(counts); !loaded.ok()) {
        return absl::DataLossError(absl::StrFormat("embedding store %s: table %d: %s",
                                                   options_.path, config_.id, loaded.message()));
      }
    } else if (!s.IsNotFound()) {
      return DiskError(options_.path, "Get (admission sketch)", s);
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::CheckIds(std::span<const uint64_t> ids) const {
  if (config_.num_keys == 0) return absl::OkStatus();
  for (uint64_t id : ids) {
    if (id >= config_.num_keys) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: id %d is out of range (the table has %d ids)", config_.id, id,
                          config_.num_keys));
    }
  }
  return absl::OkStatus();
}

void EmbeddingStore::BuildLruList() {
  std::vector<uint32_t> slots;
  slots.reserve(index_.size());
  index_.ForEachSlot([&](uint32_t slot) { slots.push_back(slot); });
  // Stamps are unique, so the order is total: the list is exactly the one kept all along.
  std::sort(slots.begin(), slots.end(),
            [this](uint32_t a, uint32_t b) { return meta(a).touched < meta(b).touched; });
  lru_head_ = lru_tail_ = kNone;
  for (const uint32_t slot : slots) LinkFront(slot);
  lru_linked_ = true;
}

void EmbeddingStore::LinkFront(uint32_t slot) {
  SlotMeta& m = meta(slot);
  m.prev = kNone;
  m.next = lru_head_;
  if (lru_head_ != kNone) meta(lru_head_).prev = slot;
  lru_head_ = slot;
  if (lru_tail_ == kNone) lru_tail_ = slot;
}

void EmbeddingStore::Unlink(uint32_t slot) {
  SlotMeta& m = meta(slot);
  if (m.prev != kNone) {
    meta(m.prev).next = m.next;
  } else {
    lru_head_ = m.next;
  }
  if (m.next != kNone) {
    meta(m.next).prev = m.prev;
  } else {
    lru_tail_ = m.prev;
  }
  m.prev = m.next = kNone;
}

void EmbeddingStore::Touch(uint32_t slot) {
  SlotMeta& m = meta(slot);
  m.touched = ++touch_count_;
  if (lru_linked_ && slot != lru_head_) {
    Unlink(slot);
    LinkFront(slot);
  }
  if (m.last_touch != step_) {
    m.last_touch = step_;
    if (options_.expire_after_steps > 0) m.dirty = true;  // the disk copy's step is stale
  }
}

bool EmbeddingStore::Expired(int64_t last_touch) const {
  return options_.expire_after_steps > 0 && step_ - last_touch > options_.expire_after_steps;
}

absl::Status EmbeddingStore::WriteRow(uint32_t slot) {
  SlotMeta& m = meta(slot);
  char key[kRowKeySize];
  EncodeRowKey(config_.id, m.id, key);
  EncodeRowValue(shape_, m.step, m.last_touch, floats(slot), &value_buffer_);
  rocksdb::Status s = db_->Put(*write_options_, rocksdb::Slice(key, kRowKeySize), value_buffer_);
  if (!s.ok()) return DiskError(options_.path, "Put", s);
  if (!m.on_disk) ++stats_.rows_on_disk;
  m.on_disk = true;
  m.dirty = false;
  ++stats_.disk_writes;
  return absl::OkStatus();
}

absl::Status EmbeddingStore::DeleteFromDisk(uint64_t id) {
  char key[kRowKeySize];
  EncodeRowKey(config_.id, id, key);
  rocksdb::Status s = db_->Delete(*write_options_, rocksdb::Slice(key, kRowKeySize));
  if (!s.ok()) return DiskError(options_.path, "Delete", s);
  --stats_.rows_on_disk;
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> EmbeddingStore::FreeSlot() {
  if (!free_slots_.empty()) {
    const uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  if (used_slots_ < capacity_) {
    if (used_slots_ % kBlockRows == 0) {
      // The last block holds only what is left of the capacity, so the tier never allocates
      // past its budget.
      const size_t n = std::min<uint64_t>(kBlockRows, capacity_ - used_slots_);
      Block block;
      block.meta = std::make_unique<SlotMeta[]>(n);
      block.floats = std::make_unique<float[]>(n * shape_.floats());
      blocks_.push_back(std::move(block));
      block_bytes_ += n * (sizeof(SlotMeta) + shape_.floats() * sizeof(float));
    }
    if (2 * (used_slots_ + 1) >= capacity_) {
      // Half full: the index takes its whole share of the budget now, while the rows not yet
      // allocated cover the old array during the rehash (a last doubling at the final row
      // would hold both arrays on top of every block). Once there, this is a no-op.
      index_.Reserve(capacity_);
    }
    return used_slots_++;
  }
  if (!lru_linked_) BuildLruList();
  const uint32_t victim = lru_tail_;
  SlotMeta& m = meta(victim);
  if (m.dirty) {
    if (auto s = WriteRow(victim); !s.ok()) return s;
  }
  Unlink(victim);
  index_.Erase(m.id, Holds(m.id));
  ++stats_.evictions;
  return victim;
}

void EmbeddingStore::PrefetchRow(uint64_t id, size_t row_bytes) const {
  // The first entry with the id's tag names the slot to fetch (a second id of one tag is a
  // 2^-32 chance, and costs a wasted fetch); Acquire's lookup kPrefetchAhead ids later checks
  // the slot's id, its bookkeeping cached by then. Nothing is kept between the two.
  const uint32_t slot = index_.Find(id, [](uint32_t) { return true; });
  if (slot == RowIndex::kNone) return;
  const auto lines = [](const void* p, size_t bytes) {
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p);
    for (uintptr_t line = begin & ~uintptr_t{63}; line < begin + bytes; line += 64) {
      PrefetchLine(reinterpret_cast<const void*>(line));
    }
  };
  lines(&meta(slot), sizeof(SlotMeta));
  lines(floats(slot), std::min(row_bytes, kPrefetchRowBytes));
}

void EmbeddingStore::PrefetchFirst(std::span<const uint64_t> ids, size_t row_bytes) const {
  for (size_t i = 0; i < std::min(ids.size(), 2 * kPrefetchAhead); ++i) index_.Prefetch(ids[i]);
  for (size_t i = 0; i < std::min(ids.size(), kPrefetchAhead); ++i) PrefetchRow(ids[i], row_bytes);
}

void EmbeddingStore::PrefetchAhead(std::span<const uint64_t> ids, size_t i,
                                   size_t row_bytes) const {
  if (i + 2 * kPrefetchAhead < ids.size()) index_.Prefetch(ids[i + 2 * kPrefetchAhead]);
  if (i + kPrefetchAhead < ids.size()) PrefetchRow(ids[i + kPrefetchAhead], row_bytes);
}

absl::StatusOr<uint32_t> EmbeddingStore::Acquire(uint64_t id, bool sighting, bool create) {
  if (const uint32_t slot = index_.Find(id, Holds(id)); slot != RowIndex::kNone) {
    ++stats_.memory_hits;
    Touch(slot);
    return slot;
  }
  if (stats_.rows_on_disk > 0) {
    char key[kRowKeySize];
    EncodeRowKey(config_.id, id, key);
    rocksdb::PinnableSlice value;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), db_->DefaultColumnFamily(),
                                 rocksdb::Slice(key, kRowKeySize), &value);
    if (s.ok()) {
      auto slot = FreeSlot();
      if (!slot.ok()) return slot.status();
      int64_t step = 0, last_touch = 0;
      if (auto d = DecodeRowValue(shape_, id, value.data(), value.size(), &step, &last_touch,
                                  floats(*slot));
          !d.ok()) {
        free_slots_.push_back(*slot);
        return absl::Status(d.code(), absl::StrCat("embedding store ", options_.path, " (table ",
                                                   config_.id, "): ", d.message()));
      }
      if (Expired(last_touch)) {
        free_slots_.push_back(*slot);
        if (auto d = DeleteFromDisk(id); !d.ok()) return d;
        ++stats_.expired;
      } else {
        SlotMeta& m = meta(*slot);
        m.id = id;
        m.step = step;
        m.last_touch = last_touch;
        m.on_disk = true;
        m.dirty = false;
        index_.Insert(id, *slot);
        if (lru_linked_) LinkFront(*slot);
        Touch(*slot);
        ++stats_.disk_hits;
        return *slot;
      }
    } else if (!s.IsNotFound()) {
      return DiskError(options_.path, "Get", s);
    }
  }
  if (!create) return kNone;
  if (sketch_ != nullptr && (!sighting || sketch_->Add(id) < options_.admit_after)) {
    ++stats_.rejected;
    return kNone;
  }
  auto slot = FreeSlot();
  if (!slot.ok()) return slot.status();
  float* f = floats(*slot);
  InitialEmbeddingRow(config_, id, f);
  std::fill(f + shape_.dim, f + shape_.floats(), 0.0f);
  SlotMeta& m = meta(*slot);
  m.id = id;
  m.step = 0;
  m.last_touch = step_;
  m.on_disk = false;
  m.dirty = true;
  index_.Insert(id, *slot);
  if (lru_linked_) LinkFront(*slot);
  Touch(*slot);
  ++stats_.admitted;
  return *slot;
}

absl::Status EmbeddingStore::Read(std::span<const uint64_t> ids, float* out, bool create) {
  if (auto s = CheckIds(ids); !s.ok()) return s;
  const size_t dim = shape_.dim;
  PrefetchFirst(ids, dim * sizeof(float));
  for (size_t i = 0; i < ids.size(); ++i) {
    PrefetchAhead(ids, i, dim * sizeof(float));
    auto slot = Acquire(ids[i], /*sighting=*/create, create);
    if (!slot.ok()) return slot.status();
    if (*slot == kNone) {
      InitialEmbeddingRow(config_, ids[i], out + i * dim);
    } else {
      std::memcpy(out + i * dim, floats(*slot), dim * sizeof(float));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::Apply(std::span<const uint64_t> ids, const float* grad_sum,
                                   float scale, std::span<const uint16_t> held,
                                   std::span<const float> spread) {
  if (auto s = CheckIds(ids); !s.ok()) return s;
  if ((!held.empty() && held.size() != ids.size()) ||
      (!spread.empty() && spread.size() != held.size())) {
    return absl::InvalidArgumentError(absl::StrFormat("%d held counts and %d spreads for %d rows",
                                                      held.size(), spread.size(), ids.size()));
  }
  const size_t dim = shape_.dim;
  const size_t row_bytes = shape_.floats() * sizeof(float);
  PrefetchFirst(ids, row_bytes);
  for (size_t i = 0; i < ids.size(); ++i) {
    PrefetchAhead(ids, i, row_bytes);
    auto slot = Acquire(ids[i], /*sighting=*/false);
    if (!slot.ok()) return slot.status();
    if (*slot == kNone) {
      ++stats_.dropped_updates;
      continue;
    }
    SlotMeta& m = meta(*slot);
    float* f = floats(*slot);
    if (held.empty()) {
      ApplyUpdate(config_.optimizer, f, f + dim, grad_sum + i * dim, scale, dim, ++m.step);
    } else {
      ApplyHeldUpdate(config_.optimizer, f, f + dim, f + 2 * dim, grad_sum + i * dim, scale, dim,
                      held[i], spread.empty() ? 1.0f : spread[i], &m.step);
    }
    m.dirty = true;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::ExpireMemory() {
  while (lru_tail_ != kNone && Expired(meta(lru_tail_).last_touch)) {
    const uint32_t slot = lru_tail_;
    SlotMeta& m = meta(slot);
    if (m.on_disk) {
      if (auto s = DeleteFromDisk(m.id); !s.ok()) return s;
    }
    Unlink(slot);
    index_.Erase(m.id, Holds(m.id));
    free_slots_.push_back(slot);
    ++stats_.expired;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::SweepDisk() {
  // Rows in memory are skipped: their memory copy (and its last touch) is the true one.
  const std::string prefix = RowKeyPrefix(config_.id);
  absl::Status first_error;
  rocksdb::WriteBatch batch;
  auto write = [&]() -> absl::Status {
    if (batch.Count() == 0) return absl::OkStatus();
    const uint64_t n = batch.Count();
    rocksdb::Status s = db_->Write(*write_options_, &batch);
    if (!s.ok()) return DiskError(options_.path, "Write (expiry sweep)", s);
    stats_.rows_on_disk -= n;
    stats_.expired += n;
    batch.Clear();
    return absl::OkStatus();
  };
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    uint64_t id = 0;
    if (!DecodeRowKey(it->key().data(), it->key().size(), config_.id, &id)) continue;
    if (Contains(id)) continue;
    int64_t step = 0, last_touch = 0;
    const rocksdb::Slice v = it->value();
    if (auto s = DecodeRowValue(shape_, id, v.data(), v.size(), &step, &last_touch, nullptr);
        !s.ok()) {
      if (first_error.ok()) {
        first_error = absl::Status(s.code(), absl::StrCat("embedding store ", options_.path,
                                                          " (expiry sweep): ", s.message()));
      }
      continue;
    }
    if (!Expired(last_touch)) continue;
    batch.Delete(it->key());
    if (batch.Count() >= kBatchRows) {
      if (auto s = write(); !s.ok()) return s;
    }
  }
  if (!it->status().ok()) return DiskError(options_.path, "Iterate (expiry sweep)", it->status());
  if (auto s = write(); !s.ok()) return s;
  return first_error;
}

absl::Status EmbeddingStore::AdvanceStep() {
  ++step_;
  if (sketch_ != nullptr && options_.sketch_halve_steps > 0 &&
      step_ % options_.sketch_halve_steps == 0) {
    sketch_->Halve();
  }
  if (options_.expire_after_steps <= 0) return absl::OkStatus();
  if (auto s = ExpireMemory(); !s.ok()) return s;
  const int64_t sweep =
      options_.expiry_sweep_steps > 0 ? options_.expiry_sweep_steps : options_.expire_after_steps;
  if (step_ % sweep == 0 && stats_.rows_on_disk > 0) return SweepDisk();
  return absl::OkStatus();
}

absl::Status EmbeddingStore::ForEachRow(
    absl::FunctionRef<absl::Status(const EmbeddingRow&)> fn) const {
  std::vector<std::pair<uint64_t, uint32_t>> memory;
  memory.reserve(index_.size());
  index_.ForEachSlot([&](uint32_t slot) { memory.emplace_back(meta(slot).id, slot); });
  std::sort(memory.begin(), memory.end());
  const size_t dim = shape_.dim;
  auto emit_memory = [&](const std::pair<uint64_t, uint32_t>& entry) {
    const SlotMeta& m = meta(entry.second);
    const float* f = floats(entry.second);
    return fn(EmbeddingRow{
        entry.first, {f, dim}, {f + dim, shape_.floats() - dim}, m.step, m.last_touch});
  };
  size_t next = 0;
  std::vector<float> buffer(shape_.floats());
  const std::string prefix = RowKeyPrefix(config_.id);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    uint64_t id = 0;
    if (!DecodeRowKey(it->key().data(), it->key().size(), config_.id, &id)) continue;
    for (; next < memory.size() && memory[next].first <= id; ++next) {
      if (auto s = emit_memory(memory[next]); !s.ok()) return s;
    }
    if (Contains(id)) continue;  // the memory copy is the current one
    int64_t step = 0, last_touch = 0;
    const rocksdb::Slice v = it->value();
    if (auto s = DecodeRowValue(shape_, id, v.data(), v.size(), &step, &last_touch, buffer.data());
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("embedding store ", options_.path, ": ", s.message()));
    }
    if (Expired(last_touch)) continue;
    if (auto s = fn(EmbeddingRow{id,
                                 {buffer.data(), dim},
                                 {buffer.data() + dim, shape_.floats() - dim},
                                 step,
                                 last_touch});
        !s.ok()) {
      return s;
    }
  }
  if (!it->status().ok()) return DiskError(options_.path, "Iterate (rows)", it->status());
  for (; next < memory.size(); ++next) {
    if (auto s = emit_memory(memory[next]); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingStore::FlushAll() {
  rocksdb::WriteBatch batch;
  std::vector<uint32_t> pending;
  auto write = [&]() -> absl::Status {
    if (batch.Count() == 0) return absl::OkStatus();
    rocksdb::Status s = db_->Write(*write_options_, &batch);
    if (!s.ok()) return DiskError(options_.path, "Write (flush)", s);
    for (uint32_t slot : pending) {
      SlotMeta& m = meta(slot);
      if (!m.on_disk) ++stats_.rows_on_disk;
      m.on_disk = true;
      m.dirty = false;
    }
    stats_.disk_writes += pending.size();
    pending.clear();
    batch.Clear();
    return absl::OkStatus();
  };
  char key[kRowKeySize];
  std::vector<uint32_t> slots;
  slots.reserve(index_.size());
  index_.ForEachSlot([&](uint32_t slot) {
    if (meta(slot).dirty) slots.push_back(slot);
  });
  for (const uint32_t slot : slots) {
    EncodeRowKey(config_.id, meta(slot).id, key);
    EncodeRowValue(shape_, meta(slot).step, meta(slot).last_touch, floats(slot), &value_buffer_);
    batch.Put(rocksdb::Slice(key, kRowKeySize), value_buffer_);
    pending.push_back(slot);
    if (pending.size() >= kBatchRows) {
      if (auto s = write(); !s.ok()) return s;
    }
  }
  batch.Put(MetaKey(config_.id),
            rocksdb::Slice(reinterpret_cast<const char*>(&step_), sizeof(step_)));
  if (sketch_) batch.Put(SketchKey(config_.id), sketch_->Serialize());
  if (auto s = write(); !s.ok()) return s;
  rocksdb::Status s = db_->Flush(rocksdb::FlushOptions());
  if (!s.ok()) return DiskError(options_.path, "Flush", s);
  return absl::OkStatus();
}

std::unique_ptr<EmbeddingSnapshot> EmbeddingStore::Capture() const {
  std::unique_ptr<EmbeddingSnapshot> snap(new EmbeddingSnapshot());
  snap->store_ = this;
  snap->step_ = step_;
  std::vector<std::pair<uint64_t, uint32_t>> dirty;
  index_.ForEachSlot([&](uint32_t slot) {
    if (meta(slot).dirty) dirty.emplace_back(meta(slot).id, slot);
  });
  std::sort(dirty.begin(), dirty.end());
  const size_t value_size = shape_.value_size();
  snap->memory_ids_.reserve(dirty.size());
  snap->memory_values_.resize(dirty.size() * value_size);
  std::string value;
  for (size_t i = 0; i < dirty.size(); ++i) {
    const SlotMeta& m = meta(dirty[i].second);
    EncodeRowValue(shape_, m.step, m.last_touch, floats(dirty[i].second), &value);
    std::memcpy(snap->memory_values_.data() + i * value_size, value.data(), value_size);
    snap->memory_ids_.push_back(dirty[i].first);
  }
  if (sketch_) snap->sketch_ = sketch_->Serialize();
  snap->db_snapshot_ = db_->GetSnapshot();
  return snap;
}

EmbeddingSnapshot::~EmbeddingSnapshot() {
  if (db_snapshot_ != nullptr) {
    store_->db_->ReleaseSnapshot(db_snapshot_);
  }
}

absl::Status EmbeddingSnapshot::ForEachEntry(
    absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> put) const {
  const EmbeddingStore& store = *store_;
  const uint32_t table = store.config_.id;
  const std::string meta_key = MetaKey(table);
  if (auto s = put(meta_key, std::string_view(reinterpret_cast<const char*>(&step_), 8)); !s.ok()) {
    return s;
  }
  const size_t value_size = store.shape_.value_size();
  char key[kRowKeySize];
  size_t next = 0;
  auto emit_memory = [&](size_t i) {
    EncodeRowKey(table, memory_ids_[i], key);
    return put(std::string_view(key, kRowKeySize),
               std::string_view(memory_values_.data() + i * value_size, value_size));
  };
  rocksdb::ReadOptions read;
  read.snapshot = db_snapshot_;
  read.fill_cache = false;  // a full scan must not push the hot rows out of the block cache
  const std::string prefix = RowKeyPrefix(table);
  std::unique_ptr<rocksdb::Iterator> it(store.db_->NewIterator(read));
  for (it->Seek(prefix); it->Valid() && it->key().starts_with(prefix); it->Next()) {
    uint64_t id = 0;
    if (!DecodeRowKey(it->key().data(), it->key().size(), table, &id)) continue;
    for (; next < memory_ids_.size() && memory_ids_[next] < id; ++next) {
      if (auto s = emit_memory(next); !s.ok()) return s;
    }
    if (next < memory_ids_.size() && memory_ids_[next] == id) {
      // The memory copy is the current one.
      if (auto s = emit_memory(next++); !s.ok()) return s;
      continue;
    }
    const rocksdb::Slice v = it->value();
    int64_t step = 0, last_touch = 0;
    if (auto s = DecodeRowValue(store.shape_, id, v.data(), v.size(), &step, &last_touch, nullptr);
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("embedding store ", store.options_.path, ": ", s.message()));
    }
    if (auto s = put(std::string_view(it->key().data(), it->key().size()),
                     std::string_view(v.data(), v.size()));
        !s.ok()) {
      return s;
    }
  }
  if (!it->status().ok()) {
    return DiskError(store.options_.path, "Iterate (snapshot)", it->status());
  }
  for (; next < memory_ids_.size(); ++next) {
    if (auto s = emit_memory(next); !s.ok()) return s;
  }
  if (!sketch_.empty()) return put(SketchKey(table), sketch_);
  return absl::OkStatus();
}

EmbeddingStoreStats EmbeddingStore::stats() const {
  EmbeddingStoreStats out = stats_;
  out.rows_in_memory = index_.size();
  out.memory_bytes = index_.bytes() + block_bytes_ + blocks_.capacity() * sizeof(Block) +
                     free_slots_.capacity() * sizeof(uint32_t);
  return out;
}

}  // namespace syncline
