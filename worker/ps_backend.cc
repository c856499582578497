#include "worker/ps_backend.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_format.h"
#include "core/sharding.h"

namespace syncline {

PsBackend::PsBackend(KVClient* client, absl::Duration request_timeout, CodecSpec codec)
    : client_(client), request_timeout_(request_timeout), codec_spec_(codec) {
  if (codec.kind != CodecKind::kNone) codec_ = Codec::Create(codec);
}

absl::Status PsBackend::Init(const ParameterLayout& layout) {
  if (codec_ != nullptr && !layout.dense_rows && codec_spec_.kind != CodecKind::kFp16) {
    return absl::InvalidArgumentError(
        "top-K and sign1 compression need dense rows (sparse rows may be pushed as fp16)");
  }
  if (layout.dense_rows && layout.num_features == 0) {
    return absl::InvalidArgumentError("dense rows need the number of features");
  }
  layout_ = layout;
  feedback_.assign(client_->num_servers(), ErrorFeedback());
  blocks_.assign(client_->num_servers(), {});
  TableConfig rows;
  rows.id = kRowsTable;
  rows.dense = layout.dense_rows;
  rows.num_keys = layout.num_features;
  rows.dim = layout.row_dim;
  rows.optimizer = layout.optimizer;
  rows.seed = layout.seed;
  rows.init_scale = layout.row_init_scale;
  if (auto s = client_->DeclareTable(rows, Deadline()); !s.ok()) return s;
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
  auto row = layout_.dense_rows
                 ? client_->PullDenseFrames(kRowsTable, 0, layout_.num_features * dim, clock,
                                            &table_pieces_)
                 : client_->Pull(kRowsTable, keys, rows, clock);
  if (!row.ok()) return row.status();
  auto b = client_->PullDense(kBiasTable, 0, bias, clock);
  if (!b.ok()) return b.status();
  *row_ticket = *row;
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
  if (auto s = client_->Wait(bias_ticket, Deadline()); !s.ok()) return s;
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
  gradient_.assign(layout_.num_features * dim, 0.0f);
  for (size_t i = 0; i < keys.size(); ++i) {
    std::copy_n(row_grads.data() + i * dim, dim, gradient_.data() + keys[i] * dim);
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
    std::span<const float> part(gradient_.data() + range.begin * dim, range.size() * dim);
    feedback_[s].Compress(*codec_, part, &blocks_[s]);
    auto t = client_->PushDenseEncoded(kRowsTable, range.begin, range.end,
                                       static_cast<uint8_t>(codec_spec_.kind), blocks_[s], clock,
                                       examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
  }
  return absl::OkStatus();
}

absl::Status PsBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                               std::span<const float> row_grads, std::span<const float> bias_grad,
                               float examples) {
  if (layout_.dense_rows) {
    if (auto s = PushDenseRows(clock, keys, row_grads, examples); !s.ok()) return s;
  } else if (!keys.empty()) {
    // Sparse rows: fp16 needs no residual, so it is the one codec they take.
    auto t = codec_spec_.kind == CodecKind::kFp16
                 ? client_->PushHalf(kRowsTable, keys, row_grads, clock, examples)
                 : client_->Push(kRowsTable, keys, row_grads, clock, examples);
    if (!t.ok()) return t.status();
    pending_pushes_.push_back(*t);
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
  return client_->Finish(Deadline());
}

// State: a u32 shard count, then per shard a u64 float count and the residual's floats (host
// byte order; the worker's checkpoint file carries a CRC32C over all of it).
absl::StatusOr<std::string> PsBackend::SaveState() const {
  std::string out;
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const auto shards = static_cast<uint32_t>(feedback_.size());
  put(&shards, 4);
  for (const ErrorFeedback& f : feedback_) {
    const uint64_t n = f.residual().size();
    put(&n, 8);
    put(f.residual().data(), n * sizeof(float));
  }
  return out;
}

absl::Status PsBackend::RestoreState(std::string_view state) {
  StateReader in(state);
  uint32_t shards = 0;
  if (!in.Read(&shards, 4) || shards != feedback_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("the saved worker state has residuals for %d shards, this job has %d",
                        shards, feedback_.size()));
  }
  const int servers = static_cast<int>(feedback_.size());
  for (int s = 0; s < servers; ++s) {
    ErrorFeedback& f = feedback_[s];
    uint64_t n = 0;
    if (!in.Read(&n, 8) || n > in.left() / sizeof(float)) {
      return absl::DataLossError("the saved worker state is truncated");
    }
    // A residual is empty (no compressed push yet) or covers the shard's range of dense rows.
    const uint64_t expected =
        DenseShardRange(layout_.num_features, s, servers).size() * layout_.row_dim;
    if (n != 0 && (!layout_.dense_rows || n != expected)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "the saved residual of shard %d has %d values; this job's shard has %d (was the "
          "checkpoint written with other --compress or model settings?)",
          s, n, layout_.dense_rows ? expected : 0));
    }
    std::vector<float> residual(n);
    in.Read(residual.data(), n * sizeof(float));
    f.SetResidual(residual);
  }
  if (in.left() != 0) return absl::DataLossError("the saved worker state has trailing bytes");
  return absl::OkStatus();
}

}  // namespace syncline
