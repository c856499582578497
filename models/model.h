// Models over sparse features whose weights live in two parameter-server tables: a sparse table
// of rows (row_dim() floats per feature id) and a dense bias table (bias_dim() floats).
//
// A Model holds no weights: a worker pulls the rows for a batch's keys (UniqueKeys) and the bias,
// computes loss and gradients here, and pushes the gradients back. Keys absent from `keys` are
// treated as all-zero rows (what a server returns for a feature it has never seen) and get no
// gradient.
//
// Thread-safety: Models are immutable after Create; all methods are const and may be called
// concurrently, provided concurrent calls write to different outputs.
#ifndef SYNCLINE_MODELS_MODEL_H_
#define SYNCLINE_MODELS_MODEL_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "compression/gradient_encoder.h"
#include "data/dataset.h"

namespace syncline {

struct ModelOptions {
  // 2 for binary models; softmax and mlp: K >= 2 classes.
  int num_classes = 2;
  // ctr: floats per categorical embedding (D).
  int embedding_dim = 8;
  // Widths of the hidden layers, input side first. ctr: one, the top MLP's (default 64); mlp:
  // one or more (default 256, 128). Empty: the model's default.
  std::vector<int> hidden;
};

// Quality of a model's scores on a dataset (models/metrics.h).
struct Evaluation {
  double loss = 0;       // Mean log loss / cross-entropy, probabilities clamped to [1e-7, 1-1e-7].
  double auc = -1;       // Binary models only; -1 when not computed.
  double accuracy = -1;  // Binary (threshold 0.5) and multiclass (argmax); -1 when no examples.
  size_t examples = 0;
};

// Scores a test set a batch at a time and keeps what its metrics need where the model computes
// its scores: a GPU model keeps them on the device and downloads only the metrics
// (Model::NewEvaluator). Must not outlive its model. Thread-compatible.
class ModelEvaluator {
 public:
  virtual ~ModelEvaluator() = default;
  // Scores `examples` of `data` at the given weights (as Model::Predict) and keeps them.
  virtual void Add(const Dataset& data, absl::Span<const uint32_t> examples,
                   absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                   absl::Span<const float> bias) = 0;
  // The metrics of every example added (models/metrics.h defines them): loss, accuracy and, for
  // binary models, AUC. Without examples: Evaluation{}.
  virtual Evaluation Finish() = 0;
};

// Time spent copying to and from a model's device (Model::TakeTransferTimes).
struct TransferTimes {
  absl::Duration upload, download;
};

class Model {
 public:
  virtual ~Model() = default;

  // name: "logreg" (binary logistic regression, row_dim 1, bias_dim 1; num_classes must be 2),
  // "softmax" (multiclass, row_dim K, bias_dim K, K = num_classes >= 2), "ctr" (the
  // DLRM-style click model of models/ctr_model.h over Criteo-layout data) or "mlp" (the
  // multilayer perceptron of models/mlp_model.h, K = num_classes >= 2).
  // Unknown names and bad options are InvalidArgument.
  static absl::StatusOr<std::unique_ptr<Model>> Create(std::string_view name,
                                                       const ModelOptions& options);
  static absl::StatusOr<std::unique_ptr<Model>> Create(std::string_view name, int num_classes) {
    return Create(name, ModelOptions{.num_classes = num_classes});
  }

  virtual std::string_view name() const = 0;
  virtual int row_dim() const = 0;
  virtual int bias_dim() const = 0;
  // Classes the model tells apart: 2 for binary models, K for softmax and mlp.
  virtual int num_classes() const = 0;
  // True when Predict returns one score, P(y=1), per example (logreg, ctr); false when it
  // returns num_classes() class probabilities per example (softmax and mlp, even with 2).
  virtual bool binary() const = 0;

  // The sorted unique keys whose rows the model reads for `examples`: UniqueKeys, unless the
  // model uses some entries as plain values (ctr's dense features).
  virtual std::vector<uint64_t> BatchKeys(const Dataset& data,
                                          absl::Span<const uint32_t> examples) const;

  // Rows and bias start uniform in [-scale, scale] on the servers (TableConfig::init_scale);
  // 0 is zeros. Models with hidden units or products of weights need > 0 to break symmetry.
  virtual float row_init_scale() const { return 0; }
  virtual float bias_init_scale() const { return 0; }

  // Returns the sum over `examples` (indices into data) of the per-example loss (log loss /
  // cross-entropy, computed in log space so it never overflows) at the given weights.
  // keys: sorted unique feature ids, normally covering every feature of the examples (as from
  // UniqueKeys); rows: keys.size()*row_dim() weights aligned with keys; bias: bias_dim() floats.
  // ADDS the sum of the per-example gradients into row_grads (aligned with rows) and bias_grad.
  virtual double LossAndGradient(const Dataset& data, absl::Span<const uint32_t> examples,
                                 absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                                 absl::Span<const float> bias, absl::Span<float> row_grads,
                                 absl::Span<float> bias_grad) const = 0;

  // Replaces *scores with per-example scores, in the order of `examples`: binary() → P(y=1), one
  // float per example; otherwise row_dim() class probabilities per example.
  virtual void Predict(const Dataset& data, absl::Span<const uint32_t> examples,
                       absl::Span<const uint64_t> keys, absl::Span<const float> rows,
                       absl::Span<const float> bias, std::vector<float>* scores) const = 0;

  // An evaluator for this model's scores. The default scores with Predict and keeps the scores
  // on the host.
  virtual std::unique_ptr<ModelEvaluator> NewEvaluator() const;

  // From now on, LossAndGradient keeps the gradients of `want.table` where it computes them
  // instead of adding them into row_grads or bias_grad: as a dense gradient of want.floats
  // floats (rows: key k's row at k * row_dim(), keys beyond it left out, as the backend refuses
  // them; the dense table as it is), summed until the encoder's Compress or Drain of a part,
  // which encodes it with want.codec. Null where the model cannot (CPU models, whose backend
  // encodes the gradients it is handed). A new call for a table replaces its encoder, with zero
  // residuals; the model owns it.
  virtual GradientEncoder* EncodeGradients(const GradientCompression& want) const {
    return nullptr;
  }

  // From now on, LossAndGradient keeps each step's row gradients where it computes them
  // (until the next step) instead of adding them into row_grads, and the encoder compresses
  // them with per-row error feedback (RowGradientEncoder). Null where the model cannot (CPU
  // models). A new call replaces the encoder, with empty residual tables; it also replaces an
  // encoder of the rows made by EncodeGradients, and EncodeGradients of the rows replaces it.
  virtual RowGradientEncoder* EncodeRows(const RowCompression& want) const { return nullptr; }

  // From now on, the replies of compressed pulls of the rows are decoded by the decoder, which
  // keeps the worker's copy of the pulled rows where the model computes: LossAndGradient reads
  // a read's rows there (PulledRowDecoder). Null where the model cannot (CPU models, another
  // width). A new call replaces the decoder, with an empty copy.
  virtual PulledRowDecoder* DecodePulls(const PullDecoding& want) const { return nullptr; }

  // From now on, steps and BatchKeys on `data` read its examples from a copy where the model
  // computes (a GPU model: the features go up once, and a batch is gathered there from its
  // example indices). `data` must not change, and must stay, until KeepData(nullptr) or
  // another KeepData. False where the model keeps nothing (CPU models, ctr, data that does not
  // fit): it reads `data` as ever.
  virtual bool KeepData(const Dataset* data) const { return false; }

  // Whether the trainer should announce each next batch before the current step (Prefetch): a
  // device model packs and uploads it while the current step computes.
  virtual bool WantsPrefetch() const { return false; }
  // The next LossAndGradient will be on `examples` of `data` with these keys; `data` must stay
  // valid until that call. A call for another batch computes as ever (the staged one is
  // dropped).
  virtual void Prefetch(const Dataset& data, absl::Span<const uint32_t> examples,
                        absl::Span<const uint64_t> keys) const {}

  // From now on, LossAndGradient hands every gradient back again and reads the rows it is
  // handed; the encoders EncodeGradients and EncodeRows made and the decoder of DecodePulls are
  // gone (a new timeline's backend asks again).
  virtual void StopEncoding() const {}

  // Time the calls since the last Take spent copying to and from a device (GPU models; zero on
  // the CPU).
  virtual TransferTimes TakeTransferTimes() const { return {}; }
};

// Sorted unique feature ids of the given examples.
std::vector<uint64_t> UniqueKeys(const Dataset& data, absl::Span<const uint32_t> examples);

}  // namespace syncline

#endif  // SYNCLINE_MODELS_MODEL_H_
