// FederatedClient: a worker's side of --sync fedavg (FedAvg, McMahan et al. 2017; FedProx, Li
// et al. 2020). Per round r of `rounds`:
//   - the client computes PickClients(seed, r, ...) and ClientDropsOut(...) (job/federated.h)
//     as the servers do; a client not picked, or dropping out, skips the round (a dropped one
//     simply never answers, so the servers' round timeout is what ends the round);
//   - a picked client pulls the whole model of round r (the servers serve it once round r - 1
//     has closed), trains it locally, with the job's optimizer and learning rate, for
//     local_epochs epochs of its own examples (or local_steps steps, continuing where the last
//     round stopped), adding FedProx's mu * (w - w_round) to every gradient when prox_mu > 0;
//   - it pushes n * (w_round - w_local) with weight n, n the examples it trained on, and ends
//     clock r. The servers' SGD with --server-lr 1 then makes the model the n-weighted mean of
//     the clients' models (or a robust aggregate of their deltas, with --aggregate; or a step
//     of --server-optimizer on the mean delta);
//   - under --dp client it pushes w_round - w_local clipped to --dp-clip, with weight 1;
//   - under --secure-aggregation it pushes nothing: its update n * (w_round - w_local),
//     quantised (privacy/secure_aggregation.h), with n as one more exact coordinate, goes
//     masked through the protocol's stages (privacy/secagg_protocol.h) over `secagg_channel`,
//     and it ends the round with weight 0 (the servers learn only the sum of n). A client
//     that drops out then vanishes at a seeded stage (job/federated.h).
// So one local step with every client picked is one BSP step of the same SGD, which the tests
// check.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_WORKER_FEDERATED_CLIENT_H_
#define SYNCLINE_WORKER_FEDERATED_CLIENT_H_

#include <cstdint>
#include <functional>
#include <optional>

#include "absl/status/statusor.h"
#include "data/example_source.h"
#include "job/federated.h"
#include "models/model.h"
#include "privacy/distributed_dp.h"
#include "privacy/secagg_protocol.h"
#include "syncline/job_spec.h"
#include "worker/slowness.h"
#include "worker/sync_backend.h"
#include "worker/trainer.h"

namespace syncline {

// A TEST HOOK, not a feature: with SYNCLINE_ENABLE_TEST_HOOKS=1 and SYNCLINE_TEST_CANARY=R in
// its environment, client wR sets the first coordinates of every round update it sends to
// these values (after the weighting by its examples or the --dp clip, before secure
// aggregation quantises and masks it), so that a test can look for them in every byte a
// server received (tests/federated_launch_test.cc). A canary without the enabling variable
// is refused: no production job runs with a planted update by accident.
inline constexpr float kTestCanary[4] = {1234.5677f, -2718.2817f, 3141.5928f, -1618.0339f};
// The rank SYNCLINE_TEST_CANARY names (-1: no canary), or InvalidArgument naming the variable.
absl::StatusOr<int> TestCanaryRank();

struct FederatedClientOptions {
  JobSpec::Federated federated;
  int rank = 0;
  int workers = 1;
  uint64_t seed = 1;
  // Who takes part in each round (job/federated.h); its seed, workers and participation are
  // the fields above unless --dp client makes the picks Poisson.
  RoundPicker picker;
  // --dp client (DP-FedAvg, McMahan et al. 2018): each round's update w_round - w_local is
  // clipped to this L2 norm (rows and bias together) and pushed with weight 1, unweighted by
  // the examples (the servers add the noise and divide by the expected clients). 0: plain
  // FedAvg.
  double dp_clip = 0;
  int batch_size = 256;
  // The clients' local update rule (the servers' tables take SGD at --server-lr).
  OptimizerConfig local_optimizer;
  // What this client sends in place of its honest delta (--byzantine); labelflip acts on the
  // data, not here.
  AttackSpec attack;
  SlownessOptions slowness;
  // --secure-aggregation: the protocol's parameters (job/privacy_plan.h) and the channel to
  // the server (not owned; it outlives the client), and how long each later stage may take.
  std::optional<SecAggParams> secagg;
  SecAggChannel* secagg_channel = nullptr;
  // --dp client under secure aggregation: this client adds its share of the Skellam noise to
  // its quantised update before masking (privacy/distributed_dp.h).
  std::optional<DistributedDpParams> distributed_dp;
  // The key of its rounding and noise streams: unset, a fresh key from the operating system
  // every round (nobody else can recompute them); set only under --dp-noise-seed (the job's
  // key, so that a run repeats, and its noise is known to whoever knows the seed).
  std::optional<DpKey> randomness_key;
  absl::Duration secagg_stage_timeout = absl::Seconds(15);
};

struct FederatedResult {
  int64_t rounds = 0;       // rounds this client trained in and answered
  int64_t skipped = 0;      // rounds it was not picked for
  int64_t dropped = 0;      // rounds it was picked for and dropped out of
  int64_t secagg_lost = 0;  // --secure-aggregation: rounds that went on (or ended) without it
  int64_t steps = 0;        // local steps, over all rounds
  uint64_t examples = 0;
  double last_loss = 0;  // mean training loss of its last round
  StepTimes times;       // of the local training
};

class FederatedClient {
 public:
  // `servers` is the worker's parameter-server backend, Init()ed with the servers' layout
  // (dense rows, SGD at server_lr); it must outlive the client.
  FederatedClient(const Model& model, SyncBackend& servers, const ParameterLayout& layout,
                  FederatedClientOptions options);

  // Runs every round over `source` (the client's examples) and then Finish()es the servers'
  // backend. on_progress (may be empty) gets one report per round trained, with clock r + 1.
  absl::StatusOr<FederatedResult> Run(ExampleSource& source,
                                      const std::function<void(const TrainProgress&)>& on_progress);

 private:
  const Model& model_;
  SyncBackend& servers_;
  const ParameterLayout layout_;
  const FederatedClientOptions options_;

  // Sends the round's update through the secure-aggregation stages; silent_after < 5: a
  // simulated dropout. OK also when the round went on without this client (*lost set).
  absl::Status MaskedUpdate(int64_t round, std::span<const float> update, float examples,
                            int silent_after, bool* lost);
};

}  // namespace syncline

#endif  // SYNCLINE_WORKER_FEDERATED_CLIENT_H_
