#include "worker/federated_client.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <numeric>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/random.h"
#include "job/federated.h"
#include "optim/optimizer.h"
#include "privacy/dp_mechanism.h"
#include "worker/attack.h"

namespace syncline {
namespace {

// The client's local model: the rows of the keys its data holds (every row of a dense model,
// the partition's own rows of a sparse one) and the bias, with the optimizer's state per row,
// kept from round to round. Each step is applied at once (no servers), with FedProx's
// proximal term towards the round's starting point.
class LocalBackend : public SyncBackend {
 public:
  LocalBackend(float prox_mu, const OptimizerConfig& optimizer)
      : prox_mu_(prox_mu), optimizer_(optimizer), bias_optimizer_(optimizer) {
    bias_optimizer_.l2 = 0;  // the bias is not regularised, as on the servers
  }

  absl::Status Init(const ParameterLayout& layout) override {
    layout_ = layout;
    state_floats_ = StateFloatsPerWeight(optimizer_.kind);
    bias_.assign(layout.bias_dim, 0.0f);
    bias_state_.assign(static_cast<size_t>(layout.bias_dim) * state_floats_, 0.0f);
    return absl::OkStatus();
  }
  // The keys (sorted, unique) the client trains, once.
  void SetKeys(std::span<const uint64_t> keys) {
    index_.clear();
    index_.reserve(keys.size());
    for (uint32_t i = 0; i < keys.size(); ++i) index_.emplace(keys[i], i);
    const size_t floats = keys.size() * layout_.row_dim;
    rows_.assign(floats, 0.0f);
    row_state_.assign(floats * state_floats_, 0.0f);
    row_steps_.assign(keys.size(), 0);
  }
  // The round's model, in SetKeys order: the local one and the proximal anchor.
  void Start(std::span<const float> rows, std::span<const float> bias) {
    std::copy(rows.begin(), rows.end(), rows_.begin());
    std::copy(bias.begin(), bias.end(), bias_.begin());
    anchor_rows_.assign(rows.begin(), rows.end());
    anchor_bias_.assign(bias.begin(), bias.end());
  }
  std::span<const float> rows() const { return rows_; }
  std::span<const float> bias() const { return bias_; }

  absl::Status Read(int64_t, std::span<const uint64_t> keys, std::span<float> rows,
                    std::span<float> bias) override {
    const uint32_t dim = layout_.row_dim;
    if (rows.size() != keys.size() * dim || bias.size() != bias_.size()) {
      return absl::InvalidArgumentError("a federated client's read: sizes do not match");
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = index_.find(keys[i]);
      if (it == index_.end()) return NotMine(keys[i]);
      std::copy_n(rows_.data() + static_cast<size_t>(it->second) * dim, dim, rows.data() + i * dim);
    }
    std::copy(bias_.begin(), bias_.end(), bias.begin());
    return absl::OkStatus();
  }
  absl::Status Update(int64_t, std::span<const uint64_t> keys, std::span<const float> row_grads,
                      std::span<const float> bias_grad, float examples) override {
    const uint32_t dim = layout_.row_dim;
    if (row_grads.size() != keys.size() * dim || bias_grad.size() != bias_.size()) {
      return absl::InvalidArgumentError("a federated client's update: sizes do not match");
    }
    if (!(examples > 0)) return absl::OkStatus();
    const float scale = 1.0f / examples;
    // The gradients are sums over the batch: the proximal term is added once per example.
    const float mu = prox_mu_ * examples;
    grad_.resize(std::max<size_t>(dim, bias_.size()));
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = index_.find(keys[i]);
      if (it == index_.end()) return NotMine(keys[i]);
      const size_t at = static_cast<size_t>(it->second) * dim;
      const float* g = row_grads.data() + i * dim;
      if (mu > 0) {
        for (uint32_t j = 0; j < dim; ++j) {
          grad_[j] = g[j] + mu * (rows_[at + j] - anchor_rows_[at + j]);
        }
        g = grad_.data();
      }
      ApplyUpdate(optimizer_, rows_.data() + at, row_state_.data() + at * state_floats_, g, scale,
                  dim, ++row_steps_[it->second]);
    }
    const float* b = bias_grad.data();
    if (mu > 0) {
      for (size_t j = 0; j < bias_.size(); ++j) {
        grad_[j] = b[j] + mu * (bias_[j] - anchor_bias_[j]);
      }
      b = grad_.data();
    }
    ApplyUpdate(bias_optimizer_, bias_.data(), bias_state_.data(), b, scale, bias_.size(),
                ++bias_steps_);
    return absl::OkStatus();
  }
  absl::Status EndIteration(int64_t, float) override { return absl::OkStatus(); }
  absl::Status Finish() override { return absl::OkStatus(); }
  uint64_t bytes_pushed() const override { return 0; }
  uint64_t bytes_pulled() const override { return 0; }

 private:
  absl::Status NotMine(uint64_t key) const {
    return absl::InternalError(
        absl::StrFormat("key %d is not among the client's %d keys", key, index_.size()));
  }

  const float prox_mu_;
  const OptimizerConfig optimizer_;
  OptimizerConfig bias_optimizer_;
  ParameterLayout layout_;
  int state_floats_ = 0;
  absl::flat_hash_map<uint64_t, uint32_t> index_;
  std::vector<float> rows_, anchor_rows_, row_state_;
  std::vector<int64_t> row_steps_;
  std::vector<float> bias_, anchor_bias_, bias_state_;
  int64_t bias_steps_ = 0;
  std::vector<float> grad_;
};

// The sorted unique keys of every example of `source` (one pass).
absl::StatusOr<std::vector<uint64_t>> KeysOfSource(const Model& model, ExampleSource& source) {
  if (auto s = source.Rewind(); !s.ok()) return s;
  absl::flat_hash_set<uint64_t> seen;
  std::vector<uint32_t> examples;
  while (true) {
    absl::StatusOr<DataSlice> slice = source.Next(8192);
    if (!slice.ok()) return slice.status();
    if (slice->size() == 0) break;
    examples.resize(slice->size());
    std::iota(examples.begin(), examples.end(), slice->begin);
    for (uint64_t k : model.BatchKeys(*slice->data, examples)) seen.insert(k);
  }
  std::vector<uint64_t> keys(seen.begin(), seen.end());
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace

absl::StatusOr<int> TestCanaryRank() {
  const char* canary = std::getenv("SYNCLINE_TEST_CANARY");
  if (canary == nullptr || *canary == '\0') return -1;
  const char* enabled = std::getenv("SYNCLINE_ENABLE_TEST_HOOKS");
  if (enabled == nullptr || std::string_view(enabled) != "1") {
    return absl::InvalidArgumentError(
        "SYNCLINE_TEST_CANARY is a test hook that plants values in a client's update; it is "
        "honoured only with SYNCLINE_ENABLE_TEST_HOOKS=1 (unset it for a real job)");
  }
  int rank = -1;
  if (!absl::SimpleAtoi(canary, &rank) || rank < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "SYNCLINE_TEST_CANARY is '%s'; it takes the rank of the client that plants the canary",
        canary));
  }
  return rank;
}

FederatedClient::FederatedClient(const Model& model, SyncBackend& servers,
                                 const ParameterLayout& layout, FederatedClientOptions options)
    : model_(model), servers_(servers), layout_(layout), options_(options) {}

absl::StatusOr<FederatedResult> FederatedClient::Run(
    ExampleSource& source, const std::function<void(const TrainProgress&)>& on_progress) {
  const JobSpec::Federated& f = options_.federated;
  if (layout_.dense_rows && layout_.num_features == 0) {
    return absl::InvalidArgumentError(
        "a federated client of a dense model needs the number of features");
  }
  absl::StatusOr<int> canary_rank = TestCanaryRank();
  if (!canary_rank.ok()) return canary_rank.status();
  const bool canary = *canary_rank == options_.rank;
  LocalBackend local(static_cast<float>(f.prox_mu), options_.local_optimizer);
  if (auto s = local.Init(layout_); !s.ok()) return s;
  // A dense model is pulled whole; a sparse one by the rows the client's data holds.
  std::vector<uint64_t> keys;
  if (layout_.dense_rows) {
    keys.resize(layout_.num_features);
    std::iota(keys.begin(), keys.end(), uint64_t{0});
  } else {
    auto found = KeysOfSource(model_, source);
    if (!found.ok()) return found.status();
    keys = std::move(*found);
    SYNCLINE_LOG(INFO) << absl::StrFormat("w%d trains the %d rows its examples hold", options_.rank,
                                          keys.size());
  }
  local.SetKeys(keys);
  const size_t row_floats = keys.size() * layout_.row_dim;
  std::vector<float> params(row_floats + layout_.bias_dim);
  std::vector<float> delta(params.size());
  std::vector<uint64_t> sent_keys;  // sparse: the rows that moved
  std::vector<float> sent_rows;
  Random random(options_.seed, 0x66656400u + static_cast<uint32_t>(options_.rank));
  const int64_t per_epoch = StepsPerEpoch(source.size(), options_.batch_size);
  if (per_epoch == 0) {
    // A skewed split may leave a client nothing: it still ends its rounds, with no update.
    SYNCLINE_LOG(WARNING) << absl::StrFormat(
        "w%d has no training examples: it answers its rounds with no update", options_.rank);
  }
  FederatedResult result;
  int64_t local_step = 0;  // --local-steps: where in its data the client goes on
  for (int64_t round = 0; round < f.rounds; ++round) {
    const std::vector<int> picked = options_.picker.Pick(round);
    if (!std::binary_search(picked.begin(), picked.end(), options_.rank)) {
      ++result.skipped;
      continue;
    }
    // Under secure aggregation a client may drop out part-way through the protocol.
    int silent_after = kSecAggStages;
    if (ClientDropsOut(options_.seed, round, options_.rank, f.client_dropout)) {
      ++result.dropped;
      silent_after =
          options_.secagg ? SecAggStagesBeforeDropout(options_.seed, round, options_.rank) : 0;
      SYNCLINE_LOG(INFO) << absl::StrFormat(
          "w%d drops out of round %d (--client-dropout %g, seed %d): %s", options_.rank, round,
          f.client_dropout, options_.seed,
          silent_after == 0 ? "it sends nothing"
                            : absl::StrFormat("it falls silent after %d secure-aggregation stages",
                                              silent_after));
      if (silent_after == 0) continue;
    }
    if (per_epoch == 0 && options_.secagg) {
      // It takes part with an empty update, so that the round does not wait for it.
      std::fill(delta.begin(), delta.end(), 0.0f);
      bool lost = false;
      if (auto s = MaskedUpdate(round, delta, 0, silent_after, &lost); !s.ok()) return s;
      if (silent_after == kSecAggStages) {
        if (auto s = servers_.EndIteration(round, 0); !s.ok()) return s;
        ++result.rounds;
      }
      result.secagg_lost += lost;
      continue;
    }
    if (per_epoch == 0) {
      if (auto s = servers_.EndIteration(round, 0); !s.ok()) return s;
      ++result.rounds;
      continue;
    }
    // The round's model: served once the previous round has closed.
    std::span<float> rows(params.data(), row_floats);
    std::span<float> bias(params.data() + row_floats, layout_.bias_dim);
    // The round's exchanges with the servers count as its steps' network (and compress) time.
    StepTimes exchange;
    absl::Time sent = absl::Now();
    if (auto s = servers_.Read(round, keys, rows, bias); !s.ok()) return s;
    AddBackendTime(servers_, sent, &exchange);
    local.Start(rows, bias);

    TrainerOptions t;
    t.batch_size = options_.batch_size;
    t.local_backend = true;  // the local replica: its updates are the round's compute
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
    std::span<const float> w_rows = local.rows();
    std::span<const float> w_bias = local.bias();
    for (size_t i = 0; i < row_floats; ++i) delta[i] = params[i] - w_rows[i];
    for (size_t j = 0; j < layout_.bias_dim; ++j) {
      delta[row_floats + j] = params[row_floats + j] - w_bias[j];
    }
    Corrupt(options_.attack, 1.0f, delta, random);
    // DP-FedAvg: one client moves the round's sum by at most the clip, whatever its examples.
    const bool dp = options_.dp_clip > 0;
    const float weight = dp ? 1.0f : n;
    if (dp) {
      ClipToNorm({std::span<float>(delta.data(), row_floats),
                  std::span<float>(delta.data() + row_floats, layout_.bias_dim)},
                 options_.dp_clip);
    } else {
      for (float& d : delta) d *= n;
    }
    if (canary) {
      std::copy_n(kTestCanary, std::min(std::size(kTestCanary), delta.size()), delta.begin());
    }
    std::span<const float> delta_bias(delta.data() + row_floats, layout_.bias_dim);
    absl::Status pushed;
    sent = absl::Now();
    if (options_.secagg) {
      bool lost = false;
      if (auto s = MaskedUpdate(round, delta, weight, silent_after, &lost); !s.ok()) return s;
      result.secagg_lost += lost;
      AddBackendTime(servers_, sent, &exchange);
      // A client that dropped out part-way never ends the round: the servers close it.
      if (silent_after < kSecAggStages) continue;
      if (auto s = servers_.EndIteration(round, 0); !s.ok()) return s;
    } else if (layout_.dense_rows) {
      pushed = servers_.Update(round, keys, std::span<const float>(delta.data(), row_floats),
                               delta_bias, weight);
    } else {
      // Only the rows that moved: a sparse client's untouched rows have a zero delta.
      const uint32_t dim = layout_.row_dim;
      sent_keys.clear();
      sent_rows.clear();
      for (size_t i = 0; i < keys.size(); ++i) {
        const float* d = delta.data() + i * dim;
        if (std::any_of(d, d + dim, [](float v) { return v != 0.0f; })) {
          sent_keys.push_back(keys[i]);
          sent_rows.insert(sent_rows.end(), d, d + dim);
        }
      }
      pushed = servers_.Update(round, sent_keys, sent_rows, delta_bias, weight);
    }
    if (!options_.secagg) {
      if (!pushed.ok()) return pushed;
      if (auto s = servers_.EndIteration(round, weight); !s.ok()) return s;
      AddBackendTime(servers_, sent, &exchange);
    }
    StepTimes times = trained->times;
    times += exchange;

    ++result.rounds;
    result.steps += steps;
    result.examples += trained->examples;
    result.last_loss = trained->last_loss;
    result.times += times;
    if (on_progress) {
      TrainProgress p;
      p.clock = round + 1;
      p.total_steps = f.rounds;
      p.epoch = static_cast<int>(round + 1);
      p.train_loss = trained->last_loss;
      p.examples = trained->examples;
      p.staleness = servers_.TakeMeanStaleness();
      p.times = times;
      on_progress(p);
    }
  }
  if (auto s = servers_.Finish(); !s.ok()) return s;
  return result;
}

absl::Status FederatedClient::MaskedUpdate(int64_t round, std::span<const float> update,
                                           float examples, int silent_after, bool* lost) {
  const SecAggParams& p = *options_.secagg;
  if (options_.secagg_channel == nullptr) {
    return absl::FailedPreconditionError("secure aggregation needs a channel to the server");
  }
  const double top = std::ldexp(1.0, p.bits) - 1;
  if (!(examples >= 0 && examples <= top)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "w%d trained on %g examples this round; the masked weight holds at most %g (%d bits)",
        options_.rank, examples, top, p.bits));
  }
  const DpKey key = options_.randomness_key ? *options_.randomness_key : FreshDpKey();
  const std::initializer_list<uint64_t> labels = {static_cast<uint64_t>(options_.rank),
                                                  static_cast<uint64_t>(round)};
  std::vector<uint32_t> input;
  if (options_.distributed_dp) {
    absl::StatusOr<DistributedDpCodec> codec =
        DistributedDpCodec::Create(*options_.distributed_dp, update.size());
    if (!codec.ok()) return codec.status();
    DpRandom noise(key, DpStream::kClientNoise, labels);
    absl::StatusOr<std::vector<uint32_t>> noised = codec->Encode(update, noise);
    if (!noised.ok()) return noised.status();
    input = std::move(*noised);
  } else {
    DpRandom rounding(key, DpStream::kRounding, labels);
    input = SecAggQuantise(update, p, rounding);
  }
  input.push_back(static_cast<uint32_t>(examples));  // exact: the servers divide by the sum
  const absl::Duration wait = options_.secagg_stage_timeout + absl::Seconds(5);
  const absl::Time first = absl::Now() + absl::Seconds(options_.federated.round_timeout_s) + wait;
  absl::Status s = RunSecAggClientRound(p, options_.rank + 1, round, input,
                                        *options_.secagg_channel, first, wait, silent_after);
  *lost = false;
  if (s.ok()) return s;
  // The round went on without this client (or aborted): the servers close it; a refusal of
  // a peer's bad share or signature is that peer's fault, not a reason to stop training.
  if (absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s) || absl::IsDataLoss(s)) {
    *lost = true;
    SYNCLINE_LOG(WARNING) << absl::StrFormat("w%d: round %d's secure aggregation: %s",
                                             options_.rank, round, s.message());
    return absl::OkStatus();
  }
  return s;
}

}  // namespace syncline
