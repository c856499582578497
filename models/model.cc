#include "models/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "models/ctr_model.h"
#include "models/metrics.h"
#include "models/mlp_model.h"
#include "models/model_internal.h"

namespace syncline {
namespace {

using model_internal::AppendSoftmax;
using model_internal::CheckOrDie;
using model_internal::ClassLabel;
using model_internal::CountFeatures;
using model_internal::KeyIndex;
using model_internal::kMissing;
using model_internal::Sigmoid;
using model_internal::SoftmaxCrossEntropy;
using model_internal::Softplus;

// A linear model z = W·x + b followed by a sigmoid (kBinary, one output) or a softmax over
// num_outputs classes. Both share the sparse forward pass and gradient scatter, which is where the
// time goes; only the link function differs.
template <bool kBinary>
class LinearModel final : public Model {
 public:
  explicit LinearModel(int num_outputs) : dim_(num_outputs) {}

  std::string_view name() const override { return kBinary ? "logreg" : "softmax"; }
  int row_dim() const override { return dim_; }
  int bias_dim() const override { return dim_; }
  int num_classes() const override { return kBinary ? 2 : dim_; }
  bool binary() const override { return kBinary; }

  double LossAndGradient(const Dataset& data, absl::Span<const uint32_t> examples,
                         absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                         absl::Span<const float> bias, absl::Span<float> row_grads,
                         absl::Span<float> bias_grad) const override {
    CheckShapes(keys, rows, bias, row_grads, bias_grad);
    Scratch scratch(dim_);
    const KeyIndex key_index(keys, CountFeatures(data, examples));
    double loss = 0;
    for (const uint32_t example : examples) {
      Forward(data, example, key_index, rows, bias, &scratch);
      const size_t label = Label(data, example);
      double* dz = scratch.z.data();  // Overwritten in place: dLoss/dz.
      if constexpr (kBinary) {
        const double z = dz[0];
        loss += Softplus(z) - (label == 1 ? z : 0.0);
        dz[0] = Sigmoid(z) - static_cast<double>(label);
      } else {
        loss += SoftmaxCrossEntropy(dz, dim_, label, dz);
      }
      const uint64_t begin = data.row_offsets[example];
      for (size_t j = 0; j < scratch.slots.size(); ++j) {
        const size_t slot = scratch.slots[j];
        if (slot == kMissing) continue;
        const double value = data.values[begin + j];
        float* grad = &row_grads[slot * dim_];
        for (int k = 0; k < dim_; ++k) grad[k] += static_cast<float>(value * dz[k]);
      }
      for (int k = 0; k < dim_; ++k) bias_grad[k] += static_cast<float>(dz[k]);
    }
    return loss;
  }

  void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
               absl::Span<const uint64_t> keys, absl::Span<const float> rows,
               absl::Span<const float> bias, std::vector<float>* scores) const override {
    CheckShapes(keys, rows, bias);
    scores->clear();
    scores->reserve(examples.size() * dim_);
    Scratch scratch(dim_);
    const KeyIndex key_index(keys, CountFeatures(data, examples));
    for (const uint32_t example : examples) {
      Forward(data, example, key_index, rows, bias, &scratch);
      const double* z = scratch.z.data();
      if constexpr (kBinary) {
        scores->push_back(static_cast<float>(Sigmoid(z[0])));
      } else {
        AppendSoftmax(z, dim_, scores);
      }
    }
  }

 private:
  // Per-call buffers, reused across the examples of the call.
  struct Scratch {
    explicit Scratch(int dim) : z(dim) {}
    std::vector<double> z;      // Logits of the current example.
    std::vector<size_t> slots;  // Row index in keys of each feature of the current example.
  };

  // The buffers of a call fit this model (model_internal::CheckShapes).
  template <typename... Spans>
  void CheckShapes(absl::Span<const uint64_t> keys, Spans... spans) const {
    model_internal::CheckShapes(row_dim(), bias_dim(), keys, spans...);
  }

  // Class index of an example.
  size_t Label(const Dataset& data, uint32_t example) const {
    const float label = data.labels[example];
    if constexpr (kBinary) return label > 0.5f ? 1 : 0;
    return ClassLabel(label, dim_);
  }

  // Fills scratch->z with the example's logits and scratch->slots with its features' rows.
  void Forward(const Dataset& data, uint32_t example, const KeyIndex& key_index,
               absl::Span<const float> rows, absl::Span<const float> bias, Scratch* scratch) const {
    double* z = scratch->z.data();
    for (int k = 0; k < dim_; ++k) z[k] = bias[k];
    const uint64_t begin = data.row_offsets[example];
    const uint64_t end = data.row_offsets[example + 1];
    scratch->slots.resize(end - begin);
    for (uint64_t j = begin; j < end; ++j) {
      const size_t slot = key_index.Find(data.ids[j]);
      scratch->slots[j - begin] = slot;
      if (slot == kMissing) continue;
      const double value = data.values[j];
      const float* row = &rows[slot * dim_];
      for (int k = 0; k < dim_; ++k) z[k] += value * row[k];
    }
  }

  const int dim_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Create(std::string_view name,
                                                     const ModelOptions& options) {
  const int num_classes = options.num_classes;
  if (name == "ctr") return CreateCtrModel(options);
  if (name == "mlp") return CreateMlpModel(options);
  if (name == "logreg") {
    if (num_classes != 2) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "model logreg is binary and needs num_classes 2, got %d (use softmax)", num_classes));
    }
    return std::make_unique<LinearModel<true>>(1);
  }
  if (name == "softmax") {
    if (num_classes < 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model softmax needs num_classes >= 2, got %d", num_classes));
    }
    return std::make_unique<LinearModel<false>>(num_classes);
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("unknown model '%s' (known: logreg, softmax, ctr, mlp)", std::string(name)));
}

std::unique_ptr<ModelEvaluator> Model::NewEvaluator() const { return NewHostEvaluator(*this); }

std::vector<uint64_t> Model::BatchKeys(const Dataset& data,
                                       absl::Span<const uint32_t> examples) const {
  return UniqueKeys(data, examples);
}

std::vector<uint64_t> UniqueKeys(const Dataset& data, absl::Span<const uint32_t> examples) {
  // Popular features repeat across a batch: dropping repeats with a hash set first leaves far
  // fewer ids to sort.
  absl::flat_hash_set<uint64_t> seen;
  seen.reserve(CountFeatures(data, examples));
  std::vector<uint64_t> keys;
  for (const uint32_t example : examples) {
    for (uint64_t j = data.row_offsets[example]; j < data.row_offsets[example + 1]; ++j) {
      if (seen.insert(data.ids[j]).second) keys.push_back(data.ids[j]);
    }
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace syncline
