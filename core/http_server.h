// HttpServer: the smallest HTTP/1.1 server that a node's /metrics page needs. It serves GET
// requests for a fixed set of paths from one thread of its own, and answers anything else with
// 404 (an unknown path) or 405 (another method). Every response closes its connection.
//
// It is built for a page that anyone on the network may ask for while the node trains:
// - it never blocks: sockets are non-blocking and one poll() loop serves them all;
// - every connection has a deadline (`request_timeout`) by which its request must have arrived
//   and its response have left; a connection past it is closed;
// - at most `max_connections` are open at once; one more evicts the oldest that has not sent a
//   whole request, so that slow or half-open connections cannot keep a scrape out;
// - a request's head is bounded (`max_request_bytes`): a longer one gets 431 and is closed.
// The node's own threads never wait for it: a page is written from values the node updates
// with atomics (core/metrics.h).
//
// Thread-safety: thread-safe. A page's `body` runs on the server's thread.
#ifndef SYNCLINE_CORE_HTTP_SERVER_H_
#define SYNCLINE_CORE_HTTP_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/net.h"

namespace syncline {

struct HttpPage {
  std::string content_type = "text/plain; charset=utf-8";
  std::function<std::string()> body;
};

struct HttpServerOptions {
  // The IPv4 address to listen on ("127.0.0.1", "10.0.0.2", "0.0.0.0").
  std::string ip = "127.0.0.1";
  // The port; 0: the first free one in `ports`, or any free one when `ports.any()`. A port
  // given and taken is an error (Unavailable, naming it).
  int port = 0;
  PortRange ports;
  // Connections open at once (beyond it the oldest unfinished one is closed).
  int max_connections = 64;
  // By when, after it opened, a connection must have sent its request and taken the response.
  absl::Duration request_timeout = absl::Seconds(10);
  // The most bytes of a request's head (request line and headers).
  size_t max_request_bytes = 8192;
};

class HttpServer {
 public:
  // Listens and starts serving `pages` (by path, e.g. "/metrics"). Unavailable when the port is
  // taken (or no port of the range is free); InvalidArgument for an address that is not IPv4.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(HttpServerOptions options,
                                                           std::map<std::string, HttpPage> pages);
  // Stops serving and closes every connection.
  ~HttpServer();

  int port() const { return port_; }

  // What the server has done, for tests and its own metrics.
  struct Stats {
    std::atomic<uint64_t> served{0};     // 200 responses
    std::atomic<uint64_t> refused{0};    // 4xx responses
    std::atomic<uint64_t> timed_out{0};  // connections closed at their deadline
    std::atomic<uint64_t> evicted{0};    // closed to make room for a newer one
  };
  const Stats& stats() const { return stats_; }

 private:
  HttpServer(int listen_fd, int wake_fd, int port, HttpServerOptions options,
             std::map<std::string, HttpPage> pages);
  void Loop();
  struct Connection;
  // Reads what `c` sent; once its head is whole, queues the response.
  void Read(Connection& c);
  void Respond(Connection& c);

  const int listen_fd_;
  const int wake_fd_;  // an eventfd: the destructor's signal to stop
  const int port_;
  const HttpServerOptions options_;
  const std::map<std::string, HttpPage> pages_;
  Stats stats_;
  std::thread thread_;
};

// The response to the head of one request (everything up to the blank line), as HttpServer
// sends it: 200 with the page's body, 404, 405 or 400. Exposed for tests.
std::string HttpResponseFor(absl::string_view head, const std::map<std::string, HttpPage>& pages,
                            int* status);

}  // namespace syncline

#endif  // SYNCLINE_CORE_HTTP_SERVER_H_
