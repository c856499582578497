// How syncline-bench-ps prints its figures: one Row per measured case, as aligned text lines,
// as CSV, and the targets judged on the worst row of each kind.
//
// Thread-safety: plain functions on values.
#ifndef SYNCLINE_BENCH_REPORT_H_
#define SYNCLINE_BENCH_REPORT_H_

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "bench/bench_client.h"
#include "bench/measure.h"

namespace syncline::bench {

struct Row {
  enum class Kind { kThroughput, kLatency };
  Kind kind = Kind::kThroughput;
  Op op = Op::kPush;
  size_t bytes = 0;
  int window = 1;
  int servers = 1;
  int workers = 1;
  Throughput syncline;  // throughput rows
  Throughput raw;
  double memcpy_bytes_per_s = 0;
  Latency syncline_latency;  // latency rows
  Latency raw_latency;

  // Syncline over raw: throughput, or p50 latency (where lower is better).
  double ratio() const;
};

// "4K", "16M", "512B".
std::string SizeName(size_t bytes);

std::string ThroughputHeader();
std::string FormatThroughput(const Row& r);
std::string LatencyHeader();
std::string FormatLatency(const Row& r);

void WriteCsv(const std::vector<Row>& rows, std::ostream& out);

// Lines saying, for each target that some row bears on, the worst ratio and whether it is met.
std::string JudgeTargets(const std::vector<Row>& rows);

}  // namespace syncline::bench

#endif  // SYNCLINE_BENCH_REPORT_H_
