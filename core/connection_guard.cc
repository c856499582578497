#include "core/connection_guard.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/descriptor_limit.h"
#include "core/log.h"

namespace syncline {
namespace {

// The descriptor limit an accept is held against.
int LimitFor(const ConnectionLimits& limits) {
  return limits.descriptor_limit > 0 ? limits.descriptor_limit : DescriptorLimit();
}

// The port of a local address such as tcp://10.0.0.1:7000 (0 when there is none).
int PortOf(std::string_view address) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string_view::npos) return 0;
  const std::string_view digits = address.substr(colon + 1);
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()), &port)) {
    return 0;
  }
  return port;
}

int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return 0;
}

std::string HostOf(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* ip =
      a.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in&>(a).sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
  if (inet_ntop(a.ss_family, ip, text, sizeof(text)) == nullptr) return "?";
  return text;
}

enum Reason { kDescriptors = 0, kRate = 1, kPending = 2, kReasons = 3 };

// The most addresses blocked at once: a classic BPF jump reaches 255 instructions ahead.
constexpr size_t kMaxBlocked = 250;

// A socket filter for a TCP listener that drops the SYNs (SYN without ACK) of the given IPv4
// addresses (host order) and passes every other packet. A TCP socket's filter sees the
// packet from the TCP header on; SKF_NET_OFF reaches back to the IP header.
std::vector<sock_filter> SynFilter(const std::vector<uint32_t>& blocked) {
  const auto n = static_cast<uint8_t>(blocked.size());
  std::vector<sock_filter> code = {
      BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 13),  // the TCP flags
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0x12),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0x02, 0, static_cast<uint8_t>(n + 1)),    // a SYN?
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, static_cast<uint32_t>(SKF_NET_OFF + 12)),  // source
  };
  for (uint8_t i = 0; i < n; ++i) {
    code.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, blocked[i], static_cast<uint8_t>(n - i), 0));
  }
  code.push_back(BPF_STMT(BPF_RET | BPF_K, 0xffffffff));  // pass
  code.push_back(BPF_STMT(BPF_RET | BPF_K, 0));           // drop
  return code;
}

}  // namespace

absl::StatusOr<int> OpenListener(const std::string& host, int port) {
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  if (port < 0 || port > 65535 || inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(host, ":", port, " is not an IPv4 address"));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot open a socket: ", std::strerror(errno)));
  }
  const int one = 1;
  // ZeroMQ's own listeners reuse the address, and its default backlog is 100.
  if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<const sockaddr*>(&a), sizeof(a)) != 0 || listen(fd, 100) != 0) {
    const int error = errno;
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("cannot bind tcp://", host, ":", port, ": ", std::strerror(error)));
  }
  return fd;
}

class ConnectionGuard::State {
 public:
  State(zmq::socket_t events, std::string name, ConnectionLimits limits,
        std::shared_ptr<const std::atomic<int>> expected_peers, int listener)
      : events(std::move(events)),
        name_(std::move(name)),
        limits_(limits),
        expected_peers_(std::move(expected_peers)),
        listener_(listener) {}

  zmq::socket_t events;  // the monitor's events, read by the guard's thread only

  void OnAccepted(int fd, std::string_view listener, ConnectionGuardStats& stats) {
    stats.accepted.fetch_add(1, std::memory_order_relaxed);
    sockaddr_storage local = {}, peer = {};
    socklen_t local_size = sizeof(local), peer_size = sizeof(peer);
    // The descriptor must still be a connection to this listener's port: ZeroMQ may have
    // closed it since, and the number may belong to something else now.
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size) != 0 ||
        (peer.ss_family != AF_INET && peer.ss_family != AF_INET6) ||
        PortOf(local) != PortOf(listener)) {
      return;
    }
    Forget(fd);
    const absl::Time now = absl::Now();
    Expire(now);
    const std::string host = HostOf(peer);

    const int limit = LimitFor(limits_);
    const int reserve = std::min(limits_.descriptor_reserve, limit / 4);
    if (reserve > 0 && fd >= limit - reserve) {
      stats.aborted_descriptors.fetch_add(1, std::memory_order_relaxed);
      Abort(fd, host, kDescriptors,
            absl::StrFormat("its descriptor %d is inside the reserve of the last %d below the "
                            "limit of %d (RLIMIT_NOFILE, ulimit -n), kept for checkpoints and "
                            "embedding stores (ConnectionLimits::descriptor_reserve)",
                            fd, reserve, limit));
      return;
    }
    const int peers = expected_peers_ != nullptr ? expected_peers_->load() : 0;
    const int per_address = std::max(limits_.max_pending_per_address, peers > 0 ? peers + 16 : 0);
    const int total = std::max(limits_.max_pending, 2 * per_address);
    if (addresses_.size() > kMaxAddresses) SweepAddresses(now, per_address);
    auto [it, fresh] = addresses_.try_emplace(host);
    Address& a = it->second;
    if (fresh) {
      a.tokens = per_address;
    } else {
      a.tokens = std::min<double>(per_address, a.tokens + absl::ToDoubleSeconds(now - a.refilled) *
                                                              limits_.accepts_per_second);
    }
    a.refilled = now;
    if (a.tokens < 1) {
      stats.aborted_rate.fetch_add(1, std::memory_order_relaxed);
      const bool blocks = Block(peer, now, stats);
      Abort(fd, host, kRate,
            absl::StrFormat("it opens connections faster than %g a second after a burst of %d "
                            "(ConnectionLimits::accepts_per_second)%s",
                            limits_.accepts_per_second, per_address,
                            blocks ? absl::StrFormat("; its new connections are dropped for %s",
                                                     absl::FormatDuration(limits_.block_time))
                                   : std::string()));
      return;
    }
    if (a.pending >= per_address || pending_ >= total) {
      stats.aborted_pending.fetch_add(1, std::memory_order_relaxed);
      Abort(fd, host, kPending,
            a.pending >= per_address
                ? absl::StrFormat("%d connections from it are still in their handshake, the "
                                  "limit per address (ConnectionLimits::max_pending_per_address)",
                                  a.pending)
                : absl::StrFormat("%d connections are still in their handshake, the limit "
                                  "(ConnectionLimits::max_pending)",
                                  pending_));
      return;
    }
    a.tokens -= 1;
    ++a.pending;
    ++pending_;
    young_.emplace_back(now, fd);
    connections_[fd] = Connection{host, now};
  }

  void OnDisconnected(int fd) {
    Forget(fd);
    Expire(absl::Now());
  }

  // Lifts the blocks whose time is up.
  void Unblock(absl::Time now) {
    if (absl::erase_if(blocked_, [now](const auto& b) { return b.second <= now; }) > 0) {
      ApplyFilter();
    }
  }

 private:
  struct Connection {
    std::string host;
    absl::Time accepted;
  };
  struct Address {
    double tokens = 0;
    absl::Time refilled;
    int pending = 0;  // connections inside their handshake
    bool logged[kReasons] = {};
  };
  static constexpr size_t kMaxAddresses = 8192;

  // A connection that ended (or whose descriptor is being reused) leaves the counts.
  void Forget(int fd) {
    auto it = connections_.find(fd);
    if (it == connections_.end()) return;
    auto a = addresses_.find(it->second.host);
    if (a != addresses_.end()) --a->second.pending;
    --pending_;
    connections_.erase(it);
  }

  // Connections older than the handshake timeout have finished their handshake (ZeroMQ closed
  // the others): they leave the counts.
  void Expire(absl::Time now) {
    while (!young_.empty() && now - young_.front().first >= limits_.handshake_timeout) {
      const auto [accepted, fd] = young_.front();
      young_.pop_front();
      auto it = connections_.find(fd);
      if (it != connections_.end() && it->second.accepted == accepted) Forget(fd);
    }
  }

  // Addresses with nothing pending and a full bucket carry no state worth keeping.
  void SweepAddresses(absl::Time now, int burst) {
    const absl::Duration refill = absl::Seconds(burst / std::max(limits_.accepts_per_second, 1e-3));
    absl::erase_if(addresses_, [&](const auto& entry) {
      return entry.second.pending == 0 && now - entry.second.refilled >= refill;
    });
  }

  // Blocks `peer`'s new connections at the listening socket for block_time; whether it is
  // blocked (an IPv4 address, a listener of the guard's own, room in the filter).
  bool Block(const sockaddr_storage& peer, absl::Time now, ConnectionGuardStats& stats) {
    if (listener_ < 0 || peer.ss_family != AF_INET || limits_.block_time <= absl::ZeroDuration()) {
      return false;
    }
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in&>(peer).sin_addr.s_addr);
    auto it = blocked_.find(ip);
    if (it != blocked_.end()) {
      it->second = now + limits_.block_time;
      return true;
    }
    if (blocked_.size() >= kMaxBlocked) return false;
    blocked_.emplace(ip, now + limits_.block_time);
    stats.blocked.fetch_add(1, std::memory_order_relaxed);
    return ApplyFilter();
  }

  // Puts the blocked addresses into the listener's socket filter (none: no filter).
  bool ApplyFilter() {
    if (blocked_.empty()) {
      // The kernel takes no option shorter than an int, even one that reads no value.
      const int none = 0;
      (void)setsockopt(listener_, SOL_SOCKET, SO_DETACH_FILTER, &none, sizeof(none));
      return true;
    }
    std::vector<uint32_t> ips;
    for (const auto& [ip, until] : blocked_) ips.push_back(ip);
    std::vector<sock_filter> code = SynFilter(ips);
    sock_fprog program = {static_cast<unsigned short>(code.size()), code.data()};
    if (setsockopt(listener_, SOL_SOCKET, SO_ATTACH_FILTER, &program, sizeof(program)) != 0) {
      SYNCLINE_LOG(WARNING) << name_
                            << ": cannot filter the listening socket: " << std::strerror(errno);
      return false;
    }
    return true;
  }

  void Abort(int fd, const std::string& host, Reason reason, const std::string& why) {
    sockaddr unspec = {};
    unspec.sa_family = AF_UNSPEC;
    (void)connect(fd, &unspec, sizeof(unspec));
    ++aborted_;
    bool& logged = addresses_[host].logged[reason];
    // The first of each kind per address, then one line per thousand.
    if (!logged || aborted_ % 1000 == 0) {
      logged = true;
      SYNCLINE_LOG(WARNING) << name_ << ": reset a connection from " << host << ": " << why << " ("
                            << aborted_ << " reset so far)";
    }
  }

  const std::string name_;
  const ConnectionLimits limits_;
  const std::shared_ptr<const std::atomic<int>> expected_peers_;
  absl::flat_hash_map<int, Connection> connections_;     // inside their handshake, by descriptor
  std::deque<std::pair<absl::Time, int>> young_;         // accept order
  absl::flat_hash_map<std::string, Address> addresses_;  // bounded by kMaxAddresses
  const int listener_;                                   // -1: no blocks
  absl::flat_hash_map<uint32_t, absl::Time> blocked_;    // IPv4 (host order) -> until
  int pending_ = 0;
  uint64_t aborted_ = 0;
};

absl::StatusOr<std::unique_ptr<ConnectionGuard>> ConnectionGuard::Start(
    zmq::context_t& context, zmq::socket_t& socket, std::string name, ConnectionLimits limits,
    std::shared_ptr<const std::atomic<int>> expected_peers, ConnectionGuardStats* stats,
    int listener) {
  // The socket's handle makes the address unique among live sockets of the context.
  const std::string address = absl::StrFormat("inproc://syncline-guard-%p", socket.handle());
  try {
    socket.set(zmq::sockopt::handshake_ivl,
               static_cast<int>(
                   std::max<int64_t>(1, absl::ToInt64Milliseconds(limits.handshake_timeout))));
    if (zmq_socket_monitor(socket.handle(), address.c_str(),
                           ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
      return absl::InternalError(
          absl::StrCat("cannot watch the connections of ", name, ": ", zmq_strerror(zmq_errno())));
    }
    zmq::socket_t events(context, zmq::socket_type::pair);
    // ZeroMQ's monitor blocks its I/O thread when the events' queue is full: it has none.
    events.set(zmq::sockopt::rcvhwm, 0);
    events.set(zmq::sockopt::linger, 0);
    events.connect(address);
    auto state = std::make_unique<State>(std::move(events), std::move(name), limits,
                                         std::move(expected_peers), listener);
    return std::unique_ptr<ConnectionGuard>(
        new ConnectionGuard(socket.handle(), std::move(state), stats));
  } catch (const zmq::error_t& e) {
    zmq_socket_monitor(socket.handle(), nullptr, 0);
    return absl::InternalError(
        absl::StrCat("cannot watch the connections of ", name, ": ", e.what()));
  }
}

ConnectionGuard::ConnectionGuard(void* socket, std::unique_ptr<State> state,
                                 ConnectionGuardStats* stats)
    : socket_(socket), state_(std::move(state)), stats_(stats) {
  thread_ = std::thread([this] { Loop(); });
}

ConnectionGuard::~ConnectionGuard() {
  zmq_socket_monitor(socket_, nullptr, 0);
  stop_.store(true);
  thread_.join();
}

void ConnectionGuard::Loop() {
  zmq::socket_t& events = state_->events;
  while (!stop_.load()) {
    zmq::pollitem_t item = {events.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, std::chrono::milliseconds(100));
    } catch (const zmq::error_t&) {
      continue;  // EINTR
    }
    state_->Unblock(absl::Now());
    while (!stop_.load()) {
      zmq::message_t head, address;
      try {
        if (!events.recv(head, zmq::recv_flags::dontwait)) break;
        if (!head.more() || !events.recv(address, zmq::recv_flags::dontwait)) continue;
      } catch (const zmq::error_t&) {
        break;
      }
      if (head.size() < 6) continue;
      uint16_t event = 0;
      uint32_t value = 0;
      std::memcpy(&event, head.data(), sizeof(event));
      std::memcpy(&value, static_cast<const char*>(head.data()) + 2, sizeof(value));
      if (event == ZMQ_EVENT_ACCEPTED) {
        state_->OnAccepted(static_cast<int>(value), address.to_string_view(), *stats_);
      } else if (event == ZMQ_EVENT_DISCONNECTED) {
        state_->OnDisconnected(static_cast<int>(value));
      }
    }
  }
}

}  // namespace syncline
