#include "core/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/log.h"

namespace syncline {

struct HttpServer::Connection {
  int fd = -1;
  absl::Time deadline;
  std::string in;
  std::string out;  // the response, once the request is whole
  size_t sent = 0;
  bool responding = false;
  // Sent whole and shut for writing: what the peer still sends is read and dropped until it
  // closes (or a second passes), so that closing never resets a response it has not read.
  bool draining = false;
};

namespace {

std::string Response(int status, absl::string_view reason, absl::string_view content_type,
                     absl::string_view body, bool head_only, absl::string_view extra = {}) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", status, " ", reason, "\r\nContent-Type: ", content_type,
                   "\r\nContent-Length: ", body.size(), "\r\n", extra, "Connection: close\r\n\r\n");
  if (!head_only) out.append(body.data(), body.size());
  return out;
}

// Binds and listens at ip:port; -1 with *error set on failure.
int Listen(const in_addr& ip, int port, std::string* error) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = absl::StrCat("socket: ", std::strerror(errno));
    return -1;
  }
  // A restarted node may take its predecessor's port while old connections linger in TIME_WAIT.
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr = ip;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(fd, 128) != 0) {
    *error = std::strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

int BoundPort(int fd) {
  sockaddr_in addr{};
  socklen_t length = sizeof(addr);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) return 0;
  return ntohs(addr.sin_port);
}

}  // namespace

std::string HttpResponseFor(absl::string_view head, const std::map<std::string, HttpPage>& pages,
                            int* status) {
  const absl::string_view line = head.substr(0, head.find_first_of("\r\n"));
  const std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3 || !absl::StartsWith(parts[2], "HTTP/1.") || parts[1].empty() ||
      parts[1][0] != '/') {
    *status = 400;
    return Response(400, "Bad Request", "text/plain", "bad request line\n", false);
  }
  const bool head_only = parts[0] == "HEAD";
  if (parts[0] != "GET" && !head_only) {
    *status = 405;
    return Response(405, "Method Not Allowed", "text/plain", "only GET and HEAD\n", false,
                    "Allow: GET, HEAD\r\n");
  }
  absl::string_view path = parts[1];
  path = path.substr(0, path.find('?'));
  const auto it = pages.find(std::string(path));
  if (it == pages.end()) {
    *status = 404;
    std::string known;
    for (const auto& [p, page] : pages) absl::StrAppend(&known, " ", p);
    return Response(404, "Not Found", "text/plain",
                    absl::StrCat("no page at ", path, "; pages:", known, "\n"), head_only);
  }
  *status = 200;
  return Response(200, "OK", it->second.content_type, it->second.body(), head_only);
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    HttpServerOptions options, std::map<std::string, HttpPage> pages) {
  in_addr ip{};
  if (inet_pton(AF_INET, options.ip.c_str(), &ip) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve metrics at '", options.ip, "': not an IPv4 address"));
  }
  int fd = -1;
  std::string error;
  if (options.port > 0) {
    fd = Listen(ip, options.port, &error);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics at ", options.ip, ":", options.port, ": ", error,
                       errno == EADDRINUSE ? " (another process has it: give another "
                                             "--metrics-port, or 0 for any free one)"
                                           : ""));
    }
  } else if (options.ports.any()) {
    fd = Listen(ip, 0, &error);
    if (fd < 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot serve metrics at ", options.ip, ": ", error));
    }
  } else {
    for (int port = options.ports.first; port <= options.ports.last && fd < 0; ++port) {
      fd = Listen(ip, port, &error);
    }
    if (fd < 0) {
      return absl::UnavailableError(absl::StrCat("cannot serve metrics: no free port in ",
                                                 options.ports.first, "-", options.ports.last,
                                                 " on ", options.ip, " (last: ", error, ")"));
    }
  }
  const int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake < 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<HttpServer>(
      new HttpServer(fd, wake, BoundPort(fd), std::move(options), std::move(pages)));
}

HttpServer::HttpServer(int listen_fd, int wake_fd, int port, HttpServerOptions options,
                       std::map<std::string, HttpPage> pages)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      port_(port),
      options_(std::move(options)),
      pages_(std::move(pages)),
      thread_([this] { Loop(); }) {}

HttpServer::~HttpServer() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
  thread_.join();
  close(listen_fd_);
  close(wake_fd_);
}

void HttpServer::Read(Connection& c) {
  char buffer[4096];
  if (c.draining) {
    while (true) {
      const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
      if (n > 0) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        c.deadline = absl::InfinitePast();
      }
      return;
    }
  }
  while (!c.responding) {
    const ssize_t n = recv(c.fd, buffer, sizeof(buffer), 0);
    if (n == 0) {  // the peer closed before its request was whole
      c.deadline = absl::InfinitePast();
      return;
    }
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c.deadline = absl::InfinitePast();
      }
      return;
    }
    c.in.append(buffer, static_cast<size_t>(n));
    size_t end = c.in.find("\r\n\r\n");
    if (end == std::string::npos) end = c.in.find("\n\n");
    if (end != std::string::npos) {
      int status = 0;
      c.out = HttpResponseFor(absl::string_view(c.in).substr(0, end), pages_, &status);
      (status == 200 ? stats_.served : stats_.refused).fetch_add(1, std::memory_order_relaxed);
      c.responding = true;
    } else if (c.in.size() > options_.max_request_bytes) {
      c.out = Response(431, "Request Header Fields Too Large", "text/plain",
                       absl::StrCat("a request's head may have at most ",
                                    options_.max_request_bytes, " bytes\n"),
                       false);
      stats_.refused.fetch_add(1, std::memory_order_relaxed);
      c.responding = true;
    }
  }
  c.in.clear();
  Respond(c);
}

void HttpServer::Respond(Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        c.deadline = absl::InfinitePast();
      }
      return;
    }
    c.sent += static_cast<size_t>(n);
  }
  // Sent whole: the connection drains until the peer closes it.
  shutdown(c.fd, SHUT_WR);
  c.draining = true;
  c.responding = false;
  c.deadline = std::min(c.deadline, absl::Now() + absl::Seconds(1));
}

void HttpServer::Loop() {
  std::list<Connection> connections;  // oldest first
  auto close_connection = [&](std::list<Connection>::iterator it) {
    close(it->fd);
    return connections.erase(it);
  };
  std::vector<pollfd> fds;
  while (true) {
    const absl::Time now = absl::Now();
    // Connections done, failed or past their deadline are closed.
    absl::Time next = absl::InfiniteFuture();
    for (auto it = connections.begin(); it != connections.end();) {
      if (it->deadline <= now) {
        const bool done = it->deadline == absl::InfinitePast() || it->draining;
        if (!done) stats_.timed_out.fetch_add(1, std::memory_order_relaxed);
        it = close_connection(it);
        continue;
      }
      next = std::min(next, it->deadline);
      ++it;
    }
    fds.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.responding ? POLLOUT : POLLIN), 0});
    }
    const int timeout_ms = next == absl::InfiniteFuture()
                               ? -1
                               : static_cast<int>(std::clamp<int64_t>(
                                     absl::ToInt64Milliseconds(next - now) + 1, 0, 60000));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) {
      if (errno == EINTR) continue;
      SYNCLINE_LOG(ERROR) << "metrics page: poll failed: " << std::strerror(errno);
      break;
    }
    if (fds[0].revents != 0) break;  // stopping
    size_t i = 2;
    for (Connection& c : connections) {
      if (i >= fds.size()) break;
      const short revents = fds[i++].revents;
      if (revents == 0) continue;
      if (c.responding) {
        Respond(c);
      } else {
        Read(c);
      }
      if ((revents & (POLLERR | POLLHUP)) != 0 && !c.responding) c.deadline = absl::InfinitePast();
    }
    if ((fds[1].revents & POLLIN) != 0) {
      while (true) {
        const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) break;
        if (static_cast<int>(connections.size()) >= options_.max_connections) {
          // The oldest connection that has not sent a whole request goes (else the oldest).
          auto victim = std::find_if(connections.begin(), connections.end(),
                                     [](const Connection& c) { return c.draining; });
          if (victim == connections.end()) {
            victim = std::find_if(connections.begin(), connections.end(),
                                  [](const Connection& c) { return !c.responding; });
          }
          if (victim == connections.end()) victim = connections.begin();
          close_connection(victim);
          stats_.evicted.fetch_add(1, std::memory_order_relaxed);
        }
        connections.push_back(Connection{.fd = fd, .deadline = now + options_.request_timeout});
      }
    }
  }
  for (Connection& c : connections) close(c.fd);
}

}  // namespace syncline
