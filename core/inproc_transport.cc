#include "core/inproc_transport.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace syncline {

// std::mutex and std::condition_variable rather than absl::Mutex: ThreadSanitizer sees the
// former through pthreads, while Debian's abseil is built without its annotations, so every
// hand-over through an absl::Mutex would read as a race (scripts/tsan.sh).
struct InprocTransport::Mailbox {
  explicit Mailbox(size_t capacity) : capacity(capacity) {}
  const size_t capacity;
  std::mutex mu;
  std::condition_variable changed;  // a message came or went, or the mailbox closed
  std::deque<Message> queue;        // guarded by mu
  bool closed = false;              // guarded by mu

  // Waits on `changed` until done() or the deadline; false at the deadline.
  template <typename Done>
  bool WaitUntil(std::unique_lock<std::mutex>& lock, absl::Time deadline, Done done) {
    if (deadline == absl::InfiniteFuture()) {
      changed.wait(lock, done);
      return true;
    }
    return changed.wait_until(lock, absl::ToChronoTime(deadline), done);
  }
};

class InprocEndpoint : public Endpoint {
 public:
  InprocEndpoint(InprocTransport* transport, std::string id,
                 std::shared_ptr<InprocTransport::Mailbox> mailbox)
      : transport_(transport), id_(std::move(id)), mailbox_(std::move(mailbox)) {}

  ~InprocEndpoint() override {
    {
      std::lock_guard<std::mutex> lock(mailbox_->mu);
      mailbox_->closed = true;
    }
    mailbox_->changed.notify_all();
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
    {
      std::unique_lock<std::mutex> lock(box->mu);
      auto has_room = [&] { return box->closed || box->queue.size() < box->capacity; };
      if (!box->WaitUntil(lock, deadline, has_room)) {
        return absl::DeadlineExceededError(absl::StrCat("send to ", peer_id, " timed out"));
      }
      if (box->closed) {
        return absl::UnavailableError(absl::StrCat("peer ", peer_id, " has closed"));
      }
      box->queue.push_back(std::move(message));
    }
    box->changed.notify_all();
    counters_.Sent(peer_id, bytes);
    return absl::OkStatus();
  }

  absl::Status TrySend(const std::string& peer_id, Message* message) override {
    std::shared_ptr<InprocTransport::Mailbox> box = transport_->Find(peer_id);
    if (box == nullptr)
      return absl::UnavailableError(absl::StrCat("peer ", peer_id, " is not connected"));
    const size_t bytes = message->ByteSize();
    {
      std::lock_guard<std::mutex> lock(box->mu);
      if (box->closed) {
        return absl::UnavailableError(absl::StrCat("peer ", peer_id, " has closed"));
      }
      if (box->queue.size() >= box->capacity) {
        return absl::ResourceExhaustedError(absl::StrCat("the queue to ", peer_id, " is full"));
      }
      message->set_peer(id_);
      box->queue.push_back(std::move(*message));
    }
    box->changed.notify_all();
    counters_.Sent(peer_id, bytes);
    return absl::OkStatus();
  }

  absl::StatusOr<Message> Receive(absl::Time deadline) override {
    InprocTransport::Mailbox* box = mailbox_.get();
    Message message;
    {
      std::unique_lock<std::mutex> lock(box->mu);
      if (!box->WaitUntil(lock, deadline, [&] { return !box->queue.empty(); })) {
        return absl::DeadlineExceededError("no message before deadline");
      }
      message = std::move(box->queue.front());
      box->queue.pop_front();
    }
    box->changed.notify_all();  // a sender may wait for room
    counters_.Received(message.peer(), message.ByteSize());
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
    std::lock_guard<std::mutex> lock(mu_);
    if (!mailboxes_.emplace(id, box).second) {
      return absl::AlreadyExistsError(absl::StrCat("endpoint ", id, " exists"));
    }
  }
  return std::make_unique<InprocEndpoint>(this, std::move(id), std::move(box));
}

std::shared_ptr<InprocTransport::Mailbox> InprocTransport::Find(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = mailboxes_.find(id);
  return it == mailboxes_.end() ? nullptr : it->second;
}

void InprocTransport::Remove(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  mailboxes_.erase(id);
}

}  // namespace syncline
