#include "core/zmq_transport.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
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
#include "core/log.h"
#include "core/net.h"

namespace syncline {
namespace {

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
              std::shared_ptr<const std::atomic<int>> expected_peers, ConnectionGuardStats* stats)
      : id_(std::move(id)),
        options_(options),
        context_(context),
        expected_peers_(std::move(expected_peers)),
        guard_stats_(stats),
        socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::routing_id, id_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // Plaintext: a second connection under a live peer's id is refused (ZeroMQ drops it), so
    // another process cannot take over a worker's or server's name while it is alive; once
    // the first connection closes, the name is free again for a restarted peer. With CURVE,
    // only a holder of the job's key can connect at all, and a restarted node takes its id
    // over at once.
    socket_.set(zmq::sockopt::router_handover, options.key != nullptr ? 1 : 0);
    // A peer that sends a frame larger than this is disconnected before it is buffered.
    socket_.set(zmq::sockopt::maxmsgsize, options.max_frame_bytes);
    socket_.set(zmq::sockopt::sndhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::rcvhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::linger, 200);
    socket_.set(zmq::sockopt::tcp_keepalive, 1);
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
      if (options_.key != nullptr) {
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
      if (options_.key != nullptr) {
        // A CURVE client of this peer: it proves to hold the key of `id_`, and the peer must
        // hold the key of `peer_id`.
        socket_.set(zmq::sockopt::curve_server, 0);
        socket_.set(zmq::sockopt::curve_serverkey, options_.key->PublicKeyFor(peer_id));
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
    try {
      zmq::message_t route(peer_id.data(), peer_id.size());
      // A routing frame that is refused leaves the message untouched: nothing of it was sent.
      if (!socket_.send(route, zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
        return absl::ResourceExhaustedError(absl::StrCat("the queue to ", peer_id, " is full"));
      }
      if (auto s = SendFrames(peer_id, frames, &bytes, QueuedCounter(peer_id)); !s.ok()) return s;
    } catch (const zmq::error_t& e) {
      return SendFailure(peer_id, e);
    }
    CountSent(bytes);
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
    size_t bytes = 0;
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
      if (auto s = SendFrames(peer_id, frames, &bytes); !s.ok()) return s;
    } catch (const zmq::error_t& e) {
      return SendFailure(peer_id, e);
    }
    CountSent(bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    while (true) {
      absl::StatusOr<Message> message = ReceiveOne(deadline);
      if (!message.ok() || message->peer() != kForged) return message;
    }
  }

 private:
  static absl::Status SendFailure(const std::string& peer_id, const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) {
      return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
    }
    return absl::UnavailableError(absl::StrCat("send to ", peer_id, " failed: ", e.what()));
  }
  void CountSent(size_t bytes) {
    counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
  }

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
      *bytes += f.size();
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
      if (options_.key != nullptr && route.more()) {
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
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("receive failed: ", e.what()));
    }
    counters_.bytes_received.fetch_add(bytes, std::memory_order_relaxed);
    counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
    return message;
  }

  // Whether `part` came over a connection whose key was made for `peer`. Connections to our
  // listener went through the ZAP handler, which named the key's id (its "User-Id"). On one
  // we opened, the peer proved to hold the key of the id we connected to (its server key),
  // and ZeroMQ routes its messages under that id.
  bool Authentic(zmq::message_t& part, const std::string& peer) {
    const char* user = zmq_msg_gets(part.handle(), "User-Id");
    if (user != nullptr && *user != '\0' ? peer == user : connected_.contains(peer)) return true;
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
  class ReceivedParts {
   public:
    static constexpr size_t kInline = 3;
    ReceivedParts() = default;
    ReceivedParts(const ReceivedParts&) = delete;
    ReceivedParts& operator=(const ReceivedParts&) = delete;
    ~ReceivedParts() {
      for (size_t i = 0; i < std::min(count_, kInline); ++i) Inline(i).~message_t();
    }
    zmq::message_t& Add() {
      if (count_ < kInline) return *new (inline_[count_++]) zmq::message_t();
      ++count_;
      return *more_.emplace_back(std::make_unique<zmq::message_t>());
    }
    // ZeroMQ hands out small parts at any offset inside its receive buffer; the header is read
    // as 8-byte words (Message::Parse), so a misaligned one is copied here rather than into
    // an allocation of its own.
    const void* AlignHeader(const zmq::message_t& part) {
      if (reinterpret_cast<uintptr_t>(part.data()) % alignof(uint64_t) == 0 ||
          part.size() > sizeof(header_)) {
        return part.data();
      }
      std::memcpy(header_, part.data(), part.size());
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
  zmq::context_t& context_;
  const std::shared_ptr<const std::atomic<int>> expected_peers_;
  ConnectionGuardStats* const guard_stats_;
  // Bytes sent with TrySend that ZeroMQ still holds, per peer (released on ZeroMQ's threads).
  absl::flat_hash_map<std::string, std::shared_ptr<std::atomic<int64_t>>> queued_;
  zmq::socket_t socket_;
  // Declared after the socket: stopped before the socket closes.
  std::unique_ptr<ConnectionGuard> guard_;
  uint64_t forged_logged_ = 0;
  absl::flat_hash_set<std::string> connected_;  // peers this endpoint connected to (CURVE)
  int sndtimeo_ms_ = -1;                        // ZeroMQ's defaults: wait forever
  int rcvtimeo_ms_ = -1;
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
    for (const std::string& id : ids) ids_by_key_[key_->PublicKeyFor(id)] = id;
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
  absl::flat_hash_map<std::string, std::string> ids_by_key_ ABSL_GUARDED_BY(mu_);
  bool complete_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

ZmqTransport::ZmqTransport(ZmqOptions options) : options_(options), context_(options.io_threads) {
  if (options_.key != nullptr) zap_ = std::make_unique<ZapHandler>(context_, options_.key);
}

void ZmqTransport::AllowPeers(const std::vector<std::string>& ids) {
  expected_peers_->store(static_cast<int>(ids.size()));
  if (zap_ != nullptr) zap_->Allow(ids);
}

uint64_t ZmqTransport::refused_connections() const { return zap_ != nullptr ? zap_->refused() : 0; }

ZmqTransport::~ZmqTransport() = default;

absl::StatusOr<std::unique_ptr<Endpoint>> ZmqTransport::CreateEndpoint(std::string id) {
  if (id.empty() || id.size() > 255) {
    return absl::InvalidArgumentError("endpoint id must have 1 to 255 bytes");
  }
  try {
    return std::make_unique<ZmqEndpoint>(context_, std::move(id), options_, expected_peers_,
                                         &guard_stats_);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot create a ZeroMQ socket: ", e.what()));
  }
}

}  // namespace syncline
