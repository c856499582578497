#include "bench/report.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline::bench {
namespace {

constexpr size_t kKiB = 1024;
constexpr size_t kMiB = size_t{1} << 20;

// Rows of 4 KiB and less are about requests, larger ones about bytes.
bool CountsRequests(size_t bytes) { return bytes <= 4 * kKiB; }

}  // namespace

double Row::ratio() const {
  if (kind == Kind::kLatency) return syncline_latency.p50_us / raw_latency.p50_us;
  return syncline.requests_per_s() / raw.requests_per_s();
}

std::string SizeName(size_t bytes) {
  if (bytes >= kMiB && bytes % kMiB == 0) return absl::StrCat(bytes / kMiB, "M");
  if (bytes >= kKiB && bytes % kKiB == 0) return absl::StrCat(bytes / kKiB, "K");
  return absl::StrCat(bytes, "B");
}

std::string ThroughputHeader() {
  return absl::StrFormat("%-9s %5s %3s %3s %3s %16s %16s %6s %9s %9s %9s", "op", "size", "win",
                         "srv", "wrk", "syncline", "raw zmq", "ratio", "cpu/req", "cpu/req",
                         "memcpy") +
         "\n" +
         absl::StrFormat("%-9s %5s %3s %3s %3s %16s %16s %6s %9s %9s %9s", "", "", "", "", "", "",
                         "", "", "sl us", "raw us", "MB/s");
}

std::string FormatThroughput(const Row& r) {
  std::string s = absl::StrFormat("%-9s %5s %3d %3d %3d", OpName(r.op), SizeName(r.bytes), r.window,
                                  r.servers, r.workers);
  if (CountsRequests(r.bytes)) {
    absl::StrAppendFormat(&s, " %10.1f kop/s %10.1f kop/s", r.syncline.requests_per_s() / 1e3,
                          r.raw.requests_per_s() / 1e3);
  } else {
    absl::StrAppendFormat(&s, " %10.0f  MB/s %10.0f  MB/s", r.syncline.bytes_per_s(r.bytes) / 1e6,
                          r.raw.bytes_per_s(r.bytes) / 1e6);
  }
  absl::StrAppendFormat(&s, " %6.2f %9.1f %9.1f %9.0f", r.ratio(), r.syncline.cpu_us_per_request(),
                        r.raw.cpu_us_per_request(), r.memcpy_bytes_per_s / 1e6);
  return s;
}

std::string LatencyHeader() {
  return absl::StrFormat("%-9s %5s %8s %8s %8s %8s %6s %6s", "op", "size", "sl p50", "sl p99",
                         "raw p50", "raw p99", "p50 x", "p99 x");
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
    const bool latency = r.kind == Row::Kind::kLatency;
    out << absl::StrFormat(
        "%s,%s,%d,%d,%d,%d,%.1f,%.1f,%.1f,%.1f,%.3f,%.2f,%.2f,%.1f,%.2f,%.2f,%.2f,%.2f\n",
        latency ? "latency" : "throughput", OpName(r.op), r.bytes, r.window, r.servers, r.workers,
        r.syncline.bytes_per_s(r.bytes) / 1e6, r.raw.bytes_per_s(r.bytes) / 1e6,
        r.syncline.requests_per_s(), r.raw.requests_per_s(), r.ratio(),
        r.syncline.cpu_us_per_request(), r.raw.cpu_us_per_request(), r.memcpy_bytes_per_s / 1e6,
        r.syncline_latency.p50_us, r.syncline_latency.p99_us, r.raw_latency.p50_us,
        r.raw_latency.p99_us);
  }
}

std::string JudgeTargets(const std::vector<Row>& rows) {
  constexpr double kNone = std::numeric_limits<double>::infinity();
  double big = kNone, small = kNone, p50 = -kNone;
  for (const Row& r : rows) {
    if (r.kind == Row::Kind::kLatency) {
      p50 = std::max(p50, r.ratio());
    } else if (r.bytes >= kMiB) {
      big = std::min(big, r.ratio());
    } else if (r.bytes == 4 * kKiB && r.window == 8) {
      small = std::min(small, r.ratio());
    }
  }
  auto verdict = [](bool met) { return met ? "met" : "MISSED"; };
  std::string out = "Targets (worst row of each kind):\n";
  if (big != kNone) {
    absl::StrAppendFormat(&out, "  >= 1 MiB throughput   >= 0.90 x raw: worst %.2f  %s\n", big,
                          verdict(big >= 0.9));
  }
  if (small != kNone) {
    absl::StrAppendFormat(&out, "  4 KiB, 8 in flight    >= 0.80 x raw: worst %.2f  %s\n", small,
                          verdict(small >= 0.8));
  }
  if (p50 != -kNone) {
    absl::StrAppendFormat(&out, "  round-trip p50        <= 1.30 x raw: worst %.2f  %s\n", p50,
                          verdict(p50 <= 1.3));
  }
  return out;
}

}  // namespace syncline::bench
