// The ctr model's kernels (models/ctr_model.h has the model; device/ctr_step.h runs them): its
// embeddings and first-order weights gathered, the pairwise interaction and its backward pass,
// the logit, and the term of a row's gradient.
//
// Thread-safety: the functors are immutable.
#ifndef SYNCLINE_DEVICE_CTR_KERNELS_H_
#define SYNCLINE_DEVICE_CTR_KERNELS_H_

#include <cstddef>
#include <cstdint>

#include "core/host_device.h"
#include "device/kernels.h"

namespace syncline::device_step {

// An example has 13 dense values and 26 categorical ids (kCtrFields), one feature each in the
// batch's CSR, so feature j is example j / 26's field j % 26. Its 27 vectors (the bottom layer's
// output, then the embeddings) are v [n][27][D].

inline constexpr int kCtrDense = 13;
inline constexpr int kCtrFields = 26;
inline constexpr int kCtrVectors = 1 + kCtrFields;
inline constexpr int kCtrPairs = kCtrVectors * (kCtrVectors - 1) / 2;

// v[e][1 + f][d] = the embedding of example e's field f (zeros for a missing id);
// i = (e * 26 + f) * D + d.
struct CtrEmbeddings {
  const uint32_t* slots;
  const float* rows;  // [keys][D + 1]: the embedding, then the first-order weight
  int dim;
  float* v;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t j = i / dim;
    const size_t d = i % dim;
    const size_t e = j / kCtrFields;
    const size_t f = j % kCtrFields;
    const uint32_t slot = slots[j];
    v[(e * kCtrVectors + 1 + f) * dim + d] =
        slot == kNoSlot ? 0.0f : rows[static_cast<size_t>(slot) * (dim + 1) + d];
  }
};

// fo[e] = the sum of example e's first-order weights, in field order.
struct CtrFirstOrder {
  const uint32_t* slots;
  const float* rows;
  int dim;
  float* fo;
  SYNCLINE_HD void operator()(size_t e) const {
    float sum = 0;
    for (int f = 0; f < kCtrFields; ++f) {
      const uint32_t slot = slots[e * kCtrFields + f];
      if (slot != kNoSlot) sum += rows[static_cast<size_t>(slot) * (dim + 1) + dim];
    }
    fo[e] = sum;
  }
};

// v[e][0] = x[e] (the bottom layer's output); i = e * D + d.
struct CtrPlaceBottom {
  const float* x;
  int dim;
  float* v;
  SYNCLINE_HD void operator()(size_t i) const { v[(i / dim) * kCtrVectors * dim + i % dim] = x[i]; }
};

// z [n][inputs]: x, then the dot product of every pair (a < c) of the 27 vectors, in the order
// pair_a / pair_c list them; i = e * inputs + j.
struct CtrInteract {
  const float* v;
  const uint8_t* pair_a;
  const uint8_t* pair_c;
  int dim;
  int inputs;
  float* z;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t e = i / inputs;
    const int j = static_cast<int>(i % inputs);
    const float* ve = v + e * kCtrVectors * dim;
    if (j < dim) {
      z[i] = ve[j];
      return;
    }
    const float* a = ve + pair_a[j - dim] * dim;
    const float* c = ve + pair_c[j - dim] * dim;
    float sum = a[0] * c[0];
    for (int d = 1; d < dim; ++d) sum += a[d] * c[d];
    z[i] = sum;
  }
};

// logit[e] = out_b + out_w . h[e] + fo[e].
struct CtrLogit {
  const float* h;  // [n][hidden]
  const float* out_w;
  const float* out_b;
  const float* fo;
  int hidden;
  float* logit;
  SYNCLINE_HD void operator()(size_t e) const {
    float dot = 0;
    for (int k = 0; k < hidden; ++k) dot += out_w[k] * h[e * hidden + k];
    logit[e] = out_b[0] + dot + fo[e];
  }
};

// dh[e][k] = g[e] * out_w[k] where pre > 0, else 0; i = e * hidden + k.
struct CtrHiddenDelta {
  const float* pre;
  const float* g;
  const float* out_w;
  int hidden;
  float* dh;
  SYNCLINE_HD void operator()(size_t i) const {
    dh[i] = pre[i] > 0 ? g[i / hidden] * out_w[i % hidden] : 0.0f;
  }
};

// dv [n][27][D] through the interaction: dv[e][u] = (u == 0: dz's x part) + the sum over the
// other vectors w of dz[e][pair(u, w)] * v[e][w]; i = (e * 27 + u) * D + d.
struct CtrInteractBackward {
  const float* dz;  // [n][inputs]
  const float* v;
  const int16_t* pair_of;  // [27][27]: the pair index of (a, c), a != c
  int dim;
  int inputs;
  float* dv;
  SYNCLINE_HD void operator()(size_t i) const {
    const size_t d = i % dim;
    const size_t eu = i / dim;
    const size_t e = eu / kCtrVectors;
    const int u = static_cast<int>(eu % kCtrVectors);
    const float* dze = dz + e * inputs;
    const float* ve = v + e * kCtrVectors * dim;
    float sum = u == 0 ? dze[d] : 0.0f;
    for (int w = 0; w < kCtrVectors; ++w) {
      if (w == u) continue;
      sum += dze[dim + pair_of[u * kCtrVectors + w]] * ve[w * dim + d];
    }
    dv[i] = sum;
  }
};

// The ctr model's term for a row's gradient [D + 1]: feature j's embedding gradient (dv of its
// field) for k < D, and its example's g for the first-order weight.
struct CtrTerm {
  const float* dv;
  const float* g;
  int dim;
  SYNCLINE_HD float operator()(uint32_t j, size_t k) const {
    const size_t e = j / kCtrFields;
    return k < static_cast<size_t>(dim) ? dv[(e * kCtrVectors + 1 + j % kCtrFields) * dim + k]
                                        : g[e];
  }
};

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_CTR_KERNELS_H_
