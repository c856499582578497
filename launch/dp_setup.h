// The launcher's part of --dp before a job starts: it counts the training examples (the
// sampling rate of DP-SGD depends on them), completes the spec's privacy (the noise for
// --dp-epsilon, the budget check, the privacy key: job/privacy_plan.h) and says what the job
// will spend.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_LAUNCH_DP_SETUP_H_
#define SYNCLINE_LAUNCH_DP_SETUP_H_

#include <string>

#include "absl/status/statusor.h"
#include "syncline/job_spec.h"

namespace syncline {

// Nothing for --dp off. Errors: the training file's (naming it and the line), or
// InvalidArgument naming the flag and the numbers (a job whose steps exceed --dp-epsilon).
// Returns the line that tells what the job spends, for the log.
absl::StatusOr<std::string> SetUpPrivacy(JobSpec& spec);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_DP_SETUP_H_
