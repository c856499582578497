// CheckpointRequests: a node's bookkeeping of time-based checkpoint requests, shared by servers
// and workers. The coordinator asks for checkpoint clocks ahead of the fastest worker; a node
// takes a requested clock when it reaches it, and a request for a clock the node has already
// gone past is missed (the node says so, and the launcher never completes that checkpoint).
// A clock the node checkpointed anyway (a periodic checkpoint) is neither taken twice nor
// missed. Memory is bounded: only the latest kKeepTaken taken clocks are remembered.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_CHECKPOINT_CHECKPOINT_REQUESTS_H_
#define SYNCLINE_CHECKPOINT_CHECKPOINT_REQUESTS_H_

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

namespace syncline {

class CheckpointRequests {
 public:
  static constexpr size_t kKeepTaken = 64;

  // The coordinator asked for checkpoint `clock`.
  void Request(int64_t clock);
  // The node checkpointed `clock` (requested or periodic).
  void Taken(int64_t clock);
  bool WasTaken(int64_t clock) const { return taken_.contains(clock); }
  // Removes the requests for clocks before `clock`; returns those never taken, oldest first.
  std::vector<int64_t> TakeMissedBefore(int64_t clock);
  // Whether `clock` was requested and not taken yet; removes the request.
  bool Consume(int64_t clock);
  bool empty() const { return requested_.empty(); }

 private:
  std::set<int64_t> requested_;
  std::set<int64_t> taken_;
};

}  // namespace syncline

#endif  // SYNCLINE_CHECKPOINT_CHECKPOINT_REQUESTS_H_
