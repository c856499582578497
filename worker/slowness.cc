#include "worker/slowness.h"

#include <cmath>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace syncline {
namespace {

absl::StatusOr<std::pair<std::string, std::string>> SplitPair(const std::string& text,
                                                              const char* flag, const char* form) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2 || parts[0].empty() || parts[1].empty()) {
    return absl::InvalidArgumentError(absl::StrFormat("--%s='%s': expected %s", flag, text, form));
  }
  return std::make_pair(parts[0], parts[1]);
}

}  // namespace

absl::StatusOr<std::pair<int, double>> ParseStraggler(const std::string& text) {
  auto parts = SplitPair(text, "straggler", "RANK:FACTOR, e.g. 1:3");
  if (!parts.ok()) return parts.status();
  int rank = 0;
  double factor = 0;
  if (!absl::SimpleAtoi(parts->first, &rank) || rank < 0 ||
      !absl::SimpleAtod(parts->second, &factor) || !std::isfinite(factor) || factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--straggler='%s': RANK must be >= 0 and FACTOR a number >= 1", text));
  }
  return std::make_pair(rank, factor);
}

absl::StatusOr<std::pair<double, double>> ParseJitter(const std::string& text) {
  auto parts = SplitPair(text, "jitter", "P:FACTOR, e.g. 0.1:5");
  if (!parts.ok()) return parts.status();
  double p = 0, factor = 0;
  if (!absl::SimpleAtod(parts->first, &p) || !(p >= 0 && p <= 1) ||
      !absl::SimpleAtod(parts->second, &factor) || !std::isfinite(factor) || factor < 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--jitter='%s': P must be in [0, 1] and FACTOR a number >= 1", text));
  }
  return std::make_pair(p, factor);
}

absl::StatusOr<std::pair<int, double>> ParseDelay(const std::string& text) {
  auto parts = SplitPair(text, "delay", "RANK:MS, e.g. 1:20");
  if (!parts.ok()) return parts.status();
  int rank = 0;
  double ms = 0;
  if (!absl::SimpleAtoi(parts->first, &rank) || rank < 0 || !absl::SimpleAtod(parts->second, &ms) ||
      !std::isfinite(ms) || ms < 0 || ms > 60000) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--delay='%s': RANK must be >= 0 and MS in [0, 60000]", text));
  }
  return std::make_pair(rank, ms);
}

SlownessOptions SlownessForWorker(const JobSpec::Slowness& slowness, int rank, uint64_t job_seed) {
  SlownessOptions o;
  o.min_step = absl::Microseconds(slowness.min_step_ms * 1000);
  o.seed = job_seed * 1000003 + static_cast<uint64_t>(rank);
  if (slowness.straggler_rank == rank) o.factor = slowness.straggler_factor;
  o.jitter_probability = slowness.jitter_probability;
  o.jitter_factor = slowness.jitter_factor;
  if (slowness.delay_rank == rank) o.delay = absl::Microseconds(slowness.delay_ms * 1000);
  return o;
}

SlownessInjector::SlownessInjector(SlownessOptions options)
    : options_(options), rng_(options.seed) {}

bool SlownessInjector::active() const {
  return options_.factor != 1.0 || options_.jitter_probability > 0 ||
         options_.min_step > absl::ZeroDuration() || options_.delay > absl::ZeroDuration();
}

absl::Duration SlownessInjector::StepTime(absl::Duration compute) {
  absl::Duration step = std::max(compute, options_.min_step) * options_.factor;
  if (options_.jitter_probability > 0 &&
      std::bernoulli_distribution(options_.jitter_probability)(rng_)) {
    step *= options_.jitter_factor;
  }
  return step;
}

void SlownessInjector::AfterCompute(absl::Duration compute) {
  const absl::Duration rest = StepTime(compute) - compute;
  if (rest > absl::ZeroDuration()) absl::SleepFor(rest);
}

void SlownessInjector::BeforeRequest() const {
  if (options_.delay > absl::ZeroDuration()) absl::SleepFor(options_.delay);
}

}  // namespace syncline
