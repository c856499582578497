#include "collective/planes.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/tcp_transport.h"
#ifdef SYNCLINE_HAVE_NCCL
#include "collective/nccl_communicator.h"
#endif

namespace syncline {

Algorithm AlgorithmOf(AllReduceAlgorithm algorithm) {
  switch (algorithm) {
    case AllReduceAlgorithm::kAuto:
      return Algorithm::kAuto;
    case AllReduceAlgorithm::kRing:
      return Algorithm::kRing;
    case AllReduceAlgorithm::kDoubling:
      return Algorithm::kRecursiveDoubling;
    case AllReduceAlgorithm::kHierarchical:
      return Algorithm::kHierarchical;
    case AllReduceAlgorithm::kHalving:
      return Algorithm::kHalvingDoubling;
  }
  return Algorithm::kAuto;
}

namespace {

// Labels each worker rank by the host of the address it registered (for the hierarchical
// algorithm): ranks that share an IP share a host.
std::vector<int> HostsOfWorkers(const NodeTable& table) {
  std::vector<int> host_of_rank(table.num_workers, 0);
  std::map<std::string, int> hosts;
  for (const NodeInfo& n : table.nodes) {
    if (n.role != wire::Role::WORKER || n.rank < 0 || n.rank >= table.num_workers) continue;
    auto hp = ParseTcpAddress(n.address);
    const std::string host = hp.ok() ? hp->host : n.address;
    host_of_rank[n.rank] = hosts.try_emplace(host, static_cast<int>(hosts.size())).first->second;
  }
  return host_of_rank;
}

CommunicatorOptions CollectiveOptions(const JobSpec& spec, const NodeTable& table) {
  CommunicatorOptions c;
  c.timeout = absl::Seconds(std::min(spec.timeouts.request_s, spec.timeouts.peer_s));
  c.host_of_rank = HostsOfWorkers(table);
  return c;
}

std::vector<std::string> WorkerIds(const NodeTable& table) {
  std::vector<std::string> peers;
  for (int w = 0; w < table.num_workers; ++w) {
    peers.push_back(DataEndpointId(wire::Role::WORKER, w));
  }
  return peers;
}

// A TcpTransport and this worker's endpoint on it; the endpoint goes first.
struct TcpPlane {
  explicit TcpPlane(TcpOptions options) : transport(std::move(options)) {}
  TcpTransport transport;
  std::unique_ptr<Endpoint> endpoint;
};

// This worker's TCP plane (sealed with the plane's key, if any), listening on the host of its
// registered address at a port in plane.ports, and the address it listens at.
absl::StatusOr<std::pair<std::shared_ptr<TcpPlane>, std::string>> ListenOnTcpPlane(
    const NodeTable& table, int rank, const std::vector<std::string>& peers,
    const CollectivePlane& plane) {
  std::string host = "127.0.0.1";
  for (const NodeInfo& node : table.nodes) {
    if (node.role != wire::Role::WORKER || node.rank != rank) continue;
    if (auto hp = ParseTcpAddress(node.address); hp.ok()) host = hp->host;
  }
  TcpOptions options;
  if (plane.max_message_bytes > 0) options.max_message_bytes = plane.max_message_bytes;
  options.key = plane.key;
  auto tcp = std::make_shared<TcpPlane>(std::move(options));
  tcp->transport.AllowPeers(peers);
  auto made = tcp->transport.CreateEndpoint(peers[rank]);
  if (!made.ok()) return made.status();
  tcp->endpoint = *std::move(made);
  absl::StatusOr<std::string> address = BindInRange(
      *tcp->endpoint, host.find(':') == std::string::npos ? host : "[" + host + "]", plane.ports);
  if (!address.ok()) return address.status();
  return std::make_pair(std::move(tcp), *std::move(address));
}

}  // namespace

uint64_t CollectiveMessageBound(uint64_t floats) {
  // A message's header frame (Cap'n Proto: tens of bytes) and the preamble, with room to spare.
  constexpr uint64_t kHeaderBytes = 4096;
  const uint64_t values = std::max<uint64_t>(
      {floats * sizeof(float), CommunicatorOptions{}.segment_bytes, kRankDeviceBytes});
  return values + kHeaderBytes;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkers(const JobSpec& spec,
                                                             const NodeTable& table, int rank,
                                                             Endpoint& endpoint) {
  for (const NodeInfo& n : table.nodes) {
    if (n.role != wire::Role::WORKER || n.rank < 0 || n.rank >= table.num_workers) continue;
    // One connection per pair, opened by the lower rank (two ROUTERs connected both ways
    // under the same ids trip ZeroMQ); the higher rank answers over the one it accepted.
    if (n.rank > rank) {
      if (auto s = endpoint.Connect(n.id, n.address); !s.ok()) return s;
    }
  }
  return std::make_unique<Communicator>(&endpoint, rank, WorkerIds(table),
                                        CollectiveOptions(spec, table));
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkersOverTcp(const JobSpec& spec,
                                                                    const NodeTable& table,
                                                                    int rank, Endpoint& endpoint,
                                                                    CollectivePlane plane) {
  auto rendezvous = ConnectWorkers(spec, table, rank, endpoint);
  if (!rendezvous.ok() || table.num_workers == 1) return rendezvous;
  const std::vector<std::string> peers = WorkerIds(table);
  // Every rank offers the address of its TCP plane, or nothing (a job with a key, or no free
  // port); the plane is used only when every rank offers one, so that all ranks agree.
  std::shared_ptr<TcpPlane> tcp;
  std::string offer;
  if (plane.tcp) {
    auto listening = ListenOnTcpPlane(table, rank, peers, plane);
    if (listening.ok()) {
      std::tie(tcp, offer) = *std::move(listening);
    } else {
      SYNCLINE_LOG(WARNING) << "collectives stay on the data endpoint: their TCP plane "
                            << listening.status();
    }
  }
  constexpr size_t kBlock = 256;  // every rank's offer, in blocks of one size
  if (offer.size() >= kBlock) {
    SYNCLINE_LOG(WARNING) << "collectives stay on the data endpoint: address too long: " << offer;
    offer.clear();
  }
  std::vector<std::byte> mine(kBlock, std::byte{0}), all;
  std::memcpy(mine.data(), offer.data(), offer.size());
  if (auto s = (*rendezvous)->AllGatherBytes(mine, &all); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("trading the collectives' TCP addresses: ", s.message()));
  }
  std::vector<std::string> addresses;
  for (int w = 0; w < table.num_workers; ++w) {
    const char* block = reinterpret_cast<const char*>(all.data() + w * kBlock);
    addresses.emplace_back(block, strnlen(block, kBlock));
  }
  for (int w = 0; w < table.num_workers; ++w) {
    if (addresses[w].empty()) {
      if (tcp != nullptr) {
        SYNCLINE_LOG(INFO) << "collectives stay on the data endpoint: " << peers[w]
                           << " offers no TCP plane";
      }
      return rendezvous;
    }
    if (w != rank && !ParseTcpAddress(addresses[w]).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          peers[w], " sent '", absl::CEscape(addresses[w]), "' as its collectives' TCP address"));
    }
  }
  for (int w = 0; w < table.num_workers; ++w) {
    if (w == rank) continue;
    if (auto s = tcp->endpoint->Connect(peers[w], addresses[w]); !s.ok()) return s;
  }
  SYNCLINE_LOG(INFO) << "collectives over " << (plane.key ? "sealed" : "direct") << " TCP at "
                     << offer;
  auto communicator = std::make_unique<Communicator>(tcp->endpoint.get(), rank, peers,
                                                     CollectiveOptions(spec, table));
  communicator->Own(std::move(tcp));
  return communicator;
}

absl::StatusOr<PeerMeeting> MeetPeers(const JobSpec& spec, const NodeTable& table, int rank,
                                      CollectivePlane plane, PeerRendezvous& rendezvous,
                                      uint64_t plan_events) {
  const uint32_t generation = rendezvous.generation();
  std::vector<std::string> ids;
  for (int w = 0; w < table.MaxWorkers(); ++w) {
    ids.push_back(PeerEndpointId(w, generation, plan_events));
  }
  std::shared_ptr<void> owned;
  Endpoint* mine = nullptr;
  std::string address;
  if (plane.tcp) {
    auto listening = ListenOnTcpPlane(table, rank, ids, plane);
    if (!listening.ok()) return listening.status();
    mine = listening->first->endpoint.get();
    owned = std::move(listening->first);
    address = std::move(listening->second);
  } else {
    absl::StatusOr<PeerRendezvous::Listening> listening = rendezvous.Listen(ids[rank], ids);
    if (!listening.ok()) return listening.status();
    mine = listening->endpoint.get();
    owned = std::shared_ptr<Endpoint>(std::move(listening->endpoint));
    address = std::move(listening->address);
  }
  CommunicatorOptions options = CollectiveOptions(spec, table);
  absl::StatusOr<std::vector<std::string>> addresses =
      rendezvous.TradeAddresses(plan_events, address, absl::Now() + options.timeout);
  if (!addresses.ok()) return addresses.status();
  addresses->resize(ids.size());
  // The members are the workers the coordinator listed, renumbered densely in rank order.
  PeerMeeting meeting;
  std::vector<std::string> peers;
  std::vector<int> hosts;
  int me = -1;
  for (int w = 0; w < static_cast<int>(ids.size()); ++w) {
    if ((*addresses)[w].empty()) continue;
    if (w == rank) me = static_cast<int>(peers.size());
    peers.push_back(ids[w]);
    meeting.members.push_back(w);
    hosts.push_back(w < static_cast<int>(options.host_of_rank.size()) ? options.host_of_rank[w]
                                                                      : w);
  }
  if (me < 0) {
    return absl::FailedPreconditionError(absl::StrCat("the coordinator counts ", ids[rank],
                                                      " out of the job (it was declared down)"));
  }
  for (size_t i = 0; i < peers.size(); ++i) {
    const int w = meeting.members[i];
    // A TCP plane connects every pair both ways; two ZeroMQ ROUTERs connected both ways under
    // the same ids trip ZeroMQ, so there the lower rank opens the one connection.
    if (w == rank || (!plane.tcp && w < rank)) continue;
    if (auto s = mine->Connect(ids[w], (*addresses)[w]); !s.ok()) return s;
  }
  options.host_of_rank = std::move(hosts);
  SYNCLINE_LOG(INFO) << "collectives of generation " << generation
                     << (plan_events > 0
                             ? absl::StrCat(" after ", plan_events, " departures and arrivals")
                             : "")
                     << " among " << peers.size() << " workers over "
                     << (!plane.tcp  ? "the node's transport"
                         : plane.key ? "sealed TCP"
                                     : "direct TCP")
                     << " at " << address;
  meeting.communicator = std::make_unique<Communicator>(mine, me, peers, options);
  meeting.communicator->Own(std::move(owned));
  return meeting;
}

absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkersOfGeneration(
    const JobSpec& spec, const NodeTable& table, int rank, Endpoint& endpoint,
    CollectivePlane plane, PeerRendezvous& rendezvous) {
  absl::StatusOr<std::unique_ptr<Communicator>> made;
  if (rendezvous.generation() == 0) {
    made = ConnectWorkersOverTcp(spec, table, rank, endpoint, plane);
  } else {
    absl::StatusOr<PeerMeeting> meeting =
        MeetPeers(spec, table, rank, plane, rendezvous, rendezvous.PlanEvents());
    if (!meeting.ok()) return meeting.status();
    if (meeting->members.size() != static_cast<size_t>(table.num_workers)) {
      return absl::UnavailableError(
          absl::StrFormat("the coordinator named %d of the %d workers for generation %d",
                          meeting->members.size(), table.num_workers, rendezvous.generation()));
    }
    made = std::move(meeting->communicator);
  }
  if (made.ok()) (*made)->StopWaitingWhen([&rendezvous] { return rendezvous.Interrupted(); });
  return made;
}

RankDevice ProbeRankDevice(std::string_view device, std::string host, int* ordinal) {
  *ordinal = -1;
  RankDevice mine{.host = std::move(host)};
  if (!device.starts_with("cuda")) return mine;  // "cpu"
  int n = 0;
  if (device != "cuda" && (!device.starts_with("cuda:") ||
                           !absl::SimpleAtoi(std::string(device.substr(5)), &n) || n < 0)) {
    mine.note = absl::StrCat("device '", std::string(device), "' is not cpu or cuda:N");
    return mine;
  }
#ifdef SYNCLINE_HAVE_NCCL
  absl::StatusOr<RankDevice> gpu = ProbeCudaDevice(n, mine.host);
  if (!gpu.ok()) {
    mine.note = absl::StrCat(std::string(device), " could not be probed: ", gpu.status().message());
    return mine;
  }
  *ordinal = n;
  return *std::move(gpu);
#else
  mine.note = absl::StrCat(std::string(device), ", but this build has no NCCL");
  return mine;
#endif
}

#ifdef SYNCLINE_HAVE_NCCL
namespace {

// Every rank's flag (one byte in a word), traded over `cpu`: true when all are set.
absl::StatusOr<bool> AllAgree(Communicator& cpu, bool mine) {
  std::vector<std::byte> block(4, std::byte{0}), all;
  block[0] = std::byte{mine ? uint8_t{1} : uint8_t{0}};
  if (auto s = cpu.AllGatherBytes(block, &all); !s.ok()) return s;
  for (int r = 0; r < cpu.size(); ++r) {
    if (all[r * 4] != std::byte{1}) return false;
  }
  return true;
}

}  // namespace
#endif  // SYNCLINE_HAVE_NCCL

absl::StatusOr<DensePlane> ConnectDenseCollective(Communicator& cpu, const RankDevice& mine,
                                                  int ordinal, absl::Duration timeout) {
  absl::StatusOr<std::vector<RankDevice>> devices = ExchangeRankDevices(cpu, mine);
  if (!devices.ok()) return devices.status();
  DensePlane plane;
  plane.choice = ChooseDenseCollective(*devices);
  const bool some_gpu = std::any_of(devices->begin(), devices->end(),
                                    [](const RankDevice& d) { return d.gpu() || !d.note.empty(); });
  if (!plane.choice.nccl) {
    if (some_gpu) SYNCLINE_LOG(WARNING) << plane.choice.reason;
    return plane;
  }
  auto fall_back = [&plane](const std::string& why) {
    plane.nccl.reset();
    plane.choice = {false, absl::StrCat(why,
                                        ", so the dense collectives run on the CPU with "
                                        "host staging")};
    SYNCLINE_LOG(WARNING) << plane.choice.reason;
  };
#ifdef SYNCLINE_HAVE_NCCL
  // Rank 0's NCCL id, or why it has none, to every rank: [1 if made][id][its error's text].
  constexpr size_t kBlock = 1 + kNcclIdBytes + 255;
  std::vector<std::byte> block(kBlock, std::byte{0}), all;
  if (cpu.rank() == 0) {
    absl::StatusOr<NcclId> id = NewNcclId();
    if (id.ok()) {
      block[0] = std::byte{1};
      std::memcpy(block.data() + 1, id->data(), kNcclIdBytes);
    } else {
      const std::string why(id.status().message().substr(0, kBlock - 1 - kNcclIdBytes - 1));
      std::memcpy(block.data() + 1 + kNcclIdBytes, why.data(), why.size());
    }
  }
  if (auto s = cpu.AllGatherBytes(block, &all); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("handing out the NCCL id: ", s.message()));
  }
  if (all[0] != std::byte{1}) {
    const char* text = reinterpret_cast<const char*>(all.data() + 1 + kNcclIdBytes);
    fall_back(absl::StrCat("w0 could not make an NCCL id (",
                           absl::CEscape(std::string(text, strnlen(text, 254))), ")"));
    return plane;
  }
  NcclId id;
  std::memcpy(id.data(), all.data() + 1, kNcclIdBytes);
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::Create(
      cpu.rank(), cpu.size(), ordinal, id, NcclOptions{.timeout = timeout});
  if (!nccl.ok()) SYNCLINE_LOG(WARNING) << "joining the NCCL communicator: " << nccl.status();
  // Every rank learns whether all joined, so that all use NCCL or none does.
  absl::StatusOr<bool> joined = AllAgree(cpu, nccl.ok());
  if (!joined.ok()) return joined.status();
  if (!*joined) {
    fall_back("a rank could not join the NCCL communicator");
    return plane;
  }
  plane.nccl = *std::move(nccl);
  SYNCLINE_LOG(INFO) << "dense all-reduces over NCCL: " << plane.choice.reason;
  return plane;
#else
  (void)ordinal;
  (void)timeout;
  fall_back("this build has no NCCL");
  return plane;
#endif
}

absl::StatusOr<DensePlane> ConnectDenseForWorker(const JobSpec& spec, Communicator& cpu,
                                                 std::string_view device) {
  // Every rank decides from the spec alone whether to trade devices at all: a job on the CPU
  // (--device cpu) keeps today's collectives without a word more on the wire.
  if (spec.device.kind == DeviceKind::kCpu) {
    return DensePlane{.nccl = nullptr, .choice = {false, "--device cpu"}};
  }
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  int ordinal = -1;
  const RankDevice mine = ProbeRankDevice(device, host, &ordinal);
  return ConnectDenseCollective(
      cpu, mine, ordinal, absl::Seconds(std::min(spec.timeouts.request_s, spec.timeouts.peer_s)));
}

}  // namespace syncline
