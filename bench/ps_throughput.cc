// syncline-bench-ps: parameter-server push, pull and push-pull throughput, and small-message
// round-trip latency, each beside the raw ZeroMQ figure for the same size, window and topology
// and beside memcpy bandwidth, all measured by this program in the same run.
//
// Everything runs in one process: servers and workers are threads, each node with its own
// zmq context, talking over tcp://127.0.0.1 (see syncline_cluster.h and raw_zmq.h).
// Throughput is value bytes per request times completed requests per second, summed over the
// workers (a push-pull counts its bytes once). Every loop is bounded by a request count and
// a time budget.
#include <pthread.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <latch>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_client.h"
#include "bench/raw_zmq.h"
#include "bench/syncline_cluster.h"
#include "core/node_table.h"

namespace syncline::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr absl::Duration kWaitTimeout = absl::Seconds(30);
constexpr size_t kKiB = 1024;
constexpr size_t kMiB = 1024 * 1024;

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

struct Settings {
  std::vector<Op> ops = {Op::kPush, Op::kPull, Op::kPushPull};
  std::vector<size_t> sizes = {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB};
  std::vector<int> windows = {1, 8};
  std::vector<std::pair<int, int>> topologies = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};  // srv, wrk
  std::vector<Op> latency_ops = {Op::kPush, Op::kPull};
  std::vector<size_t> latency_sizes = {8, 64, 512, 4 * kKiB};
  // Each figure is the best of `repeat` measurements, Syncline and raw ZeroMQ taking turns,
  // so that a burst of load from elsewhere on the machine does not decide a ratio.
  int repeat = 3;
  double budget_s = 0.1;          // per throughput measurement
  double latency_budget_s = 0.15;  // per latency measurement
  int64_t max_requests = 100000;  // per worker and measurement
  int64_t max_round_trips = 20000;
  size_t piece_bytes = 0;  // KVClientOptions::max_piece_bytes; 0 = KVClient's default
};

std::string SizeName(size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, "M");
  if (bytes >= kKiB && bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, "K");
  return absl::StrCat(bytes, "B");
}

// ---- measurements ---------------------------------------------------------------------------

struct Throughput {
  int64_t requests = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // of the whole process: every node and ZeroMQ I/O thread
  double bytes_per_s(size_t bytes) const { return requests * double(bytes) / seconds; }
  double requests_per_s() const { return requests / seconds; }
  double cpu_us_per_request() const { return cpu_seconds * 1e6 / requests; }
};

// User plus system CPU time of this process so far.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(u.ru_utime) + seconds(u.ru_stime);
}

// One worker: `window` requests in flight (issue, then wait for the oldest before each new
// one) until `max_requests` were issued or `budget_s` ran out; then drains. Waits at `start`,
// when given, before the clock starts.
absl::Status RunWindow(BenchClient& client, Op op, size_t bytes, int window, int64_t max_requests,
                       double budget_s, std::latch* start, Throughput& result) {
  if (start != nullptr) start->arrive_and_wait();
  std::deque<uint64_t> in_flight;
  auto wait_oldest = [&]() -> absl::Status {
    absl::Status st = client.Wait(in_flight.front(), absl::Now() + kWaitTimeout);
    in_flight.pop_front();
    return st;
  };
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point end =
      t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(budget_s));
  int64_t issued = 0;
  absl::Status status;
  while (status.ok() && issued < max_requests && Clock::now() < end) {
    if (static_cast<int>(in_flight.size()) == window) status = wait_oldest();
    if (!status.ok()) break;
    auto id = client.Start(op, bytes);
    if (!id.ok()) return id.status();
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

// Runs `body(w)` on one thread per worker, named `name` + w (for profilers); returns the first
// error.
template <typename Body>
absl::Status OnWorkerThreads(const char* name, size_t n, Body body) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (size_t w = 0; w < n; ++w) {
    threads.emplace_back([&, w] {
      pthread_setname_np(pthread_self(), absl::StrCat(name, w).c_str());
      statuses[w] = body(w);
    });
  }
  for (auto& t : threads) t.join();
  for (const absl::Status& st : statuses) {
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

// All workers at once, after an optional untimed warm-up of one window each; requests summed,
// time of the slowest worker.
absl::StatusOr<Throughput> MeasureThroughput(const char* name,
                                             const std::vector<BenchClient*>& clients, Op op,
                                             size_t bytes, int window, bool warm_up,
                                             const Settings& s) {
  const size_t n = clients.size();
  std::vector<Throughput> results(n);
  if (warm_up) {
    auto st = OnWorkerThreads(name, n, [&](size_t w) {
      return RunWindow(*clients[w], op, bytes, window, window, 60.0, nullptr, results[w]);
    });
    if (!st.ok()) return st;
  }
  // Every worker arrives before any starts; the latch cannot strand a thread because
  // RunWindow arrives first thing.
  std::latch start(static_cast<std::ptrdiff_t>(n));
  const double cpu0 = ProcessCpuSeconds();
  auto st = OnWorkerThreads(name, n, [&](size_t w) {
    return RunWindow(*clients[w], op, bytes, window, s.max_requests, s.budget_s, &start,
                     results[w]);
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

struct Latency {
  double p50_us = 0;
  double p99_us = 0;
  size_t samples = 0;
};

absl::StatusOr<Latency> MeasureLatency(BenchClient& client, Op op, size_t bytes, bool warm_up,
                                       const Settings& s) {
  auto round_trip = [&]() -> absl::Status {
    auto id = client.Start(op, bytes);
    if (!id.ok()) return id.status();
    return client.Wait(*id, absl::Now() + kWaitTimeout);
  };
  for (int i = 0; warm_up && i < 200; ++i) {
    if (auto st = round_trip(); !st.ok()) return st;
  }
  std::vector<double> us;
  const Clock::time_point t0 = Clock::now();
  while (static_cast<int64_t>(us.size()) < s.max_round_trips &&
         SecondsSince(t0) < s.latency_budget_s) {
    const Clock::time_point t = Clock::now();
    if (auto st = round_trip(); !st.ok()) return st;
    us.push_back(SecondsSince(t) * 1e6);
  }
  std::sort(us.begin(), us.end());
  Latency l;
  l.samples = us.size();
  l.p50_us = us[us.size() / 2];
  l.p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  return l;
}

double MemcpyBytesPerSecond(size_t bytes, double budget_s) {
  std::vector<std::byte> src(bytes, std::byte{3});
  std::vector<std::byte> dst(bytes, std::byte{0});
  std::memcpy(dst.data(), src.data(), bytes);
  // Copies in batches of about 1 MiB so that reading the clock does not count.
  const int64_t batch = std::max<int64_t>(1, kMiB / bytes);
  int64_t copies = 0;
  const Clock::time_point t0 = Clock::now();
  while (copies < 1000000 && SecondsSince(t0) < budget_s) {
    for (int64_t i = 0; i < batch; ++i) {
      std::memcpy(dst.data(), src.data(), bytes);
      asm volatile("" : : "r"(dst.data()) : "memory");  // keep the copy
    }
    copies += batch;
  }
  return copies * double(bytes) / SecondsSince(t0);
}

// ---- the raw ZeroMQ cluster -------------------------------------------------------------------

struct RawCluster {
  std::vector<std::unique_ptr<RawServer>> servers;
  std::vector<std::unique_ptr<RawClient>> clients;
};

absl::StatusOr<RawCluster> MakeRawCluster(int servers, int workers, size_t max_bytes) {
  RawCluster c;
  std::vector<const RawServer*> view;
  for (int s = 0; s < servers; ++s) {
    auto server = RawServer::Create(DataEndpointId(wire::Role::SERVER, s), max_bytes);
    if (!server.ok()) return server.status();
    view.push_back(server->get());
    c.servers.push_back(std::move(*server));
  }
  for (int w = 0; w < workers; ++w) {
    auto client = RawClient::Create(w, view, max_bytes);
    if (!client.ok()) return client.status();
    c.clients.push_back(std::move(*client));
  }
  return c;
}

// ---- reporting --------------------------------------------------------------------------------

struct Row {
  std::string kind;  // "throughput" or "latency"
  Op op = Op::kPush;
  size_t bytes = 0;
  int window = 1;
  int servers = 1;
  int workers = 1;
  double syncline = 0;  // bytes/s (throughput)
  double raw = 0;
  double syncline_ops = 0;  // requests/s
  double raw_ops = 0;
  double syncline_cpu_us = 0;  // process CPU time per request
  double raw_cpu_us = 0;
  double memcpy = 0;  // bytes/s
  Latency syncline_latency;
  Latency raw_latency;
  double ratio() const {
    return kind == "latency" ? syncline_latency.p50_us / raw_latency.p50_us : syncline / raw;
  }
};

// 4 KiB and smaller rows are about requests, larger ones about bytes.
bool CountsRequests(size_t bytes) { return bytes <= 4 * kKiB; }

std::string FormatThroughput(const Row& r) {
  std::string s = absl::StrFormat("%-9s %5s %3d %3d %3d", OpName(r.op), SizeName(r.bytes),
                                  r.window, r.servers, r.workers);
  if (CountsRequests(r.bytes)) {
    absl::StrAppendFormat(&s, " %10.1f kop/s %10.1f kop/s", r.syncline_ops / 1e3, r.raw_ops / 1e3);
  } else {
    absl::StrAppendFormat(&s, " %10.0f  MB/s %10.0f  MB/s", r.syncline / 1e6, r.raw / 1e6);
  }
  absl::StrAppendFormat(&s, " %6.2f %8.1f %8.1f %9.0f", r.ratio(), r.syncline_cpu_us,
                        r.raw_cpu_us, r.memcpy / 1e6);
  return s;
}

std::string FormatLatency(const Row& r) {
  return absl::StrFormat("%-9s %5s %8.1f %8.1f %8.1f %8.1f %6.2f %6.2f", OpName(r.op),
                         SizeName(r.bytes), r.syncline_latency.p50_us, r.syncline_latency.p99_us,
                         r.raw_latency.p50_us, r.raw_latency.p99_us, r.ratio(),
                         r.syncline_latency.p99_us / r.raw_latency.p99_us);
}

void WriteCsv(const std::vector<Row>& rows, std::ostream& out) {
  out << "kind,op,bytes,window,servers,workers,syncline_MBps,raw_MBps,syncline_ops,raw_ops,"
         "ratio,syncline_cpu_us_per_req,raw_cpu_us_per_req,memcpy_MBps,syncline_p50_us,"
         "syncline_p99_us,raw_p50_us,raw_p99_us\n";
  for (const Row& r : rows) {
    out << absl::StrFormat(
        "%s,%s,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%.3f,%.2f,%.2f,%.1f,%.2f,%.2f,%.2f,%.2f\n", r.kind,
        OpName(r.op), r.bytes, r.window, r.servers, r.workers, r.syncline / 1e6, r.raw / 1e6,
        r.syncline_ops, r.raw_ops, r.ratio(), r.syncline_cpu_us, r.raw_cpu_us, r.memcpy / 1e6, r.syncline_latency.p50_us, r.syncline_latency.p99_us,
                           r.raw_latency.p50_us, r.raw_latency.p99_us);
  }
}

// The targets, judged on the worst row of each kind.
void PrintTargets(const std::vector<Row>& rows) {
  double big = 1e9, small = 1e9, p50 = 0;
  for (const Row& r : rows) {
    if (r.kind == "latency") {
      p50 = std::max(p50, r.ratio());
    } else if (r.bytes >= kMiB) {
      big = std::min(big, r.ratio());
    } else if (r.bytes == 4 * kKiB && r.window == 8) {
      small = std::min(small, r.ratio());
    }
  }
  auto verdict = [](bool met) { return met ? "met" : "MISSED"; };
  std::printf("\nTargets (worst row of each kind):\n");
  if (big < 1e9) {
    std::printf("  >= 1 MiB throughput       >= 0.90 x raw: worst %.2f  %s\n", big,
                verdict(big >= 0.9));
  }
  if (small < 1e9) {
    std::printf("  4 KiB, 8 in flight         >= 0.80 x raw: worst %.2f  %s\n", small,
                verdict(small >= 0.8));
  }
  if (p50 > 0) {
    std::printf("  round-trip p50             <= 1.30 x raw: worst %.2f  %s\n", p50,
                verdict(p50 <= 1.3));
  }
}

absl::Status Run(Settings s, std::vector<Row>& rows) {
  std::set<size_t> all_sizes(s.sizes.begin(), s.sizes.end());
  all_sizes.insert(s.latency_sizes.begin(), s.latency_sizes.end());
  const std::vector<size_t> table_sizes(all_sizes.begin(), all_sizes.end());
  const size_t max_bytes = table_sizes.back();

  if (s.topologies.empty()) s.sizes.clear();
  absl::flat_hash_map<size_t, double> memcpy_of;
  if (!s.sizes.empty()) {
    std::printf("memcpy bandwidth (same run):");
    for (size_t b : s.sizes) {
      memcpy_of[b] = MemcpyBytesPerSecond(b, std::min(0.05, s.budget_s));
      std::printf(" %s %.0f MB/s", SizeName(b).c_str(), memcpy_of[b] / 1e6);
    }
    std::printf(
        "\n\nThroughput: syncline vs raw ZeroMQ, best of %d (MB/s = 1e6 value bytes/s summed "
        "over workers; 4K rows in 1000 requests/s)\n",
        s.repeat);
    std::printf("%-9s %5s %3s %3s %3s %16s %16s %6s %8s %8s %9s\n", "op", "size", "win", "srv",
                "wrk", "syncline", "raw zmq", "ratio", "cpu/r sl", "cpu/r raw", "memcpy");
    std::fflush(stdout);
  }

  for (auto [servers, workers] : s.topologies) {
    auto cluster = SynclineCluster::Create(servers, workers, table_sizes, s.piece_bytes);
    if (!cluster.ok()) return cluster.status();
    auto raw = MakeRawCluster(servers, workers, max_bytes);
    if (!raw.ok()) return raw.status();
    std::vector<BenchClient*> syncline_clients, raw_clients;
    for (int w = 0; w < workers; ++w) {
      syncline_clients.push_back(&(*cluster)->client(w));
      raw_clients.push_back(raw->clients[w].get());
    }
    for (Op op : s.ops) {
      for (size_t bytes : s.sizes) {
        for (int window : s.windows) {
          Throughput a, b;  // the best turn of each
          for (int turn = 0; turn < s.repeat; ++turn) {
            auto ta = MeasureThroughput("sl-w", syncline_clients, op, bytes, window, turn == 0, s);
            if (!ta.ok()) return ta.status();
            auto tb = MeasureThroughput("raw-w", raw_clients, op, bytes, window, turn == 0, s);
            if (!tb.ok()) return tb.status();
            if (turn == 0 || ta->requests_per_s() > a.requests_per_s()) a = *ta;
            if (turn == 0 || tb->requests_per_s() > b.requests_per_s()) b = *tb;
          }
          Row r{.kind = "throughput", .op = op, .bytes = bytes, .window = window,
                .servers = servers, .workers = workers};
          r.syncline = a.bytes_per_s(bytes);
          r.raw = b.bytes_per_s(bytes);
          r.syncline_ops = a.requests_per_s();
          r.raw_ops = b.requests_per_s();
          r.syncline_cpu_us = a.cpu_us_per_request();
          r.raw_cpu_us = b.cpu_us_per_request();
          r.memcpy = memcpy_of[bytes];
          std::printf("%s\n", FormatThroughput(r).c_str());
          std::fflush(stdout);
          rows.push_back(r);
        }
      }
    }
  }

  if (s.latency_ops.empty() || s.latency_sizes.empty()) return absl::OkStatus();
  std::printf(
      "\nRound-trip latency, 1 server, 1 worker, 1 in flight (microseconds; the turn with the "
      "lowest p50 of %d)\n",
      s.repeat);
  std::printf("%-9s %5s %8s %8s %8s %8s %6s %6s\n", "op", "size", "sl p50", "sl p99", "raw p50",
              "raw p99", "p50 x", "p99 x");
  auto cluster = SynclineCluster::Create(1, 1, table_sizes, s.piece_bytes);
  if (!cluster.ok()) return cluster.status();
  auto raw = MakeRawCluster(1, 1, max_bytes);
  if (!raw.ok()) return raw.status();
  for (Op op : s.latency_ops) {
    for (size_t bytes : s.latency_sizes) {
      Latency a, b;  // the turn with the lowest median, for each
      for (int turn = 0; turn < s.repeat; ++turn) {
        auto la = MeasureLatency((*cluster)->client(0), op, bytes, turn == 0, s);
        if (!la.ok()) return la.status();
        auto lb = MeasureLatency(*raw->clients[0], op, bytes, turn == 0, s);
        if (!lb.ok()) return lb.status();
        if (turn == 0 || la->p50_us < a.p50_us) a = *la;
        if (turn == 0 || lb->p50_us < b.p50_us) b = *lb;
      }
      Row r{.kind = "latency", .op = op, .bytes = bytes};
      r.syncline_latency = a;
      r.raw_latency = b;
      std::printf("%s\n", FormatLatency(r).c_str());
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  return absl::OkStatus();
}

// "4K", "1M", "512" -> bytes; a request is whole floats.
absl::StatusOr<size_t> ParseSize(const std::string& text) {
  size_t unit = 1;
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) unit = kKiB;
  if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) unit = kMiB;
  if (unit != 1) digits.pop_back();
  size_t value = 0;
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "'"));
  }
  value = std::stoull(digits) * unit;
  if (value == 0 || value % sizeof(float) != 0 || value > 256 * kMiB) {
    return absl::InvalidArgumentError(
        absl::StrCat("size '", text, "' must be a multiple of 4 bytes up to 256M"));
  }
  return value;
}

absl::StatusOr<Op> ParseOp(const std::string& text) {
  for (Op op : {Op::kPush, Op::kPull, Op::kPushPull}) {
    if (text == OpName(op)) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown op '", text, "'"));
}

// "2x1" -> 2 servers, 1 worker.
absl::StatusOr<std::pair<int, int>> ParseTopology(const std::string& text) {
  int servers = 0, workers = 0;
  char x = 0, rest = 0;
  if (std::sscanf(text.c_str(), "%d%c%d%c", &servers, &x, &workers, &rest) != 3 || x != 'x' ||
      servers < 1 || servers > 16 || workers < 1 || workers > 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("topology '", text, "' must be SERVERSxWORKERS, each 1..16"));
  }
  return std::make_pair(servers, workers);
}

// Replaces `out` with the parsed `texts` unless there are none.
template <typename T, typename Parse>
absl::Status ParseList(const std::vector<std::string>& texts, Parse parse, std::vector<T>& out) {
  if (texts.empty()) return absl::OkStatus();
  std::vector<T> parsed;
  for (const std::string& t : texts) {
    auto v = parse(t);
    if (!v.ok()) return v.status();
    parsed.push_back(*v);
  }
  out = std::move(parsed);
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-ps: parameter-server throughput and latency against raw ZeroMQ and "
      "memcpy, measured in one run.");
  bool quick = false;
  std::string csv;
  std::string part = "all";
  std::vector<std::string> ops, sizes, topologies, latency_sizes;
  std::vector<int> windows;
  Settings s;
  app.add_flag("--quick", quick, "few sizes and short budgets: a smoke run of a few seconds");
  app.add_option("--csv", csv, "also write every row to this CSV file");
  app.add_option("--part", part, "what to measure: all, throughput or latency")
      ->check(CLI::IsMember({"all", "throughput", "latency"}))
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "measurements per figure (the best one is reported)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--budget", s.budget_s, "seconds per throughput measurement")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  app.add_option("--latency-budget", s.latency_budget_s, "seconds per latency measurement")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  app.add_option("--max-requests", s.max_requests,
                 "requests per worker and throughput measurement at most (fixed work for "
                 "instruction-counting profilers)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--op", ops, "throughput ops to run: push, pull, pushpull (default: all)");
  app.add_option("--size", sizes, "throughput request sizes, e.g. 4K 1M (default: 4K 64K 1M 16M)");
  app.add_option("--window", windows, "requests in flight per worker (default: 1 8)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--topology", topologies,
                 "SERVERSxWORKERS to run, e.g. 1x1 2x2 (default: 1x1 2x1 1x2 2x2)");
  std::string piece;
  app.add_option("--piece", piece,
                 "KVClient piece size for dense ranges, e.g. 256K (default: KVClient's own)");
  app.add_option("--latency-size", latency_sizes,
                 "round-trip message sizes (default: 8 64 512 4K)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "syncline-bench-ps: " << e.what() << "\nRun with --help for usage.\n";
    return 2;
  }
  if (quick) {
    s.sizes = {4 * kKiB, 1 * kMiB};
    s.topologies = {{1, 1}, {2, 2}};
    s.latency_sizes = {8, 4 * kKiB};
    s.repeat = 1;
    s.budget_s = std::min(s.budget_s, 0.03);
    s.latency_budget_s = std::min(s.latency_budget_s, 0.05);
    s.max_requests = 2000;
    s.max_round_trips = 1000;
  }
  absl::Status parsed = ParseList(ops, ParseOp, s.ops);
  if (parsed.ok()) parsed = ParseList(sizes, ParseSize, s.sizes);
  if (parsed.ok()) parsed = ParseList(topologies, ParseTopology, s.topologies);
  if (parsed.ok()) parsed = ParseList(latency_sizes, ParseSize, s.latency_sizes);
  if (parsed.ok() && !piece.empty()) {
    auto bytes = ParseSize(piece);
    if (bytes.ok()) s.piece_bytes = *bytes;
    parsed = bytes.status();
  }
  if (!parsed.ok()) {
    std::cerr << "syncline-bench-ps: " << parsed.message() << "\n";
    return 2;
  }
  if (!windows.empty()) s.windows = windows;
  if (part == "latency") s.topologies.clear();
  if (part == "throughput") s.latency_ops.clear();

  const Clock::time_point t0 = Clock::now();
  std::vector<Row> rows;
  absl::Status status = Run(s, rows);
  if (!status.ok()) {
    std::fprintf(stderr, "syncline-bench-ps: %s\n", status.ToString().c_str());
    return 1;
  }
  PrintTargets(rows);
  std::printf("(%zu rows in %.1f s)\n", rows.size(), SecondsSince(t0));
  if (!csv.empty()) {
    std::ofstream out(csv);
    WriteCsv(rows, out);
    if (!out) {
      std::fprintf(stderr, "syncline-bench-ps: cannot write %s\n", csv.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
