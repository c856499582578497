#include "privacy/dp_random.h"

#include <sodium.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numbers>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace syncline {
namespace {

void InitSodium() {
  static const bool ok = sodium_init() >= 0;
  if (!ok) {
    std::fputs("libsodium failed to initialise\n", stderr);
    std::abort();
  }
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace

DpKey FreshDpKey() {
  InitSodium();
  DpKey key;
  randombytes_buf(key.data(), key.size());
  return key;
}

DpKey DpKeyFromSeed(uint64_t seed) {
  InitSodium();
  constexpr char kLabel[] = "syncline dp-noise-seed";
  unsigned char message[sizeof(kLabel) + sizeof(seed)];
  std::memcpy(message, kLabel, sizeof(kLabel));
  std::memcpy(message + sizeof(kLabel), &seed, sizeof(seed));
  DpKey key;
  crypto_generichash(key.data(), key.size(), message, sizeof(message), nullptr, 0);
  return key;
}

std::string DpKeyHex(const DpKey& key) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (uint8_t b : key) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

absl::StatusOr<DpKey> ParseDpKeyHex(std::string_view hex) {
  if (hex.size() != 2 * kDpKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a privacy key has ", 2 * kDpKeyBytes, " hex digits, not ", hex.size()));
  }
  DpKey key;
  for (size_t i = 0; i < key.size(); ++i) {
    const int hi = HexValue(hex[2 * i]), lo = HexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return absl::InvalidArgumentError("a privacy key holds lowercase hex digits only");
    }
    key[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return key;
}

DpRandom::DpRandom(const DpKey& key, DpStream purpose, std::initializer_list<uint64_t> labels) {
  InitSodium();
  uint64_t message[7] = {static_cast<uint64_t>(purpose)};
  size_t n = 1;
  for (uint64_t label : labels) {
    if (n == 7) {  // a programmer's mistake: every caller names at most 6
      std::fputs("DpRandom takes at most 6 labels\n", stderr);
      std::abort();
    }
    message[n++] = label;
  }
  crypto_generichash(subkey_.data(), subkey_.size(),
                     reinterpret_cast<const unsigned char*>(message), n * sizeof(uint64_t),
                     key.data(), key.size());
}

void DpRandom::Refill() {
  static constexpr unsigned char kNonce[crypto_stream_chacha20_NONCEBYTES] = {};
  block_.fill(0);
  crypto_stream_chacha20_xor_ic(block_.data(), block_.data(), block_.size(), kNonce, counter_,
                                subkey_.data());
  counter_ += block_.size() / 64;
  used_ = 0;
}

uint64_t DpRandom::NextU64() {
  if (used_ + sizeof(uint64_t) > block_.size()) Refill();
  uint64_t v;
  std::memcpy(&v, block_.data() + used_, sizeof(v));
  used_ += sizeof(v);
  return v;
}

double DpRandom::Uniform() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

double DpRandom::UniformPositive() {
  return static_cast<double>((NextU64() >> 11) + 1) * 0x1.0p-53;
}

double DpRandom::Gaussian() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double r = std::sqrt(-2 * std::log(UniformPositive()));
  const double angle = 2 * std::numbers::pi * Uniform();
  spare_ = r * std::sin(angle);
  has_spare_ = true;
  return r * std::cos(angle);
}

void DpRandom::AddGaussian(std::span<float> values, double stddev) {
  for (float& v : values) v += static_cast<float>(stddev * Gaussian());
}

namespace {

// log(lambda^k e^-lambda / k!) for k >= 1, as -bd0(k, lambda) - log(2 pi k) / 2 - stirlerr(k):
// bd0 = k log(k / lambda) + lambda - k through log1p, so that neither the terms of size
// lambda log lambda nor lgamma's cancel (Loader 2000, "Fast and accurate computation of
// binomial probabilities").
double PoissonLogDensity(double k, double lambda) {
  const double d = k - lambda;
  const double bd0 = k * std::log1p(d / lambda) - d;
  // Stirling's series of log k! - (k log k - k + log(2 pi k) / 2); exact lgamma below 16.
  double stirlerr;
  if (k < 16) {
    stirlerr =
        std::lgamma(k + 1) - (k * std::log(k) - k + 0.5 * std::log(2 * std::numbers::pi * k));
  } else {
    const double k2 = k * k;
    stirlerr = (1.0 / 12 - (1.0 / 360 - 1.0 / (1260 * k2)) / k2) / k;
  }
  return -bd0 - 0.5 * std::log(2 * std::numbers::pi * k) - stirlerr;
}

}  // namespace

int64_t DpRandom::Poisson(double lambda) {
  if (!(lambda > 0)) return 0;
  if (lambda < 10) {
    // Multiplication of uniforms until the product falls below e^-lambda.
    const double limit = std::exp(-lambda);
    int64_t k = 0;
    double product = UniformPositive();
    while (product > limit) {
      ++k;
      product *= UniformPositive();
    }
    return k;
  }
  // PTRS (Hörmann 1993, "The transformed rejection method for generating Poisson random
  // variables"); its constants are the paper's.
  const double root = std::sqrt(lambda);
  const double b = 0.931 + 2.53 * root;
  const double a = -0.059 + 0.02483 * b;
  const double inv_alpha = 1.1239 + 1.1328 / (b - 3.4);
  const double v_r = 0.9277 - 3.6224 / (b - 2);
  while (true) {
    const double u = Uniform() - 0.5;
    const double v = UniformPositive();
    const double us = 0.5 - std::fabs(u);
    const double k = std::floor((2 * a / us + b) * u + lambda + 0.43);
    if (us >= 0.07 && v <= v_r) return static_cast<int64_t>(k);
    if (k < 0 || (us < 0.013 && v > us)) continue;
    const double log_accept = std::log(v * inv_alpha / (a / (us * us) + b));
    const double log_density = k == 0 ? -lambda : PoissonLogDensity(k, lambda);
    if (log_accept <= log_density) return static_cast<int64_t>(k);
  }
}

int64_t DpRandom::Skellam(double variance) {
  if (!(variance > 0)) return 0;
  return Poisson(variance / 2) - Poisson(variance / 2);
}

int64_t DpRandom::StochasticRound(double x) {
  const double low = std::floor(x);
  return static_cast<int64_t>(low) + (Uniform() < x - low ? 1 : 0);
}

std::vector<uint32_t> DpRandom::PoissonSample(uint32_t n, double q) {
  std::vector<uint32_t> sample;
  if (!(q > 0) || n == 0) return sample;
  if (q >= 1) {
    sample.resize(n);
    for (uint32_t i = 0; i < n; ++i) sample[i] = i;
    return sample;
  }
  sample.reserve(static_cast<size_t>(n * q * 1.2) + 16);
  // The gap to the next sampled index is geometric: floor(log U / log(1 - q)).
  const double log_keep = std::log1p(-q);
  double at = -1;
  while (true) {
    at += 1 + std::floor(std::log(UniformPositive()) / log_keep);
    if (at >= n) break;
    sample.push_back(static_cast<uint32_t>(at));
  }
  return sample;
}

}  // namespace syncline
