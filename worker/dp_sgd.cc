#include "worker/dp_sgd.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_format.h"
#include "job/privacy_plan.h"
#include "privacy/dp_mechanism.h"

namespace syncline {

absl::StatusOr<DpSgdOptions> DpSgdOptionsFor(const JobSpec& spec, int rank, uint64_t features) {
  const JobSpec::Privacy& p = spec.privacy;
  if (p.level != DpLevel::kExample) {
    return absl::FailedPreconditionError("not a --dp example job");
  }
  absl::StatusOr<PrivacyPlan> plan = PlanPrivacy(spec);
  if (!plan.ok()) return plan.status();
  absl::StatusOr<DpKey> key = ParseDpKeyHex(p.key);
  if (!key.ok() || !(p.noise_multiplier > 0)) {
    return absl::FailedPreconditionError(
        "--dp example: the job spec has no noise multiplier or privacy key (the launcher sets "
        "them)");
  }
  if (features == 0 || features > (uint64_t{1} << 32)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--dp example needs a bounded feature count (the noise covers every row), not %d",
        features));
  }
  DpSgdOptions o;
  o.clip = p.clip;
  o.noise_stddev = p.noise_multiplier * p.clip / std::sqrt(static_cast<double>(spec.workers));
  o.sampling_rate = plan->sampling_rate;
  o.steps_per_epoch = plan->steps_per_epoch;
  o.reported_examples = static_cast<float>(plan->expected_batch / spec.workers);
  o.features = features;
  o.rank = rank;
  o.key = *key;
  return o;
}

DpSgdStep::DpSgdStep(DpSgdOptions options) : options_(options), keys_(options.features) {
  std::iota(keys_.begin(), keys_.end(), uint64_t{0});
}

std::vector<uint32_t> DpSgdStep::SampleBatch(int64_t step, uint32_t partition_size) const {
  DpRandom random(options_.key, DpStream::kExampleSampling,
                  {static_cast<uint64_t>(options_.rank), static_cast<uint64_t>(step)});
  return random.PoissonSample(partition_size, options_.sampling_rate);
}

double DpSgdStep::ClippedNoisyGradient(int64_t step, const Model& model, const Dataset& data,
                                       absl::Span<const uint32_t> examples,
                                       absl::Span<const float> rows, absl::Span<const float> bias,
                                       absl::Span<float> row_grads, absl::Span<float> bias_grad) {
  const size_t dim = model.row_dim();
  double loss = 0;
  for (const uint32_t e : examples) {
    // The example's own rows: its sorted unique features below the model's count.
    example_keys_.assign(data.ids.begin() + data.row_offsets[e],
                         data.ids.begin() + data.row_offsets[e + 1]);
    std::sort(example_keys_.begin(), example_keys_.end());
    example_keys_.erase(std::unique(example_keys_.begin(), example_keys_.end()),
                        example_keys_.end());
    std::erase_if(example_keys_, [&](uint64_t k) { return k >= keys_.size(); });
    example_rows_.resize(example_keys_.size() * dim);
    for (size_t i = 0; i < example_keys_.size(); ++i) {
      std::copy_n(rows.data() + example_keys_[i] * dim, dim, example_rows_.data() + i * dim);
    }
    example_grads_.assign(example_rows_.size(), 0.0f);
    example_bias_grad_.assign(bias.size(), 0.0f);
    const uint32_t one[] = {e};
    loss +=
        model.LossAndGradient(data, one, example_keys_, example_rows_, bias,
                              absl::MakeSpan(example_grads_), absl::MakeSpan(example_bias_grad_));
    const double norm = L2Norm(
        {std::span<const float>(example_grads_), std::span<const float>(example_bias_grad_)});
    const float factor = static_cast<float>(ClipFactor(norm, options_.clip));
    ++examples_;
    if (factor != 1.0f) ++clipped_;
    if (factor == 0.0f) continue;  // a gradient that is not finite is dropped whole
    for (size_t i = 0; i < example_keys_.size(); ++i) {
      float* dst = row_grads.data() + example_keys_[i] * dim;
      const float* src = example_grads_.data() + i * dim;
      for (size_t j = 0; j < dim; ++j) dst[j] += factor * src[j];
    }
    for (size_t j = 0; j < bias_grad.size(); ++j) bias_grad[j] += factor * example_bias_grad_[j];
  }
  DpRandom noise(options_.key, DpStream::kExampleNoise,
                 {static_cast<uint64_t>(options_.rank), static_cast<uint64_t>(step)});
  noise.AddGaussian(std::span<float>(row_grads.data(), row_grads.size()), options_.noise_stddev);
  noise.AddGaussian(std::span<float>(bias_grad.data(), bias_grad.size()), options_.noise_stddev);
  return loss;
}

}  // namespace syncline
