#include "core/inproc_transport.h"

#include <deque>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace syncline {

struct InprocTransport::Mailbox {
  explicit Mailbox(size_t capacity) : capacity(capacity) {}
  const size_t capacity;
  absl::Mutex mu;
  std::deque<Message> queue ABSL_GUARDED_BY(mu);
  bool closed ABSL_GUARDED_BY(mu) = false;
};

class InprocEndpoint : public Endpoint {
 public:
  InprocEndpoint(InprocTransport* transport, std::string id,
                 std::shared_ptr<InprocTransport::Mailbox> mailbox)
      : transport_(transport), id_(std::move(id)), mailbox_(std::move(mailbox)) {}

  ~InprocEndpoint() override {
    {
      absl::MutexLock lock(&mailbox_->mu);
      mailbox_->closed = true;
    }
    transport_->Remove(id_);
  }

  const std::string& id() const override { return id_; }

  absl::StatusOr<std::string> Bind(const std::string& address) override {
    return absl::StrCat("inproc://", id_);
  }

  absl::Status Connect(const std::string& peer_id, const std::string& address) override {
    if (!absl::StartsWith(address, "inproc://")) {
      return absl::InvalidArgumentError(absl::StrCat("not an inproc address: ", address));
    }
    return absl::OkStatus();
  }

  absl::Status Send(const std::string& peer_id, Message message, absl::Time deadline) override {
    std::shared_ptr<InprocTransport::Mailbox> box = transport_->Find(peer_id);
    if (box == nullptr)
      return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
    const size_t bytes = message.ByteSize();
    message.set_peer(id_);
    absl::MutexLock lock(&box->mu);
    auto has_room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(box->mu) {
      return box->closed || box->queue.size() < box->capacity;
    };
    if (!box->mu.AwaitWithDeadline(absl::Condition(&has_room), deadline)) {
      return absl::DeadlineExceededError(absl::StrCat("send to ", peer_id, " timed out"));
    }
    if (box->closed) return absl::UnavailableError(absl::StrCat("peer ", peer_id, " has closed"));
    box->queue.push_back(std::move(message));
    counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::Status TrySend(const std::string& peer_id, Message* message) override {
    std::shared_ptr<InprocTransport::Mailbox> box = transport_->Find(peer_id);
    if (box == nullptr)
      return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
    absl::MutexLock lock(&box->mu);
    if (box->closed) return absl::UnavailableError(absl::StrCat("peer ", peer_id, " has closed"));
    if (box->queue.size() >= box->capacity) {
      return absl::ResourceExhaustedError(absl::StrCat("the queue to ", peer_id, " is full"));
    }
    const size_t bytes = message->ByteSize();
    message->set_peer(id_);
    box->queue.push_back(std::move(*message));
    counters_.bytes_sent.fetch_add(bytes, std::memory_order_relaxed);
    counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    InprocTransport::Mailbox* box = mailbox_.get();
    absl::MutexLock lock(&box->mu);
    auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(box->mu) { return !box->queue.empty(); };
    if (!box->mu.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError("no message before deadline");
    }
    Message message = std::move(box->queue.front());
    box->queue.pop_front();
    counters_.bytes_received.fetch_add(message.ByteSize(), std::memory_order_relaxed);
    counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
    return message;
  }

 private:
  InprocTransport* transport_;
  std::string id_;
  std::shared_ptr<InprocTransport::Mailbox> mailbox_;
};

InprocTransport::InprocTransport(size_t mailbox_capacity) : capacity_(mailbox_capacity) {}
InprocTransport::~InprocTransport() = default;

absl::StatusOr<std::unique_ptr<Endpoint>> InprocTransport::CreateEndpoint(std::string id) {
  auto box = std::make_shared<Mailbox>(capacity_);
  {
    absl::MutexLock lock(&mu_);
    if (!mailboxes_.emplace(id, box).second) {
      return absl::AlreadyExistsError(absl::StrCat("endpoint ", id, " exists"));
    }
  }
  return std::make_unique<InprocEndpoint>(this, std::move(id), std::move(box));
}

std::shared_ptr<InprocTransport::Mailbox> InprocTransport::Find(const std::string& id) {
  absl::MutexLock lock(&mu_);
  auto it = mailboxes_.find(id);
  return it == mailboxes_.end() ? nullptr : it->second;
}

void InprocTransport::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  mailboxes_.erase(id);
}

}  // namespace syncline
