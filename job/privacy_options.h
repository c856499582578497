// Text forms of the options of private and adaptive federated training: --dp's level and
// --server-optimizer's rule (syncline/options.h). Each Parse is the inverse of its Name; a bad
// text is InvalidArgument naming it and what is allowed.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_JOB_PRIVACY_OPTIONS_H_
#define SYNCLINE_JOB_PRIVACY_OPTIONS_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// "off" | "example" | "client".
absl::StatusOr<DpLevel> ParseDpLevel(std::string_view text);
const char* DpLevelName(DpLevel level);

// "sgd" | "momentum:B" (0 <= B < 1) | "adagrad[:TAU]" | "adam[:TAU]" | "yogi[:TAU]" (TAU > 0,
// default 1e-3).
absl::StatusOr<ServerOptimizerSpec> ParseServerOptimizer(std::string_view text);
// "sgd", "momentum:0.9", "adam" (TAU only where it is not the default: "adam:0.01").
std::string ServerOptimizerName(const ServerOptimizerSpec& spec);

// The update rule the servers' tables apply for a federated job (worker/'s layout declares it):
// Reddi et al.'s rules with beta1 0.9 and beta2 0.99 at --server-lr.
OptimizerConfig ServerOptimizerConfig(const ServerOptimizerSpec& spec, double server_lr);

}  // namespace syncline

#endif  // SYNCLINE_JOB_PRIVACY_OPTIONS_H_
