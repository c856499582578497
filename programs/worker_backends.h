// The sync backends a worker program is assembled from: the collective modes (all-reduce,
// hybrid) and gossip are libraries of their own above worker/, and this is the one place that
// chooses among them, so that no library needs to know of the others. syncline-worker and the
// job-on-threads test harness (testing/job_on_threads.h) build their WorkerNodes from these.
//
// Thread-safety: the factories are stateless.
#ifndef SYNCLINE_PROGRAMS_WORKER_BACKENDS_H_
#define SYNCLINE_PROGRAMS_WORKER_BACKENDS_H_

#include "collective/allreduce_backend.h"
#include "collective/hybrid_backend.h"
#include "collective/planes.h"
#include "worker/worker_node.h"

namespace syncline {

// The backend factory of every serverless mode: gossip or all-reduce, as the spec says.
// Collectives run over `plane` (collective/allreduce_backend.h).
ServerlessBackendFactory MakeServerlessBackendFactory(CollectivePlane plane = {});

}  // namespace syncline

#endif  // SYNCLINE_PROGRAMS_WORKER_BACKENDS_H_
