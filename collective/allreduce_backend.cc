#include "collective/allreduce_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/half.h"
#include "compression/sparse_rows.h"
#include "core/log.h"
#include "job/job_spec.h"

namespace syncline {

AllReduceBackend::AllReduceBackend(std::unique_ptr<Communicator> communicator,
                                   AllReduceOptions options, std::unique_ptr<DenseCollective> dense)
    : communicator_(std::move(communicator)),
      owned_dense_collective_(std::move(dense)),
      dense_collective_(owned_dense_collective_ != nullptr ? owned_dense_collective_.get()
                                                           : communicator_.get()),
      options_(options) {
  if (options_.codec.kind == CodecKind::kTopK || options_.codec.kind == CodecKind::kSign1) {
    codec_ = Codec::Create(options_.codec);
  }
}

uint64_t AllReduceBackend::LargestAllReduce(const ParameterLayout& layout, int workers) {
  // As Init lays out buffer_, and as Round lays out small_ (the counts: two per rank).
  const uint64_t buffer =
      layout.num_features * layout.row_dim + layout.bias_dim + 1 + layout.num_features + 1;
  const uint64_t small = uint64_t{layout.bias_dim} + 2 + 2 * static_cast<uint64_t>(workers);
  return std::max(buffer, small);
}

absl::Status AllReduceBackend::Init(const ParameterLayout& layout) {
  if (auto s = model_.Init(layout, options_.optimizer); !s.ok()) return s;
  bias_at_ = model_.row_floats();
  examples_at_ = bias_at_ + layout.bias_dim;
  touched_at_ = examples_at_ + 1;
  training_at_ = touched_at_ + layout.num_features;
  buffer_.assign(training_at_ + 1, 0.0f);
  return absl::OkStatus();
}

uint64_t AllReduceBackend::bytes_pushed() const {
  return earlier_sent_ + communicator_->counters().bytes_sent +
         (owned_dense_collective_ != nullptr ? owned_dense_collective_->counters().bytes_sent : 0);
}

uint64_t AllReduceBackend::bytes_pulled() const {
  return earlier_received_ + communicator_->counters().bytes_received +
         (owned_dense_collective_ != nullptr ? owned_dense_collective_->counters().bytes_received
                                             : 0);
}

absl::Status AllReduceBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                    std::span<float> rows, std::span<float> bias) {
  if (auto s = CatchUp(clock); !s.ok()) return s;
  return model_.Read(keys, rows, bias);
}

absl::Status AllReduceBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                      std::span<const float> row_grads,
                                      std::span<const float> bias_grad, float examples) {
  if (auto s = model_.CheckUpdate(keys, row_grads, bias_grad); !s.ok()) return s;
  const uint32_t dim = model_.layout().row_dim;
  for (size_t i = 0; i < keys.size(); ++i) {
    // With an encoder, the model kept the row gradients (row_grads carry nothing).
    if (encoder_ == nullptr) {
      float* dst = buffer_.data() + keys[i] * dim;
      for (uint32_t j = 0; j < dim; ++j) dst[j] += row_grads[i * dim + j];
    }
    buffer_[touched_at_ + keys[i]] = 1.0f;
  }
  step_keys_.insert(step_keys_.end(), keys.begin(), keys.end());
  for (size_t j = 0; j < bias_grad.size(); ++j) buffer_[bias_at_ + j] += bias_grad[j];
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Round(bool training, float examples) {
  buffer_[examples_at_] = training ? examples : 0.0f;
  buffer_[training_at_] = training ? 1.0f : 0.0f;
  if (codec_ != nullptr) return CompressedRound();
  if (options_.rows == AllReduceOptions::Rows::kDense) {
    absl::Status s =
        dense_collective_->AllReduce(std::span<float>(buffer_), options_.algorithm, options_.wire);
    if (!s.ok()) return s;
    return Apply(/*by_union=*/false);
  }
  // The small sums first, with every rank's count of touched rows in its own slot.
  std::sort(step_keys_.begin(), step_keys_.end());
  step_keys_.erase(std::unique(step_keys_.begin(), step_keys_.end()), step_keys_.end());
  const int n = communicator_->size();
  // Per rank: its touched rows and the bytes of their compact keys (exact as floats below
  // 2^24; beyond, the rows are all-reduced).
  const size_t counts_at = PackSmallSums();
  small_.resize(counts_at + 2 * n, 0.0f);
  const size_t key_bytes = EncodedKeysSize(step_keys_);
  small_[counts_at + 2 * communicator_->rank()] = static_cast<float>(step_keys_.size());
  small_[counts_at + 2 * communicator_->rank() + 1] = static_cast<float>(key_bytes);
  if (auto s = communicator_->AllReduce(std::span<float>(small_), Algorithm::kAuto); !s.ok()) {
    return s;
  }
  UnpackSmallSums();
  const std::span<const float> counts(small_.data() + counts_at, 2 * n);
  const bool sparse = GathersRows(counts);
  if (auto s = ExchangeRows(sparse, counts); !s.ok()) return s;
  return Apply(/*by_union=*/sparse);
}

// The row gradients as codec blocks, all-gathered; the rest summed as it is.
absl::Status AllReduceBackend::CompressedRound() {
  const uint32_t dim = model_.layout().row_dim;
  const uint64_t features = model_.layout().num_features;
  std::span<float> rows(buffer_.data(), bias_at_);
  {
    ScopedTime timed(&codec_time_);
    if (encoder_ == nullptr) {
      feedback_.Compress(*codec_, rows, &block_);
    } else if (auto s = encoder_->Compress(0, &block_); !s.ok()) {
      return s;
    }
  }
  PackSmallSums();
  absl::Status s = communicator_->AllReduce(std::span<float>(small_), Algorithm::kAuto);
  if (s.ok()) s = communicator_->AllGatherBytes(block_, &blocks_);
  if (!s.ok()) return s;
  std::fill(rows.begin(), rows.end(), 0.0f);
  {
    ScopedTime timed(&codec_time_);
    for (int r = 0; r < communicator_->size(); ++r) {
      std::span<const std::byte> b(blocks_.data() + r * block_.size(), block_.size());
      if (auto d = codec_->DecodeAdd(b, rows); !d.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("all-reduce: the block of w", r, " does not decode: ", d.message()));
      }
    }
  }
  UnpackSmallSums();
  for (uint64_t key = 0; key < features; ++key) {
    bool any = codec_->spec().kind == CodecKind::kSign1;
    for (uint32_t j = 0; j < dim && !any; ++j) any = rows[key * dim + j] != 0.0f;
    buffer_[touched_at_ + key] = any ? 1.0f : 0.0f;
  }
  return Apply(/*by_union=*/false);
}

bool AllReduceBackend::GathersRows(std::span<const float> counts) const {
  const uint32_t dim = model_.layout().row_dim;
  const int n = communicator_->size();
  float most_rows = 0, most_key_bytes = 0;
  for (int r = 0; r < n; ++r) {
    most_rows = std::max(most_rows, counts[2 * r]);
    most_key_bytes = std::max(most_key_bytes, counts[2 * r + 1]);
  }
  // A ring all-gather sends N - 1 blocks of the largest; a ring all-reduce 2 (N - 1) / N of
  // the buffer.
  const double width = options_.wire == WireType::kFloat16 ? 2 : 4;
  const double block_bytes = 8 + most_key_bytes + most_rows * dim * width;
  const bool exact = most_rows < (1 << 24) && most_key_bytes < (1 << 24);
  return exact && (options_.rows == AllReduceOptions::Rows::kSparse ||
                   n * block_bytes < 2.0 * buffer_.size() * width);
}

size_t AllReduceBackend::PackSmallSums() {
  small_.assign(buffer_.begin() + bias_at_, buffer_.begin() + touched_at_);
  small_.push_back(buffer_[training_at_]);
  return small_.size();
}

void AllReduceBackend::UnpackSmallSums() {
  const size_t n = touched_at_ - bias_at_;
  std::copy_n(small_.begin(), n, buffer_.begin() + bias_at_);
  buffer_[training_at_] = small_[n];
}

absl::Status AllReduceBackend::ExchangeRows(bool sparse, std::span<const float> counts) {
  if (!sparse) return AllReduceRows();
  ++sparse_rounds_;
  // Block: u32 rows, u32 key bytes, the compact keys (compression/sparse_rows.h) padded to the
  // largest rank's, then rows * dim values (float32, or fp16 under --compress fp16) padded to
  // the largest rank's rows.
  const int n = communicator_->size();
  size_t most_rows = 0, most_key_bytes = 0;
  for (int r = 0; r < n; ++r) {
    most_rows = std::max(most_rows, static_cast<size_t>(counts[2 * r]));
    most_key_bytes = std::max(most_key_bytes, static_cast<size_t>(counts[2 * r + 1]));
  }
  const RowBlockLayout block{.values_at = 8 + most_key_bytes,
                             .half = options_.wire == WireType::kFloat16};
  PackRowBlock(block, most_rows);
  if (auto s = communicator_->AllGatherBytes(block_, &blocks_); !s.ok()) return s;
  // This rank's rows are in its own block too: sum every block in rank order.
  const uint32_t dim = model_.layout().row_dim;
  for (uint64_t key : step_keys_) std::fill_n(buffer_.data() + key * dim, dim, 0.0f);
  union_.clear();
  for (int r = 0; r < n; ++r) {
    if (auto s = AddRowBlock(r, block, counts); !s.ok()) return s;
  }
  std::sort(union_.begin(), union_.end());
  union_.erase(std::unique(union_.begin(), union_.end()), union_.end());
  return absl::OkStatus();
}

absl::Status AllReduceBackend::AllReduceRows() {
  ++dense_rounds_;
  // The bias, examples and flag are summed already: all-reduce zeros in their place.
  std::vector<float> summed(buffer_.begin() + bias_at_, buffer_.begin() + touched_at_);
  const float training = buffer_[training_at_];
  std::fill(buffer_.begin() + bias_at_, buffer_.begin() + touched_at_, 0.0f);
  buffer_[training_at_] = 0.0f;
  absl::Status s =
      dense_collective_->AllReduce(std::span<float>(buffer_), options_.algorithm, options_.wire);
  if (!s.ok()) return s;
  std::copy(summed.begin(), summed.end(), buffer_.begin() + bias_at_);
  buffer_[training_at_] = training;
  return absl::OkStatus();
}

void AllReduceBackend::PackRowBlock(const RowBlockLayout& layout, size_t most_rows) {
  const uint32_t dim = model_.layout().row_dim;
  const size_t width = layout.width();
  keys_block_.clear();
  EncodeKeys(step_keys_, &keys_block_);
  block_.assign(layout.values_at + most_rows * dim * width, std::byte{0});
  const auto rows = static_cast<uint32_t>(step_keys_.size());
  const auto key_bytes = static_cast<uint32_t>(keys_block_.size());
  std::memcpy(block_.data(), &rows, 4);
  std::memcpy(block_.data() + 4, &key_bytes, 4);
  if (!keys_block_.empty()) std::memcpy(block_.data() + 8, keys_block_.data(), key_bytes);
  for (size_t i = 0; i < step_keys_.size(); ++i) {
    const float* row = buffer_.data() + step_keys_[i] * dim;
    std::byte* dst = block_.data() + layout.values_at + i * dim * width;
    for (uint32_t j = 0; j < dim; ++j) {
      if (layout.half) {
        const uint16_t h = compression_internal::FloatToHalf(row[j]);
        std::memcpy(dst + j * width, &h, width);
      } else {
        std::memcpy(dst + j * width, &row[j], width);
      }
    }
  }
}

absl::Status AllReduceBackend::AddRowBlock(int r, const RowBlockLayout& layout,
                                           std::span<const float> counts) {
  const uint32_t dim = model_.layout().row_dim;
  const uint64_t features = model_.layout().num_features;
  const size_t width = layout.width();
  const std::byte* b = blocks_.data() + r * block_.size();
  uint32_t k = 0, kb = 0;
  std::memcpy(&k, b, 4);
  std::memcpy(&kb, b + 4, 4);
  if (k != counts[2 * r] || kb != counts[2 * r + 1]) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all-reduce: w%d's block holds %d rows in %d key bytes; it announced "
                        "%g and %g",
                        r, k, kb, counts[2 * r], counts[2 * r + 1]));
  }
  if (auto s = DecodeKeys(std::span<const std::byte>(b + 8, kb), k, &gathered_keys_); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("all-reduce: w", r, "'s keys do not decode: ", s.message()));
  }
  if (!gathered_keys_.empty() && gathered_keys_.back() >= features) {
    return absl::InvalidArgumentError(
        absl::StrFormat("all-reduce: w%d's block holds key %d, beyond the %d features", r,
                        gathered_keys_.back(), features));
  }
  for (uint32_t i = 0; i < k; ++i) {
    float* dst = buffer_.data() + gathered_keys_[i] * dim;
    const std::byte* src = b + layout.values_at + size_t{i} * dim * width;
    for (uint32_t j = 0; j < dim; ++j) {
      if (layout.half) {
        uint16_t h;
        std::memcpy(&h, src + j * width, width);
        dst[j] += compression_internal::HalfToFloat(h);
      } else {
        float v;
        std::memcpy(&v, src + j * width, width);
        dst[j] += v;
      }
    }
  }
  union_.insert(union_.end(), gathered_keys_.begin(), gathered_keys_.end());
  return absl::OkStatus();
}

absl::Status AllReduceBackend::Apply(bool by_union) {
  const uint32_t dim = model_.layout().row_dim;
  const uint64_t features = model_.layout().num_features;
  const float total = buffer_[examples_at_];
  examples_summed_ += total;
  if (total > 0) {
    const float scale = 1.0f / total;
    if (by_union) {
      for (uint64_t key : union_) model_.ApplyRow(key, buffer_.data() + key * dim, scale);
    } else {
      for (uint64_t key = 0; key < features; ++key) {
        if (buffer_[touched_at_ + key] != 0.0f)
          model_.ApplyRow(key, buffer_.data() + key * dim, scale);
      }
    }
    model_.ApplyBias(buffer_.data() + bias_at_, scale);
  }
  const bool anyone_training = buffer_[training_at_] > 0;
  if (by_union) {
    // Only the rows some rank touched hold anything (and no touched flag was set by others).
    for (uint64_t key : union_) std::fill_n(buffer_.data() + key * dim, dim, 0.0f);
    for (uint64_t key : step_keys_) buffer_[touched_at_ + key] = 0.0f;
    std::fill(buffer_.begin() + bias_at_, buffer_.begin() + touched_at_, 0.0f);
    buffer_[training_at_] = 0.0f;
  } else {
    std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  }
  step_keys_.clear();
  union_.clear();
  last_anyone_training_ = anyone_training;
  return anyone_training ? absl::OkStatus() : absl::OutOfRangeError("every worker has finished");
}

absl::Status AllReduceBackend::EndIteration(int64_t clock, float examples) {
  if (auto s = CatchUp(clock); !s.ok()) return s;
  absl::Status s = ElasticRound(clock, /*training=*/true, examples);
  return absl::IsOutOfRange(s) ? absl::OkStatus() : s;  // (it trained: never out of range)
}

absl::Status AllReduceBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  catch_up_to_ = -1;  // a joiner left no batch: it answers every round as one that has none
  // Others may have more steps (partitions of unequal size): keep answering their
  // collectives, adding nothing, until a round in which nobody trained.
  for (int64_t clock = next_clock_;; ++clock) {
    absl::Status s = ElasticRound(clock, /*training=*/false, 0);
    if (absl::IsOutOfRange(s)) break;
    if (!s.ok()) return s;
  }
  if (elastic_) {
    SYNCLINE_LOG(INFO) << "all-reduce: the model holds the gradients of " << examples_summed_
                       << " examples; " << members_.size() << " workers are still in the job";
  }
  if (codec_ == nullptr && options_.rows != AllReduceOptions::Rows::kDense) {
    SYNCLINE_LOG(INFO) << "all-reduce: " << sparse_rounds_
                       << " rounds all-gathered the touched rows as (key, gradient) pairs, "
                       << dense_rounds_ << " all-reduced every row";
  }
  return absl::OkStatus();
}

namespace {
constexpr char kStateMagic[4] = {'A', 'R', 'D', '1'};
}  // namespace

std::vector<GradientCompression> AllReduceBackend::CompressionWanted() const {
  if (codec_ == nullptr) return {};
  return {GradientCompression{.table = GradientTable::kRows,
                              .codec = options_.codec,
                              .floats = bias_at_,
                              .parts = {{0, bias_at_}}}};
}

absl::StatusOr<std::string> AllReduceBackend::SaveState() const {
  std::string out;
  std::vector<float> kept;
  std::span<const float> residual = feedback_.residual();
  if (encoder_ != nullptr) {
    auto on_device = encoder_->Residual(0);
    if (!on_device.ok()) return on_device.status();
    kept = std::move(*on_device);
    residual = kept;
  }
  const int64_t header[1] = {static_cast<int64_t>(residual.size())};
  model_.Save(
      kStateMagic, header,
      std::string_view(reinterpret_cast<const char*>(residual.data()), residual.size_bytes()),
      &out);
  return out;
}

absl::Status AllReduceBackend::RestoreState(std::string_view state) {
  std::vector<int64_t> header;
  std::string_view tail;
  const size_t rows = bias_at_;
  absl::Status s = model_.Restore(
      state, kStateMagic, 1,
      [rows](std::span<const int64_t> h) {
        // A residual covers every row gradient, or is absent (uncompressed, or not yet made).
        // Any other count matches no length, and the state is refused as damaged.
        if (h[0] == 0) return size_t{0};
        return h[0] == static_cast<int64_t>(rows) ? rows * sizeof(float) : size_t{1} << 62;
      },
      "the saved worker state is not an all-reduce worker's (was the checkpoint written with "
      "parameter servers or gossip?)",
      &header, &tail);
  if (!s.ok()) return s;
  std::vector<float> residual(tail.size() / sizeof(float));
  if (!tail.empty()) std::memcpy(residual.data(), tail.data(), tail.size());
  if (encoder_ != nullptr) return encoder_->SetResidual(0, residual);
  if (residual.empty()) {
    feedback_.Reset();
  } else {
    feedback_.SetResidual(residual);
  }
  return absl::OkStatus();
}

namespace {

// A joiner's first meeting, after its own arrival: the plan events it counts may still grow
// (the arrival and those before it come after the node table), and a meeting named by a count
// the coordinator has moved past ends at once, so it meets again after the newest. *met_at:
// the count it met after. Bounded: each try by the peer timeout, the tries by the events.
absl::StatusOr<PeerMeeting> MeetAsJoiner(const JobSpec& spec, const NodeTable& table, int rank,
                                         const CollectivePlane& plane, PeerRendezvous& rendezvous,
                                         uint64_t* met_at) {
  while (true) {
    const uint64_t events = rendezvous.PlanEvents();
    absl::StatusOr<PeerMeeting> meeting = MeetPeers(spec, table, rank, plane, rendezvous, events);
    if (meeting.ok()) {
      *met_at = events;
      return meeting;
    }
    if (!absl::IsAborted(meeting.status()) || !rendezvous.Interrupted().ok() ||
        rendezvous.PlanEvents() <= events) {
      return meeting.status();
    }
  }
}

}  // namespace

ServerlessBackendFactory MakeAllReduceBackendFactory(CollectivePlane plane) {
  return [plane](const JobSpec& spec, const ParameterLayout& layout, const NodeTable& table,
                 int rank, Endpoint& endpoint, const std::string& device,
                 PeerRendezvous& rendezvous) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    CollectivePlane bounded = plane;
    bounded.max_message_bytes =
        CollectiveMessageBound(AllReduceBackend::LargestAllReduce(layout, table.MaxWorkers()));
    // A worker that joined the running job meets the members where they meet it, after its
    // own arrival; the others start over their data endpoints (or the plane).
    const bool joiner = rank >= table.num_workers;
    std::vector<int> members(table.num_workers);
    for (int w = 0; w < table.num_workers; ++w) members[w] = w;
    uint64_t met_at = rendezvous.PlanEvents();
    absl::StatusOr<std::unique_ptr<Communicator>> communicator;
    if (joiner) {
      absl::StatusOr<PeerMeeting> meeting =
          MeetAsJoiner(spec, table, rank, bounded, rendezvous, &met_at);
      if (!meeting.ok()) return meeting.status();
      communicator = std::move(meeting->communicator);
      members = std::move(meeting->members);
    } else {
      communicator = ConnectWorkersOfGeneration(spec, table, rank, endpoint, bounded, rendezvous);
    }
    if (!communicator.ok()) return communicator.status();
    // An elastic collective keeps its dense all-reduces on the CPU: NCCL cannot lose or gain a
    // rank.
    const bool elastic = spec.sync.allreduce() &&
                         (MinWorkers(spec) < spec.workers || MaxWorkers(spec) > spec.workers);
    auto dense = elastic ? absl::StatusOr<DensePlane>(DensePlane{})
                         : ConnectDenseForWorker(spec, **communicator, device);
    if (!dense.ok()) return dense.status();
    AllReduceOptions o;
    o.algorithm = AlgorithmOf(spec.sync.algorithm);
    o.wire = spec.training.codec.kind == CodecKind::kFp16 ? WireType::kFloat16 : WireType::kFloat32;
    o.codec = spec.training.codec;
    switch (spec.sync.allreduce_rows) {
      case AllReduceRows::kAuto:
        o.rows = AllReduceOptions::Rows::kAuto;
        break;
      case AllReduceRows::kDense:
        o.rows = AllReduceOptions::Rows::kDense;
        break;
      case AllReduceRows::kPairs:
        o.rows = AllReduceOptions::Rows::kSparse;
        break;
    }
    o.optimizer.kind = spec.training.optimizer;
    o.optimizer.learning_rate = static_cast<float>(spec.training.learning_rate);
    o.optimizer.l2 = static_cast<float>(spec.training.l2);
    auto backend =
        std::make_unique<AllReduceBackend>(std::move(*communicator), o, std::move(dense->nccl));
    if (elastic) {
      ElasticOptions e;
      // The factory's arguments outlive the backend (worker/worker_node.cc's Link).
      e.meet = [&spec, &table, rank, bounded, &rendezvous](uint64_t plan_events) {
        return MeetPeers(spec, table, rank, bounded, rendezvous, plan_events);
      };
      e.plan_events = [&rendezvous] { return rendezvous.PlanEvents(); };
      e.interrupted = [&rendezvous] { return rendezvous.Interrupted(); };
      e.notice_timeout = table.heartbeat_timeout + absl::Seconds(2);
      absl::Status made = joiner
                              ? backend->MakeElasticJoiner(std::move(e), std::move(members), met_at)
                              : backend->MakeElastic(std::move(e), std::move(members), met_at);
      if (!made.ok()) return made;
    } else if (joiner) {
      return absl::FailedPreconditionError(
          "a worker joined an all-reduce that takes no joins (no --max-workers above --workers)");
    }
    return std::unique_ptr<SyncBackend>(std::move(backend));
  };
}

}  // namespace syncline
