#include "core/peer_rendezvous.h"

#include "absl/strings/str_cat.h"
#include "core/node_table.h"

namespace syncline {

std::string PeerEndpointId(int rank, uint32_t generation, uint64_t plan_events) {
  std::string id = DataEndpointId(wire::Role::WORKER, rank);
  if (plan_events > 0) {
    absl::StrAppend(&id, "@g", generation, ".", plan_events);
  } else if (generation > 0) {
    absl::StrAppend(&id, "@g", generation);
  }
  return id;
}

}  // namespace syncline
