// Quality metrics of a model on a dataset: mean log loss, AUC (binary) and accuracy. The
// per-example parts are models/example_metrics.h's, which a GPU model's evaluator shares.
//
// Thread-safety: free functions with no shared state; safe to call concurrently.
#ifndef SYNCLINE_MODELS_METRICS_H_
#define SYNCLINE_MODELS_METRICS_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/types/span.h"
#include "data/dataset.h"
#include "models/model.h"

namespace syncline {

// Area under the ROC curve of `scores` for `labels` (> 0.5 is positive), computed from ranks
// (Mann-Whitney U) with tied scores getting their average rank; O(n log n). NaN scores rank
// lowest. Returns 0.5 when one class is absent, as a ranking then carries no information.
double BinaryAuc(absl::Span<const float> scores, absl::Span<const float> labels);

// Loss, AUC and accuracy of binary scores P(y=1) for `labels` (> 0.5 is positive).
Evaluation EvaluateBinary(absl::Span<const float> scores, absl::Span<const float> labels);

// Loss and accuracy of class probabilities scores[n][k] for `labels` (class indices; a label
// that is no class of k, or NaN, counts as wrong with probability 0).
Evaluation EvaluateClasses(absl::Span<const float> scores, absl::Span<const float> labels, int k);

// The evaluator Model::NewEvaluator gives by default: Predict's scores kept on the host, then
// EvaluateBinary or EvaluateClasses.
std::unique_ptr<ModelEvaluator> NewHostEvaluator(const Model& model);

// Evaluates `model` over all examples of `data` with the given weights (see Model for the
// meaning of keys, rows and bias; keys normally UniqueKeys over all examples).
Evaluation Evaluate(const Model& model, const Dataset& data, absl::Span<const uint64_t> keys,
                    absl::Span<const float> rows, absl::Span<const float> bias);

}  // namespace syncline

#endif  // SYNCLINE_MODELS_METRICS_H_
