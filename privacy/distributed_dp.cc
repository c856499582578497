#include "privacy/distributed_dp.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "privacy/dp_mechanism.h"

namespace syncline {

absl::StatusOr<double> DistributedDpSensitivity(const DistributedDpParams& p) {
  if (!(p.clip > 0 && std::isfinite(p.clip)) ||
      !(p.noise_multiplier > 0 && std::isfinite(p.noise_multiplier)) || p.threshold < 1 ||
      p.clients < p.threshold) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "distributed DP: clip %g, noise multiplier %g, %d clients and threshold %d: each must be "
        "positive, and the threshold at most the clients",
        p.clip, p.noise_multiplier, p.clients, p.threshold));
  }
  const double w = p.clients;
  const double per_unit = w + 12 * p.noise_multiplier * std::sqrt(w / p.threshold);
  int bits = kDdpMaxSensitivityLog2;
  while (bits >= kDdpMinSensitivityLog2 && std::ldexp(per_unit, bits) >= std::ldexp(1.0, 31)) {
    --bits;
  }
  if (bits < kDdpMinSensitivityLog2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "distributed DP: %d clients and noise multiplier %g (threshold %d) need %.0f times the "
        "integer sensitivity in a signed 32-bit sum, which leaves less than 2^%d for it; use "
        "fewer workers, a higher --secagg-threshold or less noise",
        p.clients, p.noise_multiplier, p.threshold, per_unit, kDdpMinSensitivityLog2));
  }
  return std::ldexp(1.0, bits);
}

absl::StatusOr<DistributedDpCodec> DistributedDpCodec::Create(const DistributedDpParams& p,
                                                              size_t coordinates) {
  absl::StatusOr<double> d = DistributedDpSensitivity(p);
  if (!d.ok()) return d.status();
  if (coordinates == 0 || coordinates > kDdpMaxCoordinates) {
    return absl::InvalidArgumentError(
        absl::StrFormat("distributed DP: the update has %d coordinates; it takes 1 to %d",
                        coordinates, kDdpMaxCoordinates));
  }
  DistributedDpCodec c;
  c.params_ = p;
  c.coordinates_ = coordinates;
  c.sensitivity_ = *d;
  c.scale_ = (*d - std::sqrt(static_cast<double>(coordinates))) / p.clip;
  const double stddev = p.noise_multiplier * *d;
  c.client_variance_ = stddev * stddev / p.threshold;
  return c;
}

double DistributedDpCodec::SumStddev(int survivors) const {
  return std::sqrt(client_variance_ * survivors) / scale_;
}

absl::StatusOr<std::vector<uint32_t>> DistributedDpCodec::Encode(std::span<const float> x,
                                                                 DpRandom& random) const {
  if (x.size() != coordinates_) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "distributed DP: an update of %d coordinates, the codec's has %d", x.size(), coordinates_));
  }
  const double norm = L2Norm({x});
  // float rounding of a clipped vector may exceed C by an ulp or so.
  if (!(norm <= params_.clip * (1 + 1e-5))) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "distributed DP: the update has L2 norm %g, above the clip %g", norm, params_.clip));
  }
  const double shrink = norm > params_.clip ? params_.clip / norm : 1.0;
  std::vector<uint32_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const int64_t v =
        random.StochasticRound(scale_ * shrink * x[i]) + random.Skellam(client_variance_);
    out[i] = static_cast<uint32_t>(v);  // mod 2^32: the sum wraps back into range
  }
  return out;
}

std::vector<float> DistributedDpCodec::DecodeSum(std::span<const uint32_t> sum) const {
  std::vector<float> out(sum.size());
  for (size_t i = 0; i < sum.size(); ++i) {
    out[i] = static_cast<float>(static_cast<double>(static_cast<int32_t>(sum[i])) / scale_);
  }
  return out;
}

}  // namespace syncline
