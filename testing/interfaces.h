// The machine's network interfaces, for tests of what a job does off loopback.
//
// Thread-safety: a function of the kernel's interface list; safe from any thread.
#ifndef SYNCLINE_TESTING_INTERFACES_H_
#define SYNCLINE_TESTING_INTERFACES_H_

#include <ifaddrs.h>
#include <netinet/in.h>

#include <optional>
#include <string>

namespace syncline::testing_util {

// The name of the first interface with an IPv4 address outside 127/8; nullopt when there is
// none (the test then skips).
inline std::optional<std::string> OffLoopbackInterface() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return std::nullopt;
  std::optional<std::string> found;
  for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const uint32_t ip = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    if ((ip >> 24) != 127) found = i->ifa_name;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace syncline::testing_util

#endif  // SYNCLINE_TESTING_INTERFACES_H_
