#include "core/tcp_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/log.h"
#include "core/net.h"
#include "core/seal.h"

namespace syncline {
namespace {

constexpr char kMagic[8] = {'S', 'Y', 'N', 'C', 'L', 'T', 'C', 'P'};
constexpr uint16_t kVersion = 1;
// A sealed plane's hello (TcpOptions::key): the plain one, then the server id it wants (u16
// length, bytes), the ciphers it offers (u8) and its nonce (core/seal.h).
constexpr uint16_t kSealedVersion = 2;
constexpr size_t kServerAnswerBytes = 1 + sizeof(SealNonce) + sizeof(SealProof);
// A sealed connection's staging holds a few whole segments: each is opened in place there.
constexpr size_t kSealedStagingBytes = 4 * (SealedChannel::kMaxSegment + SealedChannel::kOverhead);
// A message is sealed and written this many bytes at a time (whole segments).
constexpr size_t kSealBatchBytes = 4 * SealedChannel::kMaxSegment;
constexpr size_t kHelloFixed = sizeof(kMagic) + 2 + 2;
// Reads land here first; a frame that still needs at least kDirectRead bytes is read straight
// into its own buffer instead.
constexpr size_t kStagingBytes = 32 * 1024;
constexpr size_t kDirectRead = 8 * 1024;
// Received frames of at least kPooledBytes come from, and go back to, a pool of buffers: a
// fresh buffer of a collective's segment size costs page faults and zeroing on every message.
constexpr size_t kPooledBytes = 64 * 1024;
constexpr size_t kPoolBytes = size_t{128} << 20;
constexpr size_t kPoolBuffersPerSize = 1024;
// One connection's reads per poll round, so that a fast sender cannot starve the others.
constexpr int kReadsPerRound = 64;
constexpr absl::Duration kFirstRetry = absl::Milliseconds(20);
constexpr absl::Duration kMaxRetry = absl::Seconds(1);

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

void PutU16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }
void PutU32(std::byte* p, uint32_t v) { std::memcpy(p, &v, 4); }
void PutU64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }
template <typename T>
T Get(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

absl::StatusOr<std::pair<sockaddr_storage, socklen_t>> Resolve(const std::string& address,
                                                               bool passive) {
  absl::StatusOr<HostPort> hp = ParseTcpAddress(address);
  if (!hp.ok()) return hp.status();
  std::string host = hp->host;
  if (host == "*") host = "0.0.0.0";
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* list = nullptr;
  const std::string port = std::to_string(hp->port);
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0 || !list) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", address, "': ", gai_strerror(rc)));
  }
  std::pair<sockaddr_storage, socklen_t> out{};
  std::memcpy(&out.first, list->ai_addr, list->ai_addrlen);
  out.second = list->ai_addrlen;
  freeaddrinfo(list);
  return out;
}

std::string Format(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
    return absl::StrCat("tcp://[", text, "]:", ntohs(in6->sin6_port));
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
  inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
  return absl::StrCat("tcp://", text, ":", ntohs(in->sin_port));
}

void NoDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

// Buffers of received frames, kept by size for reuse. Frames may outlive the endpoint and be
// released on other threads, so the pool is shared and locked.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  std::shared_ptr<std::byte[]> Get(size_t size) {
    if (size < kPooledBytes)
      return std::shared_ptr<std::byte[]>(new std::byte[std::max<size_t>(size, 1)]);
    std::byte* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        p = it->second.back();
        it->second.pop_back();
        held_ -= size;
      }
    }
    if (p == nullptr) p = new std::byte[size];  // not value-initialised: about to be written
    std::weak_ptr<BufferPool> pool = weak_from_this();
    return std::shared_ptr<std::byte[]>(p, [pool, size](std::byte* b) {
      if (auto alive = pool.lock(); alive && alive->Put(b, size)) return;
      delete[] b;
    });
  }
  ~BufferPool() {
    for (auto& [size, list] : free_) {
      for (std::byte* b : list) delete[] b;
    }
  }

 private:
  bool Put(std::byte* b, size_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& list = free_[size];
    if (held_ + size > kPoolBytes || list.size() >= kPoolBuffersPerSize) return false;
    list.push_back(b);
    held_ += size;
    return true;
  }
  std::mutex mu_;
  absl::flat_hash_map<size_t, std::vector<std::byte*>> free_;
  size_t held_ = 0;
};

}  // namespace

class TcpEndpoint : public Endpoint {
 public:
  TcpEndpoint(TcpTransport* transport, std::string id)
      : transport_(transport), id_(std::move(id)) {}
  ~TcpEndpoint() override {
    if (listen_fd_ >= 0) close(listen_fd_);
    for (auto& c : conns_) {
      if (c->fd >= 0) close(c->fd);
    }
  }

  bool SendCopiesBorrowedFrames() const override { return true; }
  const std::string& id() const override { return id_; }

  absl::StatusOr<std::string> Bind(const std::string& address) override {
    if (listen_fd_ >= 0) return absl::FailedPreconditionError(absl::StrCat(id_, ": bound already"));
    auto where = Resolve(address, /*passive=*/true);
    if (!where.ok()) return where.status();
    int fd = socket(where->first.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::InternalError(Errno("socket"));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&where->first), where->second) != 0 ||
        listen(fd, 128) != 0) {
      const std::string why = Errno("bind");
      close(fd);
      return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ": ", why));
    }
    sockaddr_storage bound = {};
    socklen_t len = sizeof(bound);
    getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
    listen_fd_ = fd;
    return Format(bound);
  }

  absl::Status Connect(const std::string& peer_id, const std::string& address) override {
    if (peer_id.empty() || peer_id.size() > TcpTransport::kMaxIdBytes) {
      return absl::InvalidArgumentError(absl::StrCat("peer id of ", peer_id.size(), " bytes"));
    }
    auto where = Resolve(address, /*passive=*/false);
    if (!where.ok()) return where.status();
    if (auto it = out_.find(peer_id); it != out_.end()) {
      if (it->second->address == address) return absl::OkStatus();
      Drop(it->second);
      out_.erase(it);
    }
    auto conn = std::make_unique<Conn>();
    conn->outgoing = true;
    conn->peer = peer_id;
    conn->address = address;
    conn->sockaddr = where->first;
    conn->sockaddr_len = where->second;
    Conn* c = conn.get();
    conns_.push_back(std::move(conn));
    out_[peer_id] = c;
    StartConnect(c);
    return absl::OkStatus();
  }

  absl::Status Send(const std::string& peer_id, Message message, absl::Time deadline) override {
    Conn* c = nullptr;
    if (absl::Status s = Route(peer_id, &c); !s.ok()) return s;
    while (c->queued_bytes > transport_->options_.max_queued_bytes) {
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            id_, ": ", c->queued_bytes, " bytes still queued for ", peer_id, " (not reading?)"));
      }
      Progress(deadline);
      if (c->state == State::kBroken) return Route(peer_id, &c);
    }
    return Write(c, message, deadline);
  }

  absl::Status TrySend(const std::string& peer_id, Message* message) override {
    Conn* c = nullptr;
    if (absl::Status s = Route(peer_id, &c); !s.ok()) return s;
    if (c->queued_bytes > transport_->options_.max_queued_bytes) {
      Flush(c);
      if (c->queued_bytes > transport_->options_.max_queued_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(peer_id, "'s queue is full"));
      }
    }
    absl::Status s = Write(c, *message, absl::InfinitePast());
    if (s.ok()) *message = Message();
    return s;
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    const absl::Time spin_until = SpinUntil();
    while (inbox_.empty()) {
      const absl::Time now = absl::Now();
      if (now >= deadline) {
        if (!Progress(now) || inbox_.empty()) {
          return absl::DeadlineExceededError(absl::StrCat(id_, ": no message"));
        }
        break;
      }
      Await(deadline, spin_until);
    }
    Message m = std::move(inbox_.front());
    inbox_.pop_front();
    return m;
  }

 private:
  // kSealing: a sealed plane's handshake, between the hello and the proofs (core/seal.h).
  enum class State { kConnecting, kRetrying, kHello, kSealing, kOpen, kBroken };

  struct Conn {
    int fd = -1;
    State state = State::kConnecting;
    bool outgoing = false;
    bool dead = false;  // to be removed (an incoming connection that is done)
    std::string peer;
    // Outgoing: where, and when to try again after a refusal.
    std::string address;
    sockaddr_storage sockaddr = {};
    socklen_t sockaddr_len = 0;
    absl::Time retry_at;
    absl::Duration backoff = kFirstRetry;
    std::string error;  // why it broke
    // Bytes the kernel has not taken yet, in order; the front is written from out_offset.
    std::deque<std::vector<std::byte>> out;
    size_t out_offset = 0;
    size_t queued_bytes = 0;
    // Input: staging[in_begin, in_end) not yet parsed.
    std::vector<std::byte> staging;
    size_t in_begin = 0, in_end = 0;
    // The message being received.
    bool have_preamble = false;
    std::vector<uint64_t> lengths;
    std::vector<std::shared_ptr<std::byte[]>> buffers;
    size_t frame = 0, offset = 0;
    // Sealed plane: the handshake's values, then the channel. staging[raw_begin, raw_end) holds
    // segments not yet opened; [in_begin, in_end) is then the opened segment being parsed.
    std::unique_ptr<SealedChannel> seal;
    SealNonce nc = {}, ns = {};
    SealKey pair = {};
    uint8_t offered = 0;
    size_t raw_begin = 0, raw_end = 0;
    // Messages written before the handshake ended, in plaintext: sealed when it ends.
    std::deque<std::vector<std::byte>> unsealed;
    // Where messages are sealed before they are written; kept for the next one when the kernel
    // took all of it.
    std::vector<std::byte> sealed_out;
  };

  // The connection a message to `peer_id` takes: ours if we connected, else the peer's own.
  absl::Status Route(const std::string& peer_id, Conn** out) {
    Conn* c = nullptr;
    if (auto it = out_.find(peer_id); it != out_.end()) {
      c = it->second;
    } else if (auto in = in_.find(peer_id); in != in_.end()) {
      c = in->second;
    }
    if (c == nullptr) {
      // It may have connected to us already, its hello still unread.
      const absl::Time until = absl::Now() + transport_->options_.unreachable_grace;
      for (;;) {
        Progress(std::min(until, absl::Now() + absl::Milliseconds(10)));
        if (auto in = in_.find(peer_id); in != in_.end()) {
          c = in->second;
          break;
        }
        if (absl::Now() >= until) {
          return absl::UnavailableError(absl::StrCat(id_, ": no connection to ", peer_id));
        }
      }
    }
    if (c->state == State::kBroken) {
      const absl::Status lost = absl::UnavailableError(
          absl::StrCat(id_, ": the connection to ", peer_id, " broke: ", c->error));
      if (c->outgoing) {
        c->error.clear();
        StartConnect(c);  // the next message goes to whoever listens there now
      } else {
        in_.erase(peer_id);
        c->dead = true;
      }
      return lost;
    }
    // A connection being opened is usually up within microseconds (the peer's kernel accepts
    // it); waiting for it lets this message go straight out instead of into the queue. A
    // sealed plane's handshake is not waited for: it needs the peer's endpoint to be driven,
    // and what is written meanwhile is sealed when it ends.
    if (c->state == State::kConnecting) {
      const absl::Time until = absl::Now() + transport_->options_.unreachable_grace;
      while (c->state == State::kConnecting && absl::Now() < until) Progress(until);
    }
    *out = c;
    return absl::OkStatus();
  }

  void StartConnect(Conn* c) {
    c->out.clear();
    c->out_offset = 0;
    c->queued_bytes = 0;
    ResetInput(c);
    c->seal.reset();
    c->unsealed.clear();
    std::vector<std::byte> hello(kHelloFixed + id_.size());
    std::memcpy(hello.data(), kMagic, sizeof(kMagic));
    PutU16(hello.data() + sizeof(kMagic), sealed() ? kSealedVersion : kVersion);
    PutU16(hello.data() + sizeof(kMagic) + 2, static_cast<uint16_t>(id_.size()));
    std::memcpy(hello.data() + kHelloFixed, id_.data(), id_.size());
    if (sealed()) AppendSealedHello(c, &hello);
    c->queued_bytes = hello.size();
    c->out.push_back(std::move(hello));
    TryConnect(c);
  }

  void TryConnect(Conn* c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = socket(c->sockaddr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
      Retry(c);
      return;
    }
    NoDelay(c->fd);
    if (connect(c->fd, reinterpret_cast<sockaddr*>(&c->sockaddr), c->sockaddr_len) == 0) {
      Opened(c);
    } else if (errno == EINPROGRESS) {
      c->state = State::kConnecting;
    } else {
      Retry(c);
    }
  }

  void Retry(Conn* c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = State::kRetrying;
    c->retry_at = absl::Now() + c->backoff;
    c->backoff = std::min(c->backoff * 2, kMaxRetry);
  }

  void Opened(Conn* c) {
    c->state = sealed() ? State::kSealing : State::kOpen;
    c->backoff = kFirstRetry;
    Flush(c);
  }

  void Break(Conn* c, std::string why) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->state = State::kBroken;
    c->error = std::move(why);
    c->out.clear();
    c->unsealed.clear();
    c->out_offset = 0;
    c->queued_bytes = 0;
    ResetInput(c);
    // An incoming connection that never said who it is, or that another one of the same peer
    // has replaced, is of no further use.
    if (!c->outgoing && (c->peer.empty() || !in_.contains(c->peer) || in_[c->peer] != c)) {
      c->dead = true;
    }
  }

  // Closes a connection for breaking the protocol.
  void Reject(Conn* c, const std::string& why) {
    transport_->Rejected(why);
    if (rejected_logged_++ < 10) {
      SYNCLINE_LOG(WARNING) << id_ << ": closed a connection"
                            << (c->peer.empty() ? "" : absl::StrCat(" from ", c->peer)) << ": "
                            << why;
    }
    if (!c->outgoing && !c->peer.empty() && in_.contains(c->peer) && in_[c->peer] == c) {
      in_.erase(c->peer);
    }
    Break(c, why);
    if (!c->outgoing) c->dead = true;
  }

  void Drop(Conn* c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->dead = true;
    c->outgoing = false;
  }

  static void ResetInput(Conn* c) {
    c->in_begin = c->in_end = 0;
    c->have_preamble = false;
    c->lengths.clear();
    c->buffers.clear();
    c->frame = c->offset = 0;
    c->raw_begin = c->raw_end = 0;
  }

  // Writes `message` to c's socket. Until `wait_until` it waits for the kernel to take every
  // byte, reading every connection meanwhile (so that two peers sending each other large
  // messages both progress); what is left then (or at once, for TrySend) is copied into c's
  // queue: the caller may reuse its buffers as soon as Send returns.
  absl::Status Write(Conn* c, const Message& message, absl::Time wait_until) {
    const std::vector<Frame>& frames = message.frames();
    std::vector<std::byte> preamble(4 + 8 * frames.size());
    PutU32(preamble.data(), static_cast<uint32_t>(frames.size()));
    std::vector<Piece> pieces = {{preamble.data(), preamble.size()}};
    size_t payload = 0;
    for (size_t i = 0; i < frames.size(); ++i) {
      PutU64(preamble.data() + 4 + 8 * i, frames[i].size());
      pieces.push_back({frames[i].data(), frames[i].size()});
      payload += frames[i].size();
    }
    if (sealed()) return WriteSealed(c, pieces, payload, wait_until);
    absl::Status s = WritePieces(c, pieces, wait_until, nullptr);
    if (s.ok()) counters_.Sent(c->peer, payload);
    return s;
  }

  struct Piece {
    const std::byte* data;
    size_t size;
  };

  // Write's second half: writes `pieces` (a message's bytes on the wire) as far as the kernel
  // takes them and queues the rest. A remainder of the one piece in `*owned` moves into the
  // queue instead of being copied.
  absl::Status WritePieces(Conn* c, const std::vector<Piece>& pieces, absl::Time wait_until,
                           std::vector<std::byte>* owned) {
    size_t total = 0;
    for (const Piece& p : pieces) total += p.size;
    auto broke = [&] {
      return absl::UnavailableError(
          absl::StrCat(id_, ": the connection to ", c->peer, " broke: ", c->error));
    };
    const absl::Time spin_until = SpinUntil();
    auto wait = [&] {
      writing_ = c;
      Await(wait_until, spin_until);
      writing_ = nullptr;
    };
    if (c->state == State::kOpen) Flush(c);
    while (c->state == State::kOpen && !c->out.empty() && absl::Now() < wait_until) {
      wait();
      if (c->state == State::kOpen) Flush(c);
    }
    if (c->state == State::kBroken) return broke();
    size_t written = 0;
    if (c->state == State::kOpen && c->out.empty()) {
      std::vector<iovec> iov;
      iov.reserve(pieces.size());
      for (;;) {
        iov.clear();
        size_t skip = written;
        auto add = [&](const std::byte* data, size_t size) {
          if (skip >= size) {
            skip -= size;
            return;
          }
          iov.push_back({const_cast<std::byte*>(data) + skip, size - skip});
          skip = 0;
        };
        for (const Piece& p : pieces) add(p.data, p.size);
        msghdr msg = {};
        msg.msg_iov = iov.data();
        msg.msg_iovlen = iov.size();
        const ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) written += static_cast<size_t>(n);
        if (written == total) break;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          Break(c, Errno("send"));
          return broke();
        }
        if (n < 0 && errno == EINTR) continue;
        if (absl::Now() >= wait_until) break;
        wait();
        if (c->state == State::kBroken) return broke();
      }
      if (written == 0 && wait_until != absl::InfinitePast()) {
        return absl::DeadlineExceededError(absl::StrCat(id_, ": ", c->peer, " takes no bytes"));
      }
    }
    if (written == total) return absl::OkStatus();
    if (owned != nullptr && (c->out.empty() || written == 0)) {
      if (c->out.empty()) c->out_offset = written;
      owned->resize(total);
      c->queued_bytes += total - written;
      c->out.push_back(std::move(*owned));
      owned->clear();
      return absl::OkStatus();
    }
    std::vector<std::byte> rest(total - written);
    size_t at = 0;
    auto append = [&](const std::byte* data, size_t size) {
      if (written >= size) {
        written -= size;
        return;
      }
      const size_t n = size - written;
      std::memcpy(rest.data() + at, data + written, n);
      at += n;
      written = 0;
    };
    for (const Piece& p : pieces) append(p.data, p.size);
    c->queued_bytes += rest.size();
    c->out.push_back(std::move(rest));
    return absl::OkStatus();
  }

  // Writes queued bytes until the kernel takes no more.
  void Flush(Conn* c) {
    while (Writable(c) && !c->out.empty()) {
      std::vector<iovec> iov;
      size_t first = c->out_offset;
      for (auto& chunk : c->out) {
        iov.push_back({chunk.data() + first, chunk.size() - first});
        first = 0;
        if (iov.size() == 64) break;
      }
      msghdr msg = {};
      msg.msg_iov = iov.data();
      msg.msg_iovlen = iov.size();
      ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
        Break(c, Errno("send"));
        return;
      }
      c->queued_bytes -= static_cast<size_t>(n);
      while (n > 0) {
        const size_t left = c->out.front().size() - c->out_offset;
        if (static_cast<size_t>(n) >= left) {
          n -= static_cast<ssize_t>(left);
          c->out.pop_front();
          c->out_offset = 0;
        } else {
          c->out_offset += static_cast<size_t>(n);
          n = 0;
        }
      }
    }
  }

  // Reads what the kernel has for c and parses whole messages into the inbox.
  void ReadAll(Conn* c) {
    if (sealed()) {
      ReadSealed(c);
      return;
    }
    if (c->staging.empty()) c->staging.resize(kStagingBytes);
    for (int round = 0; round < kReadsPerRound && c->fd >= 0; ++round) {
      ssize_t n;
      const bool direct = c->have_preamble && c->in_begin == c->in_end &&
                          c->frame < c->lengths.size() &&
                          c->lengths[c->frame] - c->offset >= kDirectRead;
      if (direct) {
        n = recv(c->fd, c->buffers[c->frame].get() + c->offset, c->lengths[c->frame] - c->offset,
                 MSG_DONTWAIT);
        if (n > 0) {
          c->offset += static_cast<size_t>(n);
          if (c->offset == c->lengths[c->frame]) {
            ++c->frame;
            c->offset = 0;
          }
        }
      } else {
        if (c->in_begin == c->in_end) c->in_begin = c->in_end = 0;
        if (c->in_end == c->staging.size()) {  // compact
          std::memmove(c->staging.data(), c->staging.data() + c->in_begin, c->in_end - c->in_begin);
          c->in_end -= c->in_begin;
          c->in_begin = 0;
        }
        n = recv(c->fd, c->staging.data() + c->in_end, c->staging.size() - c->in_end, MSG_DONTWAIT);
        if (n > 0) c->in_end += static_cast<size_t>(n);
      }
      if (bool again = false; !Received(c, n, &again)) {
        if (again) continue;
        return;
      }
      if (!Parse(c)) return;
    }
  }

  // What recv's result `n` means for c: true when bytes came. Otherwise c broke (closed by the
  // peer, or an error), or nothing was there: *again after an interrupted call.
  bool Received(Conn* c, ssize_t n, bool* again) {
    if (n > 0) return true;
    if (n == 0) {
      Break(c, c->state == State::kSealing
                   ? "the peer closed the connection during the sealed handshake (does it hold "
                     "this job's key?)"
                   : "the peer closed the connection");
    } else if (errno == EINTR) {
      *again = true;
    } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
      Break(c, Errno("recv"));
    }
    return false;
  }

  // Consumes staged bytes: the hello, preambles and frames. False when c was rejected.
  bool Parse(Conn* c) {
    for (;;) {
      const std::byte* p = c->staging.data() + c->in_begin;
      size_t avail = c->in_end - c->in_begin;
      if (c->state == State::kHello) {
        if (avail < kHelloFixed) return true;
        if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
          Reject(c, "not a Syncline TCP hello");
          return false;
        }
        if (const uint16_t v = Get<uint16_t>(p + sizeof(kMagic)); v != kVersion) {
          Reject(c, v == kSealedVersion
                        ? std::string("a sealed plane's hello: this plane has no job key")
                        : absl::StrCat("hello of protocol version ", v, ", this build speaks ",
                                       kVersion));
          return false;
        }
        const size_t id_bytes = Get<uint16_t>(p + sizeof(kMagic) + 2);
        if (id_bytes == 0 || id_bytes > TcpTransport::kMaxIdBytes) {
          Reject(c, absl::StrCat("hello with an id of ", id_bytes, " bytes"));
          return false;
        }
        if (avail < kHelloFixed + id_bytes) return true;
        std::string peer(reinterpret_cast<const char*>(p + kHelloFixed), id_bytes);
        c->in_begin += kHelloFixed + id_bytes;
        if (!transport_->Allowed(peer)) {
          Reject(c, absl::StrCat("'", peer, "' is not a node of this job"));
          return false;
        }
        c->peer = std::move(peer);
        Admit(c);
        continue;
      }
      if (!c->have_preamble) {
        if (avail < 4) return true;
        const uint32_t frames = Get<uint32_t>(p);
        if (frames == 0 || frames > TcpTransport::kMaxFrames) {
          Reject(c, absl::StrCat("a message of ", frames, " frames (at most ",
                                 TcpTransport::kMaxFrames, ")"));
          return false;
        }
        if (avail < 4 + 8 * size_t{frames}) return true;
        // Checked before anything is allocated for it: the peer's word is all we have.
        constexpr uint64_t kNoBound = std::numeric_limits<uint64_t>::max();
        uint64_t total = 0;
        c->lengths.resize(frames);
        for (uint32_t i = 0; i < frames; ++i) {
          c->lengths[i] = Get<uint64_t>(p + 4 + 8 * i);
          total = c->lengths[i] > kNoBound - total ? kNoBound : total + c->lengths[i];
        }
        if (const uint64_t bound = transport_->options_.max_message_bytes; total > bound) {
          Reject(c, absl::StrCat(c->peer, " announced a message of ", total,
                                 " bytes, over this endpoint's bound of ", bound,
                                 " bytes (TcpOptions::max_message_bytes)"));
          return false;
        }
        c->buffers.resize(frames);
        for (uint32_t i = 0; i < frames; ++i) {
          c->buffers[i] = pool_->Get(c->lengths[i]);
        }
        c->in_begin += 4 + 8 * size_t{frames};
        c->have_preamble = true;
        c->frame = c->offset = 0;
        p = c->staging.data() + c->in_begin;
        avail = c->in_end - c->in_begin;
      }
      while (c->frame < c->lengths.size()) {
        const size_t want = c->lengths[c->frame] - c->offset;
        const size_t take = std::min(want, avail);
        if (take > 0) {
          std::memcpy(c->buffers[c->frame].get() + c->offset, p, take);
          p += take;
          avail -= take;
          c->in_begin += take;
          c->offset += take;
        }
        if (c->offset < c->lengths[c->frame]) return true;
        ++c->frame;
        c->offset = 0;
      }
      Message m;
      m.set_peer(c->peer);
      size_t bytes = 0;
      for (size_t i = 0; i < c->lengths.size(); ++i) {
        std::byte* data = c->buffers[i].get();
        m.frames().push_back(Frame::Shared(std::move(c->buffers[i]), data, c->lengths[i]));
        bytes += c->lengths[i];
      }
      counters_.Received(c->peer, bytes);
      inbox_.push_back(std::move(m));
      c->have_preamble = false;
      c->lengths.clear();
      c->buffers.clear();
    }
  }

  bool sealed() const { return transport_->options_.key != nullptr; }
  static bool Writable(const Conn* c) {
    return c->state == State::kOpen || c->state == State::kSealing;
  }

  // A peer whose hello (and, sealed, proof) was accepted: answers to it take this connection.
  void Admit(Conn* c) {
    if (auto old = in_.find(c->peer); old != in_.end() && old->second != c) {
      // A peer that reconnected: answers take the new connection; the old one is read until it
      // closes.
      if (old->second->state == State::kBroken) old->second->dead = true;
    }
    in_[c->peer] = c;
    c->state = State::kOpen;
  }

  // The sealed hello's tail: the server id wanted, the ciphers offered, a fresh nonce.
  void AppendSealedHello(Conn* c, std::vector<std::byte>* hello) {
    c->offered = LocalSealCiphers(transport_->options_.seal_with_aes);
    c->nc = FreshSealNonce();
    const size_t at = hello->size();
    hello->resize(at + 2 + c->peer.size() + 1 + c->nc.size());
    std::byte* p = hello->data() + at;
    PutU16(p, static_cast<uint16_t>(c->peer.size()));
    std::memcpy(p + 2, c->peer.data(), c->peer.size());
    p[2 + c->peer.size()] = std::byte{c->offered};
    std::memcpy(p + 3 + c->peer.size(), c->nc.data(), c->nc.size());
    c->pair = PairKey(*transport_->options_.key, id_, c->peer);
  }

  // Write on a sealed plane: the message sealed into c's send buffer, segment by segment
  // straight from its frames. A handshake under way is waited for until `wait_until`, as a
  // plain Write waits for the kernel to take its bytes (so that a Send is on its way when it
  // returns, though the caller then stops driving the endpoint); a connection not up yet, or
  // a handshake not ended by then, gets a plaintext copy that is sealed when it ends.
  absl::Status WriteSealed(Conn* c, const std::vector<Piece>& pieces, size_t payload,
                           absl::Time wait_until) {
    const absl::Time spin_until = SpinUntil();
    while (c->state == State::kSealing && absl::Now() < wait_until) Await(wait_until, spin_until);
    if (c->state == State::kBroken) {
      return absl::UnavailableError(
          absl::StrCat(id_, ": the connection to ", c->peer, " broke: ", c->error));
    }
    if (c->state != State::kOpen) {
      std::vector<std::byte> plain;
      for (const Piece& p : pieces) plain.insert(plain.end(), p.data, p.data + p.size);
      c->queued_bytes += plain.size();
      c->unsealed.push_back(std::move(plain));
      counters_.Sent(c->peer, payload);
      return absl::OkStatus();
    }
    // A batch of segments at a time, so that the peer opens one batch while this end seals
    // the next (the kernel takes a batch at once when the peer keeps reading).
    SealCursor at;
    for (const Piece& p : pieces) at.left += p.size;
    for (bool first = true; at.left > 0; first = false) {
      const size_t size = SealInto(c, pieces, &at, kSealBatchBytes, &c->sealed_out);
      absl::Status s = WritePieces(c, {{c->sealed_out.data(), size}}, wait_until, &c->sealed_out);
      if (absl::IsDeadlineExceeded(s) && !first) {
        // Part of the message is out: the rest must follow it, so it waits in the queue.
        c->sealed_out.resize(size);
        c->queued_bytes += size;
        c->out.push_back(std::move(c->sealed_out));
        c->sealed_out.clear();
        s = absl::OkStatus();
      }
      if (!s.ok()) return s;
    }
    counters_.Sent(c->peer, payload);
    return absl::OkStatus();
  }

  // Where sealing stands in a message's pieces: `left` bytes from pieces[piece] at `offset`.
  struct SealCursor {
    size_t piece = 0, offset = 0, left = 0;
  };

  // Seals up to `most` bytes of one message's wire bytes (`pieces`), from *cursor on, into
  // *out, which grows as needed and never shrinks (a buffer of a batch's size is reused, not
  // zeroed each time); returns the bytes written. Every message starts a segment, so its
  // preamble (at most 516 bytes) is always inside one; a segment is sealed straight from the
  // piece that holds it, and only one that spans small pieces is gathered first.
  size_t SealInto(Conn* c, const std::vector<Piece>& pieces, SealCursor* cursor, size_t most,
                  std::vector<std::byte>* out) {
    constexpr size_t kMax = SealedChannel::kMaxSegment;
    const size_t total = std::min(cursor->left, most);
    const size_t sealed_size = total + (total + kMax - 1) / kMax * SealedChannel::kOverhead;
    if (out->size() < sealed_size) out->resize(sealed_size);
    size_t& piece = cursor->piece;
    size_t& offset = cursor->offset;
    size_t at = 0;
    cursor->left -= total;
    for (size_t left = total; left > 0;) {
      while (offset == pieces[piece].size) {
        ++piece;
        offset = 0;
      }
      // A large piece (a frame of at least kDirectRead bytes) begins a segment of its own, so
      // that the receiver opens all of its segments straight into the frame's buffer; small
      // ones (the preamble, a header frame) share one. Without this a message's first segment
      // held the preamble, the header and 64 KiB of the payload: gathered here, opened in the
      // staging buffer and copied into the frame there, a quarter of a 256 KiB segment's bytes.
      size_t n = std::min(kMax, left);
      for (size_t p = piece, run = pieces[p].size - offset; run < n && ++p < pieces.size();
           run += pieces[p].size) {
        if (pieces[p].size >= kDirectRead) {
          n = run;
          break;
        }
      }
      const std::byte* from = pieces[piece].data + offset;
      if (pieces[piece].size - offset >= n) {
        offset += n;
      } else {
        gather_.resize(kMax);
        for (size_t got = 0; got < n;) {
          while (offset == pieces[piece].size) {
            ++piece;
            offset = 0;
          }
          const size_t take = std::min(n - got, pieces[piece].size - offset);
          std::memcpy(gather_.data() + got, pieces[piece].data + offset, take);
          got += take;
          offset += take;
        }
        from = gather_.data();
      }
      if (out->size() < at + n + SealedChannel::kOverhead) {
        out->resize(at + n + SealedChannel::kOverhead);  // a segment more, cut at a frame
      }
      c->seal->Seal(from, n, out->data() + at);
      at += n + SealedChannel::kOverhead;
      left -= n;
    }
    return at;
  }

  // ReadAll on a sealed plane: the handshake, then segments, each opened in place in the
  // staging buffer and its plaintext parsed as a plain plane's bytes.
  void ReadSealed(Conn* c) {
    if (c->staging.size() < kSealedStagingBytes) c->staging.resize(kSealedStagingBytes);
    for (int round = 0; round < kReadsPerRound && c->fd >= 0; ++round) {
      if (c->raw_begin == c->raw_end) {
        c->raw_begin = c->raw_end = 0;
      } else if (c->raw_end == c->staging.size()) {  // compact: at most one partial segment
        std::memmove(c->staging.data(), c->staging.data() + c->raw_begin,
                     c->raw_end - c->raw_begin);
        c->raw_end -= c->raw_begin;
        c->raw_begin = 0;
      }
      const ssize_t n =
          recv(c->fd, c->staging.data() + c->raw_end, c->staging.size() - c->raw_end, MSG_DONTWAIT);
      if (bool again = false; !Received(c, n, &again)) {
        if (again) continue;
        return;
      }
      c->raw_end += static_cast<size_t>(n);
      if (!ParseSealed(c)) return;
    }
  }

  // Consumes staged sealed bytes. False when c was rejected.
  bool ParseSealed(Conn* c) {
    for (;;) {
      std::byte* p = c->staging.data() + c->raw_begin;
      const size_t avail = c->raw_end - c->raw_begin;
      if (c->state == State::kHello) {
        if (!AnswerSealedHello(c, p, avail)) return c->state != State::kBroken;
        continue;
      }
      if (c->state == State::kSealing && c->outgoing) {
        if (avail < kServerAnswerBytes) return true;
        if (!CheckServerAnswer(c, p)) return false;
        c->raw_begin += kServerAnswerBytes;
        continue;
      }
      if (c->state == State::kSealing) {
        if (avail < sizeof(SealProof)) return true;
        const uint8_t chosen = static_cast<uint8_t>(c->seal->cipher());
        if (!SameProof(ClientProof(c->pair, c->offered, chosen, c->nc, c->ns),
                       reinterpret_cast<const unsigned char*>(p))) {
          Reject(c, absl::StrCat("'", c->peer,
                                 "' failed the sealed handshake: it does not hold this job's key"));
          return false;
        }
        c->raw_begin += sizeof(SealProof);
        Admit(c);
        continue;
      }
      if (avail < SealedChannel::kHeaderBytes) return true;
      const uint32_t n = Get<uint32_t>(p);
      if (n == 0 || n > SealedChannel::kMaxSegment) {
        Reject(c, absl::StrCat("a sealed segment of ", n, " bytes from ", c->peer, " (at most ",
                               SealedChannel::kMaxSegment, ")"));
        return false;
      }
      if (avail < n + SealedChannel::kOverhead) return true;
      // A segment that lies inside the frame being received opens straight into its buffer;
      // any other opens in place here and is parsed from the staging buffer.
      std::byte* into = nullptr;
      if (c->have_preamble && c->frame < c->lengths.size() &&
          c->lengths[c->frame] - c->offset >= n) {
        into = c->buffers[c->frame].get() + c->offset;
      }
      if (!c->seal->Open(p, n, into)) {
        Reject(c, absl::StrCat("sealed segment ", c->seal->opened(), " from ", c->peer,
                               " fails authentication (altered, replayed, reordered or cut); "
                               "none of it is used"));
        return false;
      }
      c->in_begin = c->raw_begin + SealedChannel::kHeaderBytes;
      c->in_end = c->in_begin + n;
      c->raw_begin += n + SealedChannel::kOverhead;
      if (into != nullptr) {
        c->in_begin = c->in_end;  // nothing to parse: the frame has its bytes
        c->offset += n;
        if (c->offset == c->lengths[c->frame]) {
          ++c->frame;
          c->offset = 0;
        }
      }
      if (!Parse(c)) return false;
      if (c->in_begin != c->in_end) {
        Reject(c, absl::StrCat("a sealed segment from ", c->peer,
                               " ends inside a message's preamble"));
        return false;
      }
    }
  }

  // The server's side of a sealed hello at p: checks it and answers with the chosen cipher,
  // a fresh nonce and the server's proof. False when more bytes are needed or c was rejected.
  bool AnswerSealedHello(Conn* c, const std::byte* p, size_t avail) {
    if (avail < kHelloFixed) return false;
    if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) {
      Reject(c, "not a Syncline TCP hello");
      return false;
    }
    const uint16_t version = Get<uint16_t>(p + sizeof(kMagic));
    const size_t id_bytes = Get<uint16_t>(p + sizeof(kMagic) + 2);
    if (version != kSealedVersion) {
      Reject(c, version == kVersion
                    ? absl::StrCat(
                          "a plaintext hello (from '",
                          absl::CEscape(std::string(reinterpret_cast<const char*>(p + kHelloFixed),
                                                    std::min(avail - kHelloFixed, id_bytes))),
                          "'): this plane is sealed with the job key")
                    : absl::StrCat("hello of protocol version ", version, ", this build speaks ",
                                   kSealedVersion));
      return false;
    }
    if (id_bytes == 0 || id_bytes > TcpTransport::kMaxIdBytes) {
      Reject(c, absl::StrCat("hello with an id of ", id_bytes, " bytes"));
      return false;
    }
    if (avail < kHelloFixed + id_bytes + 2) return false;
    const size_t target_bytes = Get<uint16_t>(p + kHelloFixed + id_bytes);
    const size_t need = kHelloFixed + id_bytes + 2 + target_bytes + 1 + sizeof(SealNonce);
    if (target_bytes > TcpTransport::kMaxIdBytes) {
      Reject(c, absl::StrCat("hello for an id of ", target_bytes, " bytes"));
      return false;
    }
    if (avail < need) return false;
    c->peer.assign(reinterpret_cast<const char*>(p + kHelloFixed), id_bytes);
    const std::string target(reinterpret_cast<const char*>(p + kHelloFixed + id_bytes + 2),
                             target_bytes);
    const std::byte* tail = p + kHelloFixed + id_bytes + 2 + target_bytes;
    c->offered = static_cast<uint8_t>(tail[0]);
    std::memcpy(c->nc.data(), tail + 1, c->nc.size());
    c->raw_begin += need;
    if (!transport_->Allowed(c->peer)) {
      Reject(c, absl::StrCat("'", c->peer, "' is not a node of this job"));
      return false;
    }
    if (target != id_) {
      Reject(c, absl::StrCat("'", c->peer, "' wants '", absl::CEscape(target), "', not ", id_));
      return false;
    }
    const uint8_t chosen =
        ChooseSealCipher(c->offered, LocalSealCiphers(transport_->options_.seal_with_aes));
    if (chosen == 0) {
      Reject(c, absl::StrCat("'", c->peer, "' offers no cipher this node runs (mask ", c->offered,
                             ")"));
      return false;
    }
    c->pair = PairKey(*transport_->options_.key, c->peer, id_);
    c->ns = FreshSealNonce();
    c->seal = std::make_unique<SealedChannel>(static_cast<SealCipher>(chosen), c->pair, c->nc,
                                              c->ns, /*client=*/false);
    std::vector<std::byte> answer(kServerAnswerBytes);
    answer[0] = std::byte{chosen};
    std::memcpy(answer.data() + 1, c->ns.data(), c->ns.size());
    const SealProof proof = ServerProof(c->pair, c->offered, chosen, c->nc, c->ns);
    std::memcpy(answer.data() + 1 + c->ns.size(), proof.data(), proof.size());
    c->queued_bytes += answer.size();
    c->out.push_back(std::move(answer));
    c->state = State::kSealing;
    Flush(c);
    return c->state != State::kBroken;
  }

  // The client's side: checks the server's answer, sends its own proof and seals what was
  // written meanwhile. False when c was rejected.
  bool CheckServerAnswer(Conn* c, const std::byte* p) {
    const uint8_t chosen = static_cast<uint8_t>(p[0]);
    SealNonce ns;
    std::memcpy(ns.data(), p + 1, ns.size());
    if (ChooseSealCipher(chosen, c->offered) != chosen ||
        !SameProof(ServerProof(c->pair, c->offered, chosen, c->nc, ns),
                   reinterpret_cast<const unsigned char*>(p + 1 + ns.size()))) {
      Reject(c, absl::StrCat(c->peer, " at ", c->address,
                             " failed the sealed handshake: it does not hold this job's key"));
      return false;
    }
    c->ns = ns;
    c->seal = std::make_unique<SealedChannel>(static_cast<SealCipher>(chosen), c->pair, c->nc,
                                              c->ns, /*client=*/true);
    const SealProof proof = ClientProof(c->pair, c->offered, chosen, c->nc, c->ns);
    c->out.emplace_back(reinterpret_cast<const std::byte*>(proof.data()),
                        reinterpret_cast<const std::byte*>(proof.data()) + proof.size());
    c->queued_bytes += proof.size();
    c->state = State::kOpen;
    for (std::vector<std::byte>& plain : c->unsealed) {
      c->queued_bytes -= plain.size();
      std::vector<std::byte> segments;
      SealCursor all;
      all.left = plain.size();
      const size_t size = SealInto(c, {{plain.data(), plain.size()}}, &all, all.left, &segments);
      c->queued_bytes += size;
      c->out.push_back(std::move(segments));
    }
    c->unsealed.clear();
    Flush(c);
    return true;
  }

  void Accept() {
    for (;;) {
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;
      NoDelay(fd);
      auto conn = std::make_unique<Conn>();
      conn->fd = fd;
      conn->state = State::kHello;
      conns_.push_back(std::move(conn));
    }
  }

  // Until this, a wait polls without sleeping (TcpOptions::spin).
  absl::Time SpinUntil() const {
    const absl::Duration spin = transport_->options_.spin;
    return spin > absl::ZeroDuration() ? absl::Now() + spin : absl::InfinitePast();
  }

  // One round of progress: until `spin_until` without sleeping, yielding the core when nothing
  // was ready (ranks may share cores); after it, sleeping until something is or `deadline`.
  void Await(absl::Time deadline, absl::Time spin_until) {
    if (absl::Now() >= spin_until) {
      Progress(deadline);
    } else if (!Progress(absl::Now())) {
      sched_yield();
    }
  }

  // One round: waits for readiness until `deadline` (not at all when it has passed), then
  // accepts, connects, reads and writes what is ready. True when something happened.
  bool Progress(absl::Time deadline) {
    absl::Time now = absl::Now();
    std::vector<pollfd> fds;
    std::vector<Conn*> of;
    fds.reserve(conns_.size() + 1);
    if (listen_fd_ >= 0) {
      fds.push_back({listen_fd_, POLLIN, 0});
      of.push_back(nullptr);
    }
    for (auto& owned : conns_) {
      Conn* c = owned.get();
      if (c->state == State::kRetrying) {
        if (now >= c->retry_at) {
          TryConnect(c);
        } else {
          deadline = std::min(deadline, c->retry_at);
        }
      }
      if (c->fd < 0 || c->state == State::kBroken || c->state == State::kRetrying) continue;
      short events = POLLIN;
      if (c->state == State::kConnecting) events = POLLOUT;
      if (Writable(c) && (!c->out.empty() || c == writing_)) events |= POLLOUT;
      fds.push_back({c->fd, events, 0});
      of.push_back(c);
    }
    const absl::Duration wait = std::max(deadline - now, absl::ZeroDuration());
    timespec ts = absl::ToTimespec(wait);
    const int ready = ppoll(fds.data(), fds.size(), &ts, nullptr);
    if (ready <= 0) return false;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Conn* c = of[i];
      if (c == nullptr) {
        Accept();
        continue;
      }
      if (c->state == State::kConnecting) {
        int error = 0;
        socklen_t len = sizeof(error);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &error, &len);
        if (error == 0) {
          Opened(c);
        } else {
          Retry(c);
        }
        continue;
      }
      if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) ReadAll(c);
      if ((fds[i].revents & POLLOUT) && Writable(c)) Flush(c);
    }
    std::erase_if(conns_, [](const std::unique_ptr<Conn>& c) {
      if (!c->dead) return false;
      if (c->fd >= 0) close(c->fd);
      return true;
    });
    return true;
  }

  TcpTransport* const transport_;
  const std::string id_;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Conn>> conns_;
  absl::flat_hash_map<std::string, Conn*> out_;  // peers we connected to
  absl::flat_hash_map<std::string, Conn*> in_;   // peers that connected to us, latest first
  std::deque<Message> inbox_;
  Conn* writing_ = nullptr;  // a Send waits for it to take bytes
  std::shared_ptr<BufferPool> pool_ = std::make_shared<BufferPool>();
  std::vector<std::byte> gather_;  // a sealed segment that spans frames, gathered
  int rejected_logged_ = 0;
};

TcpTransport::TcpTransport(TcpOptions options) : options_(options) {}
TcpTransport::~TcpTransport() = default;

absl::StatusOr<std::unique_ptr<Endpoint>> TcpTransport::CreateEndpoint(std::string id) {
  if (id.empty() || id.size() > kMaxIdBytes) {
    return absl::InvalidArgumentError(absl::StrCat("endpoint id of ", id.size(), " bytes"));
  }
  return std::make_unique<TcpEndpoint>(this, std::move(id));
}

void TcpTransport::AllowPeers(const std::vector<std::string>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  restricted_ = true;
  allowed_.insert(ids.begin(), ids.end());
}

void TcpTransport::Rejected(const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  rejected_.fetch_add(1);
  last_rejection_ = why;
}

std::string TcpTransport::last_rejection() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_rejection_;
}

bool TcpTransport::Allowed(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !restricted_ || allowed_.contains(id);
}

}  // namespace syncline
