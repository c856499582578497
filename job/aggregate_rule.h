// The text form of the Byzantine-robust aggregation rule (--aggregate; syncline/options.h's
// AggregateRule), and the bounds on the number of updates each rule can run over: option checks
// that the launcher makes up front and the servers (ps/robust_aggregate.h) make again per clock.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_AGGREGATE_RULE_H_
#define SYNCLINE_JOB_AGGREGATE_RULE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// "mean" | "median" | "trimmed-mean:B" (0 <= B < 0.5) | "krum:F" (F an integer >= 0) |
// "multi-krum:F:M" (M an integer >= 1) | "bulyan:F". A bad text is InvalidArgument naming it
// and what is allowed. The fields a rule does not use keep AggregateRule's defaults.
absl::StatusOr<AggregateRule> ParseAggregateRule(std::string_view text);
// The inverse of ParseAggregateRule: "mean", "trimmed-mean:0.2", "multi-krum:2:5".
std::string AggregateRuleName(const AggregateRule& rule);

// OK when `rule` can run over n updates, else InvalidArgument with the reason, e.g. "krum:2
// needs at least 2f+3 = 7 updates, has 5". The bounds: mean, median n >= 1; trimmed-mean
// 2 floor(B n) < n; krum n >= 2f + 3; multi-krum n >= 2f + 3 and 1 <= m <= n - f; bulyan
// n >= 4f + 3. A rule whose own parameters are out of range (f < 0, m < 1, B outside [0, 0.5))
// is refused for every n.
absl::Status CheckAggregateRule(const AggregateRule& rule, int n);
// The smallest n that CheckAggregateRule accepts (for validating a job up front); INT_MAX when
// it accepts none.
int MinUpdatesFor(const AggregateRule& rule);

}  // namespace syncline

#endif  // SYNCLINE_JOB_AGGREGATE_RULE_H_
