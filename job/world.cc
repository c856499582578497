#include "job/world.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace syncline {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

}  // namespace

absl::StatusOr<std::optional<WorldRank>> WorldRankFromEnvironment() {
  struct Pair {
    const char* rank;
    const char* size;
  };
  static constexpr Pair kPairs[] = {
      {"SYNCLINE_WORLD_RANK", "SYNCLINE_WORLD_SIZE"},
      {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMIX_RANK", "OMPI_COMM_WORLD_SIZE"},
      {"PMIX_RANK", "PMI_SIZE"},
      {"PMI_RANK", "PMI_SIZE"},
      {"SLURM_PROCID", "SLURM_NTASKS"},
  };
  for (const Pair& p : kPairs) {
    const char* rank = Env(p.rank);
    const char* size = Env(p.size);
    if (rank == nullptr || size == nullptr) continue;
    WorldRank w;
    w.source = p.rank;
    if (!absl::SimpleAtoi(rank, &w.rank) || w.rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.rank, "='", rank, "' is not a rank (an integer >= 0)"));
    }
    if (!absl::SimpleAtoi(size, &w.size) || w.size < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.size, "='", size, "' is not a world size (an integer >= 1)"));
    }
    if (w.rank >= w.size) {
      return absl::InvalidArgumentError(
          absl::StrCat(p.rank, "=", w.rank, " is not below ", p.size, "=", w.size));
    }
    return std::optional<WorldRank>(w);
  }
  return std::optional<WorldRank>();
}

NodeRank NodeOfWorldRank(int world_rank, int servers) {
  if (world_rank < servers) return NodeRank{wire::Role::SERVER, world_rank};
  return NodeRank{wire::Role::WORKER, world_rank - servers};
}

}  // namespace syncline
