// The synthetic data a job without --train trains on: Criteo-format click data for the ctr
// model (or --format criteo), libsvm from a known sparse linear model otherwise.
#ifndef SYNCLINE_LAUNCH_GENERATE_DATA_H_
#define SYNCLINE_LAUNCH_GENERATE_DATA_H_

#include "absl/status/status.h"
#include "launch/job_config.h"
#include "syncline/job_spec.h"

namespace syncline {

// Writes OUT/data/train.EXT (and test.EXT when --gen-test-rows > 0) from `config`'s --gen-*
// flags and seed, and points spec->data at them (and spec->data.params_out at OUT/params.tsv
// when there is a test set). Says what it wrote on stderr.
absl::Status GenerateData(const JobConfig& config, JobSpec* spec);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_GENERATE_DATA_H_
