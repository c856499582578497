// A run folder (--out) used again: the results an earlier run wrote there must not sit beside
// this run's (a logreg run's params.tsv beside a ctr run's summary). A fresh run moves them to
// OUT/previous-run/ first, replacing what an even earlier run left there, so that the folder
// shows this run's results only and the last run's are still at hand. Checkpoints have their
// own rule (launch/resume.h); a resumed run continues its files and moves nothing.
//
// Thread-safety: functions of the file system; call from one thread.
#ifndef SYNCLINE_LAUNCH_EARLIER_RESULTS_H_
#define SYNCLINE_LAUNCH_EARLIER_RESULTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace syncline {

// The files and folders under OUT that a run writes as its results.
inline constexpr const char* kRunResults[] = {
    "summary.json", "metrics.csv", "embedding.csv", "params.tsv", "label_histograms.tsv", "logs"};

// Moves the kRunResults that `out` holds to `out`/previous-run/ (emptied first); returns their
// names, empty when there were none (and then nothing is made). An error names what could not
// be moved.
absl::StatusOr<std::vector<std::string>> SetAsideEarlierResults(const std::string& out);

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_EARLIER_RESULTS_H_
