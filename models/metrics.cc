#include "models/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "models/example_metrics.h"

namespace syncline {
namespace {

using example_metrics::BinaryHit;
using example_metrics::BinaryLoss;

class HostEvaluator final : public ModelEvaluator {
 public:
  explicit HostEvaluator(const Model& model) : model_(model) {}

  void Add(const Dataset& data, absl::Span<const uint32_t> examples,
           absl::Span<const uint64_t> keys, absl::Span<const float> rows,
           absl::Span<const float> bias) override {
    model_.Predict(data, examples, keys, rows, bias, &chunk_);
    scores_.insert(scores_.end(), chunk_.begin(), chunk_.end());
    for (const uint32_t e : examples) labels_.push_back(data.labels[e]);
  }

  Evaluation Finish() override {
    return model_.binary() ? EvaluateBinary(scores_, labels_)
                           : EvaluateClasses(scores_, labels_, model_.num_classes());
  }

 private:
  const Model& model_;
  std::vector<float> scores_, labels_, chunk_;
};

}  // namespace

double BinaryAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  // The device's rank keys (NaN lowest, -0 = +0), so that both rank alike.
  std::vector<uint32_t> keys(n);
  for (size_t i = 0; i < n; ++i) keys[i] = example_metrics::RankKey(scores[i]);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&keys](size_t a, size_t b) { return keys[a] < keys[b]; });

  double positive_rank_sum = 0;
  size_t positives = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && keys[order[j]] == keys[order[i]]) ++j;
    const double average_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (size_t t = i; t < j; ++t) {
      if (labels[order[t]] > 0.5f) {
        positive_rank_sum += average_rank;
        ++positives;
      }
    }
    i = j;
  }
  const size_t negatives = n - positives;
  if (positives == 0 || negatives == 0) return 0.5;
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1) / 2) / (p * static_cast<double>(negatives));
}

Evaluation EvaluateBinary(absl::Span<const float> scores, absl::Span<const float> labels) {
  Evaluation eval;
  const size_t n = std::min(scores.size(), labels.size());
  eval.examples = n;
  if (n == 0) return eval;
  double loss = 0;
  size_t correct = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool positive = labels[i] > 0.5f;
    loss += BinaryLoss(scores[i], positive);
    correct += BinaryHit(scores[i], positive);
  }
  eval.auc = BinaryAuc(scores.subspan(0, n), labels.subspan(0, n));
  eval.loss = loss / static_cast<double>(n);
  eval.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return eval;
}

Evaluation EvaluateClasses(absl::Span<const float> scores, absl::Span<const float> labels, int k) {
  Evaluation eval;
  const size_t n = std::min(scores.size() / static_cast<size_t>(k), labels.size());
  eval.examples = n;
  if (n == 0) return eval;
  double loss = 0;
  size_t correct = 0;
  for (size_t i = 0; i < n; ++i) {
    const float* p = &scores[i * k];
    const uint32_t label = example_metrics::ClassOf(labels[i], k);
    loss += example_metrics::ClassLoss(p, k, label);
    correct += example_metrics::ClassHit(p, k, label);
  }
  eval.loss = loss / static_cast<double>(n);
  eval.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return eval;
}

std::unique_ptr<ModelEvaluator> NewHostEvaluator(const Model& model) {
  return std::make_unique<HostEvaluator>(model);
}

Evaluation Evaluate(const Model& model, const Dataset& data, absl::Span<const uint64_t> keys,
                    absl::Span<const float> rows, absl::Span<const float> bias) {
  if (data.size() == 0) return Evaluation{};
  std::vector<uint32_t> examples(data.size());
  std::iota(examples.begin(), examples.end(), 0);
  std::unique_ptr<ModelEvaluator> evaluator = model.NewEvaluator();
  evaluator->Add(data, examples, keys, rows, bias);
  return evaluator->Finish();
}

}  // namespace syncline
