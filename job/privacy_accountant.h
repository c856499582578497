// The privacy accountant of differentially private training (--dp): Rényi differential privacy
// (Mironov 2017) of the Poisson-sampled Gaussian mechanism, the step of DP-SGD (Abadi et al.
// 2016) and of DP-FedAvg (McMahan et al. 2018), composed over the job's steps and converted to
// (epsilon, delta).
//
// One step samples each example (client) with probability q, clips each one's contribution to
// L2 norm C and adds Gaussian noise of standard deviation z C to the sum (z: the noise
// multiplier). Its RDP at order alpha is log(A_alpha) / (alpha - 1), with A_alpha the
// expectation Mironov, Talwar and Zhang 2019 ("Rényi Differential Privacy of the Sampled
// Gaussian Mechanism") compute as a finite binomial sum for integer orders (their Sec. 3.2) and
// as two converging series of erfc terms for fractional ones (Sec. 3.3); T steps compose to T
// times that. The orders are the grid Google's dp-accounting library uses by default
// (1.1, 1.2, ..., 10.9, 11, 12, ..., 63, 128, 256, 512, 1024).
//
// The conversion to (epsilon, delta) takes the best order:
//  - kTight (the default, what dp-accounting does): epsilon = rdp + log(1 - 1/alpha)
//    - log(delta alpha) / (alpha - 1), Canonne, Kamath and Steinke 2020 ("The Discrete
//    Gaussian for Differential Privacy", Proposition 12; the same bound is Asoodeh et al.
//    2020's and Balle et al. 2020's), with epsilon 0 where the KL bound delta >=
//    sqrt(1 - exp(-rdp)) already holds; orders at or below 1.01 are skipped, as there;
//  - kClassic: epsilon = rdp + log(1 / delta) / (alpha - 1) (Mironov 2017, Proposition 3),
//    the figure of older papers (Abadi et al.'s 1.26).
//
// Distributed DP under secure aggregation is accounted with the Skellam mechanism's RDP instead
// (SkellamRdp below), at sampling rate 1.
//
// Thread-safety: stateless functions; an RdpAccountant is a value (thread-compatible).
#ifndef SYNCLINE_JOB_PRIVACY_ACCOUNTANT_H_
#define SYNCLINE_JOB_PRIVACY_ACCOUNTANT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// RdpConversion, the choice of conversion, is an option type (syncline/options.h).

// Which mechanism a step is. kSkellam: distributed DP under secure aggregation
// (privacy/distributed_dp.h), the Skellam mechanism of Agarwal, Kairouz and Liu 2021 without
// amplification by sampling (the sampling rate must be 1: the server sees who takes part).
enum class DpNoiseMechanism { kSampledGaussian, kSkellam };

// "rdp" (kTight) | "rdp-classic" (kClassic).
absl::StatusOr<RdpConversion> ParseRdpConversion(std::string_view text);
const char* RdpConversionName(RdpConversion conversion);
// The accountant's name with its conversion's source, for summary.json:
// "rdp (Canonne-Kamath-Steinke 2020 conversion)".
std::string RdpConversionDescription(
    RdpConversion conversion, DpNoiseMechanism mechanism = DpNoiseMechanism::kSampledGaussian);

// dp-accounting's default grid: 99 orders 1.1 .. 10.9, 53 orders 11 .. 63, then 128 .. 1024.
const std::vector<double>& DefaultRdpOrders();

// RDP at `order` (> 1) of one step of the Poisson-sampled Gaussian mechanism with sampling rate
// q in [0, 1] and noise multiplier z >= 0: 0 at q = 0, infinity at z = 0, order / (2 z^2) at
// q = 1 (the Gaussian mechanism's own). Infinity too where the fractional series does not
// converge within its bound (the order is then of no use).
double SampledGaussianRdp(double q, double noise_multiplier, double order);

// RDP at integer `order` >= 2 of one step of the Skellam mechanism whose noise has variance
// (z D)^2 with integer L2 sensitivity D (Agarwal, Kairouz and Liu 2021, Theorem 3.5 for
// d-dimensional vectors): with mu = (z D)^2, Delta_2 = D and Delta_1 <= sqrt(d) D,
//     alpha / (2 z^2) + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2), 3 Delta_1 / (2 mu)).
// The second term falls as D grows and rises with d; it is taken at D = 2^16 and d = 2^20,
// the limits distributed_dp.h enforces, so the bound holds for every job that runs. Infinity
// for a fractional order (the theorem is for integer orders).
double SkellamRdp(double noise_multiplier, double order);

// The best epsilon at `delta` over the orders, with rdp[i] the RDP at orders[i]; the order
// that gave it.
struct EpsilonAtOrder {
  double epsilon = 0;
  double order = 0;
};
EpsilonAtOrder RdpToEpsilon(std::span<const double> orders, std::span<const double> rdp,
                            double delta, RdpConversion conversion);

// What a DP job spends: `steps` steps at sampling rate q and noise multiplier z.
struct DpSgdParameters {
  double sampling_rate = 0;     // q in (0, 1]
  double noise_multiplier = 0;  // z > 0
  int64_t steps = 0;            // >= 0
  double delta = 1e-5;          // in (0, 1)
  DpNoiseMechanism mechanism = DpNoiseMechanism::kSampledGaussian;
};

// Composes the steps of one mechanism as they are taken: Spent(t) is the epsilon of the first
// t steps. Computes the per-step RDP once.
class RdpAccountant {
 public:
  // InvalidArgument naming the parameter out of range.
  static absl::StatusOr<RdpAccountant> Create(
      double sampling_rate, double noise_multiplier, double delta, RdpConversion conversion,
      DpNoiseMechanism mechanism = DpNoiseMechanism::kSampledGaussian);
  // The epsilon after `steps` steps (0 for none), and its order.
  EpsilonAtOrder Spent(int64_t steps) const;

 private:
  RdpAccountant() = default;
  std::vector<double> step_rdp_;  // per order of DefaultRdpOrders()
  double delta_ = 0;
  RdpConversion conversion_ = RdpConversion::kTight;
};

// Epsilon of `p` (InvalidArgument naming a parameter out of range).
absl::StatusOr<EpsilonAtOrder> ComputeEpsilon(const DpSgdParameters& p, RdpConversion conversion);

// The smallest noise multiplier (to a relative 1e-6, rounded up) whose epsilon after p.steps
// steps at p.sampling_rate and p.delta is at most `epsilon`; p.noise_multiplier is ignored.
// InvalidArgument for parameters out of range, or an epsilon no noise up to 1e6 reaches.
absl::StatusOr<double> CalibrateNoiseMultiplier(const DpSgdParameters& p, double epsilon,
                                                RdpConversion conversion);

// The (epsilon, delta) of the Gaussian mechanism with sensitivity 1 and standard deviation z,
// exactly (Balle and Wang 2018, "Improving the Gaussian Mechanism for Differential Privacy",
// Theorem 8): the delta at epsilon, and the smallest epsilon at delta. A test's reference:
// RDP's epsilon of one step at q = 1 must be at least this one.
double GaussianMechanismDelta(double noise_multiplier, double epsilon);
double GaussianMechanismEpsilon(double noise_multiplier, double delta);

}  // namespace syncline

#endif  // SYNCLINE_JOB_PRIVACY_ACCOUNTANT_H_
