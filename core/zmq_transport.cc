#include "core/zmq_transport.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

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

class ZmqEndpoint : public Endpoint {
 public:
  ZmqEndpoint(zmq::context_t& context, std::string id, const ZmqOptions& options)
      : id_(std::move(id)), options_(options), socket_(context, zmq::socket_type::router) {
    socket_.set(zmq::sockopt::routing_id, id_);
    socket_.set(zmq::sockopt::router_mandatory, 1);
    // A second connection under a live peer's id is refused (ZeroMQ drops it), so another
    // process cannot take over a worker's or server's name while it is alive; once the first
    // connection closes, the name is free again for a restarted peer.
    socket_.set(zmq::sockopt::router_handover, 0);
    // A peer that sends a frame larger than this is disconnected before it is buffered.
    socket_.set(zmq::sockopt::maxmsgsize, options.max_frame_bytes);
    socket_.set(zmq::sockopt::sndhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::rcvhwm, options.high_water_mark);
    socket_.set(zmq::sockopt::linger, 200);
    socket_.set(zmq::sockopt::tcp_keepalive, 1);
  }

  const std::string& id() const override { return id_; }

  absl::StatusOr<std::string> Bind(const std::string& address) override {
    try {
      socket_.bind(address);
      return socket_.get(zmq::sockopt::last_endpoint);
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(absl::StrCat("cannot bind ", address, ": ", e.what()));
    }
  }

  absl::Status Connect(const std::string& peer_id, const std::string& address) override {
    try {
      socket_.set(zmq::sockopt::connect_routing_id, peer_id);
      socket_.connect(address);
      return absl::OkStatus();
    } catch (const zmq::error_t& e) {
      return absl::UnavailableError(
          absl::StrCat("cannot connect to ", peer_id, " at ", address, ": ", e.what()));
    }
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
      for (size_t i = 0; i < frames.size(); ++i) {
        const Frame& f = frames[i];
        zmq::message_t part = ToZmq(f);
        bytes += f.size();
        const auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
        // Once the routing frame is accepted the rest of the message goes to the same pipe
        // and does not block.
        if (!socket_.send(part, flags)) {
          return absl::DeadlineExceededError(absl::StrCat("send to ", peer_id, " timed out"));
        }
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EHOSTUNREACH) {
        return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
      }
      return absl::UnavailableError(absl::StrCat("send to ", peer_id, " failed: ", e.what()));
    }
    counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    Message message;
    size_t bytes = 0;
    try {
      zmq::message_t route;
      // The timeout is set only when it changed (callers wait in slices of fixed length, so
      // it rarely does). No non-blocking try first: when idle, that costs a round trip ~1 us.
      SetTimeout(zmq::sockopt::rcvtimeo, RemainingMs(deadline), rcvtimeo_ms_);
      if (!socket_.recv(route)) return absl::DeadlineExceededError("no message before deadline");
      message.set_peer(route.to_string());
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
        // The rest of a multipart message is already queued: this does not block.
        (void)socket_.recv(part);
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

 private:
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
  absl::flat_hash_set<std::string> heard_from_;
  std::string id_;
  ZmqOptions options_;
  zmq::socket_t socket_;
  int sndtimeo_ms_ = -1;  // ZeroMQ's defaults: wait forever
  int rcvtimeo_ms_ = -1;
};

}  // namespace

ZmqTransport::ZmqTransport(ZmqOptions options) : options_(options), context_(options.io_threads) {}

ZmqTransport::~ZmqTransport() = default;

absl::StatusOr<std::unique_ptr<Endpoint>> ZmqTransport::CreateEndpoint(std::string id) {
  if (id.empty() || id.size() > 255) {
    return absl::InvalidArgumentError("endpoint id must have 1 to 255 bytes");
  }
  try {
    return std::make_unique<ZmqEndpoint>(context_, std::move(id), options_);
  } catch (const zmq::error_t& e) {
    return absl::InternalError(absl::StrCat("cannot create a ZeroMQ socket: ", e.what()));
  }
}

}  // namespace syncline
