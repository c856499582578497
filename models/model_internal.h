// Pieces shared by the models' implementations (model.cc, ctr_model.cc, mlp_model.cc); not part
// of the Model API.
//
// Thread-safety: KeyIndex is immutable after construction; the functions are pure (or write only
// to their outputs).
#ifndef SYNCLINE_MODELS_MODEL_INTERNAL_H_
#define SYNCLINE_MODELS_MODEL_INTERNAL_H_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "data/dataset.h"
#include "models/gemm.h"

namespace syncline::model_internal {

inline constexpr size_t kMissing = static_cast<size_t>(-1);

// Mismatched spans are a caller's bug, not bad input: stop loudly rather than read or write out
// of bounds.
inline void CheckOrDie(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "syncline Model: %s\n", what);
    std::abort();
  }
}

// The weights a model reads (rows aligned with keys, row_dim floats each; bias_dim dense
// floats) have its layout.
inline void CheckShapes(size_t row_dim, size_t bias_dim, absl::Span<const uint64_t> keys,
                        absl::Span<const float> rows, absl::Span<const float> bias) {
  CheckOrDie(rows.size() == keys.size() * row_dim, "rows.size() != keys.size() * row_dim()");
  CheckOrDie(bias.size() == bias_dim, "bias.size() != bias_dim()");
}
// ... and the gradients it adds into are aligned with them.
inline void CheckShapes(size_t row_dim, size_t bias_dim, absl::Span<const uint64_t> keys,
                        absl::Span<const float> rows, absl::Span<const float> bias,
                        absl::Span<const float> row_grads, absl::Span<const float> bias_grad) {
  CheckShapes(row_dim, bias_dim, keys, rows, bias);
  CheckOrDie(row_grads.size() == rows.size(), "row_grads.size() != rows.size()");
  CheckOrDie(bias_grad.size() == bias.size(), "bias_grad.size() != bias_dim()");
}

// Number of feature occurrences in `examples`, i.e. the lookups a pass over them makes. Checks
// the example indices on the way, before anything reads the examples.
inline size_t CountFeatures(const Dataset& data, absl::Span<const uint32_t> examples) {
  size_t count = 0;
  for (const uint32_t example : examples) {
    CheckOrDie(example < data.size(), "example index out of range");
    count += data.row_offsets[example + 1] - data.row_offsets[example];
  }
  return count;
}

// Maps feature ids to their rows (positions in the sorted `keys`): the training hot loop. A hash
// map makes a lookup O(1) but costs O(keys) to build, which pays when the call makes at least
// about as many lookups as there are keys (a whole batch); a call that looks up few of many keys
// (e.g. one thread's slice of a batch), or has few keys, binary-searches instead.
class KeyIndex {
 public:
  KeyIndex(absl::Span<const uint64_t> keys, size_t lookups) : keys_(keys) {
    if (keys.size() >= kMinHashedKeys && lookups >= keys.size()) {
      slots_.reserve(keys.size());
      for (size_t i = 0; i < keys.size(); ++i) slots_.emplace(keys[i], static_cast<uint32_t>(i));
      hashed_ = true;
    }
  }

  // The row of `id`, or kMissing.
  size_t Find(uint64_t id) const {
    if (hashed_) {
      const auto it = slots_.find(id);
      return it == slots_.end() ? kMissing : it->second;
    }
    const auto it = std::lower_bound(keys_.begin(), keys_.end(), id);
    return it != keys_.end() && *it == id ? static_cast<size_t>(it - keys_.begin()) : kMissing;
  }

 private:
  static constexpr size_t kMinHashedKeys = 64;

  absl::Span<const uint64_t> keys_;
  bool hashed_ = false;
  absl::flat_hash_map<uint64_t, uint32_t> slots_;
};

// log(1 + exp(x)) without overflow for large x or loss of precision for very negative x.
inline double Softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

inline double Sigmoid(double x) {
  if (x >= 0) return 1.0 / (1.0 + std::exp(-x));
  const double e = std::exp(x);
  return e / (1.0 + e);
}

// The arithmetic a model with hidden layers runs in: float to train, double (the same code) to
// check its gradients against finite differences.
enum class Precision { kFloat, kDouble };

// The parameters as T: the caller's floats themselves, or a converted copy in *storage.
template <typename T>
const T* ParamsAs(absl::Span<const float> in, std::vector<T>* storage) {
  if constexpr (std::is_same_v<T, float>) {
    return in.data();
  } else {
    storage->assign(in.begin(), in.end());
    return storage->data();
  }
}

// Where gradients accumulate as T: the caller's floats, or zeros in *storage that AddGradients
// adds to the caller's floats afterwards.
template <typename T>
T* GradientsAs(absl::Span<float> out, std::vector<T>* storage) {
  if constexpr (std::is_same_v<T, float>) {
    return out.data();
  } else {
    storage->assign(out.size(), T{0});
    return storage->data();
  }
}
template <typename T>
void AddGradients(const std::vector<T>& storage, absl::Span<float> out) {
  if constexpr (!std::is_same_v<T, float>) {
    for (size_t i = 0; i < storage.size(); ++i) out[i] += static_cast<float>(storage[i]);
  }
}

// A model's two tables as T, for reading (Predict and the forward pass).
template <typename T>
struct WeightsAs {
  WeightsAs(absl::Span<const float> rows, absl::Span<const float> bias)
      : r(ParamsAs(rows, &r_copy)), w(ParamsAs(bias, &w_copy)) {}
  WeightsAs(const WeightsAs&) = delete;
  WeightsAs& operator=(const WeightsAs&) = delete;
  std::vector<T> r_copy, w_copy;
  const T* r;  // rows
  const T* w;  // the dense ("bias") table
};

// ... and their gradients as T, which Finish adds to the caller's floats (a double check's).
template <typename T>
struct GradientsOf {
  GradientsOf(absl::Span<float> row_grads, absl::Span<float> bias_grad)
      : gr(GradientsAs(row_grads, &gr_copy)), gw(GradientsAs(bias_grad, &gw_copy)) {}
  GradientsOf(const GradientsOf&) = delete;
  GradientsOf& operator=(const GradientsOf&) = delete;
  void Finish(absl::Span<float> row_grads, absl::Span<float> bias_grad) const {
    AddGradients(gw_copy, bias_grad);
    AddGradients(gr_copy, row_grads);
  }
  std::vector<T> gr_copy, gw_copy;
  T* gr;
  T* gw;
};

// A fully connected layer over a block of n examples, y = x W + b, with W stored input-major
// ([in][out]) so that both passes are matrix products over the block (gemm.h). x is op(X):
// stored example-major ([n][ldx], Transpose::kNo) or feature-major ([in][ldx], kYes, as the ctr
// model's interaction leaves it).
//
// y [n][out] (leading dimension out) = b + op(X) W.
template <typename T>
void AffineForward(Transpose x_layout, int n, int in, int out, const T* x, int ldx, const T* w,
                   const T* b, T* y) {
  for (int i = 0; i < n; ++i) std::copy(b, b + out, y + static_cast<size_t>(i) * out);
  Gemm(x_layout, Transpose::kNo, n, out, in, T{1}, x, ldx, w, out, T{1}, y, out);
}

// Given dy [n][out], the loss's derivative by y: ADDS to gw [in][out] and gb [out] the
// derivatives by W and b, and, unless dx is null, SETS dx (stored as x is, leading dimension
// lddx) to the derivative by x.
template <typename T>
void AffineBackward(Transpose x_layout, int n, int in, int out, const T* x, int ldx, const T* w,
                    const T* dy, T* gw, T* gb, T* dx, int lddx) {
  // The bias's gradient example by example, in order: the same sums whatever the block size.
  for (int i = 0; i < n; ++i) {
    const T* row = dy + static_cast<size_t>(i) * out;
    for (int k = 0; k < out; ++k) gb[k] += row[k];
  }
  if (x_layout == Transpose::kNo) {
    Gemm(Transpose::kYes, Transpose::kNo, in, out, n, T{1}, x, ldx, dy, out, T{1}, gw, out);
    if (dx != nullptr) {
      Gemm(Transpose::kNo, Transpose::kYes, n, in, out, T{1}, dy, out, w, out, T{0}, dx, lddx);
    }
  } else {
    Gemm(Transpose::kNo, Transpose::kNo, in, out, n, T{1}, x, ldx, dy, out, T{1}, gw, out);
    if (dx != nullptr) {
      Gemm(Transpose::kNo, Transpose::kYes, in, n, out, T{1}, w, out, dy, out, T{0}, dx, lddx);
    }
  }
}

// h = max(pre, 0), elementwise over count values.
template <typename T>
void Relu(const T* pre, size_t count, T* h) {
  for (size_t i = 0; i < count; ++i) h[i] = std::max(pre[i], T{0});
}

// dpre = dh where pre > 0, else 0 (dpre may be dh).
template <typename T>
void ReluBackward(const T* pre, const T* dh, size_t count, T* dpre) {
  for (size_t i = 0; i < count; ++i) dpre[i] = pre[i] > 0 ? dh[i] : T{0};
}

// Class index of an example of a K-class model; out-of-range labels are a caller's bug
// (ReadDataset validates them against num_classes), clamped so they cannot index out of bounds.
inline size_t ClassLabel(float label, int classes) {
  if (!(label >= 0)) return 0;
  return std::min(static_cast<size_t>(label), static_cast<size_t>(classes - 1));
}

// Softmax cross-entropy of logits z[0, k) against class `label`, computed in log space so it
// never overflows. Writes dLoss/dz into dz (which may be z).
template <typename T>
double SoftmaxCrossEntropy(const T* z, int k, size_t label, T* dz) {
  const double max_z = *std::max_element(z, z + k);
  double sum = 0;
  for (int c = 0; c < k; ++c) sum += std::exp(static_cast<double>(z[c]) - max_z);
  const double loss = max_z + std::log(sum) - static_cast<double>(z[label]);
  for (int c = 0; c < k; ++c) {
    dz[c] = static_cast<T>(std::exp(static_cast<double>(z[c]) - max_z) / sum);
  }
  dz[label] -= T{1};
  return loss;
}

// Appends the softmax of z[0, k) to *probabilities.
template <typename T>
void AppendSoftmax(const T* z, int k, std::vector<float>* probabilities) {
  const double max_z = *std::max_element(z, z + k);
  double sum = 0;
  for (int c = 0; c < k; ++c) sum += std::exp(static_cast<double>(z[c]) - max_z);
  for (int c = 0; c < k; ++c) {
    probabilities->push_back(static_cast<float>(std::exp(static_cast<double>(z[c]) - max_z) / sum));
  }
}

}  // namespace syncline::model_internal

#endif  // SYNCLINE_MODELS_MODEL_INTERNAL_H_
