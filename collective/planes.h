// Where the workers' collectives travel (--sync allreduce and hybrid): the communicator among
// every worker, over their data endpoints or a TCP plane of their own, and the plane of the
// dense all-reduces, NCCL when every rank computes on a GPU of its own, else that communicator.
// The backends (collective/allreduce_backend.h, collective/hybrid_backend.h) take what these
// connect.
//
// Thread-safety: each function is called by one rank's thread; every rank of the job calls it
// alike (the ranks trade what they offer, so that all choose the same plane).
#ifndef SYNCLINE_COLLECTIVE_PLANES_H_
#define SYNCLINE_COLLECTIVE_PLANES_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/communicator.h"
#include "collective/dense_collective.h"
#include "core/job_key.h"
#include "core/net.h"
#include "core/node_table.h"
#include "core/peer_rendezvous.h"
#include "core/transport.h"
#include "syncline/job_spec.h"

namespace syncline {

// A communicator among every worker of the job over `endpoint` (this worker's data endpoint,
// or its side of one), hosts told apart by the address each listens on (for the hierarchical
// algorithm); connects to the workers of higher rank.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkers(const JobSpec& spec,
                                                             const NodeTable& table, int rank,
                                                             Endpoint& endpoint);
// The communicator's algorithm named by --sync allreduce:ALGORITHM.
Algorithm AlgorithmOf(AllReduceAlgorithm algorithm);

// Where `--sync allreduce` workers' collectives travel.
struct CollectivePlane {
  // Offer a TcpTransport of their own (core/tcp_transport.h: no I/O thread between the socket
  // and the collective, docs/COLLECTIVES.md measures it against ZeroMQ).
  bool tcp = false;
  // The job's key: the plane is then sealed (both ends authenticated with keys derived from
  // it, every segment under an AEAD; core/seal.h). Null: plaintext, for jobs without a key.
  std::shared_ptr<const JobKey> key;
  // The plane's listening port comes from these (the node's --ports); any: a free one.
  PortRange ports;
  // The largest message a peer may send on the plane (TcpOptions::max_message_bytes): the
  // backend factories set it to their job's CollectiveMessageBound. 0: TcpOptions' default.
  uint64_t max_message_bytes = 0;
};

// The largest message (header and values) a communicator sends when its largest collective
// is an all-reduce of `floats` float32 values: the whole buffer, as recursive doubling,
// hierarchical and broadcast send it, or a segment (ring, halving), or a block of the
// connecting exchanges, whichever is largest, plus room for the header. Every peer of a job
// computes the same bound from the job's model, so an honest peer never exceeds it.
uint64_t CollectiveMessageBound(uint64_t floats);

// As ConnectWorkers; then, with more than one worker, the workers trade the addresses of
// their TCP planes (each listening on the host of the address it registered) with an
// all-gather over `endpoint`. When every worker offers one, every pair connects both ways and
// the communicator runs over the plane and owns it; when any worker offers none (a key, no
// free port), all stay on `endpoint`, so the ranks always agree.
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkersOverTcp(const JobSpec& spec,
                                                                    const NodeTable& table,
                                                                    int rank, Endpoint& endpoint,
                                                                    CollectivePlane plane);

// The communicator of one generation of the job (core/peer_rendezvous.h). In generation 0, as
// ConnectWorkersOverTcp. After a rollback the workers meet on endpoints of the generation
// instead, never over connections of the undone timeline: a TcpTransport of their own (with
// plane.tcp) or one of the node's transport (rendezvous.Listen), each listening on a fresh
// port, with every worker's address from the coordinator (rendezvous.TradeAddresses). Either
// way the communicator stops waiting for a peer once rendezvous.Interrupted() says the job
// rolls back (again).
absl::StatusOr<std::unique_ptr<Communicator>> ConnectWorkersOfGeneration(
    const JobSpec& spec, const NodeTable& table, int rank, Endpoint& endpoint,
    CollectivePlane plane, PeerRendezvous& rendezvous);

// A meeting of the workers (core/peer_rendezvous.h): a communicator over its members, and
// their ranks in the job (the communicator's rank r is members[r]).
struct PeerMeeting {
  std::unique_ptr<Communicator> communicator;
  std::vector<int> members;
};
// The members the coordinator lists once each has said where it listens for the meeting of
// rendezvous.generation() after `plan_events` departures and arrivals (endpoints of their own:
// a TcpTransport with plane.tcp, else one of the node's transport), renumbered densely in rank
// order. The communicator's waits do not end with rendezvous.Interrupted() (the caller sets
// what ends them). FailedPrecondition when the coordinator does not count this worker in.
absl::StatusOr<PeerMeeting> MeetPeers(const JobSpec& spec, const NodeTable& table, int rank,
                                      CollectivePlane plane, PeerRendezvous& rendezvous,
                                      uint64_t plan_events);

// This rank's RankDevice from its resolved device (device/placement.h: "cpu" or "cuda:N") on
// `host`, and in *ordinal the CUDA ordinal (-1 for the CPU). A CUDA device that cannot be
// probed, or a build without NCCL, gives a CPU rank whose note says why.
RankDevice ProbeRankDevice(std::string_view device, std::string host, int* ordinal);

// How a rank's dense all-reduces travel: `nccl`, or the CPU communicator when it is null.
struct DensePlane {
  std::unique_ptr<DenseCollective> nccl;
  DenseChoice choice;
};

// Every rank calls it with its own RankDevice (`mine`) and CUDA ordinal: the ranks trade their
// devices over `cpu`, choose alike (ChooseDenseCollective), log a fallback, and when NCCL is
// chosen rank 0's NCCL id travels to every rank over `cpu` and each joins the NCCL
// communicator (waiting up to `timeout`). When any rank fails to make or join it, every rank
// falls back to the CPU collective, saying why; an error only when `cpu` itself fails.
absl::StatusOr<DensePlane> ConnectDenseCollective(Communicator& cpu, const RankDevice& mine,
                                                  int ordinal, absl::Duration timeout);

// ConnectDenseCollective for a worker computing on `device` (device/placement.h's resolved
// "cpu" or "cuda:N"), on this machine's host name, with the job's peer timeout. A job whose
// --device is cpu trades nothing and keeps the CPU communicator.
absl::StatusOr<DensePlane> ConnectDenseForWorker(const JobSpec& spec, Communicator& cpu,
                                                 std::string_view device);

}  // namespace syncline

#endif  // SYNCLINE_COLLECTIVE_PLANES_H_
