#include "ps/shard_table.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

#include "absl/strings/str_format.h"
#include "core/tsan.h"
#include "embeddings/row_codec.h"
#include "optim/optimizer.h"
#include "ps/robust_aggregate.h"

namespace syncline {

absl::StatusOr<std::unique_ptr<ShardTable>> ShardTable::Create(
    const TableConfig& config, int shard, int num_shards,
    const EmbeddingStoreOptions* store_options, size_t dense_block_bytes) {
  if (num_shards < 1 || shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError("bad shard index");
  }
  std::unique_ptr<ShardTable> table(new ShardTable(config, shard, num_shards, dense_block_bytes));
  if (store_options != nullptr && !config.dense) {
    auto store = EmbeddingStore::Open(config, *store_options);
    if (!store.ok()) return store.status();
    table->store_ = std::move(*store);
  }
  return table;
}

uint64_t ShardTable::rows() const {
  if (config_.dense) return range_.size();
  return store_ ? store_->stats().rows_in_memory : sparse_rows_.size();
}

std::unique_ptr<TableSnapshot> ShardTable::Capture() const {
  auto snap = std::make_unique<TableSnapshot>();
  snap->config = config_;
  if (config_.dense) {
    snap->weights.resize(dense_floats_);
    ForEachBlockPart(0, dense_floats_, [&](size_t block, size_t in_block, size_t at, size_t n) {
      std::memcpy(snap->weights.data() + at, blocks_[block].get() + in_block, n * sizeof(float));
    });
    snap->state = state_;
    snap->step = steps_[0];
    return snap;
  }
  if (store_) {
    snap->store = store_->Capture();
    return snap;
  }
  std::vector<std::pair<uint64_t, uint32_t>> rows(sparse_rows_.begin(), sparse_rows_.end());
  std::sort(rows.begin(), rows.end());
  const RowShape shape{config_.dim, static_cast<uint32_t>(state_floats_)};
  const size_t value_size = shape.value_size();
  snap->row_ids.reserve(rows.size());
  snap->row_values.resize(rows.size() * value_size);
  std::vector<float> floats(shape.floats());
  std::string value;
  for (size_t i = 0; i < rows.size(); ++i) {
    const size_t r = rows[i].second;
    std::memcpy(floats.data(), weights_.data() + r * config_.dim, config_.dim * sizeof(float));
    std::memcpy(floats.data() + config_.dim, state_.data() + r * config_.dim * state_floats_,
                static_cast<size_t>(config_.dim) * state_floats_ * sizeof(float));
    EncodeRowValue(shape, steps_[r], 0, floats.data(), &value);
    std::memcpy(snap->row_values.data() + i * value_size, value.data(), value_size);
    snap->row_ids.push_back(rows[i].first);
  }
  return snap;
}

absl::Status TableSnapshot::ForEachSparseEntry(
    absl::FunctionRef<absl::Status(std::string_view key, std::string_view value)> put) const {
  if (store) return store->ForEachEntry(put);
  const RowShape shape{config.dim,
                       static_cast<uint32_t>(StateFloatsPerWeight(config.optimizer.kind))};
  const size_t value_size = shape.value_size();
  char key[kRowKeySize];
  for (size_t i = 0; i < row_ids.size(); ++i) {
    EncodeRowKey(config.id, row_ids[i], key);
    if (auto s = put(std::string_view(key, kRowKeySize),
                     std::string_view(row_values.data() + i * value_size, value_size));
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ShardTable::LoadDense(std::span<const float> weights, std::span<const float> state,
                                   int64_t step) {
  if (!config_.dense || weights.size() != dense_floats_ || state.size() != state_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "table %d: the checkpoint holds %d weights and %d state floats, this shard %d and %d",
        config_.id, weights.size(), state.size(), dense_floats_, state_.size()));
  }
  ForEachBlockPart(0, dense_floats_, [&](size_t block, size_t in_block, size_t at, size_t n) {
    std::memcpy(WritableBlock(block) + in_block, weights.data() + at, n * sizeof(float));
  });
  std::copy(state.begin(), state.end(), state_.begin());
  steps_[0] = step;
  return absl::OkStatus();
}

absl::Status ShardTable::LoadRow(uint64_t id, std::string_view value) {
  const RowShape shape{config_.dim, static_cast<uint32_t>(state_floats_)};
  std::vector<float> floats(shape.floats());
  int64_t step = 0, last_touch = 0;
  if (auto s =
          DecodeRowValue(shape, id, value.data(), value.size(), &step, &last_touch, floats.data());
      !s.ok()) {
    return s;
  }
  auto row = RowOf(id);
  if (!row.ok()) return row.status();
  const size_t r = *row;
  std::memcpy(weights_.data() + r * config_.dim, floats.data(), config_.dim * sizeof(float));
  std::memcpy(state_.data() + r * config_.dim * state_floats_, floats.data() + config_.dim,
              static_cast<size_t>(config_.dim) * state_floats_ * sizeof(float));
  steps_[r] = step;
  return absl::OkStatus();
}

absl::Status ShardTable::AdvanceStep() { return store_ ? store_->AdvanceStep() : absl::OkStatus(); }

ShardTable::ShardTable(const TableConfig& config, int shard, int num_shards,
                       size_t dense_block_bytes)
    : config_(config),
      shard_(shard),
      num_shards_(num_shards),
      state_floats_(StateFloatsPerWeight(config.optimizer.kind)) {
  if (config_.dense) {
    range_ = DenseShardRange(config_.num_keys, shard, num_shards);
    const size_t dim = config_.dim;
    const size_t rows_per_block = std::max<size_t>(1, dense_block_bytes / (sizeof(float) * dim));
    block_floats_ = rows_per_block * dim;
    dense_floats_ = range_.size() * dim;
    for (size_t at = 0; at < dense_floats_; at += block_floats_) {
      blocks_.push_back(
          std::make_shared_for_overwrite<float[]>(std::min(block_floats_, dense_floats_ - at)));
    }
    for (uint64_t k = range_.begin; k < range_.end; ++k) {
      InitRow(k, WritableDenseRow(k - range_.begin));
    }
    state_.assign(dense_floats_ * state_floats_, 0.0f);
    steps_.assign(1, 0);
  }
}

void ShardTable::InitRow(uint64_t key, float* row) const { InitialRow(config_, key, row); }

float* ShardTable::WritableBlock(size_t block) {
  std::shared_ptr<float[]>& b = blocks_[block];
  if (b.use_count() > 1) {
    // A reply still references the block: it keeps the old values, the table moves on with a
    // copy.
    const size_t n = std::min(block_floats_, dense_floats_ - block * block_floats_);
    auto copy = std::make_shared_for_overwrite<float[]>(n);
    std::memcpy(copy.get(), b.get(), n * sizeof(float));
    b = std::move(copy);
    ++block_copies_;
  } else {
    // The count fell to 1 when the last frame was released, maybe on another thread (a ZeroMQ
    // I/O thread): its reads of the block happen before our writes.
    std::atomic_thread_fence(std::memory_order_acquire);
    SYNCLINE_TSAN_ACQUIRE(b.get());
  }
  return b.get();
}

float* ShardTable::WritableDenseRow(size_t row) {
  const size_t at = row * config_.dim;
  return WritableBlock(at / block_floats_) + at % block_floats_;
}

absl::Status ShardTable::CheckKeys(std::span<const uint64_t> keys) const {
  if (config_.dense) {
    for (uint64_t k : keys) {
      if (!range_.Contains(k)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("table %d: key %d is outside this shard's range [%d, %d)", config_.id,
                            k, range_.begin, range_.end));
      }
    }
    return absl::OkStatus();
  }
  for (uint64_t k : keys) {
    if (config_.num_keys != 0 && k >= config_.num_keys) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: key %d is out of range (the table has %d keys)", config_.id, k,
                          config_.num_keys));
    }
    if (num_shards_ > 1 && SparseShardOf(k, num_shards_) != shard_) {
      return absl::InvalidArgumentError(
          absl::StrFormat("table %d: key %d belongs to shard %d, not %d", config_.id, k,
                          SparseShardOf(k, num_shards_), shard_));
    }
  }
  return absl::OkStatus();
}

absl::Status ShardTable::CheckRange(KeyRange r) const {
  if (!config_.dense) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d is sparse: a request needs keys, not a range", config_.id));
  }
  if (r.begin >= r.end || r.begin < range_.begin || r.end > range_.end) {
    return absl::InvalidArgumentError(
        absl::StrFormat("table %d: range [%d, %d) is not inside this shard's range [%d, %d)",
                        config_.id, r.begin, r.end, range_.begin, range_.end));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> ShardTable::RowOf(uint64_t key) {
  if (config_.dense) return static_cast<uint32_t>(key - range_.begin);
  auto it = sparse_rows_.find(key);
  if (it != sparse_rows_.end()) return it->second;
  const uint64_t limit = config_.max_rows ? config_.max_rows : TableConfig::kDefaultMaxRows;
  if (sparse_rows_.size() >= limit) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("table %d: shard %d is full (%d rows)", config_.id, shard_, limit));
  }
  const uint32_t row = static_cast<uint32_t>(sparse_rows_.size());
  sparse_rows_.emplace(key, row);
  weights_.resize(weights_.size() + config_.dim);
  InitRow(key, weights_.data() + static_cast<size_t>(row) * config_.dim);
  state_.resize(state_.size() + static_cast<size_t>(config_.dim) * state_floats_, 0.0f);
  steps_.push_back(0);
  return row;
}

absl::Status ShardTable::Read(std::span<const uint64_t> keys, float* out, bool create) {
  if (store_) return store_->Read(keys, out, create);
  const uint32_t dim = config_.dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!create && !config_.dense && !sparse_rows_.contains(keys[i])) {
      InitRow(keys[i], out + i * dim);
      continue;
    }
    auto row = RowOf(keys[i]);
    if (!row.ok()) return row.status();
    const size_t at = static_cast<size_t>(*row) * dim;
    const float* src = config_.dense ? blocks_[at / block_floats_].get() + at % block_floats_
                                     : weights_.data() + at;
    std::memcpy(out + i * dim, src, dim * sizeof(float));
  }
  return absl::OkStatus();
}

void ShardTable::ReadRange(KeyRange r, float* out) const {
  ForEachBlockPart((r.begin - range_.begin) * config_.dim, r.size() * config_.dim,
                   [&](size_t block, size_t in_block, size_t at, size_t n) {
                     std::memcpy(out, blocks_[block].get() + in_block, n * sizeof(float));
                     out += n;
                   });
}

Frame ShardTable::ShareRange(KeyRange r) const {
  const size_t offset = (r.begin - range_.begin) * config_.dim;
  const size_t n = r.size() * config_.dim;
  const size_t block = offset / block_floats_;
  const size_t in_block = offset % block_floats_;
  const size_t block_size = std::min(block_floats_, dense_floats_ - block * block_floats_);
  // A small part of a large block is copied: a later write would otherwise copy the whole
  // block to spare a copy of the part. At a quarter or more, a write copies at most four
  // times what the reply spared.
  if (in_block + n <= block_size && 4 * n >= block_size) {
    const float* data = blocks_[block].get() + in_block;
    if constexpr (SYNCLINE_TSAN_ENABLED) {
      // The reply's reference, released with an annotation WritableBlock's acquire pairs with.
      std::shared_ptr<float[]> held = blocks_[block];
      std::shared_ptr<const void> owner(held.get(), [held](const void*) mutable {
        SYNCLINE_TSAN_RELEASE(held.get());
        held.reset();
      });
      return Frame::Shared(std::move(owner), data, n * sizeof(float));
    }
    return Frame::Shared(blocks_[block], data, n * sizeof(float));
  }
  auto copy = std::make_shared_for_overwrite<float[]>(n);
  ReadRange(r, copy.get());
  const float* data = copy.get();
  return Frame::Shared(std::move(copy), data, n * sizeof(float));
}

absl::Status ShardTable::Apply(std::span<const uint64_t> keys, const float* grad_sum, float scale,
                               std::span<const uint16_t> held, std::span<const float> spread) {
  if (store_) return store_->Apply(keys, grad_sum, scale, held, spread);
  const uint32_t dim = config_.dim;
  // A dense shard counts one step per update, however many of its rows the update touches.
  const int64_t dense_step = config_.dense ? ++steps_[0] : 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto row = RowOf(keys[i]);
    if (!row.ok()) return row.status();
    const size_t r = *row;
    if (config_.dense) {
      // Dense state is laid out rule by rule over the whole shard ([m... | v...]).
      float* state = state_.data();
      const size_t at = r * dim;
      ApplyUpdate(config_.optimizer, WritableDenseRow(r), state_floats_ > 0 ? state + at : nullptr,
                  state_floats_ > 1 ? state + dense_floats_ + at : nullptr, grad_sum + i * dim,
                  scale, dim, dense_step);
      continue;
    }
    float* state = state_.data() + r * dim * state_floats_;
    if (held.empty()) {
      ApplyUpdate(config_.optimizer, weights_.data() + r * dim, state, grad_sum + i * dim, scale,
                  dim, ++steps_[r]);
    } else {
      ApplyHeldUpdate(config_.optimizer, weights_.data() + r * dim, state,
                      state_floats_ > 1 ? state + dim : nullptr, grad_sum + i * dim, scale, dim,
                      held[i], spread.empty() ? 1.0f : spread[i], &steps_[r]);
    }
  }
  return absl::OkStatus();
}

void ShardTable::ApplyRange(KeyRange r, const float* grad_sum, float scale) {
  // One vectorised call per block part. Dense state is laid out rule by rule over the whole
  // shard ([m... | v...]), so each component of a block's state is contiguous.
  const int64_t step = ++steps_[0];
  float* state = state_.data();
  const size_t offset = (r.begin - range_.begin) * config_.dim;
  const size_t n = r.size() * config_.dim;
  // Copy-on-write happens here, on the calling thread, before any helper writes.
  ForEachBlockPart(offset, n, [&](size_t block, size_t, size_t, size_t) { WritableBlock(block); });
  auto apply = [&](size_t begin, size_t count) {
    ForEachBlockPart(begin, count, [&](size_t block, size_t in_block, size_t at, size_t part) {
      ApplyUpdate(config_.optimizer, blocks_[block].get() + in_block,
                  state_floats_ > 0 ? state + at : nullptr,
                  state_floats_ > 1 ? state + dense_floats_ + at : nullptr,
                  grad_sum + (at - offset), scale, part, step);
    });
  };
  // The rules are element-wise: cutting the range into parts gives the same bits.
  const size_t tasks = update_pool_ == nullptr
                           ? 1
                           : std::min(size_t{2} * static_cast<size_t>(update_pool_->threads()),
                                      n / kMinFloatsPerUpdateTask);
  if (tasks <= 1) {
    apply(offset, n);
    return;
  }
  // Parts of multiples of 16 floats (a cache line's worth; the blocks are not line-aligned, so
  // neighbouring parts may still share one line at their edge).
  const size_t chunk = ((n + tasks - 1) / tasks + 15) / 16 * 16;
  update_pool_->Run(tasks, [&](size_t t) {
    const size_t begin = t * chunk;
    if (begin < n) apply(offset + begin, std::min(chunk, n - begin));
  });
}

void ShardTable::Accumulate(int64_t clock, int worker, std::span<const uint64_t> keys,
                            const float* grad_sum, std::span<const uint16_t> held,
                            std::span<const float> spread) {
  aggregates_[clock][worker].push_back(
      Contribution{std::vector<uint64_t>(keys.begin(), keys.end()),
                   {},
                   std::vector<float>(grad_sum, grad_sum + keys.size() * config_.dim),
                   std::vector<uint16_t>(held.begin(), held.end()),
                   std::vector<float>(spread.begin(), spread.end())});
}

void ShardTable::AccumulateRange(int64_t clock, int worker, KeyRange r, const float* grad_sum) {
  aggregates_[clock][worker].push_back(
      Contribution{{}, r, std::vector<float>(grad_sum, grad_sum + r.size() * config_.dim)});
}

void ShardTable::AddToShard(const std::vector<Contribution>& contributions, float* sum) const {
  const uint32_t dim = config_.dim;
  for (const Contribution& c : contributions) {
    if (!c.keys.empty()) {
      // Rows of a sparse update (a decoded top-K block) to a dense shard.
      for (size_t i = 0; i < c.keys.size(); ++i) {
        float* __restrict dst = sum + (c.keys[i] - range_.begin) * dim;
        const float* __restrict src = c.values.data() + i * dim;
        for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
      }
      continue;
    }
    float* __restrict dst = sum + (c.range.begin - range_.begin) * dim;
    const float* __restrict src = c.values.data();
    for (size_t i = 0; i < c.values.size(); ++i) dst[i] += src[i];
  }
}

void ShardTable::AddRowTerms(const Contribution& c, size_t i, uint32_t dim, uint16_t* held,
                             double* squares) {
  const uint16_t k = c.held.empty() ? 1 : std::max<uint16_t>(c.held[i], 1);
  const double r = c.spread.empty() ? 1.0 : c.spread[i];
  const float* src = c.values.data() + i * dim;
  double g2 = 0;
  for (uint32_t j = 0; j < dim; ++j) g2 += double{src[j]} * src[j];
  *held = std::max(*held, k);
  *squares += r * g2 / k;
}

absl::Status ShardTable::ApplySums(std::span<const uint64_t> keys, const float* sum, bool any_held,
                                   std::span<const uint16_t> held, std::span<const double> squares,
                                   float scale) {
  if (!any_held) return Apply(keys, sum, scale);
  // The combined row: the most steps any contribution held, and the spread that makes its
  // held steps add those squares (clamped by ApplyHeldUpdate).
  const uint32_t dim = config_.dim;
  std::vector<float> spread(keys.size(), 1.0f);
  for (size_t r = 0; r < keys.size(); ++r) {
    double s2 = 0;
    for (uint32_t j = 0; j < dim; ++j) s2 += double{sum[r * dim + j]} * sum[r * dim + j];
    if (s2 > 0) spread[r] = static_cast<float>(held[r] * squares[r] / s2);
  }
  return Apply(keys, sum, scale, held, spread);
}

absl::Status ShardTable::ApplySortedAggregate(Aggregate& aggregate, bool any_held, float scale) {
  // The pushes as the client sends them (distinct, increasing keys), merged in one pass in the
  // general path's order (workers by rank, each in arrival order), so that every row's sum,
  // held count and squares are the same sequence of operations: from 0.0f, 1 and 0.0, each
  // push's row in turn. A lone push (one worker) is applied from its own buffer, the aggregate
  // being spent.
  const uint32_t dim = config_.dim;
  std::vector<Contribution*> pushes;
  size_t total = 0;
  for (auto& [worker, contributions] : aggregate) {
    for (Contribution& c : contributions) {
      if (c.keys.empty()) continue;
      pushes.push_back(&c);
      total += c.keys.size();
    }
  }
  std::vector<uint16_t> held;  // with any_held only
  std::vector<double> squares;
  if (pushes.empty()) return ApplySums({}, nullptr, any_held, held, squares, scale);
  if (pushes.size() == 1) {
    Contribution& c = *pushes[0];
    if (any_held) {
      held.assign(c.keys.size(), 1);
      squares.assign(c.keys.size(), 0.0);
      for (size_t i = 0; i < c.keys.size(); ++i) AddRowTerms(c, i, dim, &held[i], &squares[i]);
    }
    for (float& v : c.values) v += 0.0f;  // 0.0f + v: turns -0 into +0, as a sum from 0 does
    return ApplySums(c.keys, c.values.data(), any_held, held, squares, scale);
  }
  // A tournament (loser) tree over the pushes' next rows: each node keeps the loser of the
  // match below it, so replacing the winner replays one match a level, log2(pushes) compares
  // without early exits. Ties go to the push earlier in that order, so a key's rows come out
  // push by push. An exhausted push plays as the largest key with a place after every push.
  struct Head {
    uint64_t key;
    uint64_t push;
  };
  auto before = [](const Head& a, const Head& b) {
    return a.key < b.key || (a.key == b.key && a.push < b.push);
  };
  const size_t leaves = std::bit_ceil(pushes.size());
  constexpr uint64_t kLast = std::numeric_limits<uint64_t>::max();
  std::vector<size_t> next(pushes.size(), 0);
  std::vector<Head> tree(2 * leaves);  // tree[1]: the root; tree[leaves + p]: push p's leaf
  for (size_t p = 0; p < leaves; ++p) {
    tree[leaves + p] = p < pushes.size() ? Head{pushes[p]->keys[0], p} : Head{kLast, leaves + p};
  }
  // Built bottom-up holding winners, then each node turned into the loser of its match.
  std::vector<Head> winner(2 * leaves);
  std::copy(tree.begin() + leaves, tree.end(), winner.begin() + leaves);
  for (size_t n = leaves; n-- > 1;) {
    const bool left = before(winner[2 * n], winner[2 * n + 1]);
    winner[n] = left ? winner[2 * n] : winner[2 * n + 1];
    tree[n] = left ? winner[2 * n + 1] : winner[2 * n];
  }
  Head top = winner[1];
  // Sized for every row pushed (an upper bound of the distinct ones) and kept between clocks:
  // no page is faulted in again and nothing moves as the sums grow.
  std::vector<uint64_t>& keys = merge_keys_;
  keys.clear();
  keys.reserve(total);
  if (merge_sums_.size() < total * dim) merge_sums_.resize(total * dim);
  float* const sum = merge_sums_.data();
  if (any_held) {
    held.reserve(total);
    squares.reserve(total);
  }
  float* dst = nullptr;
  for (size_t emitted = 0; emitted < total; ++emitted) {
    const Contribution& c = *pushes[top.push];
    const size_t row = next[top.push]++;
    const float* __restrict src = c.values.data() + row * dim;
    if (keys.empty() || keys.back() != top.key) {
      dst = sum + keys.size() * dim;
      keys.push_back(top.key);
      for (uint32_t j = 0; j < dim; ++j) dst[j] = 0.0f + src[j];
      if (any_held) {
        held.push_back(1);
        squares.push_back(0.0);
      }
    } else {
      for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
    }
    if (any_held) AddRowTerms(c, row, dim, &held.back(), &squares.back());
    Head challenger =
        row + 1 < c.keys.size() ? Head{c.keys[row + 1], top.push} : Head{kLast, leaves + top.push};
    for (size_t n = (leaves + top.push) / 2; n >= 1; n /= 2) {
      const Head held_loser = tree[n];
      const bool swap = before(held_loser, challenger);
      tree[n] = swap ? challenger : held_loser;
      challenger = swap ? held_loser : challenger;
    }
    top = challenger;
  }
  return ApplySums(keys, sum, any_held, held, squares, scale);
}

absl::Status ShardTable::ApplyAggregate(Aggregate& aggregate, float scale) {
  const uint32_t dim = config_.dim;
  if (config_.dense) {
    std::vector<float> sum(range_.size() * dim, 0.0f);
    for (const auto& [worker, contributions] : aggregate) AddToShard(contributions, sum.data());
    ApplyRange(range_, sum.data(), scale);
    return absl::OkStatus();
  }
  size_t largest = 0;  // keys of the largest push: a lower bound of the distinct keys
  bool any_held = false;
  bool sorted = true;  // every push's keys distinct and increasing
  for (auto& [worker, contributions] : aggregate) {
    for (Contribution& c : contributions) {
      largest = std::max(largest, c.keys.size());
      any_held = any_held || !c.held.empty();
      sorted = sorted && std::adjacent_find(c.keys.begin(), c.keys.end(),
                                            std::greater_equal<uint64_t>()) == c.keys.end();
    }
  }
  if (sorted) return ApplySortedAggregate(aggregate, any_held, scale);
  absl::flat_hash_map<uint64_t, uint32_t> index;
  std::vector<uint64_t> keys;
  std::vector<float> sum;
  std::vector<uint16_t> held;  // per key: the most pushes a contribution to it holds
  // Per key: the squares the contributions stand for, sum of spread * |G|^2 / held (what the
  // pushes behind each one would have added), from which the combined spread follows.
  std::vector<double> squares;
  // Reserved for the largest push, not all of them: with many workers most keys repeat.
  index.reserve(largest);
  keys.reserve(largest);
  sum.reserve(largest * dim);
  held.reserve(largest);
  squares.reserve(largest);
  for (const auto& [worker, contributions] : aggregate) {
    for (const Contribution& c : contributions) {
      for (size_t i = 0; i < c.keys.size(); ++i) {
        auto [it, inserted] = index.try_emplace(c.keys[i], static_cast<uint32_t>(keys.size()));
        if (inserted) {
          keys.push_back(c.keys[i]);
          sum.resize(sum.size() + dim, 0.0f);
          held.push_back(1);
          squares.push_back(0);
        }
        float* __restrict dst = sum.data() + static_cast<size_t>(it->second) * dim;
        const float* __restrict src = c.values.data() + i * dim;
        for (uint32_t j = 0; j < dim; ++j) dst[j] += src[j];
        if (any_held) AddRowTerms(c, i, dim, &held[it->second], &squares[it->second]);
      }
    }
  }
  return ApplySums(keys, sum.data(), any_held, held, squares, scale);
}

absl::Status ShardTable::ApplyNoisyAggregates(
    int64_t from, int64_t to, float scale,
    const std::function<void(int64_t clock, std::span<float> sum)>& add_noise) {
  if (!config_.dense) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "table %d: DP rounds add noise to every coordinate of a dense table; this one is sparse",
        config_.id));
  }
  std::vector<float> sum(range_.size() * config_.dim);
  for (int64_t clock = from; clock < to; ++clock) {
    std::fill(sum.begin(), sum.end(), 0.0f);
    if (auto it = aggregates_.find(clock); it != aggregates_.end()) {
      for (const auto& [worker, contributions] : it->second) AddToShard(contributions, sum.data());
    }
    add_noise(clock, sum);
    ApplyRange(range_, sum.data(), scale);
  }
  aggregates_.erase(aggregates_.begin(), aggregates_.lower_bound(to));
  return absl::OkStatus();
}

void ShardTable::DropContributions(int64_t clock, int worker) {
  auto it = aggregates_.find(clock);
  if (it != aggregates_.end()) it->second.erase(worker);
}

void ShardTable::DropContributionsFrom(int64_t clock, int worker) {
  for (auto it = aggregates_.lower_bound(clock); it != aggregates_.end(); ++it) {
    it->second.erase(worker);
  }
}

absl::StatusOr<uint64_t> ShardTable::ApplyRobustAggregates(
    int64_t min_clock, const AggregateRule& rule,
    const std::function<double(int64_t clock, int worker)>& examples_of) {
  uint64_t skipped = 0;
  while (!aggregates_.empty() && aggregates_.begin()->first < min_clock) {
    auto node = aggregates_.extract(aggregates_.begin());
    auto applied = ApplyRobustAggregate(node.key(), node.mapped(), rule, examples_of);
    if (!applied.ok()) return applied.status();
    skipped += *applied;
  }
  return skipped;
}

absl::StatusOr<uint64_t> ShardTable::ApplyRobustAggregate(
    int64_t clock, Aggregate& aggregate, const AggregateRule& rule,
    const std::function<double(int64_t clock, int worker)>& examples_of) {
  const uint32_t dim = config_.dim;
  // Each worker's update per example; a worker that reported no examples has none.
  std::vector<int> workers;
  std::vector<float> inverse;
  for (const auto& [worker, contributions] : aggregate) {
    const double examples = examples_of(clock, worker);
    if (examples > 0 && !contributions.empty()) {
      workers.push_back(worker);
      inverse.push_back(static_cast<float>(1.0 / examples));
    }
  }
  if (workers.empty()) return 0;
  if (config_.dense) {
    const size_t floats = range_.size() * dim;
    if (!CheckAggregateRule(rule, static_cast<int>(workers.size())).ok()) return 1;
    std::vector<std::vector<float>> updates(workers.size(), std::vector<float>(floats, 0.0f));
    for (size_t u = 0; u < workers.size(); ++u) {
      AddToShard(aggregate[workers[u]], updates[u].data());
      for (float& v : updates[u]) v *= inverse[u];
    }
    std::vector<std::span<const float>> spans(updates.begin(), updates.end());
    std::vector<float> combined(floats);
    // The robust rules weigh every update alike (no weights).
    if (auto s = syncline::Aggregate(rule, spans, {}, combined); !s.ok()) return s;
    ApplyRange(range_, combined.data(), 1.0f);
    return 0;
  }
  // Sparse: per key, the rows of the updates that hold it (in worker-rank order).
  absl::flat_hash_map<uint64_t, uint32_t> index;
  std::vector<uint64_t> keys;
  std::vector<std::vector<std::vector<float>>> rows_of;  // [key][update][dim]
  for (size_t u = 0; u < workers.size(); ++u) {
    // A worker's own rows of this clock, summed over its pushes.
    absl::flat_hash_map<uint64_t, uint32_t> mine;
    for (const Contribution& c : aggregate[workers[u]]) {
      for (size_t i = 0; i < c.keys.size(); ++i) {
        auto [it, inserted] = index.try_emplace(c.keys[i], static_cast<uint32_t>(keys.size()));
        if (inserted) {
          keys.push_back(c.keys[i]);
          rows_of.emplace_back();
        }
        auto& held = rows_of[it->second];
        auto [m, first_time] = mine.try_emplace(c.keys[i], static_cast<uint32_t>(held.size()));
        if (first_time) held.emplace_back(dim, 0.0f);
        float* dst = held[m->second].data();
        for (uint32_t j = 0; j < dim; ++j) dst[j] += c.values[i * dim + j] * inverse[u];
      }
    }
  }
  uint64_t skipped = 0;
  std::vector<uint64_t> applied_keys;
  std::vector<float> combined;
  std::vector<float> row(dim);
  for (size_t k = 0; k < keys.size(); ++k) {
    const auto& held = rows_of[k];
    if (!CheckAggregateRule(rule, static_cast<int>(held.size())).ok()) {
      ++skipped;
      continue;
    }
    std::vector<std::span<const float>> spans(held.begin(), held.end());
    if (auto s = syncline::Aggregate(rule, spans, {}, row); !s.ok()) return s;
    applied_keys.push_back(keys[k]);
    combined.insert(combined.end(), row.begin(), row.end());
  }
  if (!applied_keys.empty()) {
    if (auto s = Apply(applied_keys, combined.data(), 1.0f); !s.ok()) return s;
  }
  return skipped;
}

}  // namespace syncline
