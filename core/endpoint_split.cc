#include "core/endpoint_split.h"

#include "core/log.h"

namespace syncline {

EndpointSplit::EndpointSplit(Endpoint* base, std::function<int(const std::string& peer)> side_of)
    : base_(base), side_of_(std::move(side_of)) {
  for (int i = 0; i < 2; ++i) {
    sides_[i].split_ = this;
    sides_[i].index_ = i;
  }
}

absl::Status EndpointSplit::Side::Send(const std::string& peer_id, Message message,
                                       absl::Time deadline) {
  const size_t bytes = message.ByteSize();
  absl::Status s = split_->base_->Send(peer_id, std::move(message), deadline);
  if (s.ok()) counters_.Sent(peer_id, bytes);
  return s;
}

absl::Status EndpointSplit::Side::TrySend(const std::string& peer_id, Message* message) {
  const size_t bytes = message->ByteSize();
  absl::Status s = split_->base_->TrySend(peer_id, message);
  if (s.ok()) counters_.Sent(peer_id, bytes);
  return s;
}

absl::StatusOr<Message> EndpointSplit::Side::Receive(absl::Time deadline) {
  while (kept_.empty()) {
    absl::StatusOr<Message> m = split_->base_->Receive(deadline);
    if (!m.ok()) return m.status();
    const int side = split_->side_of_(m->peer()) == 0 ? 0 : 1;
    if (side == index_) {
      counters_.Received(m->peer(), m->ByteSize());
      return m;
    }
    std::deque<Message>& other = split_->sides_[side].kept_;
    if (other.size() >= kMaxKept) {
      if (split_->dropped_++ < 10) {
        SYNCLINE_LOG(WARNING) << split_->base_->id() << ": dropped a message from " << m->peer()
                              << ": " << kMaxKept << " wait already for a receiver";
      }
      other.pop_front();
    }
    other.push_back(*std::move(m));
  }
  Message m = std::move(kept_.front());
  kept_.pop_front();
  counters_.Received(m.peer(), m.ByteSize());
  return m;
}

}  // namespace syncline
