// MergeTraces: the job's trace, OUT/trace.json, from its nodes' files (core/trace.h) in
// OUT/trace/: one process per node (named "w3 on HOST", servers first, then workers by rank),
// each node's times moved onto the coordinator's clock by the offset the node measured over its
// heartbeats, in the Chrome trace event format that ui.perfetto.dev and chrome://tracing open.
//
// Node files are untrusted bytes (a shared folder): a line that is not an event of the
// expected shape is skipped and counted, never copied.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_LAUNCH_TRACE_MERGE_H_
#define SYNCLINE_LAUNCH_TRACE_MERGE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace syncline {

struct TraceMergeResult {
  int nodes = 0;              // node files merged
  uint64_t events = 0;        // events written (metadata included)
  uint64_t dropped = 0;       // events the nodes dropped past their bound
  uint64_t malformed = 0;     // lines skipped
  int64_t max_offset_us = 0;  // the largest clock offset applied (its magnitude)
  uint64_t bytes = 0;         // of trace.json
};

// Merges every *.trace.jsonl in `dir` into `out` (written whole, then renamed). NotFound when
// `dir` holds no node file.
absl::StatusOr<TraceMergeResult> MergeTraces(const std::string& dir, const std::string& out);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_TRACE_MERGE_H_
