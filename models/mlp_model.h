// The "mlp" model: a dense multilayer perceptron over sparse features, softmax over K classes.
//
//   layer 0   a_0 = b_0 + sum over the example's features j of value_j * row(id_j): each feature
//             id's row in the SPARSE table is its input weights (row_dim = h_0), so the first
//             layer is a gather-sum over the example's rows, like an embedding bag; h_0 = ReLU(a_0)
//   layer l   h_l = ReLU(h_{l-1} W_l + b_l) for l = 1 .. L-1
//   output    z = h_{L-1} W_out + b_out, K logits; softmax cross-entropy
//
// b_0 and every later weight and bias live in the model's "bias" table (MlpLayout), so the sync
// backends, the trainer and the servers treat the model like any other. Gradients are computed
// by hand (checked against finite differences in mlp_model_test.cc).
//
// Thread-safety: as Model.
#ifndef SYNCLINE_MODELS_MLP_MODEL_H_
#define SYNCLINE_MODELS_MLP_MODEL_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "models/model_internal.h"

namespace syncline {

// Limits CreateMlpModel enforces: layers, units per layer, and floats in the dense table.
inline constexpr int kMlpMaxLayers = 8;
inline constexpr int kMlpMaxWidth = 4096;
inline constexpr size_t kMlpMaxDenseParams = size_t{1} << 26;  // 256 MiB of floats
// Used when ModelOptions::hidden is empty.
inline const std::vector<int>& MlpDefaultHidden() {
  static const std::vector<int> kDefault = {256, 128};
  return kDefault;
}

// Where each dense parameter of an mlp sits in its bias table.
struct MlpLayout {
  MlpLayout(std::vector<int> hidden, int classes);

  std::vector<int> widths;  // h_0 .. h_{L-1}, then K: the outputs of every layer
  // Offsets: b_0 [h_0]; then for each later layer i (1 .. L, the last being the output) its
  // weights w[i] [widths[i-1]][widths[i]] (input-major) and bias b[i] [widths[i]]. w[0] is
  // unused: layer 0's weights are the sparse rows.
  std::vector<size_t> w, b;
  size_t size;  // bias_dim
};

// options.hidden: 1 to kMlpMaxLayers widths in [1, kMlpMaxWidth] (empty: MlpDefaultHidden()),
// at most kMlpMaxDenseParams dense parameters; options.num_classes >= 2. Else InvalidArgument.
absl::StatusOr<std::unique_ptr<Model>> CreateMlpModel(
    const ModelOptions& options,
    model_internal::Precision precision = model_internal::Precision::kFloat);

}  // namespace syncline

#endif  // SYNCLINE_MODELS_MLP_MODEL_H_
