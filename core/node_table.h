// NodeTable: who is in the job (every node's role, rank, routing id and address) and the
// job-wide settings every node needs, as handed out by the coordinator at rendezvous.
#ifndef SYNCLINE_CORE_NODE_TABLE_H_
#define SYNCLINE_CORE_NODE_TABLE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/syncline.capnp.h"

namespace syncline {

struct NodeInfo {
  wire::Role role = wire::Role::WORKER;
  int rank = 0;
  std::string id;       // routing id of the node's data endpoint
  std::string address;  // where that endpoint listens ("" if it does not)
};

struct NodeTable {
  std::vector<NodeInfo> nodes;
  int num_servers = 0;
  int num_workers = 0;
  // Workers may join up to this many in all (ranks num_workers.. are joiners'); 0: none.
  int max_workers = 0;
  int64_t staleness = 0;  // 0 = BSP, -1 = unbounded (ASP), s > 0 = SSP(s)
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // The job spec as a flat wire::JobSpec message (job/job_wire.h decodes it); empty: none.
  std::string job_spec;
  // The coordinator's build (core/version.h).
  std::string version;
  // Rollbacks the job has made so far; a node that replaces a failed one joins at the current
  // one, and restores the checkpoint folder `restore` (empty: a node of the job's start).
  uint32_t generation = 0;
  std::string restore;

  // The most workers the job may have: max_workers, or num_workers without joins.
  int MaxWorkers() const { return max_workers > num_workers ? max_workers : num_workers; }

  // Data endpoint ids of the servers, by rank.
  std::vector<const NodeInfo*> Servers() const;

  void ToWire(wire::NodeTable::Builder out) const;
  static absl::StatusOr<NodeTable> FromWire(wire::NodeTable::Reader in);
};

// The routing id of a node's data endpoint ("ps0", "w3") and of its control endpoint.
std::string DataEndpointId(wire::Role role, int rank);
std::string ControlEndpointId(wire::Role role, int rank);
std::string RoleName(wire::Role role);

// Every routing id of a job with these nodes: the coordinator's, and each node's data and
// control endpoints (an authenticating transport's list, Transport::AllowPeers).
// With `joins`, also the joiner's first control endpoint (kJoinerControlId).
std::vector<std::string> JobEndpointIds(int servers, int workers, bool joins = false);

// The coordinator's routing id: fixed, so that nodes need only its address.
inline constexpr char kCoordinatorId[] = "coordinator";
// The control endpoint a worker started with --join asks for its rank from.
inline constexpr char kJoinerControlId[] = "joiner.ctl";

}  // namespace syncline

#endif  // SYNCLINE_CORE_NODE_TABLE_H_
