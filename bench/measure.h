// The measuring loops of syncline-bench-ps, shared by the Syncline and raw ZeroMQ clusters so
// that both are timed by the same code: windowed throughput over several worker threads,
// one-at-a-time round-trip latency, and memcpy bandwidth for reference.
//
// Every loop stops at a request count or a time budget, whichever comes first.
//
// Thread-safety: each call runs its own worker threads and returns after joining them; a
// BenchClient is used by one thread at a time.
#ifndef SYNCLINE_BENCH_MEASURE_H_
#define SYNCLINE_BENCH_MEASURE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "bench/bench_client.h"

namespace syncline::bench {

// How long one measurement may run.
struct Budget {
  double seconds = 0.1;
  int64_t max_requests = 100000;  // per worker (throughput) or in all (latency)
};

struct Throughput {
  int64_t requests = 0;    // completed, summed over workers
  double seconds = 0;      // of the slowest worker
  double cpu_seconds = 0;  // of the whole process: every node and ZeroMQ I/O thread
  double bytes_per_s(size_t bytes) const;
  double requests_per_s() const;
  double cpu_us_per_request() const;
  // Adds another turn: requests, time and CPU time are summed.
  Throughput& operator+=(const Throughput& other);
};

// Every client on its own thread (named `name` + index, for profilers), each keeping `window`
// requests in flight: it issues `window` requests, then waits for the oldest before each new
// one. With `warm_up`, each client first completes one untimed window.
absl::StatusOr<Throughput> MeasureThroughput(const char* name,
                                             const std::vector<BenchClient*>& clients, Op op,
                                             size_t bytes, int window, bool warm_up,
                                             const Budget& budget);

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
  size_t samples = 0;
};

struct LatencyPair {
  Latency first;
  Latency second;
};

// Round trips one at a time on the calling thread, after 200 untimed ones, alternating
// between the two clients in short blocks so that both see the same moments of the machine
// (a burst of load elsewhere lands on both sides alike). `budget` covers both.
absl::StatusOr<LatencyPair> MeasureLatencyPair(BenchClient& first, BenchClient& second, Op op,
                                               size_t bytes, const Budget& budget);

// memcpy between two buffers of `bytes`, in bytes per second.
double MemcpyBytesPerSecond(size_t bytes, double budget_s);

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_MEASURE_H_
