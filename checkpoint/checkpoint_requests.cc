#include "checkpoint/checkpoint_requests.h"

namespace syncline {

void CheckpointRequests::Request(int64_t clock) {
  if (!taken_.contains(clock)) requested_.insert(clock);
}

void CheckpointRequests::Taken(int64_t clock) {
  taken_.insert(clock);
  while (taken_.size() > kKeepTaken) taken_.erase(taken_.begin());
}

std::vector<int64_t> CheckpointRequests::TakeMissedBefore(int64_t clock) {
  std::vector<int64_t> missed;
  while (!requested_.empty() && *requested_.begin() < clock) {
    const int64_t c = *requested_.begin();
    requested_.erase(requested_.begin());
    if (!taken_.contains(c)) missed.push_back(c);
  }
  return missed;
}

bool CheckpointRequests::Consume(int64_t clock) {
  return requested_.erase(clock) > 0 && !taken_.contains(clock);
}

}  // namespace syncline
