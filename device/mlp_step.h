// The training step of the linear and mlp models on an executor E (device/device_step.h): the
// forward pass over a loaded batch, then the loss and the gradients of the rows and the dense
// table. A linear model is an mlp of one layer.
//
// Thread-safety: a step uses its executor and buffers alone.
#ifndef SYNCLINE_DEVICE_MLP_STEP_H_
#define SYNCLINE_DEVICE_MLP_STEP_H_

#include <cstddef>
#include <vector>

#include "device/batch.h"
#include "device/kernels.h"
#include "device/shape.h"
#include "models/gemm.h"

namespace syncline::device_step {

// Activations of a forward pass, kept for the backward pass.
template <class E>
struct Activations {
  std::vector<typename E::template Array<float>> pre, h;  // per layer, [n][width]
  typename E::template Array<float> dh, dpre, column_tmp;
  typename E::template Array<double> loss;  // per example
};

// Forward pass over a loaded batch: act->pre.back() holds the logits.
template <class E>
void Forward(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
             const float* dense, Activations<E>* act) {
  const size_t n = batch.n();
  const int layers = static_cast<int>(s.widths.size());
  act->pre.resize(layers);
  act->h.resize(layers);
  for (int i = 0; i < layers; ++i) act->pre[i].Reserve(n * s.widths[i]);
  batch.Gather(e, rows, dense + s.b[0], s.widths[0], act->pre[0].data());
  for (int i = 1; i < layers; ++i) {
    const int in = s.widths[i - 1], out = s.widths[i];
    act->h[i - 1].Reserve(n * in);
    e.ForEach(n * in, Relu{act->pre[i - 1].data(), act->h[i - 1].data()});
    e.ForEach(n * out, BroadcastRows{dense + s.b[i], out, act->pre[i].data()});
    e.Gemm(Transpose::kNo, Transpose::kNo, static_cast<int>(n), out, in, 1.0f, act->h[i - 1].data(),
           in, dense + s.w[i], out, 1.0f, act->pre[i].data(), out);
  }
}

// One training step's loss and gradients over a loaded batch: per-example losses in
// act->loss, and SETS row_grads [num_keys][row_dim] and dense_grads [dense].
template <class E>
void LossAndGradient(E& e, const Shape& s, const SparseBatch<E>& batch, const float* rows,
                     const float* dense, Activations<E>* act, float* row_grads,
                     float* dense_grads) {
  const size_t n = batch.n();
  Forward(e, s, batch, rows, dense, act);
  const int layers = static_cast<int>(s.widths.size());
  act->loss.Reserve(n);
  float* dy = act->pre.back().data();  // the logits, then their gradient
  e.ForEach(n, LossAndDelta{batch.labels(), s.outputs(), s.binary, dy, act->loss.data()});
  e.Zero(dense_grads, s.dense);
  int widest = 0;
  for (const int w : s.widths) widest = w > widest ? w : widest;
  act->dh.Reserve(n * widest);
  act->dpre.Reserve(n * widest);
  for (int i = layers - 1; i >= 1; --i) {
    const int in = s.widths[i - 1], out = s.widths[i];
    ColumnSums(e, dy, n, out, act->column_tmp, dense_grads + s.b[i]);
    e.Gemm(Transpose::kYes, Transpose::kNo, in, out, static_cast<int>(n), 1.0f,
           act->h[i - 1].data(), in, dy, out, 0.0f, dense_grads + s.w[i], out);
    e.Gemm(Transpose::kNo, Transpose::kYes, static_cast<int>(n), in, out, 1.0f, dy, out,
           dense + s.w[i], out, 0.0f, act->dh.data(), in);
    e.ForEach(n * in, ReluBackward{act->pre[i - 1].data(), act->dh.data(), act->dpre.data()});
    dy = act->dpre.data();
  }
  ColumnSums(e, dy, n, s.widths[0], act->column_tmp, dense_grads + s.b[0]);
  batch.Scatter(e, dy, s.widths[0], row_grads);
}

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_MLP_STEP_H_
