// Transport: how nodes exchange Messages. The algorithms (parameter server, clocks, gossip)
// see only this interface; ZmqTransport carries messages between processes and
// InprocTransport between threads of one test process.
//
// An Endpoint is one node's mailbox with a unique routing id. It may bind an address that
// others connect to, connects to peers by their routing id, sends whole messages to a peer
// and receives whole messages from any peer. Messages between two endpoints arrive in the
// order they were sent.
//
// Thread-safety: an Endpoint is thread-compatible (use it from one thread at a time); a
// Transport is thread-safe and must outlive its endpoints.
#ifndef SYNCLINE_CORE_TRANSPORT_H_
#define SYNCLINE_CORE_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/message.h"

namespace syncline {

// Bytes and messages an endpoint has moved, for run summaries.
struct TrafficCounters {
  std::atomic<uint64_t> bytes_sent{0};
  std::atomic<uint64_t> bytes_received{0};
  std::atomic<uint64_t> messages_sent{0};
  std::atomic<uint64_t> messages_received{0};
};

class Endpoint {
 public:
  virtual ~Endpoint() = default;

  virtual const std::string& id() const = 0;

  // Listens on `address` ("tcp://127.0.0.1:0" picks a free port). Returns the address that
  // peers should connect to.
  virtual absl::StatusOr<std::string> Bind(const std::string& address) = 0;

  // Makes `peer_id`, listening at `address`, reachable. Messages may be sent at once: they
  // wait until the connection is up.
  virtual absl::Status Connect(const std::string& peer_id, const std::string& address) = 0;

  // Sends `message` (its frames; the peer field is ignored) to `peer_id`. Fails with
  // Unavailable when the peer is unknown, DeadlineExceeded when the peer's queue stays full.
  // Borrowed frames must stay valid until the peer has received the message.
  virtual absl::Status Send(const std::string& peer_id, Message message, absl::Time deadline) = 0;

  // Sends *message only if the peer's queue has room now. ResourceExhausted when it has none,
  // leaving *message as it was (to be tried again); otherwise as Send, and *message is spent.
  // A server answers through it, so that a peer that stops reading cannot stall it.
  virtual absl::Status TrySend(const std::string& peer_id, Message* message) = 0;

  // Waits for the next message until `deadline`. DeadlineExceeded when none came. The
  // returned message has peer() set and is not yet parsed.
  virtual absl::StatusOr<Message> Receive(absl::Time deadline) = 0;

  // Bytes of the messages sent to `peer_id` with TrySend that the transport still holds, not
  // yet written to the network: what a peer that stopped reading costs this process. 0 where
  // the transport does not count them (its queues are bounded otherwise).
  virtual uint64_t QueuedBytes(const std::string& peer_id) const { return 0; }

  // True when Send and TrySend never keep a pointer into borrowed frames past their return
  // (they write them out or copy them), so a caller may lend a buffer it overwrites next.
  virtual bool SendCopiesBorrowedFrames() const { return false; }

  const TrafficCounters& counters() const { return counters_; }

 protected:
  TrafficCounters counters_;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // `id` must be unique among the endpoints that talk to each other.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(std::string id) = 0;
  // The routing ids of every endpoint of the job, once known (the coordinator knows them from
  // the start, a node from the node table): an authenticating transport then accepts
  // connections from exactly these. Connections that come earlier wait for the list.
  virtual void AllowPeers(const std::vector<std::string>& ids) {}
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_TRANSPORT_H_
