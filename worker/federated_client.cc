#include "worker/federated_client.h"

#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/log.h"
#include "job/federated.h"
#include "tools/random.h"
#include "worker/attack.h"
#include "worker/replicated_model.h"

namespace syncline {
namespace {

// The client's local model: a replica that applies each step at once (no servers), with
// FedProx's proximal term towards the round's starting point.
class LocalBackend : public SyncBackend {
 public:
  LocalBackend(float prox_mu, const OptimizerConfig& optimizer)
      : prox_mu_(prox_mu), optimizer_(optimizer) {}

  absl::Status Init(const ParameterLayout& layout) override {
    return model_.Init(layout, optimizer_);
  }
  // The round's model: the local one and the proximal anchor.
  void Start(std::span<const float> params) {
    std::copy(params.begin(), params.end(), model_.parameters().begin());
    anchor_.assign(params.begin(), params.end());
  }
  std::span<const float> parameters() const { return model_.parameters(); }

  absl::Status Read(int64_t, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override {
    return model_.Read(keys, rows, bias);
  }
  absl::Status Update(int64_t, std::span<const uint64_t> keys, std::span<const float> row_grads,
                      std::span<const float> bias_grad, float examples) override {
    if (auto s = model_.CheckUpdate(keys, row_grads, bias_grad); !s.ok()) return s;
    if (!(examples > 0)) return absl::OkStatus();
    const uint32_t dim = model_.layout().row_dim;
    const float scale = 1.0f / examples;
    std::span<const float> w = model_.parameters();
    // The gradients are sums over the batch: the proximal term is added once per example.
    const float mu = prox_mu_ * examples;
    for (size_t i = 0; i < keys.size(); ++i) {
      const float* g = row_grads.data() + i * dim;
      if (mu > 0) {
        grad_.resize(dim);
        const size_t at = keys[i] * dim;
        for (uint32_t j = 0; j < dim; ++j) grad_[j] = g[j] + mu * (w[at + j] - anchor_[at + j]);
        g = grad_.data();
      }
      model_.ApplyRow(keys[i], g, scale);
    }
    const float* b = bias_grad.data();
    if (mu > 0) {
      const size_t at = model_.row_floats();
      grad_.resize(bias_grad.size());
      for (size_t j = 0; j < bias_grad.size(); ++j) {
        grad_[j] = b[j] + mu * (w[at + j] - anchor_[at + j]);
      }
      b = grad_.data();
    }
    model_.ApplyBias(b, scale);
    return absl::OkStatus();
  }
  absl::Status EndIteration(int64_t, float) override { return absl::OkStatus(); }
  absl::Status Finish() override { return absl::OkStatus(); }
  uint64_t bytes_pushed() const override { return 0; }
  uint64_t bytes_pulled() const override { return 0; }

 private:
  const float prox_mu_;
  const OptimizerConfig optimizer_;
  ReplicatedModel model_{"a federated client"};
  std::vector<float> anchor_;
  std::vector<float> grad_;
};

}  // namespace

FederatedClient::FederatedClient(const Model& model, SyncBackend& servers,
                                 const ParameterLayout& layout, FederatedClientOptions options)
    : model_(model), servers_(servers), layout_(layout), options_(options) {}

absl::StatusOr<FederatedResult> FederatedClient::Run(
    ExampleSource& source, const std::function<void(const TrainProgress&)>& on_progress) {
  const JobSpec::Federated& f = options_.federated;
  if (layout_.num_features == 0) {
    return absl::InvalidArgumentError(
        "a federated client holds the whole model: the number of features must be known");
  }
  LocalBackend local(static_cast<float>(f.prox_mu), options_.local_optimizer);
  if (auto s = local.Init(layout_); !s.ok()) return s;
  const size_t row_floats = layout_.num_features * layout_.row_dim;
  std::vector<uint64_t> keys(layout_.num_features);
  std::iota(keys.begin(), keys.end(), uint64_t{0});
  std::vector<float> params(row_floats + layout_.bias_dim);
  std::vector<float> delta(params.size());
  Random random(options_.seed, 0x66656400u + static_cast<uint32_t>(options_.rank));
  const int64_t per_epoch = StepsPerEpoch(source.size(), options_.batch_size);
  if (per_epoch == 0) {
    return absl::FailedPreconditionError(
        absl::StrFormat("client w%d has no training examples", options_.rank));
  }
  FederatedResult result;
  int64_t local_step = 0;  // --local-steps: where in its data the client goes on
  for (int64_t round = 0; round < f.rounds; ++round) {
    const std::vector<int> picked =
        PickClients(options_.seed, round, options_.workers, f.participation);
    if (!std::binary_search(picked.begin(), picked.end(), options_.rank)) {
      ++result.skipped;
      continue;
    }
    if (ClientDropsOut(options_.seed, round, options_.rank, f.client_dropout)) {
      ++result.dropped;
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "w%d drops out of round %d (--client-dropout %g, seed %d): it sends nothing",
          options_.rank, round, f.client_dropout, options_.seed);
      continue;
    }
    // The round's model: served once the previous round has closed.
    std::span<float> rows(params.data(), row_floats);
    std::span<float> bias(params.data() + row_floats, layout_.bias_dim);
    if (auto s = servers_.Read(round, keys, rows, bias); !s.ok()) return s;
    local.Start(params);

    TrainerOptions t;
    t.batch_size = options_.batch_size;
    t.log_every = std::numeric_limits<int>::max();
    t.slowness = options_.slowness;
    if (f.local_steps > 0) {
      const int64_t start = local_step % per_epoch;
      t.start_step = start;
      t.epochs = static_cast<int>((start + f.local_steps + per_epoch - 1) / per_epoch);
      t.stop_step = start + f.local_steps;
      local_step += f.local_steps;
    } else {
      t.epochs = f.local_epochs;
    }
    Trainer trainer(model_, local, t);
    auto trained = trainer.Run(source, nullptr);
    if (!trained.ok()) return trained.status();
    const int64_t steps = trained->steps - t.start_step;
    const float n = static_cast<float>(trained->examples);

    // The update: n * (w_round - w_local), which the servers' SGD subtracts, weighted by n.
    std::span<const float> w = local.parameters();
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = params[i] - w[i];
    Corrupt(options_.attack, 1.0f, delta, random);
    for (float& d : delta) d *= n;
    if (auto s =
            servers_.Update(round, keys, std::span<const float>(delta.data(), row_floats),
                            std::span<const float>(delta.data() + row_floats, layout_.bias_dim), n);
        !s.ok()) {
      return s;
    }
    if (auto s = servers_.EndIteration(round, n); !s.ok()) return s;

    ++result.rounds;
    result.steps += steps;
    result.examples += trained->examples;
    result.last_loss = trained->last_loss;
    result.times.batch += trained->times.batch;
    result.times.read += trained->times.read;
    result.times.compute += trained->times.compute;
    result.times.update += trained->times.update;
    result.times.end += trained->times.end;
    if (on_progress) {
      TrainProgress p;
      p.clock = round + 1;
      p.total_steps = f.rounds;
      p.epoch = static_cast<int>(round + 1);
      p.train_loss = trained->last_loss;
      p.examples = trained->examples;
      p.staleness = servers_.TakeMeanStaleness();
      on_progress(p);
    }
  }
  if (auto s = servers_.Finish(); !s.ok()) return s;
  return result;
}

}  // namespace syncline
