// The federated settings both sides of --sync fedavg compute alike: which clients a round
// picks and which of them drop out (both seeded by the job's seed, so that servers and clients
// agree without a message), and the text form of --byzantine.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_FEDERATED_H_
#define SYNCLINE_JOB_FEDERATED_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "syncline/job_spec.h"

namespace syncline {

// Clients one round takes part with: max(1, round(participation * workers)).
int ClientsPerRound(int workers, double participation);

// The clients (ranks, ascending) picked for `round`: a seeded uniform sample without
// replacement of ClientsPerRound of them. The same (seed, round) gives the same set everywhere.
std::vector<int> PickClients(uint64_t seed, int64_t round, int workers, double participation);

// Who takes part in a round, as servers and clients compute it alike: PickClients, or under
// --dp client a Poisson sample (each client independently with probability `participation`,
// as DP-FedAvg's accountant assumes) drawn from the job's privacy key, which only the job's
// nodes hold (privacy/dp_random.h). A Poisson round may pick no client at all.
struct RoundPicker {
  uint64_t seed = 1;
  int workers = 1;
  double participation = 1;
  std::string poisson_key;  // 64 hex digits; empty: PickClients
  // The round's clients (ranks, ascending).
  std::vector<int> Pick(int64_t round) const;
};
RoundPicker RoundPickerFor(const JobSpec& spec);

// Whether picked client `rank` vanishes from `round` (--client-dropout P): a seeded draw per
// (round, rank), independent of the pick.
bool ClientDropsOut(uint64_t seed, int64_t round, int rank, double dropout);
// Under --secure-aggregation, where in the round such a client vanishes (a seeded draw per
// (round, rank), equally likely): the secure-aggregation stages it sends before it falls
// silent: 0 (before it advertises keys), 2 (after it shared keys) or 3 (after it uploaded its
// masked update). So --client-dropout exercises every loss the protocol tolerates.
int SecAggStagesBeforeDropout(uint64_t seed, int64_t round, int rank);

// "RANKS:ATTACK": RANKS a comma-separated list of worker ranks, ATTACK one of signflip,
// gaussian:SIGMA, scale:K, labelflip; "" or "none": no attack. Ranks are checked against the
// job's workers by ValidateJobSpec.
absl::StatusOr<JobSpec::Byzantine> ParseByzantine(const std::string& text);
std::string ByzantineName(const JobSpec::Byzantine& byzantine);
std::string AttackName(const AttackSpec& attack);

// Whether worker `rank` is one of --byzantine's.
bool IsByzantine(const JobSpec::Byzantine& byzantine, int rank);

}  // namespace syncline

#endif  // SYNCLINE_JOB_FEDERATED_H_
