// A node's trace (--trace on, core/trace.h): made when the job spec asks for one, written into
// the job's trace folder when the node ends, with the clock offset its heartbeats measured.
//
// Thread-safety: thread-safe (as TraceRecorder).
#ifndef SYNCLINE_JOB_NODE_TRACE_H_
#define SYNCLINE_JOB_NODE_TRACE_H_

#include <memory>

#include "core/trace.h"
#include "job/node_join.h"

namespace syncline {

// Null unless job.spec.observe.tracing(). The process is named "w3 on HOST".
std::unique_ptr<TraceRecorder> MakeNodeTrace(const JoinedJob& job, wire::Role role, int rank);

// Writes `trace` (may be null: nothing to do) as DIR/<node>.trace.jsonl; a failure is logged,
// as a node's trace is never worth its exit code.
void WriteNodeTrace(const TraceRecorder* trace, const JoinedJob& job, wire::Role role, int rank);

}  // namespace syncline

#endif  // SYNCLINE_JOB_NODE_TRACE_H_
