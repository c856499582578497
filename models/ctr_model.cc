#include "models/ctr_model.h"

#include <algorithm>
#include <string_view>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/criteo.h"
#include "models/gemm.h"
#include "models/model_internal.h"
#include "syncline/options.h"

namespace syncline {
namespace {

using model_internal::AffineBackward;
using model_internal::AffineForward;
using model_internal::CheckOrDie;
using model_internal::GradientsOf;
using model_internal::KeyIndex;
using model_internal::kMissing;
using model_internal::Precision;
using model_internal::Relu;
using model_internal::Sigmoid;
using model_internal::Softplus;
using model_internal::WeightsAs;

constexpr int kDense = kCriteoDenseFields;
constexpr int kFields = kCriteoCategoricalFields;
constexpr int kVectors = 1 + kFields;  // The bottom layer's output and the embeddings.
constexpr int kPairs = kVectors * (kVectors - 1) / 2;

// Initial ranges, uniform in [-scale, scale] (the servers draw them from the seed). Embeddings
// must not start at zero: the gradient of a dot product with a zero vector is zero, and they
// would never move. The dense layers need random weights so that hidden units differ and some
// ReLUs are open; 0.1 is about 1/sqrt(fan-in) of the top layer for the default sizes.
constexpr float kEmbeddingInitScale = 0.05f;
constexpr float kDenseInitScale = 0.1f;

// y[0, n) += a * x[0, n).
template <typename T>
inline void Axpy(T a, const T* x, T* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

template <typename T>
inline T Dot(const T* x, const T* y, int n) {
  // Eight independent partial sums: a single running sum is a serial chain the compiler may not
  // vectorise without -ffast-math.
  T acc[8] = {};
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * y[i + j];
  }
  T sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) sum += x[i] * y[i];
  return sum;
}

template <typename T>
class CtrModel final : public Model {
 public:
  CtrModel(int embedding_dim, int hidden) : l_(embedding_dim, hidden) {}

  std::string_view name() const override { return "ctr"; }
  int row_dim() const override { return l_.dim + 1; }
  int bias_dim() const override { return static_cast<int>(l_.size); }
  int num_classes() const override { return 2; }
  bool binary() const override { return true; }
  float row_init_scale() const override { return kEmbeddingInitScale; }
  float bias_init_scale() const override { return kDenseInitScale; }

  std::vector<uint64_t> BatchKeys(const Dataset& data,
                                  absl::Span<const uint32_t> examples) const override {
    absl::flat_hash_set<uint64_t> seen;
    seen.reserve(examples.size() * kFields);
    std::vector<uint64_t> keys;
    for (const uint32_t example : examples) {
      const uint64_t begin = CheckExample(data, example);
      for (int f = 0; f < kFields; ++f) {
        const uint64_t id = data.ids[begin + kDense + f];
        if (seen.insert(id).second) keys.push_back(id);
      }
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

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
    const KeyIndex key_index(keys, examples.size() * kFields);
    double loss = 0;
    for (size_t first = 0; first < examples.size(); first += kBlock) {
      const auto block = examples.subspan(first, kBlock);
      Forward(data, block, key_index, r, w, &s);
      for (size_t b = 0; b < block.size(); ++b) {
        const T logit = s.logit[b];
        const bool positive = data.labels[block[b]] > 0.5f;
        loss += Softplus(logit) - (positive ? static_cast<double>(logit) : 0.0);
        s.g[b] = static_cast<T>(Sigmoid(logit) - (positive ? 1.0 : 0.0));
      }
      Backward(block.size(), w, &s, gr, gw);
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
    const KeyIndex key_index(keys, examples.size() * kFields);
    scores->clear();
    scores->reserve(examples.size());
    for (size_t first = 0; first < examples.size(); first += kBlock) {
      const auto block = examples.subspan(first, kBlock);
      Forward(data, block, key_index, r, w, &s);
      for (size_t b = 0; b < block.size(); ++b) {
        scores->push_back(static_cast<float>(Sigmoid(s.logit[b])));
      }
    }
  }

 private:
  // Examples per pass through the layers. The dense layers are then matrix products over the
  // block (gemm.h) that read their weights once per block instead of once per example, and the
  // pairwise interaction runs over the block's examples in the innermost loop: the activations
  // are stored feature-major ([feature][example], "transposed" below), so every loop of the
  // interaction is a long contiguous one the compiler vectorises. A block's activations (about
  // 0.8 MB at D = 8, H = 64) stay in L2.
  static constexpr size_t kBlock = 256;

  // A block's activations and their gradients, reused across the blocks of a call. `cap` is the
  // stride of the transposed arrays.
  struct Block {
    Block(const CtrLayout& l, size_t n)
        : cap(n),
          dense(n * kDense),
          slot(n * kFields),
          first_order(n),
          logit(n),
          g(n),
          vt(kVectors * l.dim * n),
          dvt(kVectors * l.dim * n),
          zt(l.inputs * n),
          dzt(l.inputs * n),
          pre(n * l.hidden),
          h(n * l.hidden),
          dh(n * l.hidden) {}
    size_t cap;
    std::vector<T> dense;                  // [n][13]
    std::vector<size_t> slot;              // [n][26]: row of each field's id in `keys`, or kMissing
    std::vector<T> first_order, logit, g;  // [n]; g: the loss's derivative by the logit
    std::vector<T> vt, dvt;                // [27][D][cap]: bottom output, then the embeddings
    std::vector<T> zt, dzt;  // [inputs][cap]: top layer input, bottom output then pair dots
    std::vector<T> pre, h;   // [n][H]: hidden units before and after the ReLU
    std::vector<T> dh;       // [n][H]
  };

  static uint64_t CheckExample(const Dataset& data, uint32_t example) {
    CheckOrDie(example < data.size(), "example index out of range");
    const uint64_t begin = data.row_offsets[example];
    CheckOrDie(data.row_offsets[example + 1] - begin == kCriteoEntries,
               "the ctr model needs Criteo-layout examples (39 entries each)");
    return begin;
  }

  // The buffers of a call fit this model (model_internal::CheckShapes).
  template <typename... Spans>
  void CheckShapes(absl::Span<const uint64_t> keys, Spans... spans) const {
    model_internal::CheckShapes(row_dim(), bias_dim(), keys, spans...);
  }

  // Fills *s with the block's activations and logits.
  void Forward(const Dataset& data, absl::Span<const uint32_t> block, const KeyIndex& key_index,
               const T* rows, const T* w, Block* s) const {
    const int dim = l_.dim;
    const int hidden = l_.hidden;
    const int inputs = l_.inputs;
    const int n = static_cast<int>(block.size());
    const size_t cap = s->cap;
    T* vt = s->vt.data();
    for (int b = 0; b < n; ++b) {
      const uint64_t begin = CheckExample(data, block[b]);
      T* dense = &s->dense[b * kDense];
      for (int j = 0; j < kDense; ++j) dense[j] = data.values[begin + j];
      T first_order = 0;
      size_t* slots = &s->slot[b * kFields];
      for (int f = 0; f < kFields; ++f) {
        const size_t slot = key_index.Find(data.ids[begin + kDense + f]);
        slots[f] = slot;
        T* e = vt + static_cast<size_t>(1 + f) * dim * cap + b;
        if (slot == kMissing) {
          for (int d = 0; d < dim; ++d) e[d * cap] = T{0};
          continue;
        }
        const T* row = rows + slot * (dim + 1);
        for (int d = 0; d < dim; ++d) e[d * cap] = row[d];
        first_order += row[dim];
      }
      s->first_order[b] = first_order;
    }
    // The bottom layer, x^T [D][n] = bottom_w [D][13] * dense^T, plus its bias.
    Gemm(Transpose::kNo, Transpose::kYes, dim, n, kDense, T{1}, w + l_.bottom_w, kDense,
         s->dense.data(), kDense, T{0}, vt, static_cast<int>(cap));
    for (int d = 0; d < dim; ++d) {
      T* x = vt + d * cap;
      const T bias = w[l_.bottom_b + d];
      for (int b = 0; b < n; ++b) x[b] += bias;
    }
    // z^T: x, then the dot product of every pair of the 27 vectors, example by example.
    T* zt = s->zt.data();
    std::copy(vt, vt + dim * cap, zt);
    size_t p = dim;
    for (int a = 0; a < kVectors; ++a) {
      for (int c = a + 1; c < kVectors; ++c, ++p) {
        T* __restrict z = zt + p * cap;
        const T* va = vt + static_cast<size_t>(a) * dim * cap;
        const T* vc = vt + static_cast<size_t>(c) * dim * cap;
        for (int b = 0; b < n; ++b) z[b] = va[b] * vc[b];
        for (int d = 1; d < dim; ++d) {
          const T* __restrict x = va + d * cap;
          const T* __restrict y = vc + d * cap;
          for (int b = 0; b < n; ++b) z[b] += x[b] * y[b];
        }
      }
    }
    // pre [n][H] = top_b + z [n][inputs] * top_w [inputs][H].
    AffineForward(Transpose::kYes, n, inputs, hidden, zt, static_cast<int>(cap), w + l_.top_w,
                  w + l_.top_b, s->pre.data());
    Relu(s->pre.data(), static_cast<size_t>(n) * hidden, s->h.data());
    for (int b = 0; b < n; ++b) {
      const T* h = &s->h[static_cast<size_t>(b) * hidden];
      s->logit[b] = w[l_.out_b] + Dot(w + l_.out_w, h, hidden) + s->first_order[b];
    }
  }

  // Adds the gradients of the block in *s, whose losses have derivatives s->g by their logits,
  // into gr (rows) and gw (dense parameters).
  void Backward(size_t count, const T* w, Block* s, T* gr, T* gw) const {
    const int dim = l_.dim;
    const int hidden = l_.hidden;
    const int inputs = l_.inputs;
    const int n = static_cast<int>(count);
    const size_t cap = s->cap;
    const int ld = static_cast<int>(cap);
    for (int b = 0; b < n; ++b) {
      const T g = s->g[b];
      const T* pre = &s->pre[static_cast<size_t>(b) * hidden];
      T* dh = &s->dh[static_cast<size_t>(b) * hidden];
      gw[l_.out_b] += g;
      Axpy(g, &s->h[static_cast<size_t>(b) * hidden], gw + l_.out_w, hidden);
      for (int k = 0; k < hidden; ++k) dh[k] = pre[k] > 0 ? g * w[l_.out_w + k] : T{0};
    }
    T* dzt = s->dzt.data();
    // top_w's and top_b's gradients, and dz^T [inputs][n].
    AffineBackward(Transpose::kYes, n, inputs, hidden, s->zt.data(), ld, w + l_.top_w, s->dh.data(),
                   gw + l_.top_w, gw + l_.top_b, dzt, ld);
    // Through the interaction: d v_a += dz_ac v_c and d v_c += dz_ac v_a for every pair.
    const T* vt = s->vt.data();
    T* dvt = s->dvt.data();
    std::copy(dzt, dzt + dim * cap, dvt);
    std::fill(dvt + dim * cap, dvt + kVectors * dim * cap, T{0});
    size_t p = dim;
    for (int a = 0; a < kVectors; ++a) {
      for (int c = a + 1; c < kVectors; ++c, ++p) {
        const T* __restrict dz = dzt + p * cap;
        for (int d = 0; d < dim; ++d) {
          const size_t ra = (static_cast<size_t>(a) * dim + d) * cap;
          const size_t rc = (static_cast<size_t>(c) * dim + d) * cap;
          T* __restrict dva = dvt + ra;
          T* __restrict dvc = dvt + rc;
          const T* __restrict va = vt + ra;
          const T* __restrict vc = vt + rc;
          for (int b = 0; b < n; ++b) {
            dva[b] += dz[b] * vc[b];
            dvc[b] += dz[b] * va[b];
          }
        }
      }
    }
    // The bottom layer: bottom_w gradient [D][13] += dx^T [D][n] * dense [n][13], and its bias.
    Gemm(Transpose::kNo, Transpose::kNo, dim, kDense, n, T{1}, dvt, ld, s->dense.data(), kDense,
         T{1}, gw + l_.bottom_w, kDense);
    for (int d = 0; d < dim; ++d) {
      const T* dx = dvt + d * cap;
      T sum = 0;
      for (int b = 0; b < n; ++b) sum += dx[b];
      gw[l_.bottom_b + d] += sum;
    }
    for (int b = 0; b < n; ++b) {
      const size_t* slots = &s->slot[b * kFields];
      for (int f = 0; f < kFields; ++f) {
        const size_t slot = slots[f];
        if (slot == kMissing) continue;
        T* row = gr + slot * (dim + 1);
        const T* de = dvt + static_cast<size_t>(1 + f) * dim * cap + b;
        for (int d = 0; d < dim; ++d) row[d] += de[d * cap];
        row[dim] += s->g[b];
      }
    }
  }

  const CtrLayout l_;
};

}  // namespace

CtrLayout::CtrLayout(int embedding_dim, int hidden_units)
    : dim(embedding_dim), hidden(hidden_units), inputs(embedding_dim + kPairs) {
  const size_t d = static_cast<size_t>(dim);
  const size_t h = static_cast<size_t>(hidden);
  bottom_w = 0;
  bottom_b = bottom_w + d * kDense;
  top_w = bottom_b + d;
  top_b = top_w + static_cast<size_t>(inputs) * h;
  out_w = top_b + h;
  out_b = out_w + h;
  size = out_b + 1;
}

absl::StatusOr<std::unique_ptr<Model>> CreateCtrModel(const ModelOptions& options,
                                                      Precision precision) {
  if (options.num_classes != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model ctr is binary and needs num_classes 2, got %d", options.num_classes));
  }
  if (options.embedding_dim < 1 || options.embedding_dim > 256) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model ctr: embedding dimension must be in [1, 256], got %d", options.embedding_dim));
  }
  const std::vector<int> hidden =
      options.hidden.empty() ? DefaultHidden(ModelKind::kCtr) : options.hidden;
  if (hidden.size() != 1 || hidden[0] < 1 || hidden[0] > kMaxHiddenWidth) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model ctr: one hidden layer of 1 to %d units, got %s", kMaxHiddenWidth,
                        absl::StrJoin(hidden, ",")));
  }
  if (precision == Precision::kDouble) {
    return std::make_unique<CtrModel<double>>(options.embedding_dim, hidden[0]);
  }
  return std::make_unique<CtrModel<float>>(options.embedding_dim, hidden[0]);
}

}  // namespace syncline
