#include "worker/ctr_model.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "worker/criteo.h"
#include "worker/model_internal.h"

namespace syncline {
namespace {

using model_internal::CheckOrDie;
using model_internal::KeyIndex;
using model_internal::kMissing;
using model_internal::Sigmoid;
using model_internal::Softplus;

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
    CheckShapes(keys, rows, bias);
    CheckOrDie(row_grads.size() == rows.size(), "row_grads.size() != rows.size()");
    CheckOrDie(bias_grad.size() == bias.size(), "bias_grad.size() != bias_dim()");
    const std::vector<T> w(bias.begin(), bias.end());
    const std::vector<T> r(rows.begin(), rows.end());
    std::vector<T> gw(w.size(), T{0});
    std::vector<T> gr(r.size(), T{0});
    Work s(l_);
    const KeyIndex key_index(keys, examples.size() * kFields);
    double loss = 0;
    for (const uint32_t example : examples) {
      const T logit = Forward(data, example, key_index, r.data(), w.data(), &s);
      const bool positive = data.labels[example] > 0.5f;
      loss += Softplus(logit) - (positive ? static_cast<double>(logit) : 0.0);
      const T g = static_cast<T>(Sigmoid(logit) - (positive ? 1.0 : 0.0));
      Backward(g, w.data(), &s, gr.data(), gw.data());
    }
    for (size_t i = 0; i < gw.size(); ++i) bias_grad[i] += static_cast<float>(gw[i]);
    for (size_t i = 0; i < gr.size(); ++i) row_grads[i] += static_cast<float>(gr[i]);
    return loss;
  }

  void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
               absl::Span<const uint64_t> keys, absl::Span<const float> rows,
               absl::Span<const float> bias, std::vector<float>* scores) const override {
    CheckShapes(keys, rows, bias);
    const std::vector<T> w(bias.begin(), bias.end());
    const std::vector<T> r(rows.begin(), rows.end());
    Work s(l_);
    const KeyIndex key_index(keys, examples.size() * kFields);
    scores->clear();
    scores->reserve(examples.size());
    for (const uint32_t example : examples) {
      const T logit = Forward(data, example, key_index, r.data(), w.data(), &s);
      scores->push_back(static_cast<float>(Sigmoid(logit)));
    }
  }

 private:
  // One example's activations and their gradients, reused across the examples of a call.
  struct Work {
    explicit Work(const CtrLayout& l)
        : v(kVectors * l.dim),
          dv(kVectors * l.dim),
          z(l.inputs),
          dz(l.inputs),
          pre(l.hidden),
          h(l.hidden),
          dh(l.hidden) {}
    T dense[kDense];
    size_t slot[kFields];   // Row of each field's id in `keys`, or kMissing.
    std::vector<T> v, dv;   // The 27 D-vectors: bottom output, then the embeddings.
    std::vector<T> z, dz;   // Top layer input: bottom output, then the pairwise dots.
    std::vector<T> pre, h;  // Hidden units before and after the ReLU.
    std::vector<T> dh;
  };

  static uint64_t CheckExample(const Dataset& data, uint32_t example) {
    CheckOrDie(example < data.size(), "example index out of range");
    const uint64_t begin = data.row_offsets[example];
    CheckOrDie(data.row_offsets[example + 1] - begin == kCriteoEntries,
               "the ctr model needs Criteo-layout examples (39 entries each)");
    return begin;
  }

  void CheckShapes(absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                   absl::Span<const float> bias) const {
    CheckOrDie(rows.size() == keys.size() * row_dim(), "rows.size() != keys.size() * row_dim()");
    CheckOrDie(bias.size() == l_.size, "bias.size() != bias_dim()");
  }

  // Fills *s with the example's activations; returns the logit.
  T Forward(const Dataset& data, uint32_t example, const KeyIndex& key_index, const T* rows,
            const T* w, Work* s) const {
    const int dim = l_.dim;
    const int hidden = l_.hidden;
    const uint64_t begin = CheckExample(data, example);
    for (int j = 0; j < kDense; ++j) s->dense[j] = data.values[begin + j];
    T* v = s->v.data();
    for (int d = 0; d < dim; ++d) {
      v[d] = w[l_.bottom_b + d] + Dot(&w[l_.bottom_w + d * kDense], s->dense, kDense);
    }
    T first_order = 0;
    for (int f = 0; f < kFields; ++f) {
      const size_t slot = key_index.Find(data.ids[begin + kDense + f]);
      s->slot[f] = slot;
      T* e = v + (1 + f) * dim;
      if (slot == kMissing) {
        std::fill(e, e + dim, T{0});
        continue;
      }
      const T* row = rows + slot * (dim + 1);
      std::copy(row, row + dim, e);
      first_order += row[dim];
    }
    T* z = s->z.data();
    std::copy(v, v + dim, z);
    int p = dim;
    for (int a = 0; a < kVectors; ++a) {
      for (int b = a + 1; b < kVectors; ++b) z[p++] = Dot(v + a * dim, v + b * dim, dim);
    }
    T* pre = s->pre.data();
    std::copy(w + l_.top_b, w + l_.top_b + hidden, pre);
    for (int i = 0; i < l_.inputs; ++i) {
      if (z[i] != 0) Axpy(z[i], w + l_.top_w + static_cast<size_t>(i) * hidden, pre, hidden);
    }
    T* h = s->h.data();
    for (int k = 0; k < hidden; ++k) h[k] = std::max(pre[k], T{0});
    return w[l_.out_b] + Dot(w + l_.out_w, h, hidden) + first_order;
  }

  // Adds the gradients of the example in *s, whose loss has derivative g by the logit, into gr
  // (rows) and gw (dense parameters).
  void Backward(T g, const T* w, Work* s, T* gr, T* gw) const {
    const int dim = l_.dim;
    const int hidden = l_.hidden;
    gw[l_.out_b] += g;
    Axpy(g, s->h.data(), gw + l_.out_w, hidden);
    T* dh = s->dh.data();
    bool any = false;
    for (int k = 0; k < hidden; ++k) {
      dh[k] = s->pre[k] > 0 ? g * w[l_.out_w + k] : T{0};
      any |= dh[k] != 0;
    }
    const T* z = s->z.data();
    T* dz = s->dz.data();
    if (any) {
      Axpy(T{1}, dh, gw + l_.top_b, hidden);
      for (int i = 0; i < l_.inputs; ++i) {
        const size_t row = l_.top_w + static_cast<size_t>(i) * hidden;
        if (z[i] != 0) Axpy(z[i], dh, gw + row, hidden);
        dz[i] = Dot(w + row, dh, hidden);
      }
    } else {
      std::fill(dz, dz + l_.inputs, T{0});
    }
    const T* v = s->v.data();
    T* dv = s->dv.data();
    std::copy(dz, dz + dim, dv);
    std::fill(dv + dim, dv + kVectors * dim, T{0});
    int p = dim;
    for (int a = 0; a < kVectors; ++a) {
      for (int b = a + 1; b < kVectors; ++b) {
        const T d = dz[p++];
        if (d == 0) continue;
        Axpy(d, v + b * dim, dv + a * dim, dim);
        Axpy(d, v + a * dim, dv + b * dim, dim);
      }
    }
    for (int d = 0; d < dim; ++d) {
      gw[l_.bottom_b + d] += dv[d];
      Axpy(dv[d], s->dense, gw + l_.bottom_w + d * kDense, kDense);
    }
    for (int f = 0; f < kFields; ++f) {
      const size_t slot = s->slot[f];
      if (slot == kMissing) continue;
      T* row = gr + slot * (dim + 1);
      Axpy(T{1}, dv + (1 + f) * dim, row, dim);
      row[dim] += g;
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
                                                      CtrPrecision precision) {
  if (options.num_classes != 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model ctr is binary and needs num_classes 2, got %d", options.num_classes));
  }
  if (options.embedding_dim < 1 || options.embedding_dim > 256) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "model ctr: embedding dimension must be in [1, 256], got %d", options.embedding_dim));
  }
  if (options.hidden < 1 || options.hidden > 4096) {
    return absl::InvalidArgumentError(
        absl::StrFormat("model ctr: hidden units must be in [1, 4096], got %d", options.hidden));
  }
  if (precision == CtrPrecision::kDouble) {
    return std::make_unique<CtrModel<double>>(options.embedding_dim, options.hidden);
  }
  return std::make_unique<CtrModel<float>>(options.embedding_dim, options.hidden);
}

}  // namespace syncline
