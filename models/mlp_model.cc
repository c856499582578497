#include "models/mlp_model.h"

#include <algorithm>
#include <cmath>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "models/gemm.h"
#include "syncline/options.h"

namespace syncline {
namespace {

using model_internal::AffineBackward;
using model_internal::AffineForward;
using model_internal::AppendSoftmax;
using model_internal::CheckOrDie;
using model_internal::ClassLabel;
using model_internal::CountFeatures;
using model_internal::GradientsOf;
using model_internal::KeyIndex;
using model_internal::kMissing;
using model_internal::Precision;
using model_internal::Relu;
using model_internal::ReluBackward;
using model_internal::SoftmaxCrossEntropy;
using model_internal::WeightsAs;

// Initial ranges, uniform in [-scale, scale] (the servers draw them from the seed); a uniform
// [-s, s] weight has variance s^2 / 3.
//
// The first layer's fan-in is the number of features an example has, which only the data
// knows: 0.05 keeps a_0 at a standard deviation of about 0.3 for a few hundred features of
// values up to 1 (Fashion-MNIST's 28x28 pixels) and above zero for a few dozen, so that ReLUs
// open either way.
constexpr float kRowInitScale = 0.05f;

// The dense table holds every later layer's weights and, at the same scale, the biases: He
// initialisation, s = sqrt(6 / fan-in), for the widest fan-in among those layers (the smaller
// ones then start a little small, which adagrad soon makes up). Random biases are harmless at
// this size (the ctr model starts its biases the same way) and the table has a single scale.
// Capped so that a narrow network does not start with saturated logits.
float DenseInitScale(const std::vector<int>& hidden) {
  const int widest = *std::max_element(hidden.begin(), hidden.end());
  return std::min(0.5f, static_cast<float>(std::sqrt(6.0 / widest)));
}

template <typename T>
class MlpModel final : public Model {
 public:
  explicit MlpModel(MlpLayout layout)
      : l_(std::move(layout)),
        layers_(static_cast<int>(l_.widths.size())),
        classes_(l_.widths.back()),
        dense_init_scale_(
            DenseInitScale(std::vector<int>(l_.widths.begin(), l_.widths.end() - 1))) {}

  std::string_view name() const override { return "mlp"; }
  int row_dim() const override { return l_.widths[0]; }
  int bias_dim() const override { return static_cast<int>(l_.size); }
  int num_classes() const override { return classes_; }
  bool binary() const override { return false; }
  float row_init_scale() const override { return kRowInitScale; }
  float bias_init_scale() const override { return dense_init_scale_; }

  double LossAndGradient(const Dataset& data, absl::Span<const uint32_t> examples,
                         absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                         absl::Span<const float> bias, absl::Span<float> row_grads,
                         absl::Span<float> bias_grad) const override {
    CheckShapes(keys, rows, bias, row_grads, bias_grad);
    const WeightsAs<T> weights(rows, bias);
    const T *r = weights.r, *w = weights.w;
    const GradientsOf<T> grads(row_grads, bias_grad);
    T *gr = grads.gr, *gw = grads.gw;
    Block s(l_, std::min(examples.size(), kBlock));
    const KeyIndex key_index(keys, CountFeatures(data, examples));
    double loss = 0;
    for (size_t first = 0; first < examples.size(); first += kBlock) {
      const auto block = examples.subspan(first, kBlock);
      Forward(data, block, key_index, r, w, &s);
      T* z = s.pre.back().data();  // Overwritten in place: dLoss/dz.
      for (size_t b = 0; b < block.size(); ++b) {
        T* zb = z + b * classes_;
        loss += SoftmaxCrossEntropy(zb, classes_, ClassLabel(data.labels[block[b]], classes_), zb);
      }
      Backward(data, block, w, &s, gr, gw);
    }
    grads.Finish(row_grads, bias_grad);
    return loss;
  }

  void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
               absl::Span<const uint64_t> keys, absl::Span<const float> rows,
               absl::Span<const float> bias, std::vector<float>* scores) const override {
    CheckShapes(keys, rows, bias);
    const WeightsAs<T> weights(rows, bias);
    const T *r = weights.r, *w = weights.w;
    Block s(l_, std::min(examples.size(), kBlock));
    const KeyIndex key_index(keys, CountFeatures(data, examples));
    scores->clear();
    scores->reserve(examples.size() * classes_);
    for (size_t first = 0; first < examples.size(); first += kBlock) {
      const auto block = examples.subspan(first, kBlock);
      Forward(data, block, key_index, r, w, &s);
      const T* z = s.pre.back().data();
      for (size_t b = 0; b < block.size(); ++b) AppendSoftmax(z + b * classes_, classes_, scores);
    }
  }

 private:
  // Examples per pass through the layers: the dense layers are matrix products over the block
  // that read their weights once per block, and a block's activations (about 0.4 MB at the
  // default widths) stay in L2.
  static constexpr size_t kBlock = 128;

  // A block's activations and their gradients, reused across the blocks of a call.
  struct Block {
    Block(const MlpLayout& l, size_t n) : pre(l.widths.size()), h(l.widths.size() - 1) {
      for (size_t i = 0; i < l.widths.size(); ++i) {
        pre[i].resize(n * l.widths[i]);
        if (i + 1 < l.widths.size()) h[i].resize(n * l.widths[i]);
      }
      const int widest = *std::max_element(l.widths.begin(), l.widths.end());
      dh.resize(n * widest);
      dpre.resize(n * widest);
    }
    // pre[i] [n][widths[i]]: layer i before its ReLU (the last: the logits, then their
    // gradient); h[i]: after it.
    std::vector<std::vector<T>> pre, h;
    std::vector<T> dh, dpre;    // One layer's gradients at a time, [n][width].
    std::vector<size_t> slots;  // Row in `keys` of each feature of the block, or kMissing.
  };

  // The buffers of a call fit this model (model_internal::CheckShapes).
  template <typename... Spans>
  void CheckShapes(absl::Span<const uint64_t> keys, Spans... spans) const {
    model_internal::CheckShapes(row_dim(), bias_dim(), keys, spans...);
  }

  // Fills *s with the block's activations; the logits end in s->pre.back().
  void Forward(const Dataset& data, absl::Span<const uint32_t> block, const KeyIndex& key_index,
               const T* rows, const T* w, Block* s) const {
    const int n = static_cast<int>(block.size());
    const int h0 = l_.widths[0];
    s->slots.clear();
    T* a0 = s->pre[0].data();
    for (int b = 0; b < n; ++b) {
      T* a = a0 + static_cast<size_t>(b) * h0;
      std::copy(w + l_.b[0], w + l_.b[0] + h0, a);
      for (uint64_t j = data.row_offsets[block[b]]; j < data.row_offsets[block[b] + 1]; ++j) {
        const size_t slot = key_index.Find(data.ids[j]);
        s->slots.push_back(slot);
        if (slot == kMissing) continue;
        const T value = data.values[j];
        const T* row = rows + slot * h0;
        for (int k = 0; k < h0; ++k) a[k] += value * row[k];
      }
    }
    for (int i = 1; i < layers_; ++i) {
      const int in = l_.widths[i - 1];
      Relu(s->pre[i - 1].data(), static_cast<size_t>(n) * in, s->h[i - 1].data());
      AffineForward(Transpose::kNo, n, in, l_.widths[i], s->h[i - 1].data(), in, w + l_.w[i],
                    w + l_.b[i], s->pre[i].data());
    }
  }

  // Adds the gradients of the block in *s, whose logits' gradients are in s->pre.back(), into
  // gr (rows) and gw (dense parameters).
  void Backward(const Dataset& data, absl::Span<const uint32_t> block, const T* w, Block* s, T* gr,
                T* gw) const {
    const int n = static_cast<int>(block.size());
    // dy: the gradient by the current layer's output, before its ReLU.
    const T* dy = s->pre.back().data();
    for (int i = layers_ - 1; i >= 1; --i) {
      const int in = l_.widths[i - 1];
      AffineBackward(Transpose::kNo, n, in, l_.widths[i], s->h[i - 1].data(), in, w + l_.w[i], dy,
                     gw + l_.w[i], gw + l_.b[i], s->dh.data(), in);
      ReluBackward(s->pre[i - 1].data(), s->dh.data(), static_cast<size_t>(n) * in, s->dpre.data());
      dy = s->dpre.data();
    }
    // Layer 0: its bias, and each feature's row by the feature's value.
    const int h0 = l_.widths[0];
    size_t feature = 0;
    for (int b = 0; b < n; ++b) {
      const T* da = dy + static_cast<size_t>(b) * h0;
      for (int k = 0; k < h0; ++k) gw[l_.b[0] + k] += da[k];
      for (uint64_t j = data.row_offsets[block[b]]; j < data.row_offsets[block[b] + 1];
           ++j, ++feature) {
        const size_t slot = s->slots[feature];
        if (slot == kMissing) continue;
        const T value = data.values[j];
        T* grad = gr + slot * h0;
        for (int k = 0; k < h0; ++k) grad[k] += value * da[k];
      }
    }
  }

  const MlpLayout l_;
  const int layers_;  // L + 1: the hidden layers and the output
  const int classes_;
  const float dense_init_scale_;
};

}  // namespace

MlpLayout::MlpLayout(std::vector<int> hidden, int classes) : widths(std::move(hidden)) {
  widths.push_back(classes);
  w.assign(widths.size(), 0);
  b.assign(widths.size(), 0);
  size_t offset = static_cast<size_t>(widths[0]);  // b_0
  for (size_t i = 1; i < widths.size(); ++i) {
    w[i] = offset;
    offset += static_cast<size_t>(widths[i - 1]) * widths[i];
    b[i] = offset;
    offset += widths[i];
  }
  size = offset;
}

absl::StatusOr<std::unique_ptr<Model>> CreateMlpModel(const ModelOptions& options,
                                                      Precision precision) {
  if (options.num_classes < 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model mlp needs num_classes >= 2, got %d", options.num_classes));
  }
  std::vector<int> hidden =
      options.hidden.empty() ? DefaultHidden(ModelKind::kMlp) : options.hidden;
  if (hidden.size() > static_cast<size_t>(kMaxHiddenLayers)) {
    return absl::InvalidArgumentError(absl::StrFormat("model mlp: at most %d hidden layers, got %d",
                                                      kMaxHiddenLayers, hidden.size()));
  }
  for (const int width : hidden) {
    if (width < 1 || width > kMaxHiddenWidth) {
      return absl::InvalidArgumentError(
          absl::StrFormat("model mlp: hidden layer widths must be in [1, %d], got %s",
                          kMaxHiddenWidth, absl::StrJoin(hidden, ",")));
    }
  }
  MlpLayout layout(std::move(hidden), options.num_classes);
  if (layout.size > kMaxMlpDenseParams) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model mlp: hidden layers %s have %d dense parameters, more than %d",
                        absl::StrJoin(options.hidden, ","), layout.size, kMaxMlpDenseParams));
  }
  if (precision == Precision::kDouble) {
    return std::make_unique<MlpModel<double>>(std::move(layout));
  }
  return std::make_unique<MlpModel<float>>(std::move(layout));
}

}  // namespace syncline
