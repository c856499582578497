#include "models/ctr_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "data/criteo.h"
#include "gtest/gtest.h"
#include "models/metrics.h"

namespace syncline {
namespace {

// A Criteo-layout dataset: example i has dense values dense[i] and categorical ids
// ids[i] (26 each).
Dataset MakeCriteoData(const std::vector<std::vector<float>>& dense,
                       const std::vector<std::vector<uint64_t>>& ids,
                       const std::vector<float>& labels) {
  Dataset d;
  d.row_offsets.push_back(0);
  for (size_t i = 0; i < labels.size(); ++i) {
    for (int j = 0; j < kCriteoDenseFields; ++j) {
      d.ids.push_back(j);
      d.values.push_back(dense[i][j]);
    }
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      d.ids.push_back(ids[i][f]);
      d.values.push_back(1.0f);
    }
    d.labels.push_back(labels[i]);
    d.row_offsets.push_back(d.ids.size());
  }
  return d;
}

std::vector<uint32_t> All(const Dataset& d) {
  std::vector<uint32_t> all(d.size());
  for (uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  return all;
}

TEST(CtrModelTest, ShapesFollowTheOptions) {
  auto model = Model::Create("ctr", ModelOptions{.embedding_dim = 4, .hidden = {16}});
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->row_dim(), 5);
  // bottom 4x13 + 4, top (4 + 351) x 16 + 16, output 16 + 1.
  EXPECT_EQ((*model)->bias_dim(), 4 * 13 + 4 + 355 * 16 + 16 + 16 + 1);
  EXPECT_TRUE((*model)->binary());
  EXPECT_GT((*model)->row_init_scale(), 0);
  EXPECT_GT((*model)->bias_init_scale(), 0);
  EXPECT_FALSE(Model::Create("ctr", ModelOptions{.embedding_dim = 0}).ok());
  EXPECT_FALSE(Model::Create("ctr", ModelOptions{.hidden = {0}}).ok());
  EXPECT_FALSE(Model::Create("ctr", ModelOptions{.num_classes = 3}).ok());
}

TEST(CtrModelTest, BatchKeysAreTheCategoricalIdsOnly) {
  std::vector<std::vector<uint64_t>> ids(2, std::vector<uint64_t>(26));
  for (int f = 0; f < 26; ++f) {
    ids[0][f] = CriteoCategoricalId(f, 1, true);
    ids[1][f] = CriteoCategoricalId(f, f < 13 ? 1 : 2, true);
  }
  const Dataset d =
      MakeCriteoData(std::vector<std::vector<float>>(2, std::vector<float>(13, 1)), ids, {0, 1});
  auto model = *Model::Create("ctr", ModelOptions{});
  const std::vector<uint64_t> keys = model->BatchKeys(d, All(d));
  EXPECT_EQ(keys.size(), 26u + 13u);
  EXPECT_TRUE(std::is_sorted(keys.begin(), keys.end()));
  for (uint64_t k : keys) EXPECT_GE(k, kCriteoCategoricalBit);
}

// Random small problem for gradient checks: a few examples sharing some ids, one id not pulled.
struct GradientProblem {
  Dataset data;
  std::vector<uint64_t> keys;
  std::vector<float> rows, bias;
};

// `examples` random Criteo examples: dense values uniform in [0.5 - spread/2, 0.5 + spread/2],
// categorical values in [0, values], labels alternating.
Dataset RandomCriteo(std::mt19937_64& rng, int examples, int values, float spread) {
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  std::uniform_int_distribution<int> value(0, values);
  std::vector<std::vector<float>> dense(examples, std::vector<float>(13));
  std::vector<std::vector<uint64_t>> ids(examples, std::vector<uint64_t>(26));
  std::vector<float> labels;
  for (int i = 0; i < examples; ++i) {
    for (float& x : dense[i]) x = spread * uniform(rng) + 0.5f;
    for (int f = 0; f < 26; ++f) ids[i][f] = CriteoCategoricalId(f, value(rng), true);
    labels.push_back(static_cast<float>(i % 2));
  }
  return MakeCriteoData(dense, ids, labels);
}

GradientProblem MakeGradientProblem(const Model& model, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  GradientProblem p;
  p.data = RandomCriteo(rng, 5, 2, 2.0f);
  p.keys = model.BatchKeys(p.data, All(p.data));
  p.keys.erase(p.keys.begin() + 3);  // A key the servers did not return: a zero row.
  p.rows.resize(p.keys.size() * model.row_dim());
  for (float& x : p.rows) x = uniform(rng);
  p.bias.resize(model.bias_dim());
  for (float& x : p.bias) x = uniform(rng);
  return p;
}

double Loss(const Model& model, const GradientProblem& p) {
  std::vector<float> gr(p.rows.size()), gb(p.bias.size());
  return model.LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias, absl::MakeSpan(gr),
                               absl::MakeSpan(gb));
}

// Compares every analytic partial derivative with a central finite difference.
TEST(CtrModelTest, GradientsMatchFiniteDifferences) {
  const ModelOptions options{.embedding_dim = 3, .hidden = {5}};
  auto model = *CreateCtrModel(options, model_internal::Precision::kDouble);
  GradientProblem p = MakeGradientProblem(*model, 11);
  std::vector<float> gr(p.rows.size()), gb(p.bias.size());
  model->LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias, absl::MakeSpan(gr),
                         absl::MakeSpan(gb));
  int checked = 0, nonzero = 0;
  auto check = [&](std::vector<float>* params, const std::vector<float>& analytic,
                   const char* what) {
    for (size_t i = 0; i < params->size(); ++i) {
      const float saved = (*params)[i];
      const float up = saved + 1e-3f, down = saved - 1e-3f;
      (*params)[i] = up;
      const double loss_up = Loss(*model, p);
      (*params)[i] = down;
      const double loss_down = Loss(*model, p);
      (*params)[i] = saved;
      const double numeric = (loss_up - loss_down) / (static_cast<double>(up) - down);
      const double a = analytic[i];
      EXPECT_LE(std::fabs(a - numeric), 1e-3 * std::max(std::fabs(a), std::fabs(numeric)) + 1e-6)
          << what << " " << i << ": analytic " << a << " numeric " << numeric;
      ++checked;
      nonzero += a != 0;
    }
  };
  check(&p.bias, gb, "dense parameter");
  check(&p.rows, gr, "row parameter");
  EXPECT_EQ(checked, static_cast<int>(p.bias.size() + p.rows.size()));
  EXPECT_GT(nonzero, checked / 2) << "most parameters must matter";

  // The float model used for training agrees with the double one.
  auto fast = *CreateCtrModel(options, model_internal::Precision::kFloat);
  std::vector<float> fgr(p.rows.size()), fgb(p.bias.size());
  const double fast_loss = fast->LossAndGradient(p.data, All(p.data), p.keys, p.rows, p.bias,
                                                 absl::MakeSpan(fgr), absl::MakeSpan(fgb));
  EXPECT_NEAR(fast_loss, Loss(*model, p), 1e-4);
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(fgb[i], gb[i], 1e-4 + 1e-4 * std::fabs(gb[i]));
  for (size_t i = 0; i < gr.size(); ++i) EXPECT_NEAR(fgr[i], gr[i], 1e-4 + 1e-4 * std::fabs(gr[i]));
}

// The model works through a call's examples in blocks (of 256); a call over several blocks,
// the last one short, equals the sum of calls over its parts, and so do its scores.
TEST(CtrModelTest, ACallOverSeveralBlocksIsTheSumOfItsParts) {
  const ModelOptions options{.embedding_dim = 4, .hidden = {6}};
  auto model = *CreateCtrModel(options, model_internal::Precision::kDouble);
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> uniform(-0.5f, 0.5f);
  const Dataset data = RandomCriteo(rng, 600, 40, 1.0f);
  const std::vector<uint32_t> all = All(data);
  const std::vector<uint64_t> keys = model->BatchKeys(data, all);
  std::vector<float> rows(keys.size() * model->row_dim()), bias(model->bias_dim());
  for (float& x : rows) x = uniform(rng);
  for (float& x : bias) x = uniform(rng);

  std::vector<float> gr(rows.size()), gb(bias.size());
  const double loss =
      model->LossAndGradient(data, all, keys, rows, bias, absl::MakeSpan(gr), absl::MakeSpan(gb));
  std::vector<float> pgr(rows.size()), pgb(bias.size());
  const absl::Span<const uint32_t> span(all);
  double parts = 0;
  for (const auto& part : {span.subspan(0, 300), span.subspan(300, 1), span.subspan(301)}) {
    parts += model->LossAndGradient(data, part, keys, rows, bias, absl::MakeSpan(pgr),
                                    absl::MakeSpan(pgb));
  }
  EXPECT_NEAR(loss, parts, 1e-9 * std::fabs(loss));
  for (size_t i = 0; i < gb.size(); ++i) ASSERT_NEAR(gb[i], pgb[i], 1e-5) << "dense " << i;
  for (size_t i = 0; i < gr.size(); ++i) ASSERT_NEAR(gr[i], pgr[i], 1e-5) << "row " << i;

  std::vector<float> scores, one;
  model->Predict(data, all, keys, rows, bias, &scores);
  ASSERT_EQ(scores.size(), all.size());
  for (const uint32_t e : {0u, 255u, 256u, 511u, 512u, 599u}) {
    model->Predict(data, span.subspan(e, 1), keys, rows, bias, &one);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_FLOAT_EQ(scores[e], one[0]) << "example " << e;
  }
}

TEST(CtrModelTest, PredictIsTheSigmoidOfTheLossesLogit) {
  auto model = *Model::Create("ctr", ModelOptions{.embedding_dim = 3, .hidden = {5}});
  GradientProblem p = MakeGradientProblem(*model, 5);
  std::vector<float> scores;
  model->Predict(p.data, All(p.data), p.keys, p.rows, p.bias, &scores);
  ASSERT_EQ(scores.size(), p.data.size());
  double loss = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    loss -= std::log(p.data.labels[i] > 0.5f ? scores[i] : 1 - scores[i]);
  }
  EXPECT_NEAR(loss, Loss(*model, p), 1e-4);
}

// Labels depend only on whether two categorical fields have the same parity: each value alone
// says nothing (every value is positive half the time), so a linear model cannot learn it and
// the pairwise dot products can.
Dataset MakeInteractionData(uint64_t seed, int n) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> value(0, 7);
  std::bernoulli_distribution noise(0.1);
  std::vector<std::vector<float>> dense(n, std::vector<float>(13, 0.0f));
  std::vector<std::vector<uint64_t>> ids(n, std::vector<uint64_t>(26));
  std::vector<float> labels;
  for (int i = 0; i < n; ++i) {
    const int a = value(rng), b = value(rng);
    for (int f = 0; f < 26; ++f) ids[i][f] = CriteoCategoricalId(f, 0, false);
    ids[i][0] = CriteoCategoricalId(0, a, true);
    ids[i][1] = CriteoCategoricalId(1, b, true);
    const bool same = a % 2 == b % 2;
    labels.push_back(same != noise(rng) ? 1.0f : 0.0f);
  }
  return MakeCriteoData(dense, ids, labels);
}

// Trains with Adagrad on mean batch gradients, as the servers would, from the model's initial
// ranges; returns the test AUC.
double TrainAndTest(const Model& model, const Dataset& train, const Dataset& test) {
  std::mt19937_64 rng(3);
  auto init = [&](float scale) {
    return std::uniform_real_distribution<float>(-scale, scale)(rng);
  };
  const int dim = model.row_dim();
  std::map<uint64_t, std::pair<std::vector<float>, std::vector<float>>> table;  // rows, state
  std::vector<float> bias(model.bias_dim()), bias_state(model.bias_dim());
  for (float& w : bias) w = init(model.bias_init_scale());
  auto row = [&](uint64_t key) -> auto& {
    auto [it, added] = table.try_emplace(key);
    if (added) {
      for (int j = 0; j < dim; ++j) it->second.first.push_back(init(model.row_init_scale()));
      it->second.second.assign(dim, 0.0f);
    }
    return it->second;
  };
  constexpr float kLr = 0.1f;
  auto adagrad = [](float* w, float* state, const float* g, size_t n, float scale) {
    for (size_t i = 0; i < n; ++i) {
      const float gi = g[i] / scale;
      state[i] += gi * gi;
      w[i] -= kLr * gi / (std::sqrt(state[i]) + 1e-8f);
    }
  };
  constexpr uint32_t kBatch = 64;
  for (int epoch = 0; epoch < 8; ++epoch) {
    for (uint32_t begin = 0; begin < train.size(); begin += kBatch) {
      std::vector<uint32_t> batch;
      for (uint32_t i = begin; i < std::min<uint32_t>(train.size(), begin + kBatch); ++i) {
        batch.push_back(i);
      }
      const std::vector<uint64_t> keys = model.BatchKeys(train, batch);
      std::vector<float> rows;
      for (uint64_t k : keys) {
        const auto& r = row(k).first;
        rows.insert(rows.end(), r.begin(), r.end());
      }
      std::vector<float> gr(rows.size()), gb(bias.size());
      model.LossAndGradient(train, batch, keys, rows, bias, absl::MakeSpan(gr), absl::MakeSpan(gb));
      const float n = static_cast<float>(batch.size());
      for (size_t i = 0; i < keys.size(); ++i) {
        auto& [w, state] = row(keys[i]);
        adagrad(w.data(), state.data(), &gr[i * dim], dim, n);
      }
      adagrad(bias.data(), bias_state.data(), gb.data(), gb.size(), n);
    }
  }
  const std::vector<uint64_t> keys = model.BatchKeys(test, All(test));
  std::vector<float> rows;
  for (uint64_t k : keys) {
    const auto& r = row(k).first;
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return Evaluate(model, test, keys, rows, bias).auc;
}

TEST(CtrModelTest, LearnsAnInteractionThatLogisticRegressionCannot) {
  const Dataset train = MakeInteractionData(1, 4000);
  const Dataset test = MakeInteractionData(2, 2000);
  auto ctr = *Model::Create("ctr", ModelOptions{.embedding_dim = 4, .hidden = {16}});
  auto logreg = *Model::Create("logreg", 2);
  const double ctr_auc = TrainAndTest(*ctr, train, test);
  const double logreg_auc = TrainAndTest(*logreg, train, test);
  // Labels are 10% noisy: the best possible AUC is 0.9.
  EXPECT_GT(ctr_auc, 0.85);
  EXPECT_LT(logreg_auc, 0.6);
  EXPECT_GT(ctr_auc - logreg_auc, 0.25);
}

}  // namespace
}  // namespace syncline
