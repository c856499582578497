#include "core/node_table.h"

#include <capnp/message.h>
#include <capnp/serialize.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace syncline {

std::vector<const NodeInfo*> NodeTable::Servers() const {
  std::vector<const NodeInfo*> servers(num_servers, nullptr);
  for (const NodeInfo& n : nodes) {
    if (n.role == wire::Role::SERVER && n.rank >= 0 && n.rank < num_servers) servers[n.rank] = &n;
  }
  return servers;
}

void NodeTable::ToWire(wire::NodeTable::Builder out) const {
  auto list = out.initNodes(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    list[i].setRole(nodes[i].role);
    list[i].setRank(nodes[i].rank);
    list[i].setId(nodes[i].id);
    list[i].setAddress(nodes[i].address);
  }
  out.setNumServers(num_servers);
  out.setNumWorkers(num_workers);
  out.setMaxWorkers(max_workers);
  out.setStaleness(staleness);
  out.setHeartbeatIntervalMs(static_cast<int32_t>(absl::ToInt64Milliseconds(heartbeat_interval)));
  out.setHeartbeatTimeoutMs(static_cast<int32_t>(absl::ToInt64Milliseconds(heartbeat_timeout)));
  out.setVersion(version);
  out.setGeneration(generation);
  out.setRestore(restore);
  if (!job_spec.empty()) {
    kj::Array<capnp::word> words =
        kj::heapArray<capnp::word>(job_spec.size() / sizeof(capnp::word));
    std::memcpy(words.begin(), job_spec.data(), words.size() * sizeof(capnp::word));
    capnp::FlatArrayMessageReader reader(words);
    out.setJob(reader.getRoot<wire::JobSpec>());
  }
}

absl::StatusOr<NodeTable> NodeTable::FromWire(wire::NodeTable::Reader in) {
  NodeTable t;
  t.num_servers = in.getNumServers();
  t.num_workers = in.getNumWorkers();
  t.max_workers = in.getMaxWorkers();
  t.staleness = in.getStaleness();
  t.heartbeat_interval = absl::Milliseconds(in.getHeartbeatIntervalMs());
  t.heartbeat_timeout = absl::Milliseconds(in.getHeartbeatTimeoutMs());
  if (t.num_servers < 0 || t.num_workers < 1 || t.max_workers < 0 || t.max_workers > 4096 ||
      t.staleness < -1 || t.heartbeat_interval <= absl::ZeroDuration() ||
      t.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("node table has invalid job settings");
  }
  t.version = in.getVersion();
  t.generation = in.getGeneration();
  t.restore = in.getRestore();
  if (in.hasJob()) {
    try {
      capnp::MallocMessageBuilder copy;
      copy.setRoot(in.getJob());
      kj::Array<capnp::word> words = capnp::messageToFlatArray(copy);
      t.job_spec.assign(reinterpret_cast<const char*>(words.asBytes().begin()),
                        words.asBytes().size());
    } catch (const kj::Exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("node table: malformed job spec: ", e.getDescription().cStr()));
    }
  }
  for (auto n : in.getNodes()) {
    t.nodes.push_back(NodeInfo{n.getRole(), n.getRank(), n.getId(), n.getAddress()});
  }
  for (const NodeInfo* s : t.Servers()) {
    if (s == nullptr) return absl::InvalidArgumentError("node table lacks a server rank");
  }
  return t;
}

std::string RoleName(wire::Role role) {
  switch (role) {
    case wire::Role::COORDINATOR:
      return "coordinator";
    case wire::Role::SERVER:
      return "server";
    case wire::Role::WORKER:
      return "worker";
  }
  return "unknown";
}

std::string DataEndpointId(wire::Role role, int rank) {
  return absl::StrCat(role == wire::Role::SERVER ? "ps" : "w", rank);
}

std::string ControlEndpointId(wire::Role role, int rank) {
  return absl::StrCat(DataEndpointId(role, rank), ".ctl");
}

std::vector<std::string> JobEndpointIds(int servers, int workers, bool joins) {
  std::vector<std::string> ids = {kCoordinatorId};
  if (joins) ids.push_back(kJoinerControlId);
  for (wire::Role role : {wire::Role::SERVER, wire::Role::WORKER}) {
    const int n = role == wire::Role::SERVER ? servers : workers;
    for (int r = 0; r < n; ++r) {
      ids.push_back(DataEndpointId(role, r));
      ids.push_back(ControlEndpointId(role, r));
    }
  }
  return ids;
}

}  // namespace syncline
