#include "core/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace syncline {
namespace {

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port, int socktype,
                                         socklen_t* length) {
  addrinfo hints = {};
  hints.ai_family = AF_INET;
  hints.ai_socktype = socktype;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve host '", host, "': ", gai_strerror(rc)));
  }
  sockaddr_storage out = {};
  std::memcpy(&out, found->ai_addr, found->ai_addrlen);
  *length = found->ai_addrlen;
  freeaddrinfo(found);
  return out;
}

std::string Ipv4Text(const sockaddr_in& a) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, text, sizeof(text));
  return text;
}

}  // namespace

absl::StatusOr<PortRange> ParsePortRange(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '-');
  PortRange r;
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("port range '", text,
                     "' is not FIRST-LAST (or one PORT) with 1 <= FIRST <= LAST <= 65535"));
  };
  if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &r.first)) return bad();
  r.last = r.first;
  if (parts.size() == 2 && !absl::SimpleAtoi(parts[1], &r.last)) return bad();
  if (r.first < 1 || r.last > 65535 || r.first > r.last) return bad();
  return r;
}

absl::StatusOr<HostPort> ParseTcpAddress(absl::string_view address) {
  constexpr absl::string_view kScheme = "tcp://";
  const auto bad = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not tcp://HOST:PORT"));
  };
  if (address.substr(0, kScheme.size()) != kScheme) return bad();
  absl::string_view rest = address.substr(kScheme.size());
  const size_t colon = rest.rfind(':');
  if (colon == absl::string_view::npos || colon == 0) return bad();
  HostPort out;
  absl::string_view host = rest.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  out.host = std::string(host);
  if (!absl::SimpleAtoi(rest.substr(colon + 1), &out.port) || out.port < 0 || out.port > 65535) {
    return bad();
  }
  return out;
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a = {};
  const std::string text(host);
  return inet_pton(AF_INET, text.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool IsLoopbackAddress(absl::string_view address) {
  auto hp = ParseTcpAddress(address);
  return hp.ok() && IsLoopbackHost(hp->host);
}

absl::StatusOr<std::string> InterfaceAddress(const std::string& name) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot list interfaces: ", std::strerror(errno)));
  }
  std::string found;
  std::vector<std::string> names;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    names.push_back(i->ifa_name);
    if (found.empty() && name == i->ifa_name) {
      found = Ipv4Text(*reinterpret_cast<const sockaddr_in*>(i->ifa_addr));
    }
  }
  freeifaddrs(list);
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "interface '", name,
        "' has no IPv4 address here; interfaces with one: ", absl::StrJoin(names, ", ")));
  }
  return found;
}

absl::StatusOr<std::string> LocalAddressToward(const std::string& host) {
  socklen_t length = 0;
  auto remote = Resolve(host, 9, SOCK_DGRAM, &length);
  if (!remote.ok()) return remote.status();
  Fd fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  // Connecting a datagram socket sends nothing: it only asks the kernel for the route.
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*remote), length) != 0) {
    return absl::UnavailableError(
        absl::StrCat("no route from this host to ", host, ": ", std::strerror(errno)));
  }
  sockaddr_in local = {};
  socklen_t local_length = sizeof(local);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &local_length) != 0) {
    return absl::UnavailableError(absl::StrCat("getsockname: ", std::strerror(errno)));
  }
  return Ipv4Text(local);
}

absl::StatusOr<std::string> BindInRange(Endpoint& endpoint, const std::string& ip,
                                        PortRange ports) {
  if (ports.any()) return endpoint.Bind(absl::StrCat("tcp://", ip, ":0"));
  absl::Status last;
  for (int port = ports.first; port <= ports.last; ++port) {
    auto bound = endpoint.Bind(absl::StrCat("tcp://", ip, ":", port));
    if (bound.ok()) return bound;
    last = bound.status();
  }
  return absl::UnavailableError(absl::StrCat("no free port in ", ports.first, "-", ports.last,
                                             " on ", ip, " (last: ", last.message(), ")"));
}

absl::Status ProbeTcp(absl::string_view address, absl::Duration timeout) {
  auto hp = ParseTcpAddress(address);
  if (!hp.ok()) return hp.status();
  socklen_t length = 0;
  auto remote = Resolve(hp->host, hp->port, SOCK_STREAM, &length);
  if (!remote.ok()) return remote.status();
  Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return absl::UnavailableError(absl::StrCat("socket: ", std::strerror(errno)));
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&*remote), length) == 0) {
    return absl::OkStatus();
  }
  if (errno != EINPROGRESS) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address, ": ", std::strerror(errno)));
  }
  pollfd p = {fd.get(), POLLOUT, 0};
  const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
  int rc;
  do {
    rc = poll(&p, 1, ms);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    return absl::UnavailableError(
        absl::StrCat("no answer from ", address, " within ", absl::FormatDuration(timeout)));
  }
  int error = 0;
  socklen_t error_length = sizeof(error);
  if (rc < 0 || getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &error_length) != 0) {
    error = errno;
  }
  if (error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to ", address, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace syncline
