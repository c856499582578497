// EndpointSplit: one endpoint shared by two receivers that hear disjoint sets of peers. A
// hybrid worker (--sync hybrid) talks to the parameter servers through its KVClient and to the
// other workers through a Communicator, over its one data endpoint (the node table lists one
// address per node); each would drop the other's messages as strangers. Each side's Receive
// returns only the messages of its own peers (side_of(peer) says which side a peer is on), in
// the order they arrived, and keeps those of the other side, in order, for the other side's
// Receive. Sends, binds and connects go straight to the shared endpoint.
//
// A side that never receives could have its messages pile up: each side keeps at most
// kMaxKept messages for the other; beyond, the oldest is dropped and counted (dropped()).
//
// Thread-safety: thread-compatible, like Endpoint: both sides are used from one thread.
#ifndef SYNCLINE_CORE_ENDPOINT_SPLIT_H_
#define SYNCLINE_CORE_ENDPOINT_SPLIT_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <string>

#include "core/transport.h"

namespace syncline {

class EndpointSplit {
 public:
  static constexpr size_t kMaxKept = size_t{1} << 16;

  // `base` must outlive the split; side_of(peer) is 0 or 1.
  EndpointSplit(Endpoint* base, std::function<int(const std::string& peer)> side_of);

  Endpoint& side(int i) { return sides_[i]; }
  // Messages dropped because their side kept kMaxKept already.
  uint64_t dropped() const { return dropped_; }

 private:
  class Side : public Endpoint {
   public:
    const std::string& id() const override { return split_->base_->id(); }
    absl::StatusOr<std::string> Bind(const std::string& address) override {
      return split_->base_->Bind(address);
    }
    absl::Status Connect(const std::string& peer_id, const std::string& address) override {
      return split_->base_->Connect(peer_id, address);
    }
    absl::Status Send(const std::string& peer_id, Message message, absl::Time deadline) override;
    absl::Status TrySend(const std::string& peer_id, Message* message) override;
    absl::StatusOr<Message> Receive(absl::Time deadline) override;

    EndpointSplit* split_ = nullptr;
    int index_ = 0;
    std::deque<Message> kept_;  // received for this side while the other was receiving
  };

  Endpoint* const base_;
  const std::function<int(const std::string&)> side_of_;
  Side sides_[2];
  uint64_t dropped_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_ENDPOINT_SPLIT_H_
