// BenchClient: one worker's handle on a cluster under test, so that the same measuring loop
// drives Syncline (KVClient over ZmqTransport) and the raw ZeroMQ baseline.
//
// A request moves `bytes` value bytes, split over the servers the way a dense table of that
// size is split (contiguous key ranges); it completes when every server has answered.
//
// Thread-safety: thread-compatible; each worker thread owns its client.
#ifndef SYNCLINE_BENCH_BENCH_CLIENT_H_
#define SYNCLINE_BENCH_BENCH_CLIENT_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace syncline::bench {

enum class Op : uint32_t { kPush = 0, kPull = 1, kPushPull = 2 };

inline const char* OpName(Op op) {
  switch (op) {
    case Op::kPush:
      return "push";
    case Op::kPull:
      return "pull";
    case Op::kPushPull:
      return "pushpull";
  }
  return "?";
}

class BenchClient {
 public:
  virtual ~BenchClient() = default;
  // Sends one request and returns its handle.
  virtual absl::StatusOr<uint64_t> Start(Op op, size_t bytes) = 0;
  // Blocks until request `id` has completed or `deadline` passed.
  virtual absl::Status Wait(uint64_t id, absl::Time deadline) = 0;
};

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_BENCH_CLIENT_H_
