#include "core/zmq_transport.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <thread>
#include <vector>
#include <zmq_addon.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "core/frame_seal.h"
#include "core/log.h"
#include "core/net.h"
#include "core/seal.h"

namespace syncline {

struct ZmqTransport::Refusals {
  std::atomic<uint64_t> count{0};
  absl::Mutex mu;
  std::string last ABSL_GUARDED_BY(mu);
  void Add(const std::string& why) {
    count.fetch_add(1);
    absl::MutexLock lock(&mu);
    last = why;
  }
};

namespace {

// The sealed data path's message kinds: the first 4 bytes of a message's first frame (of a
// data message, its sealed meta frame's unused prefix).
constexpr char kAsk[4] = {'S', 'L', 'H', '0'};
constexpr char kHello[4] = {'S', 'L', 'H', '1'};
constexpr char kHelloReply[4] = {'S', 'L', 'H', '2'};
constexpr char kSealedData[4] = {'S', 'L', 'D', '1'};
constexpr size_t kHelloBytes = 4 + 1 + 32;
constexpr size_t kReplyBytes = 4 + 1 + 32 + 32;
// The data endpoints, whose messages the sealed data path carries: "ps<rank>", "w<rank>".
bool IsDataEndpointId(const std::string& id) {
  size_t digits = id.starts_with("ps") ? 2 : id.starts_with("w") ? 1 : 0;
  if (digits == 0 || digits == id.size()) return false;
  return std::all_of(id.begin() + digits, id.end(), [](char c) { return c >= '0' && c <= '9'; });
}
bool HasKind(const zmq::message_t& part, const char (&kind)[4]) {
  return part.size() >= 4 && std::memcmp(part.data(), kind, 4) == 0;
}

int RemainingMs(absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) return -1;
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1 << 30));
}

// Keeps a frame's owner alive until ZeroMQ has sent the bytes.
void ReleaseOwner(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const void>*>(hint);
}
void ReleaseNothing(void* /*data*/, void* /*hint*/) {}

// The last frame of a message sent with TrySend: when ZeroMQ releases it, the whole message
// has left the peer's queue (frames leave in order), and its bytes leave the peer's count.
struct Tracked {
  std::shared_ptr<std::atomic<int64_t>> queued;
  int64_t bytes = 0;
  std::shared_ptr<const void> owner;  // an owned frame's owner, kept alive until then
  std::unique_ptr<std::byte[]> copy;  // a small frame's bytes
};
void ReleaseTracked(void* /*data*/, void* hint) {
  auto* t = static_cast<Tracked*>(hint);
  t->queued->fetch_sub(t->bytes, std::memory_order_relaxed);
  delete t;
}

class ZmqEndpoint : public Endpoint {
 public:
  ZmqEndpoint(zmq::context_t& context, std::string id, const ZmqOptions& options,
              std::shared_ptr<const std::atomic<int>> expected_peers, ConnectionGuardStats* stats,
              std::shared_ptr<ZmqTransport::Refusals> refusals)
      : id_(std::move(id)),
        options_(options),
        sealed_(options.key != nullptr && options.seal_data && IsDataEndpointId(id_)),
        context_(context),
        expected_peers_(std::move(expected_peers)),
        guard_stats_(stats),
        refusals_(std::move(refusals)),
        socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::routing_id, id_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // A second connection under a live peer's id is refused (ZeroMQ leaves it nameless, and
    // what it sends is lost), so no other process can take over a node's name while it is
    // alive; once the first connection closes, the name is free for the node's replacement (a
    // new process, whose connection comes after its predecessor's closed). Not even under
    // CURVE: ZeroMQ hands a name over before anything can check it against the key that
    // connected (a holder of w0's key would take w1's name and the replies meant for w1,
    // though every message it sent were dropped as not w1's; the ZAP handler is told the
    // listener's own id, not the peer's).
    socket_.set(zmq::sockopt::router_handover, 0);
    // A peer that sends a frame larger than this is disconnected before it is buffered.
    socket_.set(zmq::sockopt::maxmsgsize, options.max_frame_bytes);
    socket_.set(zmq::sockopt::sndhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::rcvhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::linger, 200);
    socket_.set(zmq::sockopt::tcp_keepalive, 1);
  }

  ~ZmqEndpoint() override {
    if (monitor_ != nullptr) zmq_socket_monitor(socket_.handle(), nullptr, 0);
  }

  const std::string& id() const override { return id_; }

  absl::StatusOr<std::string> Bind(const std::string& address) override {
    // An IPv4 listener of our own for ZeroMQ to use: the guard can then block addresses at
    // it (core/connection_guard.h). Other addresses (names, IPv6, "*") ZeroMQ binds itself.
    int listener = -1;
    if (absl::StatusOr<HostPort> hp = ParseTcpAddress(address); hp.ok()) {
      in_addr ip = {};
      if (inet_pton(AF_INET, hp->host.c_str(), &ip) == 1) {
        absl::StatusOr<int> fd = OpenListener(hp->host, hp->port);
        if (!fd.ok()) return fd.status();
        listener = *fd;
      }
    }
    if (guard_ == nullptr && address.rfind("tcp://", 0) == 0) {
      // Before the listener is ZeroMQ's: the guard sees every connection it accepts.
      auto guard = ConnectionGuard::Start(context_, socket_, id_, options_.connections,
                                          expected_peers_, guard_stats_, listener);
      if (!guard.ok()) {
        if (listener >= 0) close(listener);
        return guard.status();
      }
      guard_ = std::move(*guard);
    }
    try {
      if (options_.key != nullptr && !sealed_) {
        // Options are taken at bind (and connect) time: this listener is a CURVE server.
        socket_.set(zmq::sockopt::curve_server, 1);
        socket_.set(zmq::sockopt::curve_secretkey, options_.key->SecretKeyFor(id_));
        socket_.set(zmq::sockopt::zap_domain, "syncline");
      }
      // With a descriptor, ZeroMQ takes it (and closes it with the socket).
      socket_.set(zmq::sockopt::use_fd, listener);
      socket_.bind(address);
      socket_.set(zmq::sockopt::use_fd, -1);
      return socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      socket_.set(zmq::sockopt::use_fd, -1);
      if (listener >= 0) close(listener);
      return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", e.what()));
    }
  }

  absl::Status Connect(const std::string& peer_id, const std::string& address) override {
    try {
      socket_.set(zmq::sockopt::connect_routing_id, peer_id);
      if (sealed_) {
        // Sessions with this peer start at the first send; the monitor says when its
        // connection breaks, which ends the session.
        StartMonitor();
        if (servers_by_address_.size() < kMaxQueuedPeers) servers_by_address_[address] = peer_id;
        servers_.insert(peer_id);
      } else if (options_.key != nullptr) {
        // A CURVE client of this peer: it proves to hold the key of `id_`, and the peer must
        // hold the key of `peer_id`.
        const std::string server_key = options_.key->PublicKeyFor(peer_id);
        if (server_key.empty()) {
          return absl::PermissionDeniedError(
              absl::StrCat("cannot connect to ", peer_id,
                           ": this node's key file has no public key "
                           "of it (is it a node of this job?)"));
        }
        socket_.set(zmq::sockopt::curve_server, 0);
        socket_.set(zmq::sockopt::curve_serverkey, server_key);
        socket_.set(zmq::sockopt::curve_publickey, options_.key->PublicKeyFor(id_));
        socket_.set(zmq::sockopt::curve_secretkey, options_.key->SecretKeyFor(id_));
      }
      socket_.connect(address);
      if (options_.key != nullptr) connected_.insert(peer_id);
      return absl::OkStatus();
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", peer_id, " at ", address, ": ", e.what()));
    }
  }

  absl::Status TrySend(const std::string& peer_id, Message* message) override {
    std::vector<Frame>& frames = message->frames();
    if (frames.empty()) return absl::InvalidArgumentError("cannot send a message without frames");
    size_t bytes = 0;
    if (sealed_) {
      // No waiting here: a server answers through TrySend and must not stall.
      absl::StatusOr<bool> open = SessionOpen(peer_id, absl::Now() + options_.unreachable_grace,
                                              /*wait=*/false);
      if (!open.ok()) return open.status();
      if (!*open) return Wait(peer_id, std::move(*message));
    }
    try {
      zmq::message_t route(peer_id.data(), peer_id.size());
      // A routing frame that is refused leaves the message untouched: nothing of it was sent.
      if (!socket_.send(route, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return absl::ResourceExhaustedError(absl::StrCat("the queue to ", peer_id, " is full"));
      }
      // Sealed once its route is taken: a counter spent is a message sent.
      const std::vector<Frame>& out = sealed_ ? SealMessage(peer_id, frames, &bytes) : frames;
      if (auto s = SendFrames(peer_id, out, sealed_ ? nullptr : &bytes, QueuedCounter(peer_id));
          !s.ok()) {
        return s;
      }
    } catch (const zmq::error_t& e) {
      return SendFailure(peer_id, e);
    }
    CountSent(peer_id, bytes);
    return absl::OkStatus();
  }

  uint64_t QueuedBytes(const std::string& peer_id) const override {
    auto it = queued_.find(peer_id);
    if (it == queued_.end()) return 0;
    return static_cast<uint64_t>(std::max<int64_t>(0, it->second->load(std::memory_order_relaxed)));
  }

  absl::Status Send(const std::string& peer_id, Message message, absl::Time deadline) override {
    std::vector<Frame>& frames = message.frames();
    if (frames.empty()) return absl::InvalidArgumentError("cannot send a message without frames");
    if (sealed_) {
      absl::StatusOr<bool> open = SessionOpen(peer_id, deadline, /*wait=*/true);
      if (!open.ok()) return open.status();
      if (!*open) return Wait(peer_id, std::move(message));
    }
    size_t bytes = 0;
    if (auto s = SendRouted(peer_id, frames, deadline, sealed_, &bytes); !s.ok()) return s;
    CountSent(peer_id, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    if (!inbox_.empty()) {
      Message m = std::move(inbox_.front());
      inbox_.pop_front();
      return m;
    }
    while (true) {
      absl::StatusOr<Message> message = ReceiveOne(deadline);
      if (!message.ok() || message->peer() != kForged) return message;
    }
  }

 private:
  class ReceivedParts;

  // Sends the routing frame (waiting for the peer's connection and queue until `deadline`),
  // then `frames`, sealed with `seal`; adds the plaintext bytes to *bytes.
  absl::Status SendRouted(const std::string& peer_id, const std::vector<Frame>& frames,
                          absl::Time deadline, bool seal, size_t* bytes) {
    try {
      zmq::message_t route(peer_id.data(), peer_id.size());
      // Usually the peer is connected and its queue has room: try without waiting first, so
      // that the common case needs neither the clock nor a setsockopt for the timeout. A
      // failed send leaves `route` as it was.
      bool sent = false;
      try {
        sent =
            socket_.send(route, zmq::send_flags::sndmore | zmq::send_flags::dontwait).has_value();
      } catch (const zmq::error_t& e) {
        if (e.num() != EHOSTUNREACH) throw;
      }
      if (!sent) {
        SetTimeout(zmq::sockopt::sndtimeo, RemainingMs(deadline), sndtimeo_ms_);
        const absl::Time give_up = std::min(deadline, absl::Now() + options_.unreachable_grace);
        absl::Duration backoff = absl::Microseconds(200);
        while (true) {
          try {
            if (!socket_.send(route, zmq::send_flags::sndmore)) {
              return absl::DeadlineExceededError(
                  absl::StrCat("send to ", peer_id, " timed out: its queue is full"));
            }
            break;
          } catch (const zmq::error_t& e) {
            if (e.num() != EHOSTUNREACH || absl::Now() >= give_up ||
                heard_from_.contains(peer_id)) {
              throw;
            }
            absl::SleepFor(backoff);
            backoff = std::min(backoff * 2, absl::Milliseconds(20));
            SetTimeout(zmq::sockopt::sndtimeo, RemainingMs(deadline), sndtimeo_ms_);
          }
        }
      }
      const std::vector<Frame>& out = seal ? SealMessage(peer_id, frames, bytes) : frames;
      if (auto s = SendFrames(peer_id, out, seal ? nullptr : bytes); !s.ok()) return s;
    } catch (const zmq::error_t& e) {
      return SendFailure(peer_id, e);
    }
    return absl::OkStatus();
  }

  static absl::Status SendFailure(const std::string& peer_id, const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
    }
    return absl::UnavailableError(absl::StrCat("send to ", peer_id, " failed: ", e.what()));
  }
  void CountSent(const std::string& peer_id, size_t bytes) { counters_.Sent(peer_id, bytes); }

  // The frames of a message whose routing frame was accepted: they go to the same pipe and do
  // not block. Adds their bytes to *bytes, and with `queued`, to the peer's queued bytes until
  // ZeroMQ releases the last frame.
  absl::Status SendFrames(const std::string& peer_id, const std::vector<Frame>& frames,
                          size_t* bytes, std::shared_ptr<std::atomic<int64_t>> queued = nullptr) {
    for (size_t i = 0; i < frames.size(); ++i) {
      const Frame& f = frames[i];
      zmq::message_t part;
      if (queued != nullptr && i + 1 == frames.size()) {
        int64_t total = 0;
        for (const Frame& g : frames) total += static_cast<int64_t>(g.size());
        part = ToTrackedZmq(f, std::move(queued), total);
      } else {
        part = ToZmq(f);
      }
      if (bytes != nullptr) *bytes += f.size();
      const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!socket_.send(part, flags)) {
        return absl::DeadlineExceededError(absl::StrCat("send to ", peer_id, " timed out"));
      }
    }
    return absl::OkStatus();
  }

  // The peer of a message whose routing id is not the one its sender's key was made for.
  static constexpr char kForged[] = "\0forged";

  absl::StatusOr<Message> ReceiveOne(absl::Time deadline) {
    Message message;
    size_t bytes = 0;
    try {
      zmq::message_t route;
      // The timeout is set only when it changed (callers wait in slices of fixed length, so
      // it rarely does). No non-blocking try first: when idle, that costs a round trip ~1 us.
      SetTimeout(zmq::sockopt::rcvtimeo, RemainingMs(deadline), rcvtimeo_ms_);
      if (!socket_.recv(route)) return absl::DeadlineExceededError("no message before deadline");
      message.set_peer(route.to_string());
      // With CURVE, the first part says which key sent it (its "User-Id", set by the ZAP
      // handler): a message under another id is dropped.
      zmq::message_t first;
      bool have_first = false;
      if (options_.key != nullptr && !sealed_ && route.more()) {
        (void)socket_.recv(first);
        have_first = true;
        if (!Authentic(first, message.peer())) {
          while (first.more()) (void)socket_.recv(first);  // drop the rest of it
          message.set_peer(kForged);
          return message;
        }
      }
      // A peer we heard from was connected: should a send to it later find no route, it is
      // gone, and waiting for its handshake would only stall this endpoint's thread.
      if (heard_from_.size() >= kMaxHeardFrom) heard_from_.clear();
      heard_from_.insert(message.peer());
      // One allocation owns all parts of the message (and the bytes of small parts, which live
      // inside them); parts stay in place as more are added.
      auto parts = std::make_shared<ReceivedParts>();
      message.frames().reserve(ReceivedParts::kInline);
      bool more = route.more();
      while (more) {
        zmq::message_t& part = parts->Add();
        if (have_first) {
          part = std::move(first);
          have_first = false;
        } else {
          // The rest of a multipart message is already queued: this does not block.
          (void)socket_.recv(part);
        }
        more = part.more();
        bytes += part.size();
        const void* data = part.data();
        if (message.frames().empty()) data = parts->AlignHeader(part);
        message.frames().push_back(Frame::Shared(parts, data, part.size()));
      }
      if (sealed_) return Unseal(std::move(message), std::move(parts));
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("receive failed: ", e.what()));
    }
    counters_.Received(message.peer(), bytes);
    return message;
  }

  // ---- The sealed data path (ZmqOptions::seal_data; the protocol in zmq_transport.h) ----

  struct Session {
    std::unique_ptr<SealedChannel> channel;  // null while the client waits for the reply
    uint8_t offered = 0;
    SealNonce nc{};
    bool hello_sent = false;      // this end is the client of the handshake under way
    std::deque<Message> waiting;  // sent while the session opened
  };

  // Whether the session with `peer` is open (true) or its hello is under way (false; the
  // reply completes it while this endpoint is next driven): a peer this endpoint connected to
  // is sent a hello; a peer that connected to us must open one itself.
  // With `wait`, the endpoint is driven for up to ZmqOptions::unreachable_grace meanwhile
  // (messages for the caller wait in inbox_): a peer that is receiving answers at once, and
  // what is sent next goes out now, not when this endpoint is next used, which may be never.
  absl::StatusOr<bool> SessionOpen(const std::string& peer, absl::Time deadline, bool wait) {
    DrainMonitor();
    auto it = sessions_.find(peer);
    if (it != sessions_.end() && it->second.channel != nullptr) return true;
    if (auto f = failed_.find(peer); f != failed_.end()) {
      return absl::PermissionDeniedError(f->second);
    }
    if (it == sessions_.end()) {
      if (servers_.contains(peer)) {
        if (auto s = Hello(peer, deadline); !s.ok()) return s;
      } else {
        // A peer that connected to us and has sent nothing yet: asked to open a session (the
        // send fails as any other when it is not connected).
        std::vector<Frame> ask = {Frame::Copy(kAsk, sizeof(kAsk))};
        size_t bytes = 0;
        if (auto s = SendRouted(peer, ask, deadline, /*seal=*/false, &bytes); !s.ok()) return s;
        sessions_[peer];
      }
    }
    it = sessions_.find(peer);
    const absl::Time until = std::min(deadline, absl::Now() + options_.unreachable_grace);
    while (wait && inbox_.size() < kMaxInbox) {
      absl::StatusOr<Message> m = ReceiveOne(until);
      if (m.ok() && m->peer() != kForged) inbox_.push_back(*std::move(m));
      if (!m.ok() && !absl::IsDeadlineExceeded(m.status())) return m.status();
      DrainMonitor();
      it = sessions_.find(peer);
      if (it != sessions_.end() && it->second.channel != nullptr) return true;
      if (auto f = failed_.find(peer); f != failed_.end()) {
        return absl::PermissionDeniedError(f->second);
      }
      if (it == sessions_.end() || absl::Now() >= until) break;
    }
    if (it == sessions_.end()) {
      return absl::UnavailableError(absl::StrCat("no sealed session with ", peer));
    }
    return false;
  }

  absl::Status Hello(const std::string& peer, absl::Time deadline) {
    Session& s = sessions_[peer];
    s.channel.reset();
    s.hello_sent = true;
    s.offered = LocalSealCiphers();
    s.nc = FreshSealNonce();
    std::vector<Frame> hello = {Frame::Copy(HelloBytes(s).data(), kHelloBytes)};
    size_t bytes = 0;
    absl::Status sent = SendRouted(peer, hello, deadline, /*seal=*/false, &bytes);
    if (!sent.ok()) sessions_.erase(peer);
    return sent;
  }

  // Keeps a message for `peer` until its session opens (bounded as ZeroMQ's queue is).
  absl::Status Wait(const std::string& peer, Message message) {
    Session& s = sessions_[peer];
    if (s.waiting.size() >= static_cast<size_t>(std::max(1, options_.high_water_mark))) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the queue to ", peer, " is full while its sealed session opens"));
    }
    s.waiting.push_back(std::move(message));
    return absl::OkStatus();
  }

  std::array<unsigned char, kHelloBytes> HelloBytes(const Session& s) const {
    std::array<unsigned char, kHelloBytes> b;
    std::memcpy(b.data(), kHello, 4);
    b[4] = s.offered;
    std::memcpy(b.data() + 5, s.nc.data(), s.nc.size());
    return b;
  }

  // The frames that carry `frames` to `peer` under its open session, in
  // sealed_frames_; adds the plaintext bytes to *bytes.
  const std::vector<Frame>& SealMessage(const std::string& peer, const std::vector<Frame>& frames,
                                        size_t* bytes) {
    SealedChannel& channel = *sessions_.at(peer).channel;
    sealed_frames_.clear();
    std::vector<uint64_t> meta(frames.size() + 1);
    meta[0] = frames.size();
    for (size_t i = 0; i < frames.size(); ++i) meta[i + 1] = frames[i].size();
    sealed_frames_.push_back(SealBytes(channel, meta.data(), meta.size() * sizeof(uint64_t)));
    std::memcpy(const_cast<std::byte*>(sealed_frames_[0].data()), kSealedData, 4);
    for (const Frame& f : frames) {
      sealed_frames_.push_back(SealBytes(channel, f.data(), f.size()));
      *bytes += f.size();
    }
    return sealed_frames_;
  }

  static Frame SealBytes(SealedChannel& channel, const void* data, size_t n) {
    const size_t size = SealedFrameBytes(n);
    std::shared_ptr<std::byte[]> out = std::make_shared_for_overwrite<std::byte[]>(size);
    SealFrame(channel, static_cast<const std::byte*>(data), n, out.get());
    std::byte* p = out.get();
    return Frame::Shared(std::move(out), p, size);
  }

  // A received message of the sealed data path: a handshake is answered or completes a
  // session (kForged: nothing for the caller), a data message is opened in place.
  Message Unseal(Message message, std::shared_ptr<ReceivedParts> parts) {
    const std::string& peer = message.peer();
    zmq::message_t& first = parts->Part(0);
    if (parts->count() == 1 && first.size() == sizeof(kAsk) && HasKind(first, kAsk)) {
      Asked(peer);
    } else if (parts->count() == 1 && first.size() == kHelloBytes && HasKind(first, kHello)) {
      Answer(peer, static_cast<const unsigned char*>(first.data()));
    } else if (parts->count() == 1 && first.size() == kReplyBytes && HasKind(first, kHelloReply)) {
      Complete(peer, static_cast<const unsigned char*>(first.data()));
    } else if (HasKind(first, kSealedData)) {
      absl::Status s = Open(peer, *parts, message);
      if (s.ok()) return message;
      Refuse(peer, s.message());
      // The peer may not know its session ended (this end refused a message, or restarted):
      // asked, a peer this end may speak to says hello again.
      AskForHello(peer);
    } else {
      Refuse(peer, "not a message of the sealed data path");
    }
    Message none;
    none.set_peer(kForged);
    return none;
  }

  // Opens the parts of a data message into message's frames (in place).
  absl::Status Open(const std::string& peer, ReceivedParts& parts, Message& message) {
    auto it = sessions_.find(peer);
    if (it == sessions_.end() || it->second.channel == nullptr) {
      return absl::UnauthenticatedError("no sealed session with it");
    }
    SealedChannel& channel = *it->second.channel;
    auto fail = [&](absl::string_view why) {
      sessions_.erase(peer);  // out of step now: its next hello starts afresh
      return absl::UnauthenticatedError(why);
    };
    size_t n = 0;
    zmq::message_t& meta = parts.Part(0);
    if (!OpenFrame(channel, static_cast<std::byte*>(meta.data()), meta.size(), &n) ||
        n % sizeof(uint64_t) != 0 || n < sizeof(uint64_t)) {
      return fail(
          "its frame list does not open under the session's key (altered, replayed, "
          "reordered, or another key)");
    }
    uint64_t count = 0;
    const std::byte* list = static_cast<const std::byte*>(meta.data()) + kSealedFramePrefix;
    std::memcpy(&count, list, sizeof(count));
    if (count != parts.count() - 1 || n != (count + 1) * sizeof(uint64_t) || count == 0) {
      return fail(absl::StrCat("its frame list names ", count, " frames, but ", parts.count() - 1,
                               " came"));
    }
    message.frames().clear();
    size_t bytes = 0;
    for (size_t i = 1; i < parts.count(); ++i) {
      zmq::message_t& part = parts.Part(i);
      uint64_t want = 0;
      std::memcpy(&want, list + i * sizeof(uint64_t), sizeof(want));
      size_t plain = 0;
      if (!SealedFramePlainBytes(part.size(), &plain) || plain != want) {
        return fail(absl::StrCat("frame ", i, " has ", part.size(),
                                 " sealed bytes, not those of the ", want, " its list names"));
      }
      if (!OpenFrame(channel, static_cast<std::byte*>(part.data()), part.size(), &plain)) {
        return fail(absl::StrCat("frame ", i, " does not open under the session's key"));
      }
      const std::byte* data = static_cast<const std::byte*>(part.data()) + kSealedFramePrefix;
      const void* at = i == 1 ? parts.AlignHeader(data, plain) : data;
      message.frames().push_back(Frame::Shared(parts.shared_from_this(), at, plain));
      bytes += plain;
    }
    counters_.Received(peer, bytes);
    return absl::OkStatus();
  }

  // The server's side of a hello: a fresh session, replacing the peer's last one.
  void Answer(const std::string& peer, const unsigned char* hello) {
    const uint8_t offered = hello[4];
    const uint8_t chosen = ChooseSealCipher(offered, LocalSealCiphers());
    if (chosen == 0) {
      Refuse(peer,
             absl::StrFormat("its hello offers ciphers 0x%x, none of which run here", offered));
      return;
    }
    if (sessions_.size() >= kMaxQueuedPeers && !sessions_.contains(peer)) {
      // A flood of ids: the sessions that never opened a message go first.
      absl::erase_if(sessions_, [](const auto& e) {
        return e.second.channel == nullptr || e.second.channel->opened() == 0;
      });
    }
    if (auto it = sessions_.find(peer);
        it != sessions_.end() && it->second.hello_sent && id_ < peer) {
      return;  // both said hello at once: the end with the smaller id is the client
    }
    SealNonce nc;
    std::memcpy(nc.data(), hello + 5, nc.size());
    const SealNonce ns = FreshSealNonce();
    const SealKey pair = PairKey(*options_.key, peer, id_);
    const SealProof proof = ServerProof(pair, offered, chosen, nc, ns);
    std::array<unsigned char, kReplyBytes> reply;
    std::memcpy(reply.data(), kHelloReply, 4);
    reply[4] = chosen;
    std::memcpy(reply.data() + 5, ns.data(), ns.size());
    std::memcpy(reply.data() + 5 + 32, proof.data(), proof.size());
    Session& s = sessions_[peer];
    s.channel = std::make_unique<SealedChannel>(static_cast<SealCipher>(chosen), pair, nc, ns,
                                                /*client=*/false);
    s.hello_sent = false;
    try {
      zmq::message_t route(peer.data(), peer.size());
      zmq::message_t body(reply.data(), reply.size());
      if (socket_.send(route, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)socket_.send(body, zmq::send_flags::none);
      }
    } catch (const zmq::error_t&) {
      // Gone again: its next hello starts over.
    }
    Flush(peer, s);
  }

  // A peer that has messages for us and no session: this end connected to it, so it opens
  // one (again, when the peer lost the last one).
  void Asked(const std::string& peer) {
    if (!servers_.contains(peer)) {
      Refuse(peer, "it asks for a hello, but this endpoint did not connect to it");
      return;
    }
    auto it = sessions_.find(peer);
    if (it != sessions_.end() && it->second.hello_sent) return;  // the reply is under way
    (void)Hello(peer, absl::Now() + options_.unreachable_grace);
  }

  void AskForHello(const std::string& peer) {
    try {
      zmq::message_t route(peer.data(), peer.size());
      zmq::message_t body(kAsk, sizeof(kAsk));
      if (socket_.send(route, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        (void)socket_.send(body, zmq::send_flags::none);
      }
    } catch (const zmq::error_t&) {
      // Gone: nothing to ask.
    }
  }

  // Sends what waited for the session that just opened.
  void Flush(const std::string& peer, Session& s) {
    std::deque<Message> waiting = std::move(s.waiting);
    s.waiting.clear();
    for (Message& m : waiting) {
      size_t bytes = 0;
      absl::Status sent = SendRouted(peer, m.frames(), absl::Now() + options_.unreachable_grace,
                                     /*seal=*/true, &bytes);
      if (!sent.ok()) {
        SYNCLINE_LOG(WARNING) << id_ << ": a message that waited for the sealed session with "
                              << peer << " was lost: " << sent.message();
        continue;
      }
      CountSent(peer, bytes);
    }
  }

  // The client's side of a reply: the session opens when the server's proof verifies.
  void Complete(const std::string& peer, const unsigned char* reply) {
    auto it = sessions_.find(peer);
    if (it == sessions_.end() || !it->second.hello_sent) {
      Refuse(peer, "a hello reply nobody asked for");
      return;
    }
    Session& s = it->second;
    const uint8_t chosen = reply[4];
    SealNonce ns;
    std::memcpy(ns.data(), reply + 5, ns.size());
    const SealKey pair = PairKey(*options_.key, id_, peer);
    if ((chosen & s.offered) == 0 || (chosen & (chosen - 1)) != 0 ||
        !SameProof(ServerProof(pair, s.offered, chosen, s.nc, ns), reply + 5 + 32)) {
      const std::string why =
          absl::StrCat("sealed data path: ", peer, "'s hello reply does not prove the job key");
      if (!s.waiting.empty()) {
        SYNCLINE_LOG(WARNING) << id_ << ": " << s.waiting.size() << " messages to " << peer
                              << " dropped: " << why;
      }
      sessions_.erase(it);
      failed_[peer] = why;
      Refuse(peer, "its hello reply does not prove the job key");
      return;
    }
    s.channel = std::make_unique<SealedChannel>(static_cast<SealCipher>(chosen), pair, s.nc, ns,
                                                /*client=*/true);
    SYNCLINE_LOG(INFO) << id_ << ": data to " << peer << " sealed ("
                       << SealCipherName(static_cast<SealCipher>(chosen)) << ")";
    s.hello_sent = false;
    Flush(peer, s);
  }

  void Refuse(const std::string& peer, absl::string_view why) {
    const std::string text =
        absl::StrCat(id_, " refused a message from '", absl::CHexEscape(peer), "': ", why);
    refusals_->Add(text);
    if (refusals_logged_++ < 10) SYNCLINE_LOG(WARNING) << text;
  }

  void StartMonitor() {
    if (monitor_ != nullptr) return;
    const std::string address = absl::StrFormat("inproc://syncline-seal-monitor-%p", this);
    if (zmq_socket_monitor(socket_.handle(), address.c_str(), ZMQ_EVENT_DISCONNECTED) != 0) {
      throw zmq::error_t();
    }
    monitor_ = std::make_unique<zmq::socket_t>(context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(address);
  }

  // A connection to a server that broke ends the session with it: a server restarted at that
  // address knows none, and a hello starts a fresh one. (Only breaks: the event of a
  // connection coming up may arrive after the reply to the hello sent on it.)
  void DrainMonitor() {
    if (monitor_ == nullptr) return;
    zmq::message_t event, address;
    while (monitor_->recv(event, zmq::recv_flags::dontwait)) {
      if (!event.more() || !monitor_->recv(address, zmq::recv_flags::dontwait)) continue;
      auto server = servers_by_address_.find(address.to_string());
      if (server == servers_by_address_.end()) continue;
      auto it = sessions_.find(server->second);
      if (it == sessions_.end()) continue;
      // Messages waiting for a session wait for the next one.
      if (!it->second.waiting.empty()) {
        (void)Hello(server->second, absl::Now() + options_.unreachable_grace);
      } else {
        sessions_.erase(it);
      }
    }
  }

  // Whether `part` came over a connection whose key was made for `peer`. Connections to our
  // listener went through the ZAP handler, which named the key's id (its "User-Id"). On one
  // we opened, the peer proved to hold the key of the id we connected to (its server key),
  // and ZeroMQ routes its messages under that id.
  bool Authentic(zmq::message_t& part, const std::string& peer) {
    const char* user = zmq_msg_gets(part.handle(), "User-Id");
    // The ZAP handler names the key's principal ("w1" for "w1" and "w1@g2.5" alike), and a
    // control key's incarnation after a restart ("w1.ctl#1"): the failed node's connection no
    // longer goes by the name.
    if (user != nullptr && *user != '\0' ? options_.key->UserIdFor(peer) == user
                                         : connected_.contains(peer)) {
      return true;
    }
    if (forged_logged_++ < 10) {
      SYNCLINE_LOG(WARNING) << id_ << ": dropped a message under the id '" << absl::CHexEscape(peer)
                            << "' from a connection authenticated as '"
                            << (user != nullptr ? user : "(none)") << "'";
    }
    return false;
  }

  // The counter of bytes queued for `peer` (kept for at most kMaxQueuedPeers peers: counters
  // at zero are dropped first).
  std::shared_ptr<std::atomic<int64_t>> QueuedCounter(const std::string& peer) {
    auto it = queued_.find(peer);
    if (it != queued_.end()) return it->second;
    if (queued_.size() >= kMaxQueuedPeers) {
      absl::erase_if(queued_, [](const auto& e) { return e.second->load() <= 0; });
    }
    auto counter = std::make_shared<std::atomic<int64_t>>(0);
    if (queued_.size() < kMaxQueuedPeers) queued_.emplace(peer, counter);
    return counter;
  }

  // A message's last frame, whose release takes `total` (the message's bytes) off `queued`.
  // They are added first: a release can come before send returns.
  zmq::message_t ToTrackedZmq(const Frame& f, std::shared_ptr<std::atomic<int64_t>> queued,
                              int64_t total) const {
    auto* t = new Tracked{std::move(queued), total, nullptr, nullptr};
    t->queued->fetch_add(total, std::memory_order_relaxed);
    void* data = const_cast<std::byte*>(f.data());
    if (f.size() < options_.zero_copy_threshold) {
      t->copy = std::make_unique<std::byte[]>(std::max<size_t>(f.size(), 1));
      std::memcpy(t->copy.get(), f.data(), f.size());
      data = t->copy.get();
    } else if (f.owned()) {
      t->owner = f.owner();
    }
    return zmq::message_t(data, f.size(), ReleaseTracked, t);
  }

  zmq::message_t ToZmq(const Frame& f) const {
    if (f.size() < options_.zero_copy_threshold) return zmq::message_t(f.data(), f.size());
    void* data = const_cast<std::byte*>(f.data());
    if (!f.owned()) return zmq::message_t(data, f.size(), ReleaseNothing, nullptr);
    return zmq::message_t(data, f.size(), ReleaseOwner, new std::shared_ptr<const void>(f.owner()));
  }

  // The parts of one received message: the first few inside the owner (constructed as they
  // come: an unused zmq::message_t still costs two library calls), more on the heap.
  class ReceivedParts : public std::enable_shared_from_this<ReceivedParts> {
   public:
    static constexpr size_t kInline = 3;
    ReceivedParts() = default;
    ReceivedParts(const ReceivedParts&) = delete;
    ReceivedParts& operator=(const ReceivedParts&) = delete;
    ~ReceivedParts() {
      for (size_t i = 0; i < std::min(count_, kInline); ++i) Inline(i).~message_t();
    }
    size_t count() const { return count_; }
    zmq::message_t& Part(size_t i) { return i < kInline ? Inline(i) : *more_[i - kInline]; }
    zmq::message_t& Add() {
      if (count_ < kInline) return *new (inline_[count_++]) zmq::message_t();
      ++count_;
      return *more_.emplace_back(std::make_unique<zmq::message_t>());
    }
    // ZeroMQ hands out small parts at any offset inside its receive buffer; the header is read
    // as 8-byte words (Message::Parse), so a misaligned one is copied here rather than into
    // an allocation of its own.
    const void* AlignHeader(const zmq::message_t& part) {
      return AlignHeader(part.data(), part.size());
    }
    const void* AlignHeader(const void* data, size_t size) {
      if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) == 0 || size > sizeof(header_)) {
        return data;
      }
      std::memcpy(header_, data, size);
      return header_;
    }

   private:
    zmq::message_t& Inline(size_t i) {
      return *std::launder(reinterpret_cast<zmq::message_t*>(inline_[i]));
    }

    alignas(zmq::message_t) std::byte inline_[kInline][sizeof(zmq::message_t)];
    size_t count_ = 0;
    std::vector<std::unique_ptr<zmq::message_t>> more_;
    alignas(uint64_t) std::byte header_[256];
  };

  // Sets a socket timeout unless it already has that value.
  template <typename Option>
  void SetTimeout(Option option, int ms, int& current) {
    if (ms == current) return;
    socket_.set(option, ms);
    current = ms;
  }

  // Peers whose messages this endpoint received (bounded: a stranger may use many ids).
  static constexpr size_t kMaxHeardFrom = 4096;
  static constexpr size_t kMaxQueuedPeers = 4096;
  absl::flat_hash_set<std::string> heard_from_;
  std::string id_;
  ZmqOptions options_;
  const bool sealed_;  // the sealed data path (below)
  zmq::context_t& context_;
  const std::shared_ptr<const std::atomic<int>> expected_peers_;
  ConnectionGuardStats* const guard_stats_;
  const std::shared_ptr<ZmqTransport::Refusals> refusals_;
  // Bytes sent with TrySend that ZeroMQ still holds, per peer (released on ZeroMQ's threads).
  absl::flat_hash_map<std::string, std::shared_ptr<std::atomic<int64_t>>> queued_;
  zmq::socket_t socket_;
  // Declared after the socket: stopped before the socket closes.
  std::unique_ptr<ConnectionGuard> guard_;
  uint64_t forged_logged_ = 0;
  absl::flat_hash_set<std::string> connected_;  // peers this endpoint connected to (CURVE)
  int sndtimeo_ms_ = -1;                        // ZeroMQ's defaults: wait forever
  int rcvtimeo_ms_ = -1;
  // The sealed data path's state (sealed_ only).
  absl::flat_hash_map<std::string, Session> sessions_;
  absl::flat_hash_set<std::string> servers_;                          // peers we connected to
  absl::flat_hash_map<std::string, std::string> servers_by_address_;  // for the monitor
  absl::flat_hash_map<std::string, std::string> failed_;              // servers whose proof failed
  std::vector<Frame> sealed_frames_;
  // Received while a send waited for a session, for the caller's next Receive.
  static constexpr size_t kMaxInbox = 4096;
  std::deque<Message> inbox_;
  std::unique_ptr<zmq::socket_t> monitor_;  // declared after socket_: closed before it
  uint64_t refusals_logged_ = 0;
};

}  // namespace

// ZeroMQ's authentication hook (ZAP, RFC 27) for CURVE: it answers each handshake with the
// routing id the client's key was made for, or refuses it. A ROUTER rather than the usual REP:
// a key not yet known (a peer that has the node table before this node does) waits for
// AllowPeers without holding up the handshakes of others.
class ZmqTransport::ZapHandler {
 public:
  ZapHandler(zmq::context_t& context, std::shared_ptr<const JobKey> key)
      : key_(std::move(key)), socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::linger, 0);
    // Bound before any endpoint exists: a CURVE server with no handler would accept anyone.
    socket_.bind("inproc://zeromq.zap.01");
    thread_ = std::thread([this] { Loop(); });
  }
  ~ZapHandler() {
    stop_.store(true);
    thread_.join();
  }

  void Allow(const std::vector<std::string>& ids) {
    absl::MutexLock lock(&mu_);
    // Every id allowed so far, its keys looked up again each time: a node started again in
    // place presents its new control key, and its old one is refused from now on
    // (JobKey::SetIncarnation).
    allowed_.insert(ids.begin(), ids.end());
    ids_by_key_.clear();
    for (const std::string& id : allowed_) {
      const std::string key = key_->PublicKeyFor(id);
      if (!key.empty()) ids_by_key_[key] = key_->UserIdFor(id);
    }
    complete_ = true;
  }
  uint64_t refused() const { return refused_.load(); }

 private:
  struct Request {
    std::vector<zmq::message_t> frames;  // routing id, delimiter, version, request id, ...
    absl::Time since;
  };
  static constexpr absl::Duration kWaitForPeers = absl::Seconds(120);

  void Loop() {
    std::vector<Request> waiting;
    while (!stop_.load()) {
      zmq::pollitem_t item = {socket_.handle(), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(waiting.empty() ? 100 : 20));
      if (item.revents & ZMQ_POLLIN) {
        Request r;
        r.since = absl::Now();
        (void)zmq::recv_multipart(socket_, std::back_inserter(r.frames));
        waiting.push_back(std::move(r));
      }
      for (size_t i = 0; i < waiting.size();) {
        if (Answer(waiting[i])) {
          waiting.erase(waiting.begin() + i);
        } else {
          ++i;
        }
      }
    }
  }

  // Replies when the request can be decided; false while its key may yet become known.
  bool Answer(Request& r) {
    // routing id, "", version, request id, domain, address, identity, mechanism, key
    if (r.frames.size() < 8) return true;  // not a ZAP request: nothing to answer
    const std::string mechanism = r.frames[7].to_string();
    const std::string address = r.frames[5].to_string();
    std::string id;
    bool known = false;
    if (mechanism == "CURVE" && r.frames.size() >= 9 && r.frames[8].size() == 32) {
      absl::MutexLock lock(&mu_);
      auto it = ids_by_key_.find(r.frames[8].to_string());
      known = it != ids_by_key_.end();
      if (known) {
        id = it->second;
      } else if (!complete_ && absl::Now() - r.since < kWaitForPeers) {
        return false;
      }
    }
    if (!known) {
      refused_.fetch_add(1);
      SYNCLINE_LOG(WARNING) << "refused a " << mechanism << " connection from " << address
                            << ": its key is not one of this job's";
    }
    std::vector<zmq::const_buffer> reply = {
        zmq::buffer(r.frames[0].data(), r.frames[0].size()),
        zmq::buffer(r.frames[1].data(), r.frames[1].size()),
        zmq::str_buffer("1.0"),
        zmq::buffer(r.frames[3].data(), r.frames[3].size()),
        known ? zmq::str_buffer("200") : zmq::str_buffer("400"),
        known ? zmq::str_buffer("OK") : zmq::str_buffer("not a key of this job"),
        zmq::buffer(id),
        zmq::str_buffer(""),
    };
    try {
      (void)zmq::send_multipart(socket_, reply);
    } catch (const zmq::error_t&) {
      // The connection went away while it waited.
    }
    return true;
  }

  const std::shared_ptr<const JobKey> key_;
  zmq::socket_t socket_;  // used by the handler's thread only, after construction
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> refused_{0};
  absl::Mutex mu_;
  absl::flat_hash_set<std::string> allowed_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::string> ids_by_key_ ABSL_GUARDED_BY(mu_);
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

ZmqTransport::ZmqTransport(ZmqOptions options)
    : options_(options), refusals_(std::make_shared<Refusals>()), context_(options.io_threads) {
  if (options_.key != nullptr) zap_ = std::make_unique<ZapHandler>(context_, options_.key);
}

void ZmqTransport::AllowPeers(const std::vector<std::string>& ids) {
  expected_peers_->store(static_cast<int>(ids.size()));
  if (zap_ != nullptr) zap_->Allow(ids);
}

uint64_t ZmqTransport::refused_connections() const { return zap_ != nullptr ? zap_->refused() : 0; }

uint64_t ZmqTransport::refused_messages() const { return refusals_->count.load(); }

std::string ZmqTransport::last_refusal() const {
  absl::MutexLock lock(&refusals_->mu);
  return refusals_->last;
}

ZmqTransport::~ZmqTransport() = default;

absl::StatusOr<std::unique_ptr<Endpoint>> ZmqTransport::CreateEndpoint(std::string id) {
  if (id.empty() || id.size() > 255) {
    return absl::InvalidArgumentError("endpoint id must have 1 to 255 bytes");
  }
  if (options_.key != nullptr && !options_.key->Holds(id)) {
    return absl::PermissionDeniedError(
        absl::StrCat("the key file holds the keys of node ", options_.key->node(), ", not of ",
                     KeyPrincipal(id), ": give this node its own key (the launcher's OUT/keys)"));
  }
  try {
    return std::make_unique<ZmqEndpoint>(context_, std::move(id), options_, expected_peers_,
                                         &guard_stats_, refusals_);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot create a ZeroMQ socket: ", e.what()));
  }
}

}  // namespace syncline
