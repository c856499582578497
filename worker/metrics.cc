#include "worker/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

namespace syncline {
namespace {

// Bounds -log(p) at about 16.1 so one confidently wrong example cannot dominate the mean.
constexpr double kMinProbability = 1e-7;

double LogLoss(double p_true) {
  return -std::log(std::clamp(p_true, kMinProbability, 1.0 - kMinProbability));
}

}  // namespace

double BinaryAuc(absl::Span<const float> scores, absl::Span<const float> labels) {
  const size_t n = std::min(scores.size(), labels.size());
  // NaN breaks the strict weak ordering std::sort needs; rank it below every number.
  std::vector<float> keys(n);
  for (size_t i = 0; i < n; ++i) {
    keys[i] = std::isnan(scores[i]) ? -std::numeric_limits<float>::infinity() : scores[i];
  }
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
    loss += LogLoss(positive ? scores[i] : 1.0 - scores[i]);
    correct += (scores[i] >= 0.5f) == positive;
  }
  eval.auc = BinaryAuc(scores.subspan(0, n), labels.subspan(0, n));
  eval.loss = loss / static_cast<double>(n);
  eval.accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return eval;
}

Evaluation Evaluate(const Model& model, const Dataset& data, absl::Span<const uint64_t> keys,
                    absl::Span<const float> rows, absl::Span<const float> bias) {
  Evaluation eval;
  eval.examples = data.size();
  if (data.size() == 0) return eval;
  std::vector<uint32_t> examples(data.size());
  std::iota(examples.begin(), examples.end(), 0);
  std::vector<float> scores;
  model.Predict(data, examples, keys, rows, bias, &scores);

  if (model.binary()) return EvaluateBinary(scores, data.labels);
  double loss = 0;
  size_t correct = 0;
  const size_t k = static_cast<size_t>(model.num_classes());
  for (size_t i = 0; i < data.size(); ++i) {
    const float* p = &scores[i * k];
    // Labels outside [0, k) cannot come from ReadDataset; score them as predicted wrong.
    const size_t label = data.labels[i] >= 0 ? static_cast<size_t>(data.labels[i]) : k;
    loss += LogLoss(label < k ? p[label] : 0.0);
    correct += static_cast<size_t>(std::max_element(p, p + k) - p) == label;
  }
  eval.loss = loss / static_cast<double>(data.size());
  eval.accuracy = static_cast<double>(correct) / static_cast<double>(data.size());
  return eval;
}

}  // namespace syncline
