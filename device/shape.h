// The layout of a model's parameters as the device steps use it (device/mlp_step.h,
// device/ctr_step.h).
//
// Thread-safety: a plain value.
#ifndef SYNCLINE_DEVICE_SHAPE_H_
#define SYNCLINE_DEVICE_SHAPE_H_

#include <cstddef>
#include <vector>

namespace syncline::device_step {

// The layout of a model's parameters as the steps use it: row_dim floats per key; the dense
// ("bias") table holds the first layer's bias at b[0] and, for the layers i >= 1 of an mlp,
// input-major weights at w[i] and the bias at b[i]. widths: every layer's outputs, the logits'
// last (one layer: a linear model).
struct Shape {
  std::vector<int> widths;
  std::vector<size_t> w, b;
  size_t dense = 0;  // floats in the dense table
  bool binary = false;
  int row_dim() const { return widths[0]; }
  int outputs() const { return widths.back(); }

  // The ctr model (models/ctr_model.h's CtrLayout): D, H, the top layer's inputs and where each
  // dense parameter sits. ctr_dim 0: not a ctr model.
  int ctr_dim = 0, ctr_hidden = 0, ctr_inputs = 0;
  size_t bottom_w = 0, bottom_b = 0, top_w = 0, top_b = 0, out_w = 0, out_b = 0;
};

}  // namespace syncline::device_step

#endif  // SYNCLINE_DEVICE_SHAPE_H_
