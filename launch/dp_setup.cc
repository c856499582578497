#include "launch/dp_setup.h"

#include <limits>

#include "absl/strings/str_format.h"
#include "data/dataset.h"
#include "job/privacy_accountant.h"
#include "job/privacy_options.h"
#include "job/privacy_plan.h"

namespace syncline {

absl::StatusOr<std::string> SetUpPrivacy(JobSpec& spec) {
  JobSpec::Privacy& p = spec.privacy;
  if (!p.on()) return std::string();
  if (p.level == DpLevel::kExample) {
    // Only the count: one example of each huge stride is kept, every line is still checked.
    ReadOptions o;
    o.format = spec.data.format;
    o.index_base = spec.data.index_base;
    o.num_classes = spec.model.classes;
    o.num_partitions = std::numeric_limits<int>::max();
    absl::StatusOr<Dataset> counted = ReadDataset(spec.data.train, o);
    if (!counted.ok()) return counted.status();
    p.examples = counted->file_examples;
  }
  const bool calibrated = p.noise_multiplier == 0;
  if (auto s = ResolvePrivacy(spec); !s.ok()) return s;
  absl::StatusOr<PrivacyPlan> plan = PlanPrivacy(spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<EpsilonAtOrder> spent =
      ComputeEpsilon(DpSgdParameters{.sampling_rate = plan->sampling_rate,
                                     .noise_multiplier = p.noise_multiplier,
                                     .steps = plan->steps,
                                     .delta = p.delta,
                                     .mechanism = plan->mechanism},
                     p.accountant);
  if (!spent.ok()) return spent.status();
  const bool example = p.level == DpLevel::kExample;
  return absl::StrFormat(
      "--dp %s: %s, sampling rate %.6g, %d %s, clip %g, noise multiplier %.6g%s: epsilon %.4g "
      "at delta %g (%s; %s)%s",
      DpLevelName(p.level),
      example ? absl::StrFormat("%d training examples", p.examples)
              : absl::StrFormat("%d clients", spec.workers),
      plan->sampling_rate, plan->steps, example ? "steps" : "rounds", p.clip, p.noise_multiplier,
      calibrated ? absl::StrFormat(" (calibrated to --dp-epsilon %g)", p.epsilon) : "",
      spent->epsilon, p.delta, RdpConversionName(p.accountant), DpMechanismDescription(spec),
      p.noise_seed != 0 ? "; noise seeded by --dp-noise-seed (not private against whoever "
                          "knows it)"
                        : "");
}

}  // namespace syncline
