// The ctr model's training step on an executor E (device/device_step.h): its buffers, the
// forward pass over a loaded batch, and the loss and the gradients of the rows (embeddings and
// first-order weights) and of the dense layers.
//
// Thread-safety: a step uses its executor and buffers alone.
#ifndef SYNCLINE_DEVICE_CTR_STEP_H_
#define SYNCLINE_DEVICE_CTR_STEP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "device/batch.h"
#include "device/ctr_kernels.h"
#include "device/kernels.h"
#include "device/shape.h"
#include "models/gemm.h"

namespace syncline::device_step {

// The ctr model's buffers: its pair tables (uploaded once), the batch's dense values, and the
// activations a forward pass keeps for the backward pass.
template <class E>
struct CtrActivations {
  bool tables = false;
  typename E::template Array<uint8_t> pair_a, pair_c;
  typename E::template Array<int16_t> pair_of;
  typename E::template Array<float> dense;  // [n][13]
  typename E::template Array<float> x, v, fo, z, pre, h, logit, dh, dz, dv, column_tmp;
  typename E::template Array<double> loss;

  void Tables(E& e) {
    if (tables) return;
    std::vector<uint8_t> a, c;
    std::vector<int16_t> of(kCtrVectors * kCtrVectors, 0);
    for (int i = 0; i < kCtrVectors; ++i) {
      for (int j = i + 1; j < kCtrVectors; ++j) {
        of[i * kCtrVectors + j] = of[j * kCtrVectors + i] = static_cast<int16_t>(a.size());
        a.push_back(static_cast<uint8_t>(i));
        c.push_back(static_cast<uint8_t>(j));
      }
    }
    pair_a.Reserve(a.size());
    pair_c.Reserve(c.size());
    pair_of.Reserve(of.size());
    e.Upload(pair_a.data(), a.data(), a.size());
    e.Upload(pair_c.data(), c.data(), c.size());
    e.Upload(pair_of.data(), of.data(), of.size());
    e.Finish();  // the host vectors go now
    tables = true;
  }
};

// The ctr model's forward pass over a loaded batch (26 features per example) whose dense values
// are in act->dense: act->logit holds the logits.
template <class E>
void CtrForward(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                const float* w, CtrActivations<E>* act) {
  const size_t n = batch.n();
  const int dim = s.ctr_dim, hidden = s.ctr_hidden, inputs = s.ctr_inputs;
  act->Tables(e);
  act->x.Reserve(n * dim);
  act->v.Reserve(n * kCtrVectors * dim);
  act->fo.Reserve(n);
  act->z.Reserve(n * inputs);
  act->pre.Reserve(n * hidden);
  act->h.Reserve(n * hidden);
  act->logit.Reserve(n);
  e.ForEach(n * kCtrFields * dim, CtrEmbeddings{batch.slots(), rows, dim, act->v.data()});
  e.ForEach(n, CtrFirstOrder{batch.slots(), rows, dim, act->fo.data()});
  // x [n][D] = bottom_b + dense [n][13] bottom_w^T ([D][13]).
  e.ForEach(n * dim, BroadcastRows{w + s.bottom_b, dim, act->x.data()});
  e.Gemm(Transpose::kNo, Transpose::kYes, static_cast<int>(n), dim, kCtrDense, 1.0f,
         act->dense.data(), kCtrDense, w + s.bottom_w, kCtrDense, 1.0f, act->x.data(), dim);
  e.ForEach(n * dim, CtrPlaceBottom{act->x.data(), dim, act->v.data()});
  e.ForEach(n * inputs, CtrInteract{act->v.data(), act->pair_a.data(), act->pair_c.data(), dim,
                                    inputs, act->z.data()});
  // pre [n][H] = top_b + z [n][inputs] top_w [inputs][H].
  e.ForEach(n * hidden, BroadcastRows{w + s.top_b, hidden, act->pre.data()});
  e.Gemm(Transpose::kNo, Transpose::kNo, static_cast<int>(n), hidden, inputs, 1.0f, act->z.data(),
         inputs, w + s.top_w, hidden, 1.0f, act->pre.data(), hidden);
  e.ForEach(n * hidden, Relu{act->pre.data(), act->h.data()});
  e.ForEach(n, CtrLogit{act->h.data(), w + s.out_w, w + s.out_b, act->fo.data(), hidden,
                        act->logit.data()});
}

// The ctr model's step: per-example losses in act->loss; SETS row_grads [keys][D + 1] and
// dense_grads [dense].
template <class E>
void CtrLossAndGradient(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                        const float* w, CtrActivations<E>* act, float* row_grads,
                        float* dense_grads) {
  const size_t n = batch.n();
  const int dim = s.ctr_dim, hidden = s.ctr_hidden, inputs = s.ctr_inputs;
  const int rows_n = static_cast<int>(n);
  CtrForward(e, s, batch, rows, w, act);
  act->loss.Reserve(n);
  float* g = act->logit.data();  // the logits, then the loss's derivatives by them
  e.ForEach(n, LossAndDelta{batch.labels(), 1, true, g, act->loss.data()});
  e.Zero(dense_grads, s.dense);
  // The output layer: out_b's and out_w's gradients (g^T h), then dh.
  ColumnSums(e, g, n, 1, act->column_tmp, dense_grads + s.out_b);
  e.Gemm(Transpose::kYes, Transpose::kNo, 1, hidden, rows_n, 1.0f, g, 1, act->h.data(), hidden,
         0.0f, dense_grads + s.out_w, hidden);
  act->dh.Reserve(n * hidden);
  e.ForEach(n * hidden, CtrHiddenDelta{act->pre.data(), g, w + s.out_w, hidden, act->dh.data()});
  // The top layer: top_w's (z^T dh) and top_b's gradients, and dz = dh top_w^T.
  ColumnSums(e, act->dh.data(), n, hidden, act->column_tmp, dense_grads + s.top_b);
  e.Gemm(Transpose::kYes, Transpose::kNo, inputs, hidden, rows_n, 1.0f, act->z.data(), inputs,
         act->dh.data(), hidden, 0.0f, dense_grads + s.top_w, hidden);
  act->dz.Reserve(n * inputs);
  e.Gemm(Transpose::kNo, Transpose::kYes, rows_n, inputs, hidden, 1.0f, act->dh.data(), hidden,
         w + s.top_w, hidden, 0.0f, act->dz.data(), inputs);
  // Through the interaction to every vector.
  act->dv.Reserve(n * kCtrVectors * dim);
  e.ForEach(n * kCtrVectors * dim,
            CtrInteractBackward{act->dz.data(), act->v.data(), act->pair_of.data(), dim, inputs,
                                act->dv.data()});
  // The bottom layer: bottom_w's gradient dx^T [D][n] dense [n][13] (dx is dv[.][0], rows
  // 27 * D apart) and bottom_b's.
  const int ld = kCtrVectors * dim;
  e.Gemm(Transpose::kYes, Transpose::kNo, dim, kCtrDense, rows_n, 1.0f, act->dv.data(), ld,
         act->dense.data(), kCtrDense, 0.0f, dense_grads + s.bottom_w, kCtrDense);
  ColumnSums(e, act->dv.data(), n, dim, act->column_tmp, dense_grads + s.bottom_b, ld);
  // The rows: embeddings and first-order weights.
  batch.ScatterTerms(e, CtrTerm{act->dv.data(), g, dim}, dim + 1, row_grads);
}

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_CTR_STEP_H_
