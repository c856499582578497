// syncline-bench-link: one worker's dense push and pull throughput against a real job's
// parameter servers, for measuring links between hosts (bench/multihost-bottleneck.sh).
//
// It joins a job that syncline-launch --external-workers started, as worker --rank, through
// the public API (include/syncline/worker_session.h), declares one dense table of
// --table-bytes (every worker declares the same one), and then for --seconds pushes the whole
// table over and over in --request-bytes pieces, keeping --window requests outstanding, and
// afterwards does the same with pulls. It calls Clock after each full-table pass (use
// --sync asp, so that workers do not wait for each other). It prints one line:
//
//   link_bench rank=R servers=S workers=W push_MBps=... pull_MBps=... push_bytes=...
//     pull_bytes=... push_s=... pull_s=... push_t0=... push_t1=... pull_t0=... pull_t1=...
//     push_cpu_s=... pull_cpu_s=... push_passes=... pull_passes=...
//
// MB/s are 1e6 value bytes per second (completed requests' float bytes over the phase's wall
// time, from its first request until its last reply); t0/t1 are the phases' ends as Unix
// times (seconds), so that a script can line them up with link counters; cpu_s is this
// process's user+system CPU time in the phase. Then it leaves the job (Finish).
// The pushed values come from a fixed seed (--seed).
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/command_line.h"
#include "syncline/worker_session.h"

namespace syncline::bench {
namespace {

constexpr uint32_t kTable = 1;
constexpr size_t kMiB = size_t{1} << 20;

struct Flags {
  std::string coordinator;
  int rank = 0;
  std::string key_file;
  bool insecure = false;
  size_t table_bytes = 16 * kMiB;
  size_t request_bytes = 1 * kMiB;
  int window = 4;
  double seconds = 5;
  double request_timeout_s = 60;
  double startup_timeout_s = 120;
  uint32_t seed = 1;
};

struct PhaseResult {
  uint64_t bytes = 0;
  uint64_t requests = 0;
  int64_t passes = 0;
  double seconds = 0;
  double t0 = 0, t1 = 0;  // Unix times
  double cpu_seconds = 0;
  double mbps() const { return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e6 : 0; }
};

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}

double UnixNow() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

enum class Op { kPush, kPull };
const char* OpName(Op op) { return op == Op::kPush ? "push" : "pull"; }

// Pushes (or pulls) the table piece after piece for `f.seconds`, `window` requests
// outstanding, then drains what it issued. `values` is what is pushed; pulls land in `out`.
absl::Status RunPhase(WorkerSession& s, const Flags& f, Op op, const std::vector<float>& values,
                      std::vector<float>& out, PhaseResult& r) {
  const size_t table_floats = values.size();
  const size_t piece_floats = f.request_bytes / sizeof(float);
  const size_t pieces = (table_floats + piece_floats - 1) / piece_floats;
  // Pulls in flight at once land in distinct pieces of `out`.
  const size_t window = std::min(static_cast<size_t>(f.window), pieces);
  const absl::Duration timeout = absl::Seconds(f.request_timeout_s);
  struct InFlight {
    WorkerSession::Ticket ticket;
    size_t bytes;
  };
  std::deque<InFlight> in_flight;
  absl::Status status;
  auto wait_oldest = [&]() {
    const InFlight oldest = in_flight.front();
    in_flight.pop_front();
    absl::Status st = s.Wait(oldest.ticket, absl::Now() + timeout);
    if (st.ok()) {
      r.bytes += oldest.bytes;
      ++r.requests;
    } else if (status.ok()) {
      status = absl::Status(
          st.code(), absl::StrCat(OpName(op), " of ", oldest.bytes, " bytes: ", st.message()));
    }
  };
  const double cpu0 = CpuSeconds();
  r.t0 = UnixNow();
  const auto start = std::chrono::steady_clock::now();
  const auto end = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                               std::chrono::duration<double>(f.seconds));
  size_t piece = 0;
  while (status.ok() && std::chrono::steady_clock::now() < end) {
    if (in_flight.size() == window) {
      wait_oldest();
      if (!status.ok()) break;
    }
    const size_t begin = piece * piece_floats;
    const size_t count = std::min(piece_floats, table_floats - begin);
    absl::StatusOr<WorkerSession::Ticket> ticket =
        op == Op::kPush
            ? s.PushDense(kTable, begin, std::span<const float>(values.data() + begin, count), 1)
            : s.PullDense(kTable, begin, std::span<float>(out.data() + begin, count));
    if (!ticket.ok()) {
      status = absl::Status(ticket.status().code(), absl::StrCat("cannot send a ", OpName(op), ": ",
                                                                 ticket.status().message()));
      break;
    }
    in_flight.push_back({*ticket, count * sizeof(float)});
    if (++piece == pieces) {
      // One full-table pass issued: one iteration.
      piece = 0;
      ++r.passes;
      if (absl::Status st = s.Clock(0, std::numeric_limits<double>::quiet_NaN()); !st.ok()) {
        status = absl::Status(st.code(), absl::StrCat("clock: ", st.message()));
      }
    }
  }
  while (!in_flight.empty()) wait_oldest();
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.t1 = UnixNow();
  r.cpu_seconds = CpuSeconds() - cpu0;
  return status;
}

int Fail(const Flags& f, const char* what, const absl::Status& st) {
  std::fprintf(stderr, "syncline-bench-link: rank %d: %s: %s\n", f.rank, what,
               std::string(st.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  CLI::App app(
      "syncline-bench-link: one worker of a syncline-launch --external-workers job that pushes "
      "and then pulls one dense table for a fixed time and prints its throughput (one "
      "machine-readable line). See bench/multihost-bottleneck.sh.");
  Flags f;
  app.add_option("--coordinator", f.coordinator,
                 "the coordinator's address (syncline-launch's OUT/coordinator.address)")
      ->required();
  app.add_option("--rank", f.rank, "this worker's rank, 0..workers-1")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--key-file", f.key_file, "the job key (OUT/job.key) of a CURVE job");
  app.add_flag("--insecure", f.insecure, "plaintext off loopback (a job run with --insecure)");
  app.add_option("--table-bytes", f.table_bytes,
                 "size of the dense table (float32 values; every worker gives the same)")
      ->check(CLI::Range(size_t{4}, size_t{1} << 34))
      ->capture_default_str();
  app.add_option("--request-bytes", f.request_bytes,
                 "value bytes per push or pull request (at most the table)")
      ->check(CLI::Range(size_t{4}, size_t{1} << 34))
      ->capture_default_str();
  app.add_option("--window", f.window, "requests outstanding at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--seconds", f.seconds, "length of each phase (push, then pull)")
      ->check(CLI::Range(0.01, 3600.0))
      ->capture_default_str();
  app.add_option("--request-timeout", f.request_timeout_s,
                 "seconds to wait for one request's reply before failing")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  app.add_option("--startup-timeout", f.startup_timeout_s,
                 "seconds to wait for the whole job to join")
      ->check(CLI::Range(1.0, 3600.0))
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the pushed values (plus the rank)")
      ->capture_default_str();
  if (auto exit_code = ParseCommandLine(app, argc, argv, "syncline-bench-link")) return *exit_code;
  if (f.table_bytes % sizeof(float) != 0 || f.request_bytes % sizeof(float) != 0) {
    std::fprintf(stderr,
                 "syncline-bench-link: --table-bytes and --request-bytes must be multiples of 4 "
                 "(float32 values), got %zu and %zu\n",
                 f.table_bytes, f.request_bytes);
    return 2;
  }
  if (f.request_bytes > f.table_bytes) f.request_bytes = f.table_bytes;
  if (!f.key_file.empty() && f.insecure) {
    std::fprintf(stderr, "syncline-bench-link: give --key-file or --insecure, not both\n");
    return 2;
  }

  auto session = WorkerSession::Join({.coordinator = f.coordinator,
                                      .rank = f.rank,
                                      .startup_timeout = absl::Seconds(f.startup_timeout_s),
                                      .key_file = f.key_file,
                                      .insecure = f.insecure});
  if (!session.ok()) return Fail(f, "WorkerSession::Join", session.status());
  WorkerSession& s = **session;
  const size_t floats = f.table_bytes / sizeof(float);
  if (absl::Status st = s.DeclareTable(
          {.id = kTable, .dense = true, .num_keys = floats, .dim = 1, .learning_rate = 1e-3f},
          absl::Now() + absl::Seconds(f.request_timeout_s));
      !st.ok()) {
    return Fail(f, "cannot declare the table", st);
  }
  std::vector<float> values(floats), out(floats);
  std::mt19937 rng(f.seed + static_cast<uint32_t>(f.rank));
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (float& v : values) v = uniform(rng);

  PhaseResult push, pull;
  if (absl::Status st = RunPhase(s, f, Op::kPush, values, out, push); !st.ok()) {
    return Fail(f, "push phase", st);
  }
  if (absl::Status st = RunPhase(s, f, Op::kPull, values, out, pull); !st.ok()) {
    return Fail(f, "pull phase", st);
  }
  std::printf(
      "link_bench rank=%d servers=%d workers=%d table_bytes=%zu request_bytes=%zu window=%d "
      "push_MBps=%.2f pull_MBps=%.2f push_bytes=%" PRIu64 " pull_bytes=%" PRIu64
      " push_s=%.4f pull_s=%.4f push_t0=%.6f push_t1=%.6f pull_t0=%.6f pull_t1=%.6f "
      "push_cpu_s=%.3f pull_cpu_s=%.3f push_passes=%" PRId64 " pull_passes=%" PRId64 "\n",
      f.rank, s.spec().servers, s.spec().workers, f.table_bytes, f.request_bytes, f.window,
      push.mbps(), pull.mbps(), push.bytes, pull.bytes, push.seconds, pull.seconds, push.t0,
      push.t1, pull.t0, pull.t1, push.cpu_seconds, pull.cpu_seconds, push.passes, pull.passes);
  std::fflush(stdout);
  if (absl::Status st = s.Finish(nullptr, absl::Seconds(60)); !st.ok()) {
    return Fail(f, "cannot finish", st);
  }
  return 0;
}

}  // namespace
}  // namespace syncline::bench

int main(int argc, char** argv) { return syncline::bench::Main(argc, argv); }
