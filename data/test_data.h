// Test data for training tests: a small sparse binary dataset drawn from a known logistic model,
// seeded. For tests only.
#ifndef SYNCLINE_DATA_TEST_DATA_H_
#define SYNCLINE_DATA_TEST_DATA_H_

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "data/dataset.h"

namespace syncline {

// `n` examples with about 5 of `features` features each; `partition` of `parts` keeps every
// parts-th example, the strided split ReadDataset makes.
inline Dataset MakeLogisticData(uint64_t seed, int n, int features, int partition, int parts) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> feature(0, features - 1);
  std::vector<float> truth(features);
  for (float& w : truth) w = std::normal_distribution<float>(0, 1)(rng);
  Dataset d;
  d.num_features = features;
  d.row_offsets.push_back(0);
  for (int i = 0; i < n; ++i) {
    std::vector<uint64_t> ids;
    float score = 0;
    for (int k = 0; k < 5; ++k) ids.push_back(feature(rng));
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    for (uint64_t id : ids) score += truth[id];
    const float label = std::bernoulli_distribution(1 / (1 + std::exp(-score)))(rng) ? 1.f : 0.f;
    if (i % parts != partition) continue;
    d.labels.push_back(label);
    for (uint64_t id : ids) {
      d.ids.push_back(id);
      d.values.push_back(1.0f);
    }
    d.row_offsets.push_back(d.ids.size());
  }
  return d;
}

}  // namespace syncline

#endif  // SYNCLINE_DATA_TEST_DATA_H_
