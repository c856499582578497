// Distributed differential privacy under secure aggregation (--dp client with
// --secure-aggregation on): each client adds its share of integer noise to its quantised update
// before it masks it, so that the sum the server unmasks is already noised and no node ever
// holds an un-noised sum. The noise is the Skellam mechanism (Agarwal, Kairouz and Liu 2021,
// "The Skellam Mechanism for Differentially Private Federated Learning"): a symmetric Skellam
// variable is the difference of two Poisson variables, integer-valued, and a sum of independent
// Skellam variables is Skellam with the summed variance, so t clients' shares of variance
// mu / t make exactly the central mechanism of variance mu.
//
// A client's update x, already clipped to L2 norm C, becomes the integers
//     v = StochasticRound(s x) + Sk(mu / t)   (each coordinate, mod 2^32)
// with the scale s = (D - sqrt(d)) / C for a power of two D (the integer sensitivity) and d
// coordinates. Stochastic rounding moves each coordinate by less than 1, so ||round(s x)||_2 <=
// s C + sqrt(d) = D whatever the draw: the rounding's norm growth is bounded deterministically
// (more conservative than Kairouz et al. 2021's high-probability bound, and needing no failure
// probability). The noise is mu = (z D)^2 summed over t clients: a Gaussian's z relative to
// the sensitivity after rounding, so the noise on the real scale, z D / s, is at least z C.
// With k >= t survivors the sum carries k mu / t >= mu: more survivors, more noise, never less.
//
// D is the largest power of two, at most 2^20, for which W clients' values and 12 standard
// deviations of W clients' noise fit a signed 32-bit sum: D (W + 12 z sqrt(W / t)) < 2^31
// (a Skellam variable of this variance exceeds 12 standard deviations with probability below
// 1e-30). Jobs whose D would fall below 2^16 are refused, and so are vectors of more than 2^20
// coordinates, which keeps the accountant's bound (job/privacy_accountant.h, SkellamRdp) true
// for every job it runs: that bound takes D >= 2^16 and d <= 2^20.
//
// Thread-safety: DistributedDpCodec is an immutable value; its methods are thread-safe (the
// DpRandom they take is the caller's).
#ifndef SYNCLINE_PRIVACY_DISTRIBUTED_DP_H_
#define SYNCLINE_PRIVACY_DISTRIBUTED_DP_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "privacy/dp_random.h"

namespace syncline {

inline constexpr int kDdpMinSensitivityLog2 = 16;
inline constexpr int kDdpMaxSensitivityLog2 = 20;
inline constexpr size_t kDdpMaxCoordinates = size_t{1} << 20;

struct DistributedDpParams {
  double clip = 1;              // C: each client's update has L2 norm at most C
  double noise_multiplier = 1;  // z: the sum of t shares has standard deviation z D
  int clients = 2;              // W: the most clients whose values one sum holds
  int threshold = 2;            // t: the fewest survivors whose sum is unmasked
};

// D for the params; InvalidArgument naming the numbers when it would fall below 2^16.
absl::StatusOr<double> DistributedDpSensitivity(const DistributedDpParams& p);

class DistributedDpCodec {
 public:
  // InvalidArgument naming the value: params out of range, D below 2^16, or more than 2^20
  // coordinates.
  static absl::StatusOr<DistributedDpCodec> Create(const DistributedDpParams& p,
                                                   size_t coordinates);

  double sensitivity() const { return sensitivity_; }  // D
  double scale() const { return scale_; }              // s
  // Each client's noise variance per coordinate, (z D)^2 / t.
  double client_variance() const { return client_variance_; }
  // The standard deviation of the sum's noise on the real scale with `survivors` clients.
  double SumStddev(int survivors) const;

  // A client's share: x (L2 norm at most C; InvalidArgument otherwise, as an unclipped update
  // would break the sensitivity) scaled, stochastically rounded and noised, mod 2^32.
  absl::StatusOr<std::vector<uint32_t>> Encode(std::span<const float> x, DpRandom& random) const;
  // The noised sum of several clients' shares, unmasked, back to the real scale (the values
  // read as signed 32-bit integers, divided by s).
  std::vector<float> DecodeSum(std::span<const uint32_t> sum) const;

 private:
  DistributedDpParams params_;
  size_t coordinates_ = 0;
  double sensitivity_ = 0, scale_ = 0, client_variance_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_PRIVACY_DISTRIBUTED_DP_H_
