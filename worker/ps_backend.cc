#include "worker/ps_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/sharding.h"

namespace syncline {

PsBackend::PsBackend(KVClient* client, absl::Duration request_timeout, CodecSpec codec,
                     size_t residual_rows)
    : client_(client),
      request_timeout_(request_timeout),
      codec_spec_(codec),
      residual_rows_(residual_rows) {
  if (codec.kind != CodecKind::kNone) codec_ = Codec::Create(codec);
}

absl::Status PsBackend::Init(const ParameterLayout& layout) {
  if (layout.dense_rows && layout.num_features == 0) {
    return absl::InvalidArgumentError("dense rows need the number of features");
  }
  layout_ = layout;
  const int servers = client_->num_servers();
  feedback_.assign(servers, ErrorFeedback());
  blocks_.assign(servers, {});
  sparse_feedback_.clear();
  // The dense layers (a ctr model's MLP) are compressed as well when they are large enough;
  // a linear model's bias costs less as it is.
  bias_feedback_.clear();
  if (codec_ != nullptr && bias_on_servers_ && layout.bias_dim >= kMinCompressedDenseValues) {
    bias_feedback_.assign(servers, ErrorFeedback());
    bias_blocks_.assign(servers, {});
  }
  if (codec_ != nullptr && !layout.dense_rows && codec_spec_.kind != CodecKind::kFp16) {
    for (int s = 0; s < servers; ++s) sparse_feedback_.emplace_back(layout.row_dim, residual_rows_);
    sparse_pushes_.assign(servers, {});
  }
  TableConfig rows;
  rows.id = kRowsTable;
  rows.dense = layout.dense_rows;
  rows.num_keys = layout.num_features;
  rows.dim = layout.row_dim;
  rows.optimizer = layout.optimizer;
  rows.seed = layout.seed;
  rows.init_scale = layout.row_init_scale;
  if (auto s = client_->DeclareTable(rows, Deadline()); !s.ok()) return s;
  if (!bias_on_servers_) return absl::OkStatus();
  TableConfig bias;
  bias.id = kBiasTable;
  bias.dense = true;
  bias.num_keys = layout.bias_dim;
  bias.dim = 1;
  bias.optimizer = layout.optimizer;
  bias.optimizer.l2 = 0;  // the bias is not regularised
  bias.seed = layout.seed;
  bias.init_scale = layout.bias_init_scale;
  return client_->DeclareTable(bias, Deadline());
}

absl::Status PsBackend::WaitForPushes() {
  absl::Status status;
  for (Ticket t : pending_pushes_) {
    if (auto s = client_->Wait(t, Deadline()); !s.ok() && status.ok()) status = s;
  }
  pending_pushes_.clear();
  return status;
}

absl::Status PsBackend::StartRead(int64_t clock, std::span<const uint64_t> keys,
                                  std::span<float> rows, std::span<float> bias, Ticket* row_ticket,
                                  Ticket* bias_ticket) {
  const uint32_t dim = layout_.row_dim;
  if (pull_decoder_ != nullptr && !layout_.dense_rows && client_->CompressesPulls(clock)) {
    pull_decoder_->BeginRead(rows);
  }
  auto row = layout_.dense_rows
                 ? client_->PullDenseFrames(kRowsTable, 0, layout_.num_features * dim, clock,
                                            &table_pieces_)
                 : client_->Pull(kRowsTable, keys, rows, clock);
  if (!row.ok()) return row.status();
  *row_ticket = *row;
  *bias_ticket = 0;
  if (!bias_on_servers_) return absl::OkStatus();
  auto b = client_->PullDense(kBiasTable, 0, bias, clock);
  if (!b.ok()) return b.status();
  *bias_ticket = *b;
  return absl::OkStatus();
}

bool PsBackend::ReadAhead(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                          std::span<float> bias) {
  if (layout_.dense_rows || ahead_.active) return false;
  ahead_ = Ahead{.active = true,
                 .clock = clock,
                 .keys = keys.data(),
                 .rows = rows.data(),
                 .bias = bias.data()};
  ahead_.status = StartRead(clock, keys, rows, bias, &ahead_.row_ticket, &ahead_.bias_ticket);
  return true;
}

absl::Status PsBackend::Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                             std::span<float> bias) {
  Ticket row_ticket = 0, bias_ticket = 0;
  if (ahead_.active) {
    ahead_.active = false;
    if (ahead_.clock != clock || ahead_.keys != keys.data() || ahead_.rows != rows.data() ||
        ahead_.bias != bias.data()) {
      return absl::InternalError(
          absl::StrFormat("a read of clock %d follows a read-ahead of clock %d for other buffers",
                          clock, ahead_.clock));
    }
    if (!ahead_.status.ok()) return ahead_.status;
    row_ticket = ahead_.row_ticket;
    bias_ticket = ahead_.bias_ticket;
  } else if (auto s = StartRead(clock, keys, rows, bias, &row_ticket, &bias_ticket); !s.ok()) {
    return s;
  }
  // Acknowledgements of the last pushes arrive before these replies (same connection, in
  // order), or soon after a read-ahead's; waiting for them here costs nothing extra.
  if (auto s = WaitForPushes(); !s.ok()) return s;
  if (auto s = client_->Wait(row_ticket, Deadline()); !s.ok()) return s;
  if (bias_on_servers_) {
    if (auto s = client_->Wait(bias_ticket, Deadline()); !s.ok()) return s;
  }
  if (layout_.dense_rows) return GatherDenseRows(keys, rows);
  return absl::OkStatus();
}

absl::Status PsBackend::GatherDenseRows(std::span<const uint64_t> keys, std::span<float> rows) {
  const uint32_t dim = layout_.row_dim;
  // Pieces hold whole rows, so a row lies in one piece: the last one starting at or before it.
  std::vector<std::span<const float>> pieces;
  std::vector<uint64_t> starts;  // first value of each piece
  uint64_t at = 0;
  for (Frame& f : table_pieces_) {
    auto values = f.As<float>();
    if (!values.ok()) return values.status();
    pieces.push_back(*values);
    starts.push_back(at);
    at += values->size();
  }
  absl::Status status;
  for (size_t i = 0; i < keys.size() && status.ok(); ++i) {
    if (keys[i] >= layout_.num_features) {
      status = absl::InvalidArgumentError(absl::StrFormat(
          "feature %d is beyond the %d features of the dense rows", keys[i], layout_.num_features));
      break;
    }
    const uint64_t first = keys[i] * dim;
    const size_t p = std::upper_bound(starts.begin(), starts.end(), first) - starts.begin() - 1;
    std::copy_n(pieces[p].data() + (first - starts[p]), dim, rows.data() + i * dim);
  }
  table_pieces_.clear();  // frees the received bytes (in-process: unpins the servers' blocks)
  return status;
}

absl::Status PsBackend::PushDenseRows(int64_t clock, std::span<const uint64_t> keys,
                                      std::span<const float> row_grads, float examples) {
  const uint32_t dim = layout_.row_dim;
  // With an encoder, the model kept the row gradients and encodes each shard's part.
  if (encoder_ == nullptr) {
    gradient_.assign(layout_.num_features * dim, 0.0f);
    for (size_t i = 0; i < keys.size(); ++i) {
      std::copy_n(row_grads.data() + i * dim, dim, gradient_.data() + keys[i] * dim);
    }
  }
  if (codec_ == nullptr) {
    auto t = client_->PushDense(kRowsTable, 0, gradient_, clock, examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
    return absl::OkStatus();
  }
  const int n = client_->num_servers();
  for (int s = 0; s < n; ++s) {
    const KeyRange range = DenseShardRange(layout_.num_features, s, n);
    if (range.size() == 0) continue;
    {
      ScopedTime timed(&codec_time_);
      if (encoder_ != nullptr) {
        if (auto e = encoder_->Compress(s, &blocks_[s]); !e.ok()) return e;
      } else {
        std::span<const float> part(gradient_.data() + range.begin * dim, range.size() * dim);
        feedback_[s].Compress(*codec_, part, &blocks_[s]);
      }
    }
    auto t = client_->PushDenseEncoded(kRowsTable, range.begin, range.end,
                                       static_cast<uint8_t>(codec_spec_.kind), blocks_[s], clock,
                                       examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
  }
  return absl::OkStatus();
}

absl::Status PsBackend::PushSparseRows(int64_t clock, std::span<const uint64_t> keys,
                                       std::span<const float> row_grads, float examples) {
  const uint32_t dim = layout_.row_dim;
  const int n = client_->num_servers();
  // Keys ascend, so every shard's share of them does too.
  std::vector<std::vector<uint64_t>> shard_keys(n);
  std::vector<std::vector<float>> shard_grads(n);
  // With a row encoder, the rows' positions among the step's (the gradients are the model's).
  std::vector<std::vector<uint32_t>> shard_positions(row_encoder_ != nullptr ? n : 0);
  for (size_t i = 0; i < keys.size(); ++i) {
    const int s = client_->SparseServerOf(keys[i]);
    shard_keys[s].push_back(keys[i]);
    if (row_encoder_ != nullptr) {
      shard_positions[s].push_back(static_cast<uint32_t>(i));
    } else {
      shard_grads[s].insert(shard_grads[s].end(), row_grads.data() + i * dim,
                            row_grads.data() + (i + 1) * dim);
    }
  }
  const bool last = clock == final_clock_;
  for (int s = 0; s < n; ++s) {
    SparsePush& push = sparse_pushes_[s];
    if (shard_keys[s].empty() && !last) continue;
    {
      ScopedTime timed(&codec_time_);
      if (shard_keys[s].empty()) {
        push = SparsePush{};
      } else if (row_encoder_ != nullptr) {
        if (auto e = row_encoder_->Compress(s, shard_keys[s], shard_positions[s], examples, &push);
            !e.ok()) {
          return e;
        }
      } else {
        sparse_feedback_[s].Compress(*codec_, shard_keys[s], shard_grads[s], &push, examples);
      }
      if (last && row_encoder_ != nullptr) {
        if (auto e = row_encoder_->Drain(s, examples, &push); !e.ok()) return e;
      } else if (last) {
        sparse_feedback_[s].Drain(&push, examples);
      }
    }
    if (auto st = client_->PushSparse(kRowsTable, s, dim, push, clock, examples, &pending_pushes_);
        !st.ok()) {
      return st;
    }
  }
  return absl::OkStatus();
}

absl::Status PsBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                               std::span<const float> row_grads, std::span<const float> bias_grad,
                               float examples) {
  if (layout_.dense_rows) {
    if (auto s = PushDenseRows(clock, keys, row_grads, examples); !s.ok()) return s;
  } else if ((!keys.empty() || clock == final_clock_) && sparse_feedback()) {
    if (auto s = PushSparseRows(clock, keys, row_grads, examples); !s.ok()) return s;
  } else if (!keys.empty()) {
    // Sparse rows as they are, or as fp16 (which keeps no residual).
    auto t = codec_spec_.kind == CodecKind::kFp16
                 ? client_->PushHalf(kRowsTable, keys, row_grads, clock, examples)
                 : client_->Push(kRowsTable, keys, row_grads, clock, examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
  }
  if (!bias_on_servers_) return absl::OkStatus();
  if (bias_compressed() && clock == final_clock_) {
    // The last clock sends the dense layers' residuals with their gradient, uncompressed.
    bias_final_.assign(bias_grad.begin(), bias_grad.end());
    const int n = client_->num_servers();
    for (int s = 0; s < n; ++s) {
      const KeyRange range = DenseShardRange(layout_.bias_dim, s, n);
      if (bias_encoder_ != nullptr) {
        // The model kept the gradient: the encoder hands over gradient + residual.
        std::vector<float> held;
        if (auto e = bias_encoder_->Drain(s, &held); !e.ok()) return e;
        std::copy(held.begin(), held.end(), bias_final_.begin() + range.begin);
        continue;
      }
      const auto residual = bias_feedback_[s].residual();
      if (residual.size() == range.size()) {
        for (size_t i = 0; i < range.size(); ++i) bias_final_[range.begin + i] += residual[i];
      }
      bias_feedback_[s].Reset();
    }
    auto t = client_->PushDense(kBiasTable, 0, bias_final_, clock, examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
    return absl::OkStatus();
  }
  if (bias_compressed()) {
    const int n = client_->num_servers();
    for (int s = 0; s < n; ++s) {
      const KeyRange range = DenseShardRange(layout_.bias_dim, s, n);
      if (range.size() == 0) continue;
      {
        ScopedTime timed(&codec_time_);
        if (bias_encoder_ != nullptr) {
          if (auto e = bias_encoder_->Compress(s, &bias_blocks_[s]); !e.ok()) return e;
        } else {
          bias_feedback_[s].Compress(*codec_, bias_grad.subspan(range.begin, range.size()),
                                     &bias_blocks_[s]);
        }
      }
      auto t = client_->PushDenseEncoded(kBiasTable, range.begin, range.end,
                                         static_cast<uint8_t>(codec_spec_.kind), bias_blocks_[s],
                                         clock, examples);
      if (!t.ok()) return t.status();
      pending_pushes_.push_back(*t);
    }
    return absl::OkStatus();
  }
  auto t = client_->PushDense(kBiasTable, 0, bias_grad, clock, examples);
  if (!t.ok()) return t.status();
  pending_pushes_.push_back(*t);
  return absl::OkStatus();
}

absl::Status PsBackend::EndIteration(int64_t clock, float examples) {
  return client_->Clock(clock + 1, examples);
}

void PsBackend::Settle(absl::Duration max_wait) {
  const absl::Time deadline = absl::Now() + max_wait;
  for (Ticket t : pending_pushes_) (void)client_->Wait(t, deadline);
  pending_pushes_.clear();
}

absl::Status PsBackend::Finish() {
  if (auto s = WaitForPushes(); !s.ok()) return s;
  if (sparse_feedback()) {
    uint64_t held = 0, flushed = 0, drained = 0;
    for (const SparseErrorFeedback& f : sparse_feedback_) {
      held += f.residuals().size();
      flushed += f.rows_flushed();
      drained += f.rows_drained();
    }
    if (row_encoder_ != nullptr) {
      const RowGradientEncoder::Counts counts = row_encoder_->counts();
      held = counts.held;
      flushed = counts.flushed;
      drained = counts.drained;
    }
    SYNCLINE_LOG(INFO) << "compressed pushes: " << flushed
                       << " rows flushed whole to stay within --residual-rows " << residual_rows_
                       << " per server; " << drained << " rows of residual sent whole at the last "
                       << "clock, " << held << " still held";
  }
  return client_->Finish(Deadline());
}

namespace {

void SaveResiduals(const std::vector<ErrorFeedback>& feedback, std::string* out) {
  const auto put = [out](const void* p, size_t n) { out->append(static_cast<const char*>(p), n); };
  const auto shards = static_cast<uint32_t>(feedback.size());
  put(&shards, 4);
  for (const ErrorFeedback& f : feedback) {
    const uint64_t n = f.residual().size();
    put(&n, 8);
    put(f.residual().data(), n * sizeof(float));
  }
}

// Per shard residuals of a dense table of num_keys x dim (num_keys 0: none may be held).
absl::Status RestoreResiduals(StateReader& in, std::vector<ErrorFeedback>& feedback,
                              uint64_t num_keys, uint32_t dim, const char* what) {
  uint32_t shards = 0;
  if (!in.Read(&shards, 4) || shards != feedback.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the saved worker state has %s residuals for %d shards, this job has %d",
                        what, shards, feedback.size()));
  }
  const int servers = static_cast<int>(feedback.size());
  for (int s = 0; s < servers; ++s) {
    uint64_t n = 0;
    if (!in.Read(&n, 8) || n > in.left() / sizeof(float)) {
      return absl::DataLossError("the saved worker state is truncated");
    }
    // A residual is empty (no compressed push yet) or covers the shard's range.
    const uint64_t expected = DenseShardRange(num_keys, s, servers).size() * dim;
    if (n != 0 && n != expected) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the saved %s residual of shard %d has %d values; this job's shard has %d (was the "
          "checkpoint written with other --compress or model settings?)",
          what, s, n, expected));
    }
    std::vector<float> residual(n);
    in.Read(residual.data(), n * sizeof(float));
    feedback[s].SetResidual(residual);
  }
  return absl::OkStatus();
}

// The residuals an encoder holds, one part a shard, as the ErrorFeedback SaveResiduals writes.
absl::StatusOr<std::vector<ErrorFeedback>> HeldResiduals(const GradientEncoder& encoder,
                                                         size_t shards) {
  std::vector<ErrorFeedback> held(shards);
  for (size_t s = 0; s < shards; ++s) {
    absl::StatusOr<std::vector<float>> residual = encoder.Residual(s);
    if (!residual.ok()) return residual.status();
    held[s].SetResidual(*residual);
  }
  return held;
}

// Moves restored residuals into the encoder that keeps the gradients.
absl::Status GiveResiduals(std::vector<ErrorFeedback>& feedback, GradientEncoder& encoder) {
  for (size_t s = 0; s < feedback.size(); ++s) {
    if (auto e = encoder.SetResidual(s, feedback[s].residual()); !e.ok()) return e;
    feedback[s].Reset();
  }
  return absl::OkStatus();
}

}  // namespace

// State: the rows' residuals, then (compressed dense layers) the bias table's. Dense residuals:
// a u32 shard count, then per shard a u64 float count and the residual's floats (host byte
// order; the worker's checkpoint file carries a CRC32C over all of it). Sparse rows: a u32
// shard count, then per shard a u64 push count and a u64 row count, then the rows oldest
// first, each a u64 key, a u64 stamp, a u32 held count, a float sum of squares and row_dim
// floats.
absl::StatusOr<std::string> PsBackend::SaveState() const {
  std::string out;
  if (sparse_feedback()) {
    const auto put = [&out](const void* p, size_t n) {
      out.append(static_cast<const char*>(p), n);
    };
    const auto shards = static_cast<uint32_t>(sparse_feedback_.size());
    put(&shards, 4);
    for (uint32_t s = 0; s < shards; ++s) {
      const SparseErrorFeedback* f = &sparse_feedback_[s];
      // A row encoder holds the residuals: a copy of its table, in the CPU class's form.
      SparseErrorFeedback held(layout_.row_dim, 0);
      if (row_encoder_ != nullptr) {
        uint64_t pushes = 0;
        if (auto e = row_encoder_->CopyResiduals(s, &held.mutable_residuals(), &pushes); !e.ok()) {
          return e;
        }
        held.set_pushes(pushes);
        f = &held;
      }
      const uint64_t pushes = f->pushes(), rows = f->residuals().size();
      put(&pushes, 8);
      put(&rows, 8);
      f->residuals().ForEach(
          [&](uint64_t key, uint64_t stamp, const RowMeta& meta, const float* row) {
            put(&key, 8);
            put(&stamp, 8);
            put(&meta.held, 4);
            put(&meta.squares, 4);
            put(row, layout_.row_dim * sizeof(float));
          });
    }
  } else if (encoder_ != nullptr) {
    absl::StatusOr<std::vector<ErrorFeedback>> held = HeldResiduals(*encoder_, feedback_.size());
    if (!held.ok()) return held.status();
    SaveResiduals(*held, &out);
  } else {
    SaveResiduals(feedback_, &out);
  }
  if (bias_encoder_ != nullptr) {
    absl::StatusOr<std::vector<ErrorFeedback>> held =
        HeldResiduals(*bias_encoder_, bias_feedback_.size());
    if (!held.ok()) return held.status();
    SaveResiduals(*held, &out);
  } else if (bias_compressed()) {
    SaveResiduals(bias_feedback_, &out);
  }
  return out;
}

std::optional<PullDecoding> PsBackend::PullDecodingWanted() const {
  if (layout_.dense_rows || client_->pull_codec().kind == CodecKind::kNone) return std::nullopt;
  return PullDecoding{.codec = client_->pull_codec().kind, .dim = layout_.row_dim};
}

void PsBackend::SetPullDecoder(PulledRowDecoder* decoder) {
  pull_decoder_ = decoder;
  client_->SetPullDecoder(kRowsTable, decoder);
}

std::optional<RowCompression> PsBackend::RowCompressionWanted() const {
  if (!sparse_feedback()) return std::nullopt;
  return RowCompression{.codec = codec_spec_,
                        .dim = layout_.row_dim,
                        .shards = sparse_feedback_.size(),
                        .residual_rows = residual_rows_};
}

std::vector<GradientCompression> PsBackend::CompressionWanted() const {
  std::vector<GradientCompression> wanted;
  const int n = client_->num_servers();
  // One part a shard of a dense table of num_keys x dim.
  auto sharded = [&](GradientTable table, uint64_t num_keys, uint32_t dim) {
    GradientCompression want{.table = table, .codec = codec_spec_, .floats = num_keys * dim};
    for (int s = 0; s < n; ++s) {
      const KeyRange range = DenseShardRange(num_keys, s, n);
      want.parts.push_back({range.begin * dim, range.end * dim});
    }
    wanted.push_back(std::move(want));
  };
  if (layout_.dense_rows && codec_ != nullptr) {
    sharded(GradientTable::kRows, layout_.num_features, layout_.row_dim);
  }
  if (bias_compressed()) sharded(GradientTable::kDense, layout_.bias_dim, 1);
  return wanted;
}

absl::Status PsBackend::RestoreState(std::string_view state) {
  StateReader in(state);
  if (sparse_feedback()) {
    uint32_t shards = 0;
    if (!in.Read(&shards, 4) || shards != sparse_feedback_.size()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("the saved worker state has residuals for %d shards, this job has %d",
                          shards, sparse_feedback_.size()));
    }
    if (auto s = RestoreSparseState(in); !s.ok()) return s;
  } else if (auto s = RestoreResiduals(in, feedback_, layout_.dense_rows ? layout_.num_features : 0,
                                       layout_.row_dim, "row");
             !s.ok()) {
    return s;
  } else if (encoder_ != nullptr) {
    // The residuals go where the gradients are kept.
    if (auto e = GiveResiduals(feedback_, *encoder_); !e.ok()) return e;
  }
  if (bias_compressed()) {
    if (auto s = RestoreResiduals(in, bias_feedback_, layout_.bias_dim, 1, "dense-layer");
        !s.ok()) {
      return s;
    }
    if (bias_encoder_ != nullptr) {
      if (auto e = GiveResiduals(bias_feedback_, *bias_encoder_); !e.ok()) {
        return e;
      }
    }
  }
  if (in.left() != 0) return absl::DataLossError("the saved worker state has trailing bytes");
  return absl::OkStatus();
}

absl::Status PsBackend::RestoreSparseState(StateReader& in) {
  const uint32_t dim = layout_.row_dim;
  const size_t row_bytes = 24 + size_t{dim} * sizeof(float);
  for (size_t s = 0; s < sparse_feedback_.size(); ++s) {
    SparseErrorFeedback& f = sparse_feedback_[s];
    uint64_t pushes = 0, rows = 0;
    if (!in.Read(&pushes, 8) || !in.Read(&rows, 8) || rows > in.left() / row_bytes) {
      return absl::DataLossError(absl::StrFormat(
          "the saved residual rows of shard %d are truncated (was the checkpoint written with "
          "other --compress or model settings?)",
          s));
    }
    RowTable& table = f.mutable_residuals();
    table.Clear();
    uint64_t last_stamp = 0;
    for (uint64_t r = 0; r < rows; ++r) {
      uint64_t key = 0, stamp = 0;
      RowMeta meta;
      in.Read(&key, 8);
      in.Read(&stamp, 8);
      in.Read(&meta.held, 4);
      in.Read(&meta.squares, 4);
      if (stamp < last_stamp || stamp > pushes || meta.held > stamp ||
          !(meta.squares >= 0 && std::isfinite(meta.squares)) || table.Contains(key) ||
          client_->SparseServerOf(key) != static_cast<int>(s)) {
        return absl::DataLossError(absl::StrFormat(
            "the saved residual row %d of shard %d is out of order, repeated, of another shard "
            "or holds more pushes than were made",
            key, s));
      }
      last_stamp = stamp;
      in.Read(table.Touch(key, stamp, meta), dim * sizeof(float));
    }
    f.set_pushes(pushes);
    if (row_encoder_ != nullptr) {
      // The residuals go where the gradients are kept.
      if (auto e = row_encoder_->SetResiduals(s, table, pushes); !e.ok()) return e;
      table.Clear();
    }
  }
  return absl::OkStatus();
}

}  // namespace syncline
