#include "job/privacy_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "job/options.h"

namespace syncline {
namespace {

constexpr double kDefaultTau = 1e-3;

absl::Status BadServerOptimizer(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(text), "': ", std::string(why),
                   " (sgd, momentum:B, adagrad[:TAU], adam[:TAU] or yogi[:TAU])"));
}

}  // namespace

absl::StatusOr<DpLevel> ParseDpLevel(std::string_view text) {
  for (DpLevel level : {DpLevel::kOff, DpLevel::kExample, DpLevel::kClient}) {
    if (text == DpLevelName(level)) return level;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(text), "' is not a privacy level: off, example or client"));
}

const char* DpLevelName(DpLevel level) {
  switch (level) {
    case DpLevel::kOff:
      return "off";
    case DpLevel::kExample:
      return "example";
    case DpLevel::kClient:
      return "client";
  }
  return "?";
}

absl::StatusOr<ServerOptimizerSpec> ParseServerOptimizer(std::string_view text) {
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const bool has_arg = colon != std::string_view::npos;
  const std::string arg(has_arg ? text.substr(colon + 1) : std::string_view());
  // SimpleAtod would also take " 0.5".
  const bool blank = std::any_of(arg.begin(), arg.end(), [](char c) {
    return absl::ascii_isspace(static_cast<unsigned char>(c));
  });
  double value = 0;
  const bool number = has_arg && !blank && absl::SimpleAtod(arg, &value) && std::isfinite(value);
  ServerOptimizerSpec spec;
  if (name == "sgd") {
    if (has_arg) return BadServerOptimizer(text, "sgd takes no parameter");
    return spec;
  }
  if (name == "momentum") {
    if (!number || value < 0 || value >= 1) {
      return BadServerOptimizer(text, "momentum needs B, a number in [0, 1)");
    }
    spec.kind = ServerOptimizerKind::kMomentum;
    spec.momentum = value;
    return spec;
  }
  for (auto [kind, rule] : {std::pair{ServerOptimizerKind::kAdagrad, "adagrad"},
                            std::pair{ServerOptimizerKind::kAdam, "adam"},
                            std::pair{ServerOptimizerKind::kYogi, "yogi"}}) {
    if (name != rule) continue;
    if (has_arg && (!number || value <= 0)) {
      return BadServerOptimizer(text, "TAU must be a number > 0");
    }
    spec.kind = kind;
    spec.tau = has_arg ? value : kDefaultTau;
    return spec;
  }
  return BadServerOptimizer(text, "unknown rule");
}

std::string ServerOptimizerName(const ServerOptimizerSpec& spec) {
  switch (spec.kind) {
    case ServerOptimizerKind::kSgd:
      return "sgd";
    case ServerOptimizerKind::kMomentum:
      return absl::StrCat("momentum:", ShortestDouble(spec.momentum));
    case ServerOptimizerKind::kAdagrad:
    case ServerOptimizerKind::kAdam:
    case ServerOptimizerKind::kYogi: {
      const char* rule = spec.kind == ServerOptimizerKind::kAdagrad ? "adagrad"
                         : spec.kind == ServerOptimizerKind::kAdam  ? "adam"
                                                                    : "yogi";
      return spec.tau == kDefaultTau ? std::string(rule)
                                     : absl::StrCat(rule, ":", ShortestDouble(spec.tau));
    }
  }
  return "?";
}

OptimizerConfig ServerOptimizerConfig(const ServerOptimizerSpec& spec, double server_lr) {
  OptimizerConfig c;
  c.learning_rate = static_cast<float>(server_lr);
  c.l2 = 0;
  // Reddi et al. 2021's moments: beta1 0.9, beta2 0.99; tau where Adam has its epsilon.
  c.beta1 = 0.9f;
  c.beta2 = 0.99f;
  c.epsilon = static_cast<float>(spec.tau);
  switch (spec.kind) {
    case ServerOptimizerKind::kSgd:
      c.kind = OptimizerKind::kSgd;
      break;
    case ServerOptimizerKind::kMomentum:
      c.kind = OptimizerKind::kMomentum;
      c.beta1 = static_cast<float>(spec.momentum);
      break;
    case ServerOptimizerKind::kAdagrad:
      c.kind = OptimizerKind::kAdagrad;
      break;
    case ServerOptimizerKind::kAdam:
      c.kind = OptimizerKind::kAdam;
      break;
    case ServerOptimizerKind::kYogi:
      c.kind = OptimizerKind::kYogi;
      break;
  }
  return c;
}

}  // namespace syncline
