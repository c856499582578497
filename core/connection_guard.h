// ConnectionGuard: bounds what strangers can make a listening ZeroMQ socket hold. ZeroMQ
// accepts every TCP connection and keeps it (a descriptor, buffers, an engine) until its
// handshake ends or times out, with no bound on how many one address may open; a few hundred
// idle connections from anywhere took every descriptor of a server, and its checkpoints
// failed with "Too many open files".
//
// The guard watches one socket's accepts through ZeroMQ's socket monitor and aborts a new
// connection at once when
//  - it took a descriptor inside the reserve below RLIMIT_NOFILE (descriptor_reserve): those
//    are kept for checkpoints, embedding stores and logs;
//  - its address opens connections faster than `accepts_per_second` (a token bucket holding
//    `max_pending_per_address`): a stream of bogus CURVE HELLOs costs a server CPU for each;
//  - its address already has `max_pending_per_address` connections still inside their
//    handshake, or all addresses together `max_pending`.
// A connection is "in its handshake" until it is `handshake_timeout` old: ZeroMQ closes one
// that has not finished by then (ZMQ_HANDSHAKE_IVL), so an older one that is still open has
// finished it (with CURVE: it holds the job's key). ZeroMQ's monitor does not say which
// connection a handshake event belongs to, so age is what the guard can know.
//
// Aborting is connect(AF_UNSPEC) on the descriptor: the kernel resets the TCP connection and
// discards what it sent but ZeroMQ has not read, and ZeroMQ, woken by the reset, closes the
// descriptor itself. The guard never closes a descriptor it does not own. Before it aborts, it
// checks that the descriptor is still a connection to the listening port (ZeroMQ may have
// closed it and the number may be reused by the time the event is read).
//
// By the time the guard hears of a connection, ZeroMQ has accepted it, made its engine and
// often read what came with it (a HELLO sent with the greeting): that costs the node CPU
// whatever the guard does. So an address over its rate is also blocked for `block_time`: the
// listening socket, which the endpoint opens itself (OpenListener) for ZeroMQ to use, gets a
// classic BPF socket filter that drops the address's SYNs, and the kernel never completes its
// connections. Its established connections are untouched (the filter passes everything but
// a SYN), as is every other address. IPv4 only; an IPv6 listener is watched without blocks.
//
// Thread-safety: Start and the destructor run on the socket's thread (ZeroMQ sockets are
// not thread-safe); the guard's own thread reads the monitor and counts into the stats.
#ifndef SYNCLINE_CORE_CONNECTION_GUARD_H_
#define SYNCLINE_CORE_CONNECTION_GUARD_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace syncline {

struct ConnectionLimits {
  // ZMQ_HANDSHAKE_IVL: a connection that has not finished ZeroMQ's handshake (and CURVE's)
  // this long after it was accepted is closed. ZeroMQ's default is 30 s.
  absl::Duration handshake_timeout = absl::Seconds(10);
  // Connections still inside their handshake, from one address and from all.
  int max_pending_per_address = 64;
  int max_pending = 1024;
  // New connections per second one address may open, after a burst of
  // max_pending_per_address.
  double accepts_per_second = 100;
  // Accepted connections never take the last `descriptor_reserve` descriptors below the
  // limit (at most a quarter of it). 0: no reserve.
  int descriptor_reserve = 256;
  // The descriptor limit; 0: RLIMIT_NOFILE's soft limit, read at each accept.
  int descriptor_limit = 0;
  // How long an address over its rate stays blocked at the listening socket (0: never).
  absl::Duration block_time = absl::Seconds(10);
};

// A listening IPv4 TCP socket at host:port (port 0: any free one), non-blocking, for ZeroMQ
// to take over (ZMQ_USE_FD) and a ConnectionGuard to filter. host must be a dotted IPv4
// address; Unavailable naming the address when it cannot be bound.
absl::StatusOr<int> OpenListener(const std::string& host, int port);

// Connections the guard saw and aborted, by reason.
struct ConnectionGuardStats {
  std::atomic<uint64_t> accepted{0};
  std::atomic<uint64_t> aborted_descriptors{0};
  std::atomic<uint64_t> aborted_rate{0};
  std::atomic<uint64_t> aborted_pending{0};
  std::atomic<uint64_t> blocked{0};  // times an address was blocked at the listening socket
};

class ConnectionGuard {
 public:
  // Starts watching `socket`, which must not be listening yet (events of listeners made
  // before are not seen). `name` is the endpoint's id, for log lines. `expected_peers` (may be
  // null) is the number of the job's endpoints once known: one host may hold many of them
  // (every node of a local job is 127.0.0.1), so the per-address bounds are at least that
  // plus 16, and the total at least twice that. `stats` (not null) must outlive the guard.
  // `listener` (from OpenListener; -1: none) is the listening socket whose SYNs blocked
  // addresses lose; it must stay open while the guard lives.
  static absl::StatusOr<std::unique_ptr<ConnectionGuard>> Start(
      zmq::context_t& context, zmq::socket_t& socket, std::string name, ConnectionLimits limits,
      std::shared_ptr<const std::atomic<int>> expected_peers, ConnectionGuardStats* stats,
      int listener);
  // Stops the monitor and the thread. On the socket's thread, before the socket closes.
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

 private:
  class State;
  ConnectionGuard(void* socket, std::unique_ptr<State> state, ConnectionGuardStats* stats);
  void Loop();

  void* const socket_;  // the watched socket's handle, to stop its monitor
  std::unique_ptr<State> state_;
  ConnectionGuardStats* const stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_CONNECTION_GUARD_H_
