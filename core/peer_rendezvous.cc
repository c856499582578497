#include "core/peer_rendezvous.h"

#include "absl/strings/str_cat.h"
#include "core/node_table.h"

namespace syncline {

std::string PeerEndpointId(int rank, uint32_t generation) {
  std::string id = DataEndpointId(wire::Role::WORKER, rank);
  if (generation > 0) absl::StrAppend(&id, "@g", generation);
  return id;
}

}  // namespace syncline
