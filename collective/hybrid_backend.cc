#include "collective/hybrid_backend.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collective/allreduce_backend.h"
#include "core/crc32c.h"
#include "core/log.h"
#include "core/table_config.h"
#include "worker/ps_backend.h"

namespace syncline {

HybridBackend::HybridBackend(std::unique_ptr<SyncBackend> rows,
                             std::unique_ptr<Communicator> communicator, Algorithm algorithm,
                             std::unique_ptr<DenseCollective> dense)
    : rows_(std::move(rows)),
      communicator_(std::move(communicator)),
      owned_dense_collective_(std::move(dense)),
      dense_collective_(owned_dense_collective_ != nullptr ? owned_dense_collective_.get()
                                                           : communicator_.get()),
      algorithm_(algorithm) {}

absl::Status HybridBackend::Init(const ParameterLayout& layout) {
  if (layout.bias_dim == 0) {
    return absl::InvalidArgumentError("hybrid: the model has no dense layers to all-reduce");
  }
  if (auto s = rows_->Init(layout); !s.ok()) return s;
  optimizer_ = layout.optimizer;
  optimizer_.l2 = 0;  // the bias is not regularised, as on the servers
  // The servers' bias table, as PsBackend would declare it: the same initial values.
  TableConfig bias;
  bias.id = PsBackend::kBiasTable;
  bias.dense = true;
  bias.num_keys = layout.bias_dim;
  bias.dim = 1;
  bias.optimizer = optimizer_;
  bias.seed = layout.seed;
  bias.init_scale = layout.bias_init_scale;
  dense_.resize(layout.bias_dim);
  for (uint32_t k = 0; k < layout.bias_dim; ++k) InitialRow(bias, k, &dense_[k]);
  state_.assign(static_cast<size_t>(layout.bias_dim) * StateFloatsPerWeight(optimizer_.kind), 0.0f);
  steps_ = 0;
  buffer_.assign(layout.bias_dim + 2, 0.0f);
  return absl::OkStatus();
}

absl::Status HybridBackend::Read(int64_t clock, std::span<const uint64_t> keys,
                                 std::span<float> rows, std::span<float> bias) {
  if (bias.size() != dense_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "hybrid read: %d dense values asked for, the model has %d", bias.size(), dense_.size()));
  }
  if (auto s = rows_->Read(clock, keys, rows, bias); !s.ok()) return s;
  std::copy(dense_.begin(), dense_.end(), bias.begin());
  return absl::OkStatus();
}

absl::Status HybridBackend::Update(int64_t clock, std::span<const uint64_t> keys,
                                   std::span<const float> row_grads,
                                   std::span<const float> bias_grad, float examples) {
  if (bias_grad.size() != dense_.size()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("hybrid update: %d dense gradient values, the model has %d",
                        bias_grad.size(), dense_.size()));
  }
  if (auto s = rows_->Update(clock, keys, row_grads, bias_grad, examples); !s.ok()) return s;
  for (size_t j = 0; j < bias_grad.size(); ++j) buffer_[j] += bias_grad[j];
  return absl::OkStatus();
}

absl::Status HybridBackend::Round(bool training, float examples) {
  const size_t n = dense_.size();
  buffer_[n] = training ? examples : 0.0f;
  buffer_[n + 1] = training ? 1.0f : 0.0f;
  if (auto s =
          dense_collective_->AllReduce(std::span<float>(buffer_), algorithm_, WireType::kFloat32);
      !s.ok()) {
    return s;
  }
  const float total = buffer_[n];
  if (total > 0) {
    ApplyUpdate(optimizer_, dense_.data(), state_.empty() ? nullptr : state_.data(), buffer_.data(),
                1.0f / total, n, ++steps_);
  }
  const bool anyone_training = buffer_[n + 1] > 0;
  std::fill(buffer_.begin(), buffer_.end(), 0.0f);
  return anyone_training ? absl::OkStatus() : absl::OutOfRangeError("every worker has finished");
}

absl::Status HybridBackend::EndIteration(int64_t clock, float examples) {
  if (auto s = rows_->EndIteration(clock, examples); !s.ok()) return s;
  absl::Status s = Round(/*training=*/true, examples);
  return absl::IsOutOfRange(s) ? absl::OkStatus() : s;  // (it trained: never out of range)
}

absl::Status HybridBackend::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  // The servers first: under SSP a finished worker must not hold the others' reads back.
  if (auto s = rows_->Finish(); !s.ok()) return s;
  while (true) {
    absl::Status s = Round(/*training=*/false, 0);
    if (absl::IsOutOfRange(s)) break;
    if (!s.ok()) return s;
  }
  // Every worker applied the same sums in the same order: the replicas are equal to the bit,
  // which this line lets a reader (and a test) check across the workers' logs.
  SYNCLINE_LOG(INFO) << absl::StrFormat(
      "hybrid: dense layers after %d all-reduced steps: %d values, crc32c %08x", steps_,
      dense_.size(), Crc32c(dense_.data(), dense_.size() * sizeof(float)));
  return absl::OkStatus();
}

namespace {
constexpr char kMagic[4] = {'H', 'Y', 'B', '1'};
}  // namespace

absl::StatusOr<std::string> HybridBackend::SaveState() const {
  auto rows = rows_->SaveState();
  if (!rows.ok()) return rows.status();
  std::string out(kMagic, 4);
  const auto put = [&out](const void* p, size_t n) { out.append(static_cast<const char*>(p), n); };
  const uint64_t rows_size = rows->size();
  put(&rows_size, 8);
  out.append(*rows);
  const auto dense = static_cast<uint32_t>(dense_.size());
  const auto state = static_cast<uint32_t>(state_.size());
  put(&dense, 4);
  put(&state, 4);
  put(&steps_, 8);
  put(dense_.data(), dense_.size() * sizeof(float));
  put(state_.data(), state_.size() * sizeof(float));
  return out;
}

absl::Status HybridBackend::RestoreState(std::string_view state) {
  const auto damaged = [](absl::string_view why) {
    return absl::DataLossError(absl::StrCat("the saved hybrid worker state ", why));
  };
  if (state.size() < 12 || std::memcmp(state.data(), kMagic, 4) != 0) {
    return absl::InvalidArgumentError(
        "the saved worker state is not a hybrid worker's (was the checkpoint written with "
        "another --sync?)");
  }
  uint64_t rows_size = 0;
  std::memcpy(&rows_size, state.data() + 4, 8);
  if (rows_size > state.size() - 12) return damaged("is truncated (rows)");
  const std::string_view rows = state.substr(12, rows_size);
  std::string_view rest = state.substr(12 + rows_size);
  uint32_t dense = 0, floats = 0;
  int64_t steps = 0;
  if (rest.size() < 16) return damaged("is truncated (dense layers)");
  std::memcpy(&dense, rest.data(), 4);
  std::memcpy(&floats, rest.data() + 4, 4);
  std::memcpy(&steps, rest.data() + 8, 8);
  rest.remove_prefix(16);
  if (dense != dense_.size() || floats != state_.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the saved hybrid worker state holds %d dense values and %d of optimizer state; this "
        "job's model has %d and %d (other --model, --hidden or --optimizer?)",
        dense, floats, dense_.size(), state_.size()));
  }
  if (rest.size() != (size_t{dense} + floats) * sizeof(float) || steps < 0) {
    return damaged("has the wrong length or a negative step count");
  }
  if (auto s = rows_->RestoreState(rows); !s.ok()) return s;
  std::memcpy(dense_.data(), rest.data(), dense * sizeof(float));
  std::memcpy(state_.data(), rest.data() + dense * sizeof(float), floats * sizeof(float));
  steps_ = steps;
  return absl::OkStatus();
}

HybridBackendFactory MakeHybridBackendFactory(CollectivePlane plane) {
  return [plane](const JobSpec& spec, const ParameterLayout& layout, const NodeTable& table,
                 int rank, Endpoint& peers, std::unique_ptr<SyncBackend> rows,
                 const std::string& device,
                 PeerRendezvous& rendezvous) -> absl::StatusOr<std::unique_ptr<SyncBackend>> {
    // The workers' one all-reduce: the dense layers, the examples and the flag.
    CollectivePlane bounded = plane;
    bounded.max_message_bytes = CollectiveMessageBound(uint64_t{layout.bias_dim} + 2);
    auto communicator = ConnectWorkersOfGeneration(spec, table, rank, peers, bounded, rendezvous);
    if (!communicator.ok()) return communicator.status();
    // The dense layers' all-reduce may take NCCL; the rows stay with the servers.
    auto dense = ConnectDenseForWorker(spec, **communicator, device);
    if (!dense.ok()) return dense.status();
    return std::unique_ptr<SyncBackend>(
        std::make_unique<HybridBackend>(std::move(rows), std::move(*communicator),
                                        AlgorithmOf(spec.sync.algorithm), std::move(dense->nccl)));
  };
}

}  // namespace syncline
