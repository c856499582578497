#include "job/privacy_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// log(exp(a) + exp(b)) without overflow; -inf is zero.
double LogAdd(double a, double b) {
  const double hi = std::max(a, b), lo = std::min(a, b);
  if (lo == -kInf) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}

// log |Gamma(x)| without std::lgamma's global sign (thread-safe).
double LogAbsGamma(double x) {
  int sign = 0;
  return lgamma_r(x, &sign);
}

// log |binomial(n, k)| for real n and integer-valued k >= 0.
double LogAbsBinomial(double n, double k) {
  return LogAbsGamma(n + 1) - LogAbsGamma(k + 1) - LogAbsGamma(n - k + 1);
}

// log(erfc(x)), accurate far into the tail, where erfc itself underflows.
double LogErfc(double x) {
  if (x < 26) return std::log(std::erfc(x));
  // The asymptotic series of erfc at infinity: exp(-x^2) / (x sqrt(pi)) times
  // 1 - 1/(2x^2) + 3/(4x^4) - 15/(8x^6).
  const double r = 1 / (x * x);
  return -x * x - std::log(x) - 0.5 * std::log(std::numbers::pi) +
         std::log1p(r * (-0.5 + r * (0.75 - r * 1.875)));
}

// Standard normal CDF.
double Phi(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

// log(A_alpha) at an integer order (Mironov, Talwar and Zhang 2019, Sec. 3.2): the expectation
// over the binomial number i of "hits" of exp((i^2 - i) / (2 sigma^2)).
double LogAInteger(double q, double sigma, int alpha) {
  double log_a = -kInf;
  const double log_q = std::log(q), log_1mq = std::log1p(-q);
  for (int i = 0; i <= alpha; ++i) {
    const double term = LogAbsBinomial(alpha, i) + i * log_q + (alpha - i) * log_1mq +
                        (static_cast<double>(i) * i - i) / (2 * sigma * sigma);
    log_a = LogAdd(log_a, term);
  }
  return log_a;
}

// Terms the fractional series may take before the order is given up (dp-accounting's bound).
constexpr int kMaxFractionalTerms = 1000;

// log(A_alpha) at a fractional order (Sec. 3.3): the integral split at z0, where the two
// densities' ratio crosses 1, each side a series of binomial terms times Gaussian tails. The
// series stops once both sides' terms decrease and are below exp(-30) of the total.
double LogAFractional(double q, double sigma, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  const double log_q = std::log(q), log_1mq = std::log1p(-q);
  const double tail = std::numbers::sqrt2 * sigma;
  double last0 = -kInf, last1 = -kInf;
  for (int i = 0; i < kMaxFractionalTerms; ++i) {
    const double coef = LogAbsBinomial(alpha, i);
    const double j = alpha - i;
    const double t0 = coef + i * log_q + j * log_1mq;
    const double t1 = coef + j * log_q + i * log_1mq;
    const double e0 = std::log(0.5) + LogErfc((i - z0) / tail);
    const double e1 = std::log(0.5) + LogErfc((z0 - j) / tail);
    const double s0 = t0 + (static_cast<double>(i) * i - i) / (2 * sigma * sigma) + e0;
    const double s1 = t1 + (j * j - j) / (2 * sigma * sigma) + e1;
    log_a0 = LogAdd(log_a0, s0);
    log_a1 = LogAdd(log_a1, s1);
    const double total = LogAdd(log_a0, log_a1);
    if (s0 < last0 && s1 < last1 && std::max(s0, s1) < total - 30) return total;
    last0 = s0;
    last1 = s1;
  }
  return kInf;  // not converged: this order gives no bound
}

absl::Status CheckParameters(double q, double z, double delta) {
  if (!(q > 0 && q <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("the sampling rate must be in (0, 1], not ", q));
  }
  if (!(z > 0 && std::isfinite(z))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the noise multiplier must be a positive number, not ", z));
  }
  if (!(delta > 0 && delta < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("delta must be in (0, 1), not ", delta));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RdpConversion> ParseRdpConversion(std::string_view text) {
  if (text == "rdp") return RdpConversion::kTight;
  if (text == "rdp-classic") return RdpConversion::kClassic;
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(text), "' is not an accountant: rdp or rdp-classic"));
}

const char* RdpConversionName(RdpConversion conversion) {
  return conversion == RdpConversion::kTight ? "rdp" : "rdp-classic";
}

std::string RdpConversionDescription(RdpConversion conversion, DpNoiseMechanism mechanism) {
  const char* of = mechanism == DpNoiseMechanism::kSkellam
                       ? "Skellam at integer orders, Agarwal-Kairouz-Liu 2021 Thm 3.5"
                       : "sampled Gaussian";
  return conversion == RdpConversion::kTight
             ? absl::StrCat("rdp (", of, ", Canonne-Kamath-Steinke 2020 conversion)")
             : absl::StrCat("rdp-classic (", of, ", Mironov 2017 conversion)");
}

const std::vector<double>& DefaultRdpOrders() {
  static const std::vector<double>* const orders = [] {
    auto* o = new std::vector<double>;
    for (int x = 1; x < 100; ++x) o->push_back(1 + x / 10.0);
    for (int a = 11; a < 64; ++a) o->push_back(a);
    for (double a : {128.0, 256.0, 512.0, 1024.0}) o->push_back(a);
    return o;
  }();
  return *orders;
}

double SampledGaussianRdp(double q, double noise_multiplier, double order) {
  if (q == 0) return 0;
  if (noise_multiplier == 0 || std::isinf(order)) return kInf;
  if (q == 1) return order / (2 * noise_multiplier * noise_multiplier);
  const double log_a = order == std::floor(order)
                           ? LogAInteger(q, noise_multiplier, static_cast<int>(order))
                           : LogAFractional(q, noise_multiplier, order);
  return log_a / (order - 1);
}

EpsilonAtOrder RdpToEpsilon(std::span<const double> orders, std::span<const double> rdp,
                            double delta, RdpConversion conversion) {
  EpsilonAtOrder best{.epsilon = kInf, .order = 0};
  const double log_delta = std::log(delta);
  for (size_t i = 0; i < orders.size() && i < rdp.size(); ++i) {
    const double a = orders[i], r = rdp[i];
    double epsilon = kInf;
    if (conversion == RdpConversion::kClassic) {
      if (a > 1) epsilon = r - log_delta / (a - 1);
    } else if (r <= 0 || delta * delta + std::expm1(-r) > 0) {
      // The KL bound delta >= sqrt(1 - exp(-KL)) already holds at epsilon 0.
      epsilon = 0;
    } else if (a > 1.01) {  // the bound is unstable as the order nears 1, and useless there
      epsilon = r + std::log1p(-1 / a) - (log_delta + std::log(a)) / (a - 1);
    }
    if (epsilon < best.epsilon) best = {.epsilon = epsilon, .order = a};
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

double SkellamRdp(double noise_multiplier, double order) {
  if (!(order >= 2) || order != std::floor(order)) return kInf;
  const double z = noise_multiplier;
  const double d2 = std::ldexp(1.0, 16);                  // the smallest D
  const double d1 = std::sqrt(std::ldexp(1.0, 20)) * d2;  // sqrt(the most coordinates) D
  const double mu = z * z * d2 * d2;
  return order / (2 * z * z) +
         std::min(((2 * order - 1) * d2 * d2 + 6 * d1) / (4 * mu * mu), 3 * d1 / (2 * mu));
}

absl::StatusOr<RdpAccountant> RdpAccountant::Create(double sampling_rate, double noise_multiplier,
                                                    double delta, RdpConversion conversion,
                                                    DpNoiseMechanism mechanism) {
  if (auto s = CheckParameters(sampling_rate, noise_multiplier, delta); !s.ok()) return s;
  if (mechanism == DpNoiseMechanism::kSkellam && sampling_rate != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the Skellam mechanism is accounted without amplification: sampling rate 1, not ",
        sampling_rate));
  }
  RdpAccountant a;
  a.delta_ = delta;
  a.conversion_ = conversion;
  for (double order : DefaultRdpOrders()) {
    a.step_rdp_.push_back(mechanism == DpNoiseMechanism::kSkellam
                              ? SkellamRdp(noise_multiplier, order)
                              : SampledGaussianRdp(sampling_rate, noise_multiplier, order));
  }
  return a;
}

EpsilonAtOrder RdpAccountant::Spent(int64_t steps) const {
  if (steps <= 0) return {};
  std::vector<double> rdp(step_rdp_.size());
  for (size_t i = 0; i < rdp.size(); ++i) rdp[i] = step_rdp_[i] * static_cast<double>(steps);
  return RdpToEpsilon(DefaultRdpOrders(), rdp, delta_, conversion_);
}

absl::StatusOr<EpsilonAtOrder> ComputeEpsilon(const DpSgdParameters& p, RdpConversion conversion) {
  if (p.steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be >= 0, not ", p.steps));
  }
  auto accountant =
      RdpAccountant::Create(p.sampling_rate, p.noise_multiplier, p.delta, conversion, p.mechanism);
  if (!accountant.ok()) return accountant.status();
  return accountant->Spent(p.steps);
}

absl::StatusOr<double> CalibrateNoiseMultiplier(const DpSgdParameters& p, double epsilon,
                                                RdpConversion conversion) {
  if (!(epsilon > 0 && std::isfinite(epsilon))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the target epsilon must be a positive number, not ", epsilon));
  }
  if (p.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("steps must be >= 1, not ", p.steps));
  }
  if (auto s = CheckParameters(p.sampling_rate, 1, p.delta); !s.ok()) return s;
  auto epsilon_at = [&](double z) {
    DpSgdParameters at = p;
    at.noise_multiplier = z;
    return ComputeEpsilon(at, conversion)->epsilon;
  };
  // Epsilon falls as the noise grows: bracket the target, then bisect on a log scale.
  constexpr double kMostNoise = 1e6;
  double hi = 1;
  while (epsilon_at(hi) > epsilon) {
    hi *= 2;
    if (hi > kMostNoise) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "no noise multiplier up to %g reaches epsilon %g in %d steps at sampling rate %g "
          "(delta %g)",
          kMostNoise, epsilon, p.steps, p.sampling_rate, p.delta));
    }
  }
  double lo = hi / 2;
  while (lo > 1e-3 && epsilon_at(lo) <= epsilon) {
    hi = lo;
    lo /= 2;
  }
  while (hi / lo > 1 + 1e-6) {
    const double mid = std::sqrt(lo * hi);
    (epsilon_at(mid) <= epsilon ? hi : lo) = mid;
  }
  return hi;
}

double GaussianMechanismDelta(double noise_multiplier, double epsilon) {
  const double z = noise_multiplier;
  return Phi(1 / (2 * z) - epsilon * z) - std::exp(epsilon) * Phi(-1 / (2 * z) - epsilon * z);
}

double GaussianMechanismEpsilon(double noise_multiplier, double delta) {
  // Delta falls as epsilon grows.
  double lo = 0, hi = 1;
  while (GaussianMechanismDelta(noise_multiplier, hi) > delta) hi *= 2;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
    const double mid = (lo + hi) / 2;
    (GaussianMechanismDelta(noise_multiplier, mid) > delta ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace syncline
