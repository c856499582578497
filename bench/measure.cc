#include "bench/measure.h"

#include <pthread.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <latch>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A reply that takes this long means the cluster is broken, not slow.
constexpr absl::Duration kWaitTimeout = absl::Seconds(30);
constexpr int kLatencyWarmUp = 200;
// Round trips in a row on one side before the other side's turn.
constexpr int kLatencyBlock = 16;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

Clock::time_point After(Clock::time_point t0, double seconds) {
  return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// User plus system CPU time of this process so far.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// One worker's loop (see MeasureThroughput). Waits at `start`, when given, before the clock
// starts; always drains what it issued.
absl::Status RunWindow(BenchClient& client, Op op, size_t bytes, int window, const Budget& budget,
                       std::latch* start, Throughput& result) {
  if (start != nullptr) start->arrive_and_wait();
  std::deque<uint64_t> in_flight;
  auto wait_oldest = [&]() -> absl::Status {
    absl::Status st = client.Wait(in_flight.front(), absl::Now() + kWaitTimeout);
    in_flight.pop_front();
    return st;
  };
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end = After(t0, budget.seconds);
  int64_t issued = 0;
  absl::Status status;
  while (issued < budget.max_requests && Clock::now() < end) {
    if (static_cast<int>(in_flight.size()) == window) status = wait_oldest();
    if (!status.ok()) break;
    auto id = client.Start(op, bytes);
    if (!id.ok()) {
      status = id.status();
      break;
    }
    in_flight.push_back(*id);
    ++issued;
  }
  while (!in_flight.empty()) {
    absl::Status st = wait_oldest();
    if (status.ok()) status = st;
  }
  result.requests = issued;
  result.seconds = SecondsSince(t0);
  return status;
}

// Runs `body(i)` on one thread per index, named `name` + i; returns the first error.
template <typename Body>
absl::Status OnThreads(const char* name, size_t n, Body body) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      pthread_setname_np(pthread_self(), absl::StrCat(name, i).c_str());
      statuses[i] = body(i);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : statuses) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace

double Throughput::bytes_per_s(size_t bytes) const {
  return seconds > 0 ? requests * static_cast<double>(bytes) / seconds : 0;
}
double Throughput::requests_per_s() const { return seconds > 0 ? requests / seconds : 0; }
double Throughput::cpu_us_per_request() const {
  return requests > 0 ? cpu_seconds * 1e6 / requests : 0;
}
Throughput& Throughput::operator+=(const Throughput& other) {
  requests += other.requests;
  seconds += other.seconds;
  cpu_seconds += other.cpu_seconds;
  return *this;
}

absl::StatusOr<Throughput> MeasureThroughput(const char* name,
                                             const std::vector<BenchClient*>& clients, Op op,
                                             size_t bytes, int window, bool warm_up,
                                             const Budget& budget) {
  const size_t n = clients.size();
  std::vector<Throughput> results(n);
  if (warm_up) {
    const Budget one_window{.seconds = absl::ToDoubleSeconds(kWaitTimeout), .max_requests = window};
    auto st = OnThreads(name, n, [&](size_t w) {
      return RunWindow(*clients[w], op, bytes, window, one_window, nullptr, results[w]);
    });
    if (!st.ok()) return st;
  }
  // RunWindow arrives at the latch before anything that can fail, so no thread is stranded.
  std::latch start(static_cast<std::ptrdiff_t>(n));
  const double cpu0 = ProcessCpuSeconds();
  auto st = OnThreads(name, n, [&](size_t w) {
    return RunWindow(*clients[w], op, bytes, window, budget, &start, results[w]);
  });
  if (!st.ok()) return st;
  Throughput total;
  total.cpu_seconds = ProcessCpuSeconds() - cpu0;
  for (const Throughput& r : results) {
    total.requests += r.requests;
    total.seconds = std::max(total.seconds, r.seconds);
  }
  return total;
}

absl::StatusOr<LatencyPair> MeasureLatencyPair(BenchClient& first, BenchClient& second, Op op,
                                               size_t bytes, const Budget& budget) {
  auto round_trip = [&](BenchClient& client) -> absl::Status {
    auto id = client.Start(op, bytes);
    if (!id.ok()) return id.status();
    return client.Wait(*id, absl::Now() + kWaitTimeout);
  };
  for (int i = 0; i < kLatencyWarmUp; ++i) {
    if (auto st = round_trip(first); !st.ok()) return st;
    if (auto st = round_trip(second); !st.ok()) return st;
  }
  std::vector<double> us[2];
  BenchClient* clients[2] = {&first, &second};
  const Clock::time_point end = After(Clock::now(), budget.seconds);
  do {
    for (int side = 0; side < 2; ++side) {
      for (int i = 0; i < kLatencyBlock; ++i) {
        const Clock::time_point t = Clock::now();
        if (auto st = round_trip(*clients[side]); !st.ok()) return st;
        us[side].push_back(SecondsSince(t) * 1e6);
      }
    }
  } while (static_cast<int64_t>(us[0].size()) < budget.max_requests && Clock::now() < end);
  auto summary = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return Latency{.p50_us = v[v.size() / 2],
                   .p99_us = v[std::min(v.size() - 1, v.size() * 99 / 100)],
                   .samples = v.size()};
  };
  return LatencyPair{.first = summary(us[0]), .second = summary(us[1])};
}

double MemcpyBytesPerSecond(size_t bytes, double budget_s) {
  std::vector<std::byte> src(bytes, std::byte{3});
  std::vector<std::byte> dst(bytes, std::byte{0});
  std::memcpy(dst.data(), src.data(), bytes);
  // Copies in batches of about 1 MiB so that reading the clock does not count.
  const int64_t batch = std::max<int64_t>(1, (size_t{1} << 20) / bytes);
  int64_t copies = 0;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end = After(t0, budget_s);
  while (copies < 1000000 && Clock::now() < end) {
    for (int64_t i = 0; i < batch; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copy
    }
    copies += batch;
  }
  return copies * static_cast<double>(bytes) / SecondsSince(t0);
}

}  // namespace syncline::bench
