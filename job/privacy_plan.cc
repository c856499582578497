#include "job/privacy_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compression/codec.h"
#include "job/aggregate_rule.h"
#include "job/federated.h"
#include "job/job_spec.h"
#include "job/options.h"
#include "job/privacy_accountant.h"
#include "job/privacy_options.h"
#include "privacy/dp_random.h"

namespace syncline {
namespace {

std::string Steps(const JobSpec& s, const PrivacyPlan& plan) {
  if (s.privacy.level == DpLevel::kClient) return absl::StrCat(plan.steps, " rounds");
  return absl::StrFormat("%d steps (%d epoch%s of %d)", plan.steps, s.training.epochs,
                         s.training.epochs == 1 ? "" : "s", plan.steps_per_epoch);
}

absl::Status CheckServerOptimizer(const JobSpec& s) {
  const ServerOptimizerSpec& o = s.federated.server_optimizer;
  const std::string name = ServerOptimizerName(o);
  if (o.kind != ServerOptimizerKind::kSgd && !s.sync.fedavg()) {
    return InvalidFlag("server-optimizer", name, "is for --sync fedavg (the servers' round rule)");
  }
  if (!(o.momentum >= 0 && o.momentum < 1)) {
    return InvalidFlag("server-optimizer", name, "the momentum must be in [0, 1)");
  }
  if (!(o.tau > 0 && std::isfinite(o.tau))) {
    return InvalidFlag("server-optimizer", name, "TAU must be a positive number");
  }
  return absl::OkStatus();
}

absl::Status CheckSecureAggregation(const JobSpec& s) {
  const JobSpec::Federated& f = s.federated;
  const std::string t = absl::StrCat(f.secagg_threshold);
  const std::string k = absl::StrCat(f.secagg_neighbours);
  if (!f.secure_aggregation) {
    if (f.secagg_threshold != 0) {
      return InvalidFlag("secagg-threshold", t, "needs --secure-aggregation");
    }
    if (f.secagg_neighbours != 0) {
      return InvalidFlag("secagg-neighbours", k, "needs --secure-aggregation");
    }
    return absl::OkStatus();
  }
  if (!s.sync.fedavg()) {
    return InvalidFlag("secure-aggregation", "on", "is for --sync fedavg (federated rounds)");
  }
  if (s.aggregate.robust()) {
    return InvalidFlag(
        "secure-aggregation", "on",
        absl::StrCat("cannot be combined with --aggregate ", AggregateRuleName(s.aggregate),
                     ": a robust rule needs every client's update, and the "
                     "servers see only the masked sum"));
  }
  const CodecKind codec = s.training.codec.kind;
  if (codec != CodecKind::kNone && codec != CodecKind::kFp16) {
    return InvalidFlag(
        "secure-aggregation", "on",
        absl::StrCat("cannot be combined with --compress ", CodecName(s.training.codec),
                     ": the masked sum needs every client's whole vector "
                     "(none or fp16)"));
  }
  if (UsesCriteoData(s)) {
    return InvalidFlag("secure-aggregation", "on",
                       "needs a bounded model (the masks cover one fixed vector); Criteo ids "
                       "are unbounded hashes");
  }
  if (s.servers != 1) {
    return InvalidFlag("secure-aggregation", "on",
                       absl::StrCat("needs --servers 1, not ", s.servers,
                                    ": the masks cover the whole model, which several servers "
                                    "would each hold a shard of"));
  }
  if (s.workers > 255) {
    return InvalidFlag(
        "secure-aggregation", "on",
        absl::StrCat("takes at most 255 workers (Shamir shares over GF(2^8)), not ", s.workers));
  }
  if (!s.worker_command.empty()) {
    return InvalidFlag("secure-aggregation", "on",
                       "needs the built-in federated clients, which mask their updates (a "
                       "worker command pushes its own)");
  }
  const int clients = ClientsPerRound(s.workers, s.federated.participation);
  if (clients < 2) {
    return InvalidFlag("secure-aggregation", "on",
                       "needs at least 2 clients a round (one client's sum is its update)");
  }
  const int most_neighbours = s.workers - 1 - (s.workers - 1) % 2;
  if (f.secagg_neighbours < 0 || f.secagg_neighbours % 2 != 0 ||
      f.secagg_neighbours > s.workers - 1) {
    return InvalidFlag(
        "secagg-neighbours", k,
        most_neighbours < 2
            ? absl::StrCat("must be 0: with ", s.workers,
                           " workers every client already pairs with every other")
            : absl::StrCat("must be 0 (every other client) or an even number in [2, ",
                           most_neighbours, "] (a Harary graph is K-regular for even K, below the ",
                           s.workers, " clients)"));
  }
  // With a neighbour graph the threshold must be a majority of a client's share holders: with
  // fewer, two disjoint groups of t exist in a neighbourhood, and a server that showed them
  // different survivor lists could collect a client's self-mask shares from one and its
  // masking-key shares from the other.
  const int holders = SecAggShareHolders(s);
  const int lowest = f.secagg_neighbours > 0 ? std::max(2, holders / 2 + 1) : 2;
  if (f.secagg_threshold != 0 && (f.secagg_threshold < lowest || f.secagg_threshold > holders)) {
    return InvalidFlag(
        "secagg-threshold", t,
        f.secagg_neighbours > 0
            ? absl::StrCat("must be 0 (a majority of a neighbourhood) or in [", lowest, ", ",
                           holders, "]: a majority of the ", holders,
                           " clients who hold a client's shares (its neighbours and itself), so "
                           "that two groups shown different survivor lists cannot each rebuild "
                           "one kind of its secrets")
            : absl::StrCat("must be 0 (a majority of a round's clients) or in [2, ", clients,
                           "] (the clients a round picks)"));
  }
  const SecAggParams p = SecureAggregationParams(s);
  if (absl::Status fits = CheckSecAggParams(p); !fits.ok()) {
    return InvalidFlag("secure-aggregation", "on", fits.message());
  }
  return absl::OkStatus();
}

// What --dp works with, and why not the rest.
absl::Status CheckDpCombination(const JobSpec& s) {
  const std::string level = DpLevelName(s.privacy.level);
  if (UsesCriteoData(s) || s.model.kind == ModelKind::kCtr) {
    return InvalidFlag(
        "dp", level,
        "is not built for sparse hashed models (ctr, Criteo data): the set of rows a step "
        "touches itself tells which examples trained, and noise on every row of an unbounded "
        "table cannot be added");
  }
  if (s.training.codec.kind != CodecKind::kNone || s.training.pull_codec.kind != CodecKind::kNone) {
    return InvalidFlag("dp", level,
                       "takes no --compress or --compress-pull: a codec would change the "
                       "clipped sums the noise is calibrated to");
  }
  if (s.aggregate.robust()) {
    return InvalidFlag(
        "dp", level,
        absl::StrCat("cannot be combined with --aggregate ", AggregateRuleName(s.aggregate),
                     ": the noise is calibrated to the sum of clipped updates"));
  }
  if (!s.worker_command.empty()) {
    return InvalidFlag("dp", level,
                       "needs the built-in workers, which clip and add noise (a worker command "
                       "pushes its own gradients)");
  }
  if (s.device.kind == DeviceKind::kCuda) {
    return InvalidFlag("dp", level, "clips per example on the CPU: give --device cpu or auto");
  }
  if (s.privacy.level == DpLevel::kClient) {
    if (!s.sync.fedavg()) {
      return InvalidFlag("dp", level, "is DP-FedAvg: it needs --sync fedavg");
    }
    return absl::OkStatus();
  }
  if (s.sync.kind != SyncKind::kBsp && !s.sync.allreduce()) {
    return InvalidFlag(
        "dp", level,
        absl::StrCat("is DP-SGD under --sync bsp or allreduce, where every step sums every "
                     "worker's clipped gradients once (",
                     s.sync.fedavg() ? "federated jobs take --dp client"
                                     : "asynchronous modes apply each worker's push on its own",
                     ")"));
  }
  if (MinWorkers(s) < s.workers || MaxWorkers(s) > s.workers || s.max_restarts > 0) {
    return InvalidFlag("dp", level,
                       "needs a fixed set of workers (no --min-workers below --workers, "
                       "--max-workers or --max-restarts): each adds its share of a step's noise, "
                       "and a rolled-back step would be spent twice");
  }
  return absl::OkStatus();
}

absl::Status CheckDp(const JobSpec& s) {
  const JobSpec::Privacy& p = s.privacy;
  if (!(p.clip > 0 && std::isfinite(p.clip))) {
    return InvalidFlag("dp-clip", absl::StrCat(p.clip), "must be a positive number");
  }
  if (!(p.delta > 0 && p.delta < 1)) {
    return InvalidFlag("dp-delta", absl::StrCat(p.delta), "must be in (0, 1)");
  }
  if (!(p.noise_multiplier >= 0 && std::isfinite(p.noise_multiplier))) {
    return InvalidFlag("dp-noise-multiplier", absl::StrCat(p.noise_multiplier),
                       "must be a positive number");
  }
  if (!(p.epsilon >= 0 && std::isfinite(p.epsilon))) {
    return InvalidFlag("dp-epsilon", absl::StrCat(p.epsilon), "must be a positive number");
  }
  if (!p.on()) return absl::OkStatus();
  if (p.noise_multiplier == 0 && p.epsilon == 0) {
    return InvalidFlag("dp", DpLevelName(p.level),
                       "give --dp-noise-multiplier Z or --dp-epsilon E (or both: E is then "
                       "checked against the planned steps)");
  }
  return CheckDpCombination(s);
}

}  // namespace

absl::Status CheckPrivacyOptions(const JobSpec& s) {
  for (absl::Status (*check)(const JobSpec&) :
       {CheckServerOptimizer, CheckSecureAggregation, CheckDp}) {
    if (absl::Status status = check(s); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<PrivacyPlan> PlanPrivacy(const JobSpec& s) {
  PrivacyPlan plan;
  switch (s.privacy.level) {
    case DpLevel::kOff:
      return absl::FailedPreconditionError("--dp is off: nothing to plan");
    case DpLevel::kExample: {
      const uint64_t n = s.privacy.examples;
      if (n == 0) {
        return absl::FailedPreconditionError(
            "--dp example: the training examples are not counted (the launcher counts them)");
      }
      const double per_step = static_cast<double>(s.workers) * s.training.batch_size;
      plan.sampling_rate = std::min(1.0, per_step / static_cast<double>(n));
      plan.steps_per_epoch = static_cast<int64_t>(std::ceil(static_cast<double>(n) / per_step));
      plan.steps = plan.steps_per_epoch * s.training.epochs;
      plan.expected_batch = plan.sampling_rate * static_cast<double>(n);
      return plan;
    }
    case DpLevel::kClient:
      plan.sampling_rate = s.federated.participation;
      if (UsesDistributedDp(s)) {
        plan.sampling_rate = 1;  // no amplification: the server sees who takes part
        plan.mechanism = DpNoiseMechanism::kSkellam;
      }
      plan.steps = s.federated.rounds;
      plan.expected_batch = s.federated.participation * s.workers;
      return plan;
  }
  return absl::InternalError("unknown --dp level");
}

absl::Status CheckPrivacyResolved(const JobSpec& s) {
  const JobSpec::Privacy& p = s.privacy;
  if (!p.on()) return absl::OkStatus();
  if (!(p.noise_multiplier > 0)) {
    return absl::FailedPreconditionError("--dp: the job spec has no noise multiplier");
  }
  if (!ParseDpKeyHex(p.key).ok()) {
    return absl::FailedPreconditionError("--dp: the job spec has no valid privacy key");
  }
  if (p.level == DpLevel::kExample && p.examples == 0) {
    return absl::FailedPreconditionError("--dp example: the job spec has no example count");
  }
  return absl::OkStatus();
}

absl::StatusOr<RdpAccountant> JobAccountant(const JobSpec& s) {
  auto plan = PlanPrivacy(s);
  if (!plan.ok()) return plan.status();
  return RdpAccountant::Create(plan->sampling_rate, s.privacy.noise_multiplier, s.privacy.delta,
                               s.privacy.accountant, plan->mechanism);
}

absl::Status ResolvePrivacy(JobSpec& s) {
  JobSpec::Privacy& p = s.privacy;
  if (!p.on()) return absl::OkStatus();
  auto plan = PlanPrivacy(s);
  if (!plan.ok()) return plan.status();
  DpSgdParameters params{.sampling_rate = plan->sampling_rate,
                         .noise_multiplier = p.noise_multiplier,
                         .steps = plan->steps,
                         .delta = p.delta,
                         .mechanism = plan->mechanism};
  const std::string eps_text = absl::StrFormat("%g", p.epsilon);
  if (p.epsilon > 0) {
    absl::StatusOr<double> needed = CalibrateNoiseMultiplier(params, p.epsilon, p.accountant);
    if (!needed.ok()) return InvalidFlag("dp-epsilon", eps_text, needed.status().message());
    if (p.noise_multiplier == 0) {
      p.noise_multiplier = *needed;
    } else {
      auto spent = ComputeEpsilon(params, p.accountant);
      if (!spent.ok()) {
        return InvalidFlag("dp-noise-multiplier", absl::StrCat(p.noise_multiplier),
                           spent.status().message());
      }
      if (spent->epsilon > p.epsilon) {
        return InvalidFlag(
            "dp-epsilon", eps_text,
            absl::StrFormat(
                "the planned %s at sampling rate %.6g with --dp-noise-multiplier %g spend "
                "epsilon %.4g (delta %g, %s), more than the budget; a noise multiplier of %.4g "
                "keeps them within it, or plan fewer steps",
                Steps(s, *plan), plan->sampling_rate, p.noise_multiplier, spent->epsilon, p.delta,
                RdpConversionName(p.accountant), *needed));
      }
    }
  }
  if (p.noise_multiplier <= 0) {
    return InvalidFlag("dp", "on", "give --dp-noise-multiplier Z or --dp-epsilon E");
  }
  if (UsesDistributedDp(s)) {
    if (absl::StatusOr<double> d = DistributedDpSensitivity(DistributedDpFor(s)); !d.ok()) {
      return InvalidFlag("secure-aggregation", "on", d.status().message());
    }
  }
  p.key = DpKeyHex(p.noise_seed != 0 ? DpKeyFromSeed(p.noise_seed) : FreshDpKey());
  return absl::OkStatus();
}

int SecAggShareHolders(const JobSpec& spec) {
  const int clients = ClientsPerRound(spec.workers, spec.federated.participation);
  const int neighbours = spec.federated.secagg_neighbours;
  return neighbours > 0 ? std::min(clients, neighbours + 1) : clients;
}

SecAggParams SecureAggregationParams(const JobSpec& spec) {
  SecAggParams p{
      .clients = spec.workers, .clip = kSecAggClip, .neighbours = spec.federated.secagg_neighbours};
  // The default: a majority of those who hold a client's shares.
  p.threshold = spec.federated.secagg_threshold != 0
                    ? spec.federated.secagg_threshold
                    : std::max(2, SecAggShareHolders(spec) / 2 + 1);
  p.bits = 1;
  while (p.bits < 31 && static_cast<double>(spec.workers) * (std::ldexp(1.0, p.bits + 1) - 1) <
                            std::ldexp(1.0, 32)) {
    ++p.bits;
  }
  return p;
}

bool UsesDistributedDp(const JobSpec& spec) {
  return spec.privacy.level == DpLevel::kClient && spec.federated.secure_aggregation;
}

std::string DpMechanismDescription(const JobSpec& spec) {
  if (UsesDistributedDp(spec)) {
    return "skellam, distributed: each client adds its share before masking (Agarwal, Kairouz "
           "and Liu 2021), accounted without amplification by sampling";
  }
  if (spec.privacy.level == DpLevel::kExample) {
    return "gaussian, each worker adding its share of every step's noise (sampled Gaussian)";
  }
  return "gaussian, added by the servers to each round's sum (sampled Gaussian)";
}

DistributedDpParams DistributedDpFor(const JobSpec& spec) {
  return DistributedDpParams{.clip = spec.privacy.clip,
                             .noise_multiplier = spec.privacy.noise_multiplier,
                             .clients = spec.workers,
                             .threshold = SecureAggregationParams(spec).threshold};
}

double SecAggStageTimeoutSeconds(const JobSpec& spec) {
  return std::max(2.0, spec.federated.round_timeout_s / 4);
}

}  // namespace syncline
