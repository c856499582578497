// embed_client: logistic regression trained by a program of your own, as the workers of a
// Syncline job whose coordinator and servers syncline-launch --external-workers started.
//
//   syncline-launch --external-workers --workers 2 --sync bsp --out runs/ext &
//   embed_client --coordinator "$(cat runs/ext/coordinator.address)" --rank 0 &
//   embed_client --coordinator "$(cat runs/ext/coordinator.address)" --rank 1
//
// Every worker draws the same data from a known random linear model (seeded), trains on its
// own stride of it, and worker 0 evaluates the final model on a held-out set when asked.
#include <syncline/worker_session.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Example {
  std::vector<float> x;
  float label;
};

struct Flags {
  std::string coordinator;
  int rank = 0;
  int features = 50;
  int rows = 8000;
  int test_rows = 2000;
  int epochs = 3;
  int batch = 64;
  unsigned seed = 1;
};

// Rows of a known model: label 1 with probability sigmoid(w . x).
std::vector<Example> Generate(const Flags& f, int rows, unsigned stream) {
  std::mt19937 truth(f.seed);
  std::normal_distribution<float> normal(0, 1);
  std::vector<float> w(f.features);
  for (float& v : w) v = normal(truth);
  std::mt19937 rng(f.seed * 7919 + stream);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::vector<Example> data(rows);
  for (Example& e : data) {
    e.x.resize(f.features);
    float z = 0;
    for (int j = 0; j < f.features; ++j) {
      e.x[j] = normal(rng) / std::sqrt(static_cast<float>(f.features));
      z += w[j] * e.x[j];
    }
    e.label = uniform(rng) < 1 / (1 + std::exp(-3 * z)) ? 1.0f : 0.0f;
  }
  return data;
}

// Mean log loss and accuracy of weights `w` (bias last) on `data`.
std::pair<double, double> Score(const std::vector<float>& w, const std::vector<Example>& data) {
  double loss = 0, correct = 0;
  for (const Example& e : data) {
    double z = w.back();
    for (size_t j = 0; j < e.x.size(); ++j) z += w[j] * e.x[j];
    const double p = 1 / (1 + std::exp(-z));
    loss -= e.label > 0 ? std::log(std::max(p, 1e-12)) : std::log(std::max(1 - p, 1e-12));
    correct += (p > 0.5) == (e.label > 0);
  }
  return {loss / data.size(), correct / data.size()};
}

bool ParseFlags(int argc, char** argv, Flags* f) {
  if (const char* c = std::getenv("SYNCLINE_COORDINATOR")) f->coordinator = c;
  if (const char* r = std::getenv("SYNCLINE_RANK")) f->rank = std::atoi(r);
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--coordinator")
      f->coordinator = value;
    else if (flag == "--rank")
      f->rank = std::atoi(value.c_str());
    else if (flag == "--epochs")
      f->epochs = std::atoi(value.c_str());
    else if (flag == "--seed")
      f->seed = static_cast<unsigned>(std::atoi(value.c_str()));
    else
      return false;
  }
  return !f->coordinator.empty() && (argc % 2) == 1;
}

int Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "embed_client: %s: %s\n", what, std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  if (!ParseFlags(argc, argv, &f)) {
    std::fprintf(stderr,
                 "usage: embed_client --coordinator ADDRESS [--rank R] [--epochs N] [--seed S]\n");
    return 2;
  }
  auto session = syncline::WorkerSession::Join({.coordinator = f.coordinator, .rank = f.rank});
  if (!session.ok()) return Fail("cannot join the job", session.status());
  syncline::WorkerSession& s = **session;
  const int workers = s.spec().workers;
  constexpr uint32_t kWeights = 1;
  const absl::Duration timeout = absl::Seconds(60);
  if (auto st = s.DeclareTable({.id = kWeights,
                                .dense = true,
                                .num_keys = static_cast<uint64_t>(f.features) + 1,
                                .optimizer = syncline::OptimizerKind::kAdagrad,
                                .learning_rate = 0.5f},
                               absl::Now() + timeout);
      !st.ok()) {
    return Fail("cannot declare the table", st);
  }

  const std::vector<Example> train = Generate(f, f.rows, 0);
  std::vector<float> w(f.features + 1), grad(f.features + 1);
  // This worker's stride; every worker runs the same number of steps (BSP needs that).
  std::vector<const Example*> mine;
  for (int i = f.rank; i < f.rows; i += workers) mine.push_back(&train[i]);
  const int steps_per_epoch = static_cast<int>(f.rows / workers) / f.batch;
  for (int epoch = 0; epoch < f.epochs; ++epoch) {
    for (int step = 0; step < steps_per_epoch; ++step) {
      auto pulled = s.PullDense(kWeights, 0, w);
      if (!pulled.ok()) return Fail("pull", pulled.status());
      if (auto st = s.Wait(*pulled, absl::Now() + timeout); !st.ok()) return Fail("pull", st);
      std::fill(grad.begin(), grad.end(), 0.0f);
      double loss = 0;
      for (int b = 0; b < f.batch; ++b) {
        const Example& e = *mine[(step * f.batch + b) % mine.size()];
        double z = w.back();
        for (int j = 0; j < f.features; ++j) z += w[j] * e.x[j];
        const double p = 1 / (1 + std::exp(-z));
        loss -= e.label > 0 ? std::log(std::max(p, 1e-12)) : std::log(std::max(1 - p, 1e-12));
        const float g = static_cast<float>(p - e.label);
        for (int j = 0; j < f.features; ++j) grad[j] += g * e.x[j];
        grad.back() += g;
      }
      // A gradient sum and the examples behind it: the servers divide and apply Adagrad.
      auto pushed = s.PushDense(kWeights, 0, grad, static_cast<float>(f.batch));
      if (!pushed.ok()) return Fail("push", pushed.status());
      if (auto st = s.Wait(*pushed, absl::Now() + timeout); !st.ok()) return Fail("push", st);
      if (auto st = s.Clock(f.batch, loss / f.batch); !st.ok()) return Fail("clock", st);
    }
  }

  double final_loss = -1;
  auto evaluate = [&]() -> absl::StatusOr<syncline::EvaluationResult> {
    auto pulled = s.PullDense(kWeights, 0, w);
    if (!pulled.ok()) return pulled.status();
    if (auto st = s.Wait(*pulled, absl::Now() + timeout); !st.ok()) return st;
    const std::vector<Example> test = Generate(f, f.test_rows, 1);
    const auto [loss, accuracy] = Score(w, test);
    final_loss = loss;
    return syncline::EvaluationResult{.loss = loss, .accuracy = accuracy, .examples = test.size()};
  };
  if (auto st = s.Finish(evaluate); !st.ok()) return Fail("finish", st);
  std::printf("embed_client w%d: %lld steps", f.rank, static_cast<long long>(s.clock()));
  if (final_loss >= 0) std::printf(", test loss %.4f", final_loss);
  std::printf("\n");
  return 0;
}
