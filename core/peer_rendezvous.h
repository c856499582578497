// PeerRendezvous: how the workers of a job that talk to each other (all-reduce and hybrid
// collectives, gossip) find each other in one generation of the job, and learn that the
// generation is being undone.
//
// At the start (generation 0) the workers meet over their data endpoints, whose addresses are
// in the node table. After a rollback (in-place recovery, docs/FAULT_TOLERANCE.md) they do not:
// a survivor's ZeroMQ ROUTER may still hold the dead peer's connection under its id, and a
// replacement's message over a new one is then lost (an earlier attempt hung its all-gather for
// the peer timeout). Instead every worker listens on an endpoint of its own for the new
// generation, under an id that names the generation (PeerEndpointId), and the coordinator hands
// out every worker's address once all have theirs. No connection of the undone timeline is
// used again, and a message of another generation is dropped: its sender's id is not a peer's
// of this one (a generation's TCP plane refuses the connection at its hello).
//
// An elastic all-reduce (--min-workers, docs/FAULT_TOLERANCE.md) meets the same way after each
// departure or arrival of a worker (a plan event): a meeting is named by the generation and the
// count of plan events heard, and its members are the workers the coordinator still counts in.
//
// Thread-safety: thread-compatible; one worker's backend factory and backend use it.
#ifndef SYNCLINE_CORE_PEER_RENDEZVOUS_H_
#define SYNCLINE_CORE_PEER_RENDEZVOUS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/transport.h"

namespace syncline {

// The id of worker `rank`'s endpoint for its peers in `generation` after `plan_events`
// departures and arrivals: its data endpoint's id ("w3") at the start, "w3@g2" in generation 2,
// "w3@g0.1" after the first departure from an elastic all-reduce.
std::string PeerEndpointId(int rank, uint32_t generation, uint64_t plan_events = 0);

class PeerRendezvous {
 public:
  virtual ~PeerRendezvous() = default;

  // The generation this timeline trains in: 0 from the start, one more for each rollback.
  virtual uint32_t generation() const = 0;

  // OK while this timeline goes on; Aborted once the job rolls back (a wait for a peer then
  // ends, instead of waiting out the peer timeout for one that is dead).
  virtual absl::Status Interrupted() const = 0;

  // A new endpoint of this worker's transport under `id` (PeerEndpointId), bound as the data
  // endpoint is (its host, a port of the node's range), and the address it listens at. An
  // authenticating transport accepts `peers` (the meeting's ids) from now on.
  struct Listening {
    std::unique_ptr<Endpoint> endpoint;
    std::string address;
  };
  virtual absl::StatusOr<Listening> Listen(const std::string& id,
                                           const std::vector<std::string>& peers) = 0;

  // The departures and arrivals of workers heard so far: every worker hears the same sequence.
  virtual uint64_t PlanEvents() const = 0;

  // Hands `address`, where this worker listens in generation() after `plan_events` departures
  // and arrivals, to the coordinator and returns every member's by rank ("" for a rank that is
  // not one: gone, or never there), once all have handed theirs. Aborted when the job rolls
  // back, or another worker leaves or arrives, first; DeadlineExceeded at `deadline`.
  virtual absl::StatusOr<std::vector<std::string>> TradeAddresses(uint64_t plan_events,
                                                                  const std::string& address,
                                                                  absl::Time deadline) = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_PEER_RENDEZVOUS_H_
