// TcpTransport: messages over plain TCP connections that the calling thread drives itself.
//
// ZmqTransport hands every message to a ZeroMQ I/O thread and takes every received one from
// it: four thread wakeups per round trip, which dominate a small collective (112 us against
// MPI's 22 us for a 4 KiB all-reduce of 2 ranks, docs/COLLECTIVES.md). Here, as in MPI's TCP
// transport and Gloo's pairs, there is no thread between the socket and the caller: Send
// writes to the socket at once (straight from the message's frames, no copy, when the kernel
// takes them), and Receive polls every connection of the endpoint and reads into the frames'
// final buffers. Bytes the kernel does not take at once are copied into a per-connection
// queue and written while the endpoint is next used (any Send or Receive), so two ranks that
// send each other large buffers before either receives cannot deadlock. Send therefore never
// keeps a pointer to the caller's frames (SendCopiesBorrowedFrames).
//
// The transport is meant for collectives: a few peers, each connected both ways, the calling
// thread busy in the collective. It polls its connections with ppoll, linear in their number.
//
// Wire: a connection opens with a hello (magic, version, the connecting endpoint's id). Each
// message is its frame count (u32, at most kMaxFrames), each frame's length (u64), then the
// frames' bytes; a message may not exceed TcpOptions::max_message_bytes. A connection whose
// hello or message preamble breaks these rules, or whose id AllowPeers did not list, is closed
// and counted (rejected_connections); the endpoint goes on with the others.
//
// Connections: Connect(peer) opens one to the peer and retries while it is refused; messages
// wait for it. A peer that only connected to us is answered over its own connection. When an
// established connection breaks, the next Send to that peer fails with Unavailable naming the
// cause; the one after reconnects (a restarted peer is reached again).
//
// Sealed (TcpOptions::key): the hello also carries the server id wanted, the ciphers offered
// and a nonce, the server answers with its choice, its nonce and its proof, the client sends
// its proof, and every message after it travels in AEAD segments (core/seal.h). A connection
// whose end does not hold the job key, or whose segment fails its tag (altered, replayed,
// reordered, cut), is closed and counted; none of its bytes reach Receive. The ids and lengths
// of the hello, and the lengths of segments, travel in the clear.
//
// Thread-safety: the transport is thread-safe; an endpoint is thread-compatible.
#ifndef SYNCLINE_CORE_TCP_TRANSPORT_H_
#define SYNCLINE_CORE_TCP_TRANSPORT_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "core/job_key.h"
#include "core/transport.h"

namespace syncline {

struct TcpOptions {
  // The largest message (its frames' bytes together) a peer may send. A receiver allocates a
  // message's buffers from the lengths its sender announces, so this bounds what one peer can
  // make it allocate per connection; a peer that announces more is disconnected and named
  // before anything is allocated. Jobs set it to the largest message their model and codec
  // produce (collective/planes.h, CollectiveMessageBound); the default is for tools and tests.
  uint64_t max_message_bytes = uint64_t{1} << 31;
  // Bytes queued for one connection (that the kernel would not take yet) before Send waits,
  // and fails at its deadline; TrySend answers ResourceExhausted instead.
  size_t max_queued_bytes = size_t{256} << 20;
  // A send to a peer with no connection yet waits this long for that peer to connect to us
  // (its hello may be in flight), then fails with Unavailable.
  absl::Duration unreachable_grace = absl::Milliseconds(500);
  // Before Receive sleeps in ppoll it polls without sleeping for up to this long, yielding
  // the core between polls (sched_yield), as MPI's progress loop does when ranks outnumber the
  // cores. It saves the sleep and wakeup (tens of microseconds on a virtual machine) when the
  // answer is close, and costs at most this much of a core per wait. Zero: always sleep.
  // docs/COLLECTIVES.md measures 0 against 100 us.
  absl::Duration spin = absl::Microseconds(100);
  // The job's key: when set, every connection is authenticated with keys derived from it and
  // sealed (core/seal.h); both ends must have the same key. Null: plaintext.
  std::shared_ptr<const JobKey> key;
  // With a key: offer AES-256-GCM when the CPU runs it; false leaves XChaCha20-Poly1305 only.
  bool seal_with_aes = true;
};

class TcpTransport : public Transport {
 public:
  explicit TcpTransport(TcpOptions options = {});
  ~TcpTransport() override;
  absl::StatusOr<std::unique_ptr<Endpoint>> CreateEndpoint(std::string id) override;
  // Once called, only connections whose hello names one of `ids` are accepted.
  void AllowPeers(const std::vector<std::string>& ids) override;

  // Connections closed for a bad hello, a stranger's id or a malformed message.
  uint64_t rejected_connections() const { return rejected_.load(); }
  // Why the latest of those was closed (empty before the first), naming the peer when its
  // hello said who it is.
  std::string last_rejection() const;

  static constexpr uint32_t kMaxFrames = 64;
  static constexpr size_t kMaxIdBytes = 255;

 private:
  friend class TcpEndpoint;
  bool Allowed(const std::string& id) const;
  void Rejected(const std::string& why);

  const TcpOptions options_;
  mutable std::mutex mu_;
  bool restricted_ = false;
  absl::flat_hash_set<std::string> allowed_;
  std::atomic<uint64_t> rejected_{0};
  std::string last_rejection_;  // guarded by mu_
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_TCP_TRANSPORT_H_
