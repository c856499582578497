// syncline-bench-ps: parameter-server push, pull and push-pull throughput, and small-message
// round-trip latency, each beside the raw ZeroMQ figure for the same size, window and topology
// and beside memcpy bandwidth, all measured by this program in the same run.
//
// Everything runs in one process: servers and workers are threads, each node with its own
// zmq context, talking over tcp://127.0.0.1 (see syncline_cluster.h and raw_zmq.h).
// Throughput is value bytes per request times completed requests per second, summed over the
// workers (a push-pull counts its bytes once). With --curve, every throughput case also runs on a
// second Syncline cluster whose transports share a JobKey (CURVE encryption and authentication,
// core/zmq_transport.h) in the same alternating turns, and a table gives CURVE over plaintext.
// See docs/PERFORMANCE.md.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_client.h"
#include "bench/measure.h"
#include "bench/raw_zmq.h"
#include "bench/report.h"
#include "bench/syncline_cluster.h"
#include "core/command_line.h"
#include "core/heap_reuse.h"
#include "core/job_key.h"
#include "job/options.h"
#include "optim/optimizer.h"

namespace syncline::bench {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = size_t{1} << 20;

struct Settings {
  std::vector<Op> ops = {Op::kPush, Op::kPull, Op::kPushPull};
  std::vector<size_t> sizes = {4 * kKiB, 64 * kKiB, 1 * kMiB, 16 * kMiB};
  std::vector<int> windows = {1, 8};
  std::vector<std::pair<int, int>> topologies = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};  // srv, wrk
  std::vector<Op> latency_ops = {Op::kPush, Op::kPull};
  std::vector<size_t> latency_sizes = {8, 64, 512, 4 * kKiB};
  // Each throughput figure sums `repeat` turns, Syncline and raw ZeroMQ alternating, so that
  // a burst of load from elsewhere on the machine falls on both sides alike. (Latency rows
  // interleave the two sides more finely; see MeasureLatencyPair.)
  int repeat = 3;
  Budget throughput{.seconds = 0.1, .max_requests = 100000};
  Budget latency{.seconds = 0.6, .max_requests = 20000};  // per row, both sides
  size_t piece_bytes = 0;  // KVClientOptions::max_piece_bytes; 0 = KVClient's default
  int update_threads = 1;  // ServerOptions::update_threads
  OptimizerKind optimizer = OptimizerKind::kSgd;
  // Also measure every throughput case on a CURVE cluster (one JobKey for all its nodes).
  bool curve = false;
  bool curve_data = false;  // the keyed cluster's data path under CURVE, not sealed
  // The heap as the node programs keep it (core/heap_reuse.h), or glibc's default.
  std::string heap = "node";
};

SynclineCluster::Options ClusterOptions(const Settings& s,
                                        std::shared_ptr<const JobKey> key = nullptr) {
  return {.max_piece_bytes = s.piece_bytes,
          .update_threads = s.update_threads,
          .optimizer = s.optimizer,
          .key = std::move(key),
          .seal_data = !s.curve_data};
}

// A throughput case measured with CURVE beside plaintext (row.syncline) and raw ZeroMQ.
struct CurveRow {
  Row row;
  Throughput curve;
  double ratio() const { return curve.requests_per_s() / row.syncline.requests_per_s(); }
};

// As FormatThroughput (bench/report.h): rows of 4 KiB and less in requests, larger in bytes.
std::string FormatRate(const Throughput& t, size_t bytes) {
  if (bytes <= 4 * kKiB) return absl::StrFormat("%10.1f kop/s", t.requests_per_s() / 1e3);
  return absl::StrFormat("%10.0f  MB/s", t.bytes_per_s(bytes) / 1e6);
}

std::string CurveHeader() {
  return absl::StrFormat("%-9s %5s %3s %3s %3s %16s %16s %6s %9s %9s %16s", "op", "size", "win",
                         "srv", "wrk", "plaintext", "keyed", "ratio", "cpu/req", "cpu/req",
                         "raw zmq") +
         "\n" +
         absl::StrFormat("%-9s %5s %3s %3s %3s %16s %16s %6s %9s %9s", "", "", "", "", "", "", "",
                         "", "plain us", "keyed us");
}

std::string FormatCurve(const CurveRow& c) {
  const Row& r = c.row;
  return absl::StrFormat("%-9s %5s %3d %3d %3d %16s %16s %6.2f %9.1f %9.1f %16s", OpName(r.op),
                         SizeName(r.bytes), r.window, r.servers, r.workers,
                         FormatRate(r.syncline, r.bytes), FormatRate(c.curve, r.bytes), c.ratio(),
                         r.syncline.cpu_us_per_request(), c.curve.cpu_us_per_request(),
                         FormatRate(r.raw, r.bytes));
}

void PrintCurve(const std::vector<CurveRow>& curve_rows, bool curve_data) {
  std::printf(
      "\nThroughput keyed (one JobKey per cluster; data path %s) vs plaintext Syncline, same "
      "turns as above (ratio = keyed / plaintext; cpu/req = process CPU time per request)\n%s\n",
      curve_data ? "under CURVE" : "sealed, AES-256-GCM or XChaCha20-Poly1305",
      CurveHeader().c_str());
  for (const CurveRow& c : curve_rows) std::printf("%s\n", FormatCurve(c).c_str());
  std::fflush(stdout);
}

absl::Status RunThroughput(const Settings& s, const std::vector<size_t>& table_sizes,
                           std::vector<Row>& rows) {
  absl::flat_hash_map<size_t, double> memcpy_of;
  std::printf("memcpy bandwidth (same run):");
  for (size_t b : s.sizes) {
    memcpy_of[b] = MemcpyBytesPerSecond(b, std::min(0.05, s.throughput.seconds));
    std::printf(" %s %.0f MB/s", SizeName(b).c_str(), memcpy_of[b] / 1e6);
  }
  std::printf(
      "\n\nThroughput, Syncline vs raw ZeroMQ, %d alternating turns of %.2f s each%s (MB/s = "
      "1e6 value bytes/s summed over workers; 4K rows in 1000 requests/s; cpu/req = process "
      "CPU time per request; %s updates, %d update thread(s) per server)\n%s\n",
      s.repeat, s.throughput.seconds, s.curve ? " (with CURVE Syncline between the two)" : "",
      OptimizerName(s.optimizer), s.update_threads, ThroughputHeader().c_str());
  std::fflush(stdout);

  // One key for every node of the CURVE clusters, as a launcher hands one to a whole job.
  std::shared_ptr<const JobKey> key;
  if (s.curve) key = std::make_shared<const JobKey>(JobKey::Generate());
  std::vector<CurveRow> curve_rows;
  for (auto [servers, workers] : s.topologies) {
    auto cluster = SynclineCluster::Create(servers, workers, table_sizes, ClusterOptions(s));
    if (!cluster.ok()) return cluster.status();
    std::unique_ptr<SynclineCluster> curve_cluster;
    if (s.curve) {
      auto created = SynclineCluster::Create(servers, workers, table_sizes, ClusterOptions(s, key));
      if (!created.ok()) return created.status();
      curve_cluster = std::move(*created);
    }
    auto raw = RawCluster::Create(servers, workers, table_sizes.back());
    if (!raw.ok()) return raw.status();
    std::vector<BenchClient*> syncline_clients, curve_clients, raw_clients;
    for (int w = 0; w < workers; ++w) {
      syncline_clients.push_back(&(*cluster)->client(w));
      if (curve_cluster != nullptr) curve_clients.push_back(&curve_cluster->client(w));
      raw_clients.push_back(raw->clients[w].get());
    }
    for (Op op : s.ops) {
      for (size_t bytes : s.sizes) {
        for (int window : s.windows) {
          Row r{.kind = Row::Kind::kThroughput,
                .op = op,
                .bytes = bytes,
                .window = window,
                .servers = servers,
                .workers = workers,
                .memcpy_bytes_per_s = memcpy_of[bytes]};
          Throughput curve;
          for (int turn = 0; turn < s.repeat; ++turn) {
            const bool warm_up = turn == 0;
            auto a = MeasureThroughput("sl-w", syncline_clients, op, bytes, window, warm_up,
                                       s.throughput);
            if (!a.ok()) return a.status();
            if (curve_cluster != nullptr) {
              auto c = MeasureThroughput("slc-w", curve_clients, op, bytes, window, warm_up,
                                         s.throughput);
              if (!c.ok()) return c.status();
              curve += *c;
            }
            auto b =
                MeasureThroughput("raw-w", raw_clients, op, bytes, window, warm_up, s.throughput);
            if (!b.ok()) return b.status();
            r.syncline += *a;
            r.raw += *b;
          }
          std::printf("%s\n", FormatThroughput(r).c_str());
          std::fflush(stdout);
          rows.push_back(r);
          if (curve_cluster != nullptr) curve_rows.push_back({.row = r, .curve = curve});
        }
      }
    }
  }
  if (s.curve) PrintCurve(curve_rows, s.curve_data);
  return absl::OkStatus();
}

absl::Status RunLatency(const Settings& s, const std::vector<size_t>& table_sizes,
                        std::vector<Row>& rows) {
  std::printf(
      "\nRound-trip latency, 1 server, 1 worker, 1 in flight, microseconds (Syncline and raw "
      "ZeroMQ alternating in blocks of round trips for %.2f s per row)\n%s\n",
      s.latency.seconds, LatencyHeader().c_str());
  auto cluster = SynclineCluster::Create(1, 1, table_sizes, ClusterOptions(s));
  if (!cluster.ok()) return cluster.status();
  auto raw = RawCluster::Create(1, 1, table_sizes.back());
  if (!raw.ok()) return raw.status();
  for (Op op : s.latency_ops) {
    for (size_t bytes : s.latency_sizes) {
      auto pair = MeasureLatencyPair((*cluster)->client(0), *raw->clients[0], op, bytes, s.latency);
      if (!pair.ok()) return pair.status();
      Row r{.kind = Row::Kind::kLatency, .op = op, .bytes = bytes};
      r.syncline_latency = pair->first;
      r.raw_latency = pair->second;
      std::printf("%s\n", FormatLatency(r).c_str());
      std::fflush(stdout);
      rows.push_back(r);
    }
  }
  return absl::OkStatus();
}

absl::Status Run(const Settings& s, std::vector<Row>& rows) {
  // One table per request size, declared on every cluster.
  std::set<size_t> all_sizes(s.sizes.begin(), s.sizes.end());
  all_sizes.insert(s.latency_sizes.begin(), s.latency_sizes.end());
  const std::vector<size_t> table_sizes(all_sizes.begin(), all_sizes.end());
  if (table_sizes.empty()) return absl::OkStatus();
  if (!s.topologies.empty() && !s.sizes.empty() && !s.ops.empty()) {
    if (auto st = RunThroughput(s, table_sizes, rows); !st.ok()) return st;
  }
  if (!s.latency_ops.empty() && !s.latency_sizes.empty()) {
    if (auto st = RunLatency(s, table_sizes, rows); !st.ok()) return st;
  }
  return absl::OkStatus();
}

// ---- flags ------------------------------------------------------------------------------------

// "4K", "1M", "512" -> bytes; a request is whole floats.
absl::StatusOr<size_t> ParseSize(const std::string& text) {
  size_t unit = 1;
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) unit = kKiB;
  if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) unit = kMiB;
  if (unit != 1) digits.pop_back();
  if (digits.empty() || digits.size() > 9 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return absl::InvalidArgumentError(absl::StrCat("bad size '", text, "'"));
  }
  const size_t value = std::stoull(digits) * unit;
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

// The command line into *settings and *csv; an exit code when the program should stop.
std::optional<int> ParseSettings(int argc, char** argv, Settings* settings, std::string* csv_out) {
  Settings& s = *settings;
  std::string& csv = *csv_out;
  CLI::App app(
      "syncline-bench-ps: parameter-server throughput and latency against raw ZeroMQ and "
      "memcpy, measured in one run.");
  bool quick = false;
  std::string part = "all", piece;
  std::vector<std::string> ops, sizes, topologies, latency_sizes;
  std::vector<int> windows;
  app.add_flag("--quick", quick, "few sizes, one short turn each: a smoke run of a few seconds");
  app.add_option("--heap", s.heap,
                 "node: malloc keeps freed memory for reuse, as the node programs do "
                 "(core/heap_reuse.h); default: glibc's own thresholds")
      ->check(CLI::IsMember({"node", "default"}))
      ->capture_default_str();
  app.add_flag("--curve", s.curve,
               "also run each throughput case on a keyed cluster (one job key: CURVE, and the "
               "sealed data path) and print keyed over plaintext (latency rows and the CSV stay "
               "plaintext)");
  app.add_flag("--curve-data", s.curve_data,
               "with --curve: the keyed cluster's data endpoints run CURVE too "
               "(ZmqOptions::seal_data false), as keyed jobs did before the sealed data path");
  app.add_option("--csv", csv, "also write every row to this CSV file");
  app.add_option("--part", part, "what to measure: all, throughput or latency")
      ->check(CLI::IsMember({"all", "throughput", "latency"}))
      ->capture_default_str();
  app.add_option("--repeat", s.repeat, "alternating turns per throughput figure (summed)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--budget", s.throughput.seconds, "seconds per throughput turn")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  app.add_option("--latency-budget", s.latency.seconds, "seconds per latency row (both sides)")
      ->check(CLI::Range(0.001, 60.0))
      ->capture_default_str();
  app.add_option("--max-requests", s.throughput.max_requests,
                 "requests per worker and throughput turn at most (fixed work, e.g. for "
                 "callgrind)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("--op", ops, "throughput ops: push, pull, pushpull (default: all)");
  app.add_option("--size", sizes, "throughput request sizes, e.g. 4K 1M (default: 4K 64K 1M 16M)");
  app.add_option("--window", windows, "requests in flight per worker (default: 1 8)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--topology", topologies,
                 "SERVERSxWORKERS, e.g. 1x1 2x2 (default: 1x1 2x1 1x2 2x2)");
  app.add_option("--latency-size", latency_sizes, "round-trip sizes (default: 8 64 512 4K)");
  app.add_option("--piece", piece, "KVClient piece size for dense ranges (default: KVClient's)");
  app.add_option("--update-threads", s.update_threads,
                 "threads per server sharing a large dense update (ServerOptions::update_threads)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  std::string optimizer = "sgd";
  app.add_option("--optimizer", optimizer, "the tables' update rule: sgd, adagrad, adam or ftrl")
      ->capture_default_str();
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-ps")) return *exit_code;
  if (auto kind = ParseOptimizer(optimizer); kind.ok()) {
    s.optimizer = *kind;
  } else {
    std::cerr << "syncline-bench-ps: --optimizer: " << kind.status().message() << "\n";
    return 2;
  }
  if (quick) {
    s.sizes = {4 * kKiB, 1 * kMiB};
    s.topologies = {{1, 1}, {2, 2}};
    s.latency_sizes = {8, 4 * kKiB};
    s.repeat = 1;
    s.throughput = Budget{.seconds = std::min(s.throughput.seconds, 0.03), .max_requests = 2000};
    s.latency = Budget{.seconds = std::min(s.latency.seconds, 0.1), .max_requests = 1000};
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
  return std::nullopt;
}

int Main(int argc, char** argv) {
  Settings s;
  std::string csv;
  if (auto exit_code = ParseSettings(argc, argv, &s, &csv)) return *exit_code;
  // Before any thread starts (mallopt).
  if (s.heap == "node" && !KeepFreedHeapForReuse()) {
    std::fprintf(stderr,
                 "syncline-bench-ps: this C library's malloc cannot be tuned: --heap default\n");
  }
  std::printf("heap: %s\n", s.heap == "node" ? "freed memory kept for reuse (as the node programs)"
                                             : "glibc's default thresholds");
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Row> rows;
  if (absl::Status st = Run(s, rows); !st.ok()) {
    std::fprintf(stderr, "syncline-bench-ps: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("\n%s(%zu rows in %.1f s)\n", JudgeTargets(rows).c_str(), rows.size(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  if (!csv.empty()) {
    std::ofstream out(csv);
    WriteCsv(rows, out);
    out.close();
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
