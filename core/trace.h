// TraceRecorder: one node's part of a job's trace (--trace on), in the Chrome trace event format
// that Perfetto (ui.perfetto.dev) and chrome://tracing open. A node records slices on tracks of
// its own (a worker's steps with their phases nested, a server's requests, its checkpoints) and
// async events for what overlaps on one track (pulls parked until slower workers catch up), in
// memory up to a bound, and writes them to a file of its own when it ends. The launcher merges
// the nodes' files into OUT/trace.json (launch/trace_merge.h), one process per node, moving each
// node's times onto the coordinator's clock by the offset the node measured over its heartbeats.
//
// A node file is JSON Lines: a first line {"node":...,"process":...,"clock_offset_us":...,
// "round_trip_us":...,"events":N,"dropped":N}, then one event a line, each beginning
// {"ts":MICROSECONDS, and never naming its pid (the merge gives each node its own).
//
// Thread-safety: thread-safe.
#ifndef SYNCLINE_CORE_TRACE_H_
#define SYNCLINE_CORE_TRACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace syncline {

class TraceRecorder {
 public:
  // `node` names the file ("w3"), `process` the process in the viewer ("w3 on gpu7").
  TraceRecorder(std::string node, std::string process, size_t max_events = 500000);

  // A track (the format's "thread") of this node, named; returns its id.
  int Track(absl::string_view name);

  // A slice [begin, end] on `track`. Slices on one track must nest (the viewer draws a slice
  // inside another only when it lies within it). `args`: a JSON object's members, without
  // braces ("\"clock\":17"), or empty.
  void Slice(int track, absl::string_view name, absl::string_view category, absl::Time begin,
             absl::Time end, absl::string_view args = {});
  // An async slice: may overlap others of its category; `id` tells them apart.
  void AsyncSlice(absl::string_view name, absl::string_view category, uint64_t id, absl::Time begin,
                  absl::Time end, absl::string_view args = {});

  size_t events() const;
  size_t dropped() const;

  // Writes the node file `path` (atomically: a temporary file, then a rename), with the offset
  // of the coordinator's clock from this node's (ControlClient::ClockOffsetMicros) and the
  // round trip it was measured over.
  absl::Status Write(const std::string& path, int64_t clock_offset_us, int64_t round_trip_us) const;

 private:
  bool Room() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string node_;
  const std::string process_;
  const size_t max_events_;
  mutable absl::Mutex mu_;
  std::vector<std::string> tracks_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  size_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// The node file's name in the trace folder: "w3.trace.jsonl".
std::string TraceFileName(absl::string_view node);

}  // namespace syncline

#endif  // SYNCLINE_CORE_TRACE_H_
