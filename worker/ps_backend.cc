#include "worker/ps_backend.h"

namespace syncline {

PsBackend::PsBackend(KVClient* client, absl::Duration request_timeout)
    : client_(client), request_timeout_(request_timeout) {}

absl::Status PsBackend::Init(const ParameterLayout& layout) {
  TableConfig rows;
  rows.id = kRowsTable;
  rows.dense = false;
  rows.num_keys = layout.num_features;
  rows.dim = layout.row_dim;
  rows.optimizer = layout.optimizer;
  rows.seed = layout.seed;
  if (auto s = client_->DeclareTable(rows, Deadline()); !s.ok()) return s;
  TableConfig bias;
  bias.id = kBiasTable;
  bias.dense = true;
  bias.num_keys = layout.bias_dim;
  bias.dim = 1;
  bias.optimizer = layout.optimizer;
  bias.optimizer.l2 = 0;  // the bias is not regularised
  bias.seed = layout.seed;
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

absl::Status PsBackend::Read(int64_t clock, std::span<const uint64_t> keys, std::span<float> rows,
                             std::span<float> bias) {
  auto row_ticket = client_->Pull(kRowsTable, keys, rows, clock);
  if (!row_ticket.ok()) return row_ticket.status();
  auto bias_ticket = client_->PullDense(kBiasTable, 0, bias, clock);
  if (!bias_ticket.ok()) return bias_ticket.status();
  // Acknowledgements of the last pushes arrive before these replies (same connection, in
  // order), so waiting for them here costs nothing extra.
  if (auto s = WaitForPushes(); !s.ok()) return s;
  if (auto s = client_->Wait(*row_ticket, Deadline()); !s.ok()) return s;
  return client_->Wait(*bias_ticket, Deadline());
}

absl::Status PsBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                               std::span<const float> row_grads, std::span<const float> bias_grad,
                               float examples) {
  if (!keys.empty()) {
    auto t = client_->Push(kRowsTable, keys, row_grads, clock, examples);
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

absl::Status PsBackend::Finish() {
  if (auto s = WaitForPushes(); !s.ok()) return s;
  return client_->Finish(Deadline());
}

}  // namespace syncline
