// ZmqTransport: the production Transport over ZeroMQ.
//
// Every endpoint is one ROUTER socket whose routing id is the endpoint id. Connecting names
// the peer up front (ZMQ_CONNECT_ROUTING_ID), so a node can address any peer by id over a
// single socket, and a receive needs no poll over many sockets and no extra thread between
// the socket and the caller. ZMQ_ROUTER_MANDATORY turns a send to an unknown peer into an
// error instead of a silent drop. Payload frames are handed to ZeroMQ without a copy when
// they are large (borrowed frames are referenced, owned ones keep their owner alive until
// ZeroMQ releases them).
//
// With ZmqOptions::key the transport authenticates and encrypts (CURVE, see ZmqOptions::key).
//
// Sealed data path (ZmqOptions::seal_data, keyed jobs' data endpoints): the socket runs
// without CURVE, and the endpoint seals each message itself. The first send to a peer it
// connected to opens a session (the sealed TCP plane's handshake, core/seal.h, as messages;
// what is sent meanwhile waits, bounded, and goes out when the endpoint, next driven by any
// Send or Receive, takes the reply):
//   client -> server  "SLH1": the ciphers offered, nonce Nc
//   server -> client  "SLH2": the cipher chosen, nonce Ns, ServerProof(PairKey(client, server))
// and both directions' keys come from the pair key and both nonces. An end with messages for
// a peer that connected to it and has not said hello asks it to ("SLH0"); when both say hello
// at once, the end with the smaller id is the client. The server holds no
// proof of the client: the client's first message opens only under keys that need the pair
// key and the server's fresh Ns. A message is then [meta][frame]...: the meta frame, sealed,
// lists the frames' sizes; each frame is sealed in place (core/frame_seal.h) with counter
// nonces, and opened in place where ZeroMQ received it. A message without a session, whose
// tag fails (altered, replayed, reordered, cut, another key) or whose layout is wrong is
// refused, counted and logged naming the peer's routing id; the session with that peer ends
// (its next HELLO starts a fresh one), and the endpoint serves the others. A client drops its
// session when its connection to the server breaks (a socket monitor), so a
// restarted server is met with a fresh handshake. Routing ids, frame counts and sizes travel
// in the clear; a stranger may take an id nobody holds yet (no handover, as in plaintext).
// A listening endpoint bounds what strangers can make it hold (ZmqOptions::connections,
// core/connection_guard.h), and TrySend counts the bytes each peer has not taken yet
// (Endpoint::QueuedBytes), which ZeroMQ's high-water mark, a count of messages, does not bound.
//
// Thread-safety: the transport (a zmq context) is thread-safe; endpoints are
// thread-compatible, as sockets are.
#ifndef SYNCLINE_CORE_ZMQ_TRANSPORT_H_
#define SYNCLINE_CORE_ZMQ_TRANSPORT_H_

#include <memory>
#include <string>
#include <zmq.hpp>

#include "absl/time/time.h"
#include "core/connection_guard.h"
#include "core/job_key.h"
#include "core/transport.h"

namespace syncline {

struct ZmqOptions {
  // ZeroMQ I/O threads. One thread moves about 3 GB/s; two help large transfers when cores
  // are free.
  int io_threads = 1;
  // Messages queued per peer before Send blocks (and then fails at its deadline). A count, not
  // bytes: a server bounds the bytes it queues for a peer itself (Endpoint::QueuedBytes).
  int high_water_mark = 100000;
  // Frames at least this large are sent without a copy; smaller ones are copied, which is
  // cheaper than the bookkeeping of a zero-copy send.
  size_t zero_copy_threshold = 4096;
  // A send to a peer whose connection is not up yet (it connected to us and the handshake is
  // still in flight) is retried for this long before it fails with Unavailable.
  absl::Duration unreachable_grace = absl::Milliseconds(500);
  // The largest frame a peer may send (ZMQ_MAXMSGSIZE); one that sends more is disconnected.
  // Requests travel in pieces of about 1 MiB; a gossip peer's whole model is one frame.
  int64_t max_frame_bytes = int64_t{1} << 30;
  // With a key, every connection is CURVE-encrypted and authenticated (core/job_key.h): a
  // ZAP handler accepts only the job's keys, a message counts only under the id its key was
  // made for, and a restarted node may take over its own id (ZMQ_ROUTER_HANDOVER), which no
  // process without the key can. Without one, plaintext, and a live id is never handed over.
  std::shared_ptr<const JobKey> key;
  // With a key: the data endpoints ("ps<rank>", "w<rank>": pushes, pulls, a worker's peers)
  // run without CURVE and seal every message themselves (the sealed data path, below), which
  // runs at several times CURVE's speed (AES-256-GCM through OpenSSL, docs/PERFORMANCE.md).
  // False: they use CURVE as the control endpoints do. Every node of a job must agree.
  bool seal_data = true;
  // What connections a listening endpoint accepts: handshake time, connections per address
  // still in their handshake, their rate, and the descriptors kept for files.
  ConnectionLimits connections;
};

class ZmqTransport : public Transport {
 public:
  explicit ZmqTransport(ZmqOptions options = {});
  ~ZmqTransport() override;
  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(std::string id) override;
  void AllowPeers(const std::vector<std::string>& ids) override;

  // Connections the ZAP handler refused (strangers, wrong keys), for tests and statistics.
  uint64_t refused_connections() const;
  // Messages and handshakes the sealed data path refused, and why the latest was (naming the
  // peer; empty before the first).
  uint64_t refused_messages() const;
  std::string last_refusal() const;
  // Where the endpoints count those (shared with them; defined in zmq_transport.cc).
  struct Refusals;
  // Connections the endpoints' guards saw and reset (ConnectionLimits).
  const ConnectionGuardStats& connection_stats() const { return guard_stats_; }

 private:
  class ZapHandler;
  ZmqOptions options_;
  ConnectionGuardStats guard_stats_;
  std::shared_ptr<Refusals> refusals_;
  // The job's endpoints, once AllowPeers named them (0 before): a guard's per-address bounds.
  std::shared_ptr<std::atomic<int>> expected_peers_ = std::make_shared<std::atomic<int>>(0);
  zmq::context_t context_;
  std::unique_ptr<ZapHandler> zap_;  // with a key; destroyed before the context
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_ZMQ_TRANSPORT_H_
