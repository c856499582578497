// ReplicatedModel: the whole model that a serverless worker keeps (gossip peers, all-reduce
// workers): num_features x row_dim dense rows, then bias_dim bias floats, in one vector, with
// the servers' per-weight optimizer state and per-row step counts, so that an update is the one a
// parameter server would apply. Reads copy rows out; updates apply one row (or the bias) with
// optim/optimizer.h's rules; checkpoints save and restore it all.
//
// Saved form: magic[4], u64 features, u32 row_dim, u32 bias_dim, u32 state floats, the
// caller's i64 header fields, i64 bias steps, then params, row state, row steps, bias state,
// then the caller's tail bytes.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_REPLICATED_MODEL_H_
#define SYNCLINE_WORKER_REPLICATED_MODEL_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "optim/optimizer.h"
#include "worker/sync_backend.h"

namespace syncline {

// The bytes a replicated model of `layout` keeps (rows, bias, their optimizer state under
// `optimizer`, row steps); saturates at UINT64_MAX.
uint64_t ReplicatedModelBytes(const ParameterLayout& layout, OptimizerKind optimizer);

// The most a serverless worker keeps of the whole model: half of this machine's memory. A
// libsvm file's largest feature id sets the model's rows (one id of 10^12 made every worker
// abort on bad_alloc).
uint64_t ReplicatedModelLimit();

// OK when a model of `layout` fits `limit` bytes; otherwise InvalidArgument (bad input: the
// worker exits with code 2) naming `where` (the data file and the line of its largest
// feature id), the feature count, the bytes and the limit.
absl::Status CheckReplicatedModelFits(const ParameterLayout& layout, OptimizerKind optimizer,
                                      const std::string& where,
                                      uint64_t limit = ReplicatedModelLimit());

class ReplicatedModel {
 public:
  // `who` names the backend in messages ("gossip", "all-reduce").
  explicit ReplicatedModel(std::string who) : who_(std::move(who)) {}

  // Zeros, in the layout's shape; InvalidArgument when the feature count is unknown, or
  // larger than ReplicatedModelLimit() allows (nothing is allocated then).
  absl::Status Init(const ParameterLayout& layout, const OptimizerConfig& optimizer);

  // Copies the rows of `keys` and the bias.
  absl::Status Read(std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) const;
  // Checks an update's sizes and keys against the layout.
  absl::Status CheckUpdate(std::span<const uint64_t> keys, std::span<const float> row_grads,
                           std::span<const float> bias_grad) const;
  // One optimizer step of row `key` (row_dim gradient floats times `scale`), or of the bias.
  void ApplyRow(uint64_t key, const float* grad, float scale);
  void ApplyBias(const float* grad, float scale);

  // Appends the saved form to *out, with `header` fields and `tail` bytes of the caller's.
  void Save(const char (&magic)[4], std::span<const int64_t> header, std::string_view tail,
            std::string* out) const;
  // Restores a saved form with `header_fields` fields of the caller's, which it returns in
  // *header; `tail_bytes(header)` says how many tail bytes must follow, which it returns in
  // *tail. Nothing changes unless the whole form checks out. `not_mine` is the message for a
  // form of another kind of backend.
  absl::Status Restore(std::string_view state, const char (&magic)[4], int header_fields,
                       const std::function<size_t(std::span<const int64_t>)>& tail_bytes,
                       const std::string& not_mine, std::vector<int64_t>* header,
                       std::string_view* tail);

  const ParameterLayout& layout() const { return layout_; }
  std::span<float> parameters() { return params_; }
  std::span<const float> parameters() const { return params_; }
  size_t row_floats() const { return layout_.num_features * layout_.row_dim; }

 private:
  const std::string who_;
  ParameterLayout layout_;
  OptimizerConfig row_optimizer_;
  OptimizerConfig bias_optimizer_;
  int state_floats_ = 0;
  std::vector<float> params_;
  std::vector<float> row_state_;
  std::vector<int64_t> row_steps_;
  std::vector<float> bias_state_;
  int64_t bias_steps_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_REPLICATED_MODEL_H_
