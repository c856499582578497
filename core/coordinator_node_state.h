// Coordinator::NodeState: what the coordinator knows of one node (core/coordinator.h). Private
// to the coordinator, whose implementation spreads over coordinator.cc (the run and its message
// pump), coordinator_rendezvous.cc, coordinator_supervision.cc, coordinator_joins.cc and
// coordinator_recovery.cc (restarts and rollbacks).
//
// Thread-safety: Run()'s thread only.
#ifndef SYNCLINE_CORE_COORDINATOR_NODE_STATE_H_
#define SYNCLINE_CORE_COORDINATOR_NODE_STATE_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/coordinator.h"
#include "core/net.h"
#include "core/node_table.h"

namespace syncline {

struct Coordinator::NodeState {
  wire::Role role;
  int rank;
  std::string control_id;
  std::string address;
  std::string host;
  int pid = 0;
  absl::Time last_seen;
  bool ready = false;
  bool done = false;  // workers: finished training
  // Workers under ASP with hand-over: trained their plan and wait to take a lost worker's
  // batches (idle), or told that no batches will come (released).
  bool idle = false;
  bool released = false;
  bool down = false;
  // Its process failed and a replacement is to register under its id (Restart).
  bool replacing = false;
  // During a recovery: whether it has restored the rollback's checkpoint (a replacement:
  // registered and ready), and whether it is a replacement still to be started.
  bool restored = true;
  bool needs_start = false;
  // Reported to the launcher as hung (TakeHungNodes), to be killed and restarted.
  bool hang_reported = false;
  // A replacement that has registered and waits for its table (SendReplacementTables).
  bool awaiting_table = false;
  // A worker that asked to join: given its rank, not yet its table (CompleteArrival).
  bool joining = false;
  int64_t first_clock = 0;  // workers: the clock their plan starts at (joiners: their entry)
  bool stats = false;       // servers: statistics received at shutdown
  int64_t clock = -1;       // workers: the clock their last heartbeat carried
  // Workers whose peers meet on endpoints of their own (collective and gossip jobs after a
  // rollback, an elastic all-reduce after a departure): where its endpoint for meeting
  // peer_meeting (generation, plan events) listens (Coordinator::OnPeerAddress).
  std::optional<std::pair<uint32_t, uint64_t>> peer_meeting;
  std::string peer_address;
  absl::Time clock_since;  // when that clock was first seen
  int metrics_port = 0;    // where it serves /metrics (0: it does not)

  // Takes what a registration says of where the node runs, and tells `observer` (may be null).
  // A replacement keeps the failed node's data address: it listens there (job/node_join.h).
  void Registered(wire::Register::Reader reg, CoordinatorObserver* observer,
                  bool replacement = false) {
    if (!replacement) address = reg.getDataAddress();
    host = reg.getHost();
    pid = reg.getPid();
    metrics_port = reg.getMetricsPort();
    if (observer != nullptr) observer->OnNodeRegistered(role, rank, host, address, metrics_port);
  }

  // "w2 (pid 812 on gpu3)", and the data address when it is off loopback: hosts that share a
  // name (containers, network namespaces) are still told apart.
  std::string Name() const {
    const std::string where =
        address.empty() || IsLoopbackAddress(address) ? host : absl::StrCat(host, ", ", address);
    return absl::StrFormat("%s (pid %d on %s)", DataEndpointId(role, rank), pid, where);
  }
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_COORDINATOR_NODE_STATE_H_
