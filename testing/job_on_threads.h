// RunJobOnThreads: a whole job, the coordinator, every server and every worker, as threads of
// one process over the in-process transport. The nodes are the same classes the node binaries
// run (ServerNode, WorkerNode), so a test can compare such a job with one of real processes.
// For tests and benchmarks.
//
// Thread-safety: thread-compatible; it starts and joins its own threads.
#ifndef SYNCLINE_TESTING_JOB_ON_THREADS_H_
#define SYNCLINE_TESTING_JOB_ON_THREADS_H_

#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "core/control_client.h"
#include "job/node_join.h"
#include "syncline/job_spec.h"

namespace syncline {

struct ThreadedJobResult {
  absl::Status status;                         // the coordinator's verdict
  std::vector<NodeExit> servers, workers;      // how each node's Run() ended, by rank
  std::optional<EvaluationReport> evaluation;  // the final model on the test set, if any
};

// Runs `spec`'s job to the end (the spec's files, data and params_out, are used as they are).
ThreadedJobResult RunJobOnThreads(const JobSpec& spec);

}  // namespace syncline

#endif  // SYNCLINE_TESTING_JOB_ON_THREADS_H_
