// The world a cluster launcher (mpirun, srun, a PMI implementation) starts: how many ranks, and
// which one this process is, read from the launcher's environment; and the one mapping from a
// world rank to a node of the job. With S servers, world ranks 0..S-1 are servers ps0..ps(S-1)
// and ranks S.. are workers w0, w1, ... So `mpirun -np S+W syncline-node --servers S ...` and
// `srun -n S+W syncline-node --servers S ...` start a whole job with one command.
//
// Thread-safety: the functions are thread-safe (they read the environment).
#ifndef SYNCLINE_JOB_WORLD_H_
#define SYNCLINE_JOB_WORLD_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "core/syncline.capnp.h"

namespace syncline {

struct WorldRank {
  int rank = 0;
  int size = 0;
  // The variable the rank came from ("OMPI_COMM_WORLD_RANK"), for messages.
  std::string source;
};

// This process's world rank and size, from the first of these pairs that is set:
// SYNCLINE_WORLD_RANK/SYNCLINE_WORLD_SIZE, OMPI_COMM_WORLD_RANK/_SIZE, PMIX_RANK with
// OMPI_COMM_WORLD_SIZE or PMI_SIZE, PMI_RANK/PMI_SIZE, SLURM_PROCID/SLURM_NTASKS. (Open MPI's
// and PMI's come before Slurm's: under `mpirun` inside an allocation, SLURM_PROCID names the
// daemon's step, not the rank.) nullopt when none is set; InvalidArgument naming the variable
// when a value does not parse or the rank is not below the size.
absl::StatusOr<std::optional<WorldRank>> WorldRankFromEnvironment();

struct NodeRank {
  wire::Role role = wire::Role::WORKER;
  int rank = 0;
};

// The node that world rank `world_rank` is in a job with `servers` servers.
NodeRank NodeOfWorldRank(int world_rank, int servers);

}  // namespace syncline

#endif  // SYNCLINE_JOB_WORLD_H_
