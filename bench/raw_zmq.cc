#include "bench/raw_zmq.h"

#include <pthread.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/node_table.h"
#include "core/sharding.h"

namespace syncline::bench {
namespace {

// Same rule as ZmqOptions::zero_copy_threshold.
constexpr size_t kZeroCopyThreshold = 4096;
// Receives wake up this often to look at the stop flag or the caller's deadline.
constexpr int kPollMs = 100;

struct RawHeader {
  uint32_t op;
  uint32_t reserved;
  uint64_t id;
  uint64_t bytes;  // value bytes this server part carries or asks for
};

void ReleaseNothing(void* /*data*/, void* /*hint*/) {}

zmq::message_t Payload(const std::byte* data, size_t size) {
  if (size < kZeroCopyThreshold) return zmq::message_t(data, size);
  return zmq::message_t(const_cast<std::byte*>(data), size, ReleaseNothing, nullptr);
}

void SetCommonOptions(zmq::socket_t& socket, const std::string& id) {
  socket.set(zmq::sockopt::routing_id, id);
  socket.set(zmq::sockopt::router_mandatory, 1);
  socket.set(zmq::sockopt::sndhwm, 100000);
  socket.set(zmq::sockopt::rcvhwm, 100000);
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::rcvtimeo, kPollMs);
  socket.set(zmq::sockopt::sndtimeo, 10000);
}

}  // namespace

RawServer::RawServer(std::string id, size_t max_reply_bytes)
    : id_(std::move(id)),
      reply_(max_reply_bytes, std::byte{1}),
      socket_(context_, zmq::socket_type::router) {
  SetCommonOptions(socket_, id_);
}

absl::StatusOr<std::unique_ptr<RawServer>> RawServer::Create(std::string id,
                                                             size_t max_reply_bytes) {
  try {
    std::unique_ptr<RawServer> server(new RawServer(std::move(id), max_reply_bytes));
    server->socket_.bind("tcp://127.0.0.1:0");
    server->address_ = server->socket_.get(zmq::sockopt::last_endpoint);
    server->thread_ = std::thread([s = server.get()] { s->Serve(); });
    return server;
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("raw server: ", e.what()));
  }
}

RawServer::~RawServer() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

void RawServer::Serve() {
  pthread_setname_np(pthread_self(), absl::StrCat("raw-", id_).c_str());  // for profilers
  try {
    while (!stop_.load(std::memory_order_relaxed)) {
      zmq::message_t route;
      if (!socket_.recv(route)) continue;  // timed out: look at the stop flag
      zmq::message_t head;
      (void)socket_.recv(head);
      RawHeader h{};
      std::memcpy(&h, head.data(), std::min(head.size(), sizeof(h)));
      while (socket_.get(zmq::sockopt::rcvmore)) {
        zmq::message_t payload;  // a push's values: received and dropped
        (void)socket_.recv(payload);
      }
      const bool replies_values = h.op != static_cast<uint32_t>(Op::kPush);
      const size_t bytes = std::min<size_t>(h.bytes, reply_.size());
      socket_.send(route, zmq::send_flags::sndmore);
      socket_.send(head, replies_values ? zmq::send_flags::sndmore : zmq::send_flags::none);
      if (replies_values) {
        zmq::message_t payload = Payload(reply_.data(), bytes);
        socket_.send(payload, zmq::send_flags::none);
      }
    }
  } catch (const zmq::error_t& e) {
    std::fprintf(stderr, "raw server %s stopped: %s\n", id_.c_str(), e.what());
  }
}

RawClient::RawClient(int rank, const std::vector<const RawServer*>& servers, size_t max_bytes)
    : values_(max_bytes, std::byte{2}), socket_(context_, zmq::socket_type::router) {
  SetCommonOptions(socket_, DataEndpointId(wire::Role::WORKER, rank));
  for (const RawServer* s : servers) {
    socket_.set(zmq::sockopt::connect_routing_id, s->id());
    socket_.connect(s->address());
    server_ids_.push_back(s->id());
  }
}

absl::StatusOr<std::unique_ptr<RawClient>> RawClient::Create(
    int rank, const std::vector<const RawServer*>& servers, size_t max_bytes) {
  try {
    return std::unique_ptr<RawClient>(new RawClient(rank, servers, max_bytes));
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("raw client: ", e.what()));
  }
}

absl::StatusOr<uint64_t> RawClient::Start(Op op, size_t bytes) {
  if (bytes > values_.size()) return absl::InvalidArgumentError("request larger than the buffer");
  const uint64_t id = next_id_++;
  const int n = static_cast<int>(server_ids_.size());
  const uint64_t floats = bytes / sizeof(float);
  int parts = 0;
  try {
    for (int s = 0; s < n; ++s) {
      // Split like a dense table of `floats` keys.
      const KeyRange r = DenseShardRange(floats, s, n);
      if (r.size() == 0) continue;
      const size_t part = r.size() * sizeof(float);
      const RawHeader h{static_cast<uint32_t>(op), 0, id, part};
      const bool sends_values = op != Op::kPull;
      zmq::message_t route(server_ids_[s].data(), server_ids_[s].size());
      zmq::message_t head(&h, sizeof(h));
      if (!socket_.send(route, zmq::send_flags::sndmore) ||
          !socket_.send(head, sends_values ? zmq::send_flags::sndmore : zmq::send_flags::none)) {
        return absl::DeadlineExceededError("raw send timed out");
      }
      if (sends_values) {
        zmq::message_t payload = Payload(values_.data() + r.begin * sizeof(float), part);
        (void)socket_.send(payload, zmq::send_flags::none);
      }
      ++parts;
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("raw send: ", e.what()));
  }
  pending_[id] = parts;
  return id;
}

absl::Status RawClient::Wait(uint64_t id, absl::Time deadline) {
  auto it = pending_.find(id);
  if (it == pending_.end()) return absl::InvalidArgumentError("unknown raw request");
  try {
    while (it->second > 0) {
      if (absl::Now() >= deadline) return absl::DeadlineExceededError("no raw reply in time");
      zmq::message_t route;
      if (!socket_.recv(route)) continue;
      zmq::message_t head;
      (void)socket_.recv(head);
      RawHeader h{};
      std::memcpy(&h, head.data(), std::min(head.size(), sizeof(h)));
      while (socket_.get(zmq::sockopt::rcvmore)) {
        zmq::message_t payload;  // pulled values: left where ZeroMQ put them
        (void)socket_.recv(payload);
      }
      auto reply = pending_.find(h.id);
      if (reply != pending_.end()) --reply->second;  // no insertion here: `it` stays valid
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("raw receive: ", e.what()));
  }
  pending_.erase(it);
  return absl::OkStatus();
}

absl::StatusOr<RawCluster> RawCluster::Create(int servers, int workers, size_t max_bytes) {
  RawCluster c;
  std::vector<const RawServer*> view;
  for (int s = 0; s < servers; ++s) {
    auto server = RawServer::Create(DataEndpointId(wire::Role::SERVER, s), max_bytes);
    if (!server.ok()) return server.status();
    view.push_back(server->get());
    c.servers.push_back(std::move(*server));
  }
  for (int w = 0; w < workers; ++w) {
    auto client = RawClient::Create(w, view, max_bytes);
    if (!client.ok()) return client.status();
    c.clients.push_back(std::move(*client));
  }
  return c;
}

}  // namespace syncline::bench
