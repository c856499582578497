// The data a worker trains and is scored on: its partition of the training set (streamed for
// Criteo files, in memory otherwise), the test set, and the final model's evaluation on it (with
// the test features' parameters written out for comparing runs). The worker node reads its own
// partition at the start, and a leaver's when it hands its batches over.
//
// Thread-safety: the functions are stateless; a WorkerData is used by one thread at a time.
#ifndef SYNCLINE_WORKER_WORKER_DATA_H_
#define SYNCLINE_WORKER_WORKER_DATA_H_

#include <memory>

#include "absl/status/statusor.h"
#include "core/control_client.h"
#include "data/dataset.h"
#include "data/example_source.h"
#include "models/model.h"
#include "syncline/job_spec.h"
#include "worker/sync_backend.h"

namespace syncline {

// The worker's training and test data: streamed (Criteo) or in memory. Not movable: `source`
// may point into `train`.
struct WorkerData {
  WorkerData() = default;
  WorkerData(const WorkerData&) = delete;
  WorkerData& operator=(const WorkerData&) = delete;

  bool criteo = false;
  Dataset train;  // in memory (not Criteo)
  Dataset test;
  std::unique_ptr<ExampleSource> source;
  std::unique_ptr<ExampleSource> test_source;  // streamed (Criteo), parsed ahead
};

// Reads (or, for Criteo, validates and opens) partition `rank` of the training data and the
// whole test set. Errors name the file and line. A hand-over reads a leaver's partition only:
// no test set, histograms or attack.
absl::StatusOr<std::unique_ptr<WorkerData>> ReadWorkerData(const JobSpec& spec, int rank,
                                                           bool hand_over = false);

// The final model on the test set; with `write_params`, writes the test features' parameters
// to params_out.
absl::StatusOr<EvaluationReport> EvaluateModel(const JobSpec& spec, const Model& model,
                                               const ParameterLayout& layout, SyncBackend& backend,
                                               WorkerData& data, bool write_params = true);

}  // namespace syncline

#endif  // SYNCLINE_WORKER_WORKER_DATA_H_
