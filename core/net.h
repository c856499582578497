// Addresses for jobs that span hosts: which local address a node listens on and advertises,
// and whether a peer's port answers. A node's default address is the one whose route reaches
// the coordinator (the interface the kernel would send from), as Gloo and NCCL choose theirs;
// an interface name or a port range overrides it; a job whose coordinator is on loopback stays
// on loopback.
//
// Thread-safety: the functions are thread-safe.
#ifndef SYNCLINE_CORE_NET_H_
#define SYNCLINE_CORE_NET_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/transport.h"

namespace syncline {

// Ports to listen on, both inclusive; {0, 0}: any free port.
struct PortRange {
  int first = 0;
  int last = 0;
  bool any() const { return first == 0 && last == 0; }
};

// "7000-7100" or "7000". InvalidArgument naming the text otherwise.
absl::StatusOr<PortRange> ParsePortRange(absl::string_view text);

// The host and port of "tcp://HOST:PORT" ("[v6]" hosts keep no brackets). InvalidArgument for
// another form.
struct HostPort {
  std::string host;
  int port = 0;
};
absl::StatusOr<HostPort> ParseTcpAddress(absl::string_view address);

// Whether `address` ("tcp://127.0.0.1:7000", "tcp://localhost:7000") is on loopback.
bool IsLoopbackAddress(absl::string_view address);
// Whether the host part alone ("127.0.1.1", "localhost", "::1") is loopback.
bool IsLoopbackHost(absl::string_view host);

// The IPv4 address of interface `name` ("eth0"). NotFound naming the interfaces that exist.
absl::StatusOr<std::string> InterfaceAddress(const std::string& name);

// The local IPv4 address the kernel would send from to reach `host` (a name or an address):
// a UDP socket connected to it, which sends nothing. Unavailable when there is no route.
absl::StatusOr<std::string> LocalAddressToward(const std::string& host);

// Binds `endpoint` at tcp://IP:PORT for the first free PORT in `ports` (any free one when
// `ports.any()`). Returns the bound address. Unavailable naming the range when every port is
// taken.
absl::StatusOr<std::string> BindInRange(Endpoint& endpoint, const std::string& ip, PortRange ports);

// Opens (and closes) a TCP connection to "tcp://HOST:PORT" within `timeout`: the preflight
// check that a peer is reachable. Unavailable with the reason ("connection refused", "no
// answer within 5s") otherwise.
absl::Status ProbeTcp(absl::string_view address, absl::Duration timeout);

}  // namespace syncline

#endif  // SYNCLINE_CORE_NET_H_
