#include "core/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Everything the server sends on `fd` until it closes, or what came before `timeout`.
std::string ReadAll(int fd, absl::Duration timeout = absl::Seconds(20)) {
  std::string out;
  const absl::Time deadline = absl::Now() + timeout;
  char buffer[4096];
  while (absl::Now() < deadline) {
    pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

std::string Get(int port, std::string_view request) {
  const int fd = ConnectTo(port);
  if (fd < 0) return "(no connection)";
  (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string response = ReadAll(fd);
  close(fd);
  return response;
}

std::map<std::string, HttpPage> MetricsPage(std::atomic<int>* scrapes = nullptr) {
  std::map<std::string, HttpPage> pages;
  pages["/metrics"] =
      HttpPage{.content_type = "text/plain; version=0.0.4; charset=utf-8", .body = [scrapes] {
                 if (scrapes) ++*scrapes;
                 return std::string("syncline_up 1\n");
               }};
  return pages;
}

TEST(HttpServerTest, ServesThePageAndNamesWhatItRefuses) {
  auto server = HttpServer::Start({}, MetricsPage());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_GT(port, 0);
  const std::string ok = Get(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Length: 14\r\n"));
  EXPECT_TRUE(absl::EndsWith(ok, "\r\n\r\nsyncline_up 1\n")) << ok;
  // A query string is not part of the path.
  EXPECT_THAT(Get(port, "GET /metrics?x=1 HTTP/1.0\r\n\r\n"), StartsWith("HTTP/1.1 200"));
  const std::string missing = Get(port, "GET /secrets HTTP/1.1\r\n\r\n");
  EXPECT_THAT(missing, StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_THAT(missing, HasSubstr("no page at /secrets; pages: /metrics"));
  EXPECT_THAT(Get(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
              StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(Get(port, "garbage\r\n\r\n"), StartsWith("HTTP/1.1 400"));
  const std::string head = Get(port, "HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(absl::EndsWith(head, "\r\n\r\n")) << head;
  EXPECT_THAT(Get(port, std::string("GET /metrics HTTP/1.1\r\nX: ") + std::string(9000, 'a')),
              StartsWith("HTTP/1.1 431"));
  EXPECT_EQ((*server)->stats().served.load(), 3u);
  EXPECT_EQ((*server)->stats().refused.load(), 4u);
}

TEST(HttpServerTest, HalfOpenConnectionsDoNotKeepAScrapeOut) {
  HttpServerOptions options;
  options.max_connections = 16;
  options.request_timeout = absl::Seconds(60);  // only eviction can make room in this test
  std::atomic<int> scrapes{0};
  auto server = HttpServer::Start(options, MetricsPage(&scrapes));
  ASSERT_TRUE(server.ok()) << server.status();
  std::vector<int> idle;
  for (int i = 0; i < 200; ++i) {
    const int fd = ConnectTo((*server)->port());
    ASSERT_GE(fd, 0);
    // Half a request line, never finished.
    (void)!send(fd, "GET /met", 8, MSG_NOSIGNAL);
    idle.push_back(fd);
  }
  const std::string ok = Get((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n");
  EXPECT_THAT(ok, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_EQ(scrapes.load(), 1);
  EXPECT_GE((*server)->stats().evicted.load(), 200u - 16u);
  for (int fd : idle) close(fd);
}

TEST(HttpServerTest, ASlowConnectionIsClosedAtItsDeadline) {
  HttpServerOptions options;
  options.request_timeout = absl::Milliseconds(200);
  auto server = HttpServer::Start(options, MetricsPage());
  ASSERT_TRUE(server.ok()) << server.status();
  const int fd = ConnectTo((*server)->port());
  ASSERT_GE(fd, 0);
  (void)!send(fd, "GET /metrics HTTP/1.1\r\n", 23, MSG_NOSIGNAL);  // no blank line: never whole
  EXPECT_EQ(ReadAll(fd), "");  // closed by the server, nothing sent
  close(fd);
  EXPECT_EQ((*server)->stats().timed_out.load(), 1u);
  EXPECT_THAT(Get((*server)->port(), "GET /metrics HTTP/1.1\r\n\r\n"), StartsWith("HTTP/1.1 200"));
}

TEST(HttpServerTest, APortInUseIsAClearErrorAndARangeMovesOn) {
  auto first = HttpServer::Start({}, MetricsPage());
  ASSERT_TRUE(first.ok()) << first.status();
  const int taken = (*first)->port();
  HttpServerOptions same;
  same.port = taken;
  auto second = HttpServer::Start(same, MetricsPage());
  ASSERT_FALSE(second.ok());
  EXPECT_TRUE(absl::IsUnavailable(second.status()));
  EXPECT_THAT(second.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", taken)));
  EXPECT_THAT(second.status().message(), HasSubstr("--metrics-port"));
  HttpServerOptions range;
  range.ports = PortRange{taken, taken + 20};
  auto third = HttpServer::Start(range, MetricsPage());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_GT((*third)->port(), taken);
  EXPECT_LE((*third)->port(), taken + 20);
  HttpServerOptions full;
  full.ports = PortRange{taken, taken};
  auto none = HttpServer::Start(full, MetricsPage());
  ASSERT_FALSE(none.ok());
  EXPECT_THAT(none.status().message(), HasSubstr(absl::StrCat("no free port in ", taken)));
  HttpServerOptions bad;
  bad.ip = "not-an-ip";
  EXPECT_TRUE(absl::IsInvalidArgument(HttpServer::Start(bad, MetricsPage()).status()));
}

}  // namespace
}  // namespace syncline
