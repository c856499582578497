// The "ctr" model: a DLRM-style click-through-rate model over Criteo-layout data (see
// data/criteo.h: entries 0..12 dense values, entries 13..38 one categorical id per field).
//
//   embeddings   each categorical id's row in the SPARSE table holds D embedding floats and one
//                first-order weight (row_dim = D + 1);
//   bottom       the 13 dense values go through a linear layer to a D-vector x;
//   interaction  the dot products of every pair among the 27 D-vectors (x and the 26
//                embeddings: 351 numbers), concatenated with x;
//   top          one hidden ReLU layer of H units and a linear output, plus the sum of the 26
//                first-order weights, is the logit; sigmoid, log loss.
//
// Every dense parameter (bottom, top) lives in the model's "bias" table, so the sync backends,
// the trainer and the servers treat the model like any other. Gradients are computed by hand
// (checked against finite differences in ctr_model_test.cc).
//
// Thread-safety: as Model.
#ifndef SYNCLINE_MODELS_CTR_MODEL_H_
#define SYNCLINE_MODELS_CTR_MODEL_H_

#include <cstddef>
#include <memory>

#include "absl/status/statusor.h"
#include "models/model.h"
#include "models/model_internal.h"

namespace syncline {

// Where each dense parameter of a ctr model sits in its bias table.
struct CtrLayout {
  CtrLayout(int embedding_dim, int hidden);

  int dim;     // D
  int hidden;  // H
  int inputs;  // of the top layer: D + 27*26/2
  // Offsets: bottom weights [D][13], bottom bias [D], top weights [inputs][H] (input-major, so
  // the forward and backward passes run over contiguous H-vectors), top bias [H], output
  // weights [H], output bias [1].
  size_t bottom_w, bottom_b, top_w, top_b, out_w, out_b;
  size_t size;  // bias_dim
};

// embedding_dim in [1, 256], hidden one width in [1, kMaxHiddenWidth] (empty: 64), and
// options.num_classes must be 2; else InvalidArgument.
absl::StatusOr<std::unique_ptr<Model>> CreateCtrModel(
    const ModelOptions& options,
    model_internal::Precision precision = model_internal::Precision::kFloat);

}  // namespace syncline

#endif  // SYNCLINE_MODELS_CTR_MODEL_H_
