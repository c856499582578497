// What a differentially private job (--dp) plans to spend, from its spec: the sampling rate
// and the steps its accountant composes, and the noise it needs for --dp-epsilon.
//
//  - example level (DP-SGD): N training examples (JobSpec::Privacy::examples), W workers and
//    --batch-size B give the sampling rate q = min(1, W B / N): every step, each worker samples
//    each example of its partition with probability q, so the step's batch is a Poisson sample
//    of all N examples. An epoch is ceil(N / (W B)) steps; the job runs --epochs of them.
//  - client level (DP-FedAvg): a round picks each of the W clients with probability
//    q = --participation; the job runs --rounds rounds. Under --secure-aggregation the noise is
//    distributed (privacy/distributed_dp.h: each client's share of Skellam noise) and the
//    accountant composes the Skellam mechanism's RDP over the rounds at sampling rate 1: the
//    server sees which clients take part, so the picks' amplification does not hold against it.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_PRIVACY_PLAN_H_
#define SYNCLINE_JOB_PRIVACY_PLAN_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "job/privacy_accountant.h"
#include "privacy/distributed_dp.h"
#include "privacy/secure_aggregation.h"
#include "syncline/job_spec.h"

namespace syncline {

struct PrivacyPlan {
  double sampling_rate = 0;     // q
  int64_t steps = 0;            // steps (example level) or rounds (client level) composed
  int64_t steps_per_epoch = 0;  // example level
  // What the noisy sum is divided by: q N expected examples a step (example level; each of
  // the W workers reports q N / W of them), or q W expected clients a round (client level).
  double expected_batch = 0;
  DpNoiseMechanism mechanism = DpNoiseMechanism::kSampledGaussian;
};

// The checks of --dp, --server-optimizer and --secure-aggregation (ValidateJobSpec runs them):
// values in range, and only the sync modes, models and settings each one works with; the
// InvalidArgument error names the flag and why.
absl::Status CheckPrivacyOptions(const JobSpec& spec);

// FailedPrecondition for --dp off, or an example-level job whose examples are not counted yet.
absl::StatusOr<PrivacyPlan> PlanPrivacy(const JobSpec& spec);

// Completes the spec's privacy before the job starts (the launcher calls it once the training
// data is known, after setting privacy.examples): with --dp-epsilon only, calibrates the noise
// multiplier; with both, refuses a job whose planned steps spend more than --dp-epsilon,
// giving the numbers (InvalidArgument naming the flag); draws the privacy key (or derives it
// from --dp-noise-seed). Nothing to do for --dp off.
absl::Status ResolvePrivacy(JobSpec& spec);

// What a node checks of a spec it received: with --dp on, the launcher's part is done (a noise
// multiplier, a privacy key, the examples counted for --dp example), so that no node trains
// or aggregates without noise. FailedPrecondition naming what is missing.
absl::Status CheckPrivacyResolved(const JobSpec& spec);

// --secure-aggregation: each coordinate of a client's round update n (w_round - w_local) is
// clipped to [-kSecAggClip, kSecAggClip] before it is quantised. Generous, so that it rarely
// clips (a client of 6,000 examples may move a weight by up to 170 before it does); the
// quantisation step is 2 kSecAggClip / (2^bits - 1) (2^-7 with 10 workers).
inline constexpr double kSecAggClip = 1 << 20;

// The secure-aggregation parameters of a job (privacy/secure_aggregation.h): the W workers
// are clients 1..W (rank + 1); the threshold is --secagg-threshold, or with 0 a majority of
// the h share holders (SecAggShareHolders), floor(h / 2) + 1 and at least 2; the bits are the most
// b for which W (2^b - 1) < 2^32 (28 for 10 workers); the clip is kSecAggClip.
SecAggParams SecureAggregationParams(const JobSpec& spec);
// Who holds one client's Shamir shares: the clients of a round, or with
// --secagg-neighbours K its neighbourhood of K + 1 (itself included), whichever is fewer.
// The default threshold is a majority of them; with K, a given one must be too.
int SecAggShareHolders(const JobSpec& spec);
// --dp client with --secure-aggregation: the distributed noise's parameters (the clip, the
// noise multiplier, the W workers and the protocol's threshold t).
DistributedDpParams DistributedDpFor(const JobSpec& spec);
// Whether the spec's DP noise is the clients' (distributed) rather than the servers'.
bool UsesDistributedDp(const JobSpec& spec);
// The noise mechanism and who adds it, for summary.json and the launcher's plan line.
std::string DpMechanismDescription(const JobSpec& spec);
// Each secure-aggregation stage after the first (which covers the clients' local training and
// ends at --round-timeout) ends this long after the one before: a quarter of --round-timeout,
// at least 2 s. They are message exchanges only, so a client that misses one is lost.
double SecAggStageTimeoutSeconds(const JobSpec& spec);

// The accountant of the spec's plan (its sampling rate, noise multiplier and delta), whose
// Spent(t) is the epsilon after t steps (rounds). FailedPrecondition for --dp off or an
// unresolved spec.
absl::StatusOr<RdpAccountant> JobAccountant(const JobSpec& spec);

}  // namespace syncline

#endif  // SYNCLINE_JOB_PRIVACY_PLAN_H_
