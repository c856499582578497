// Random: seeded uniform and normal draws that give the same values with every standard
// library, for generators whose output must be the same bytes from the same seed.
//
// Thread-safety: thread-compatible.
#ifndef SYNCLINE_CORE_RANDOM_H_
#define SYNCLINE_CORE_RANDOM_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>

namespace syncline {

// Uniform and normal draws defined in terms of mt19937_64's output alone, because the std::
// distributions differ between standard libraries and the same seed must give the same file.
class Random {
 public:
  // Independent streams from one user seed: std::seed_seq's mixing is fully specified.
  Random(uint64_t seed, uint32_t stream) {
    std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), stream};
    engine_.seed(seq);
  }

  // In [0, 1), with 53 random bits.
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // In [0, n); n > 0.
  uint64_t UniformInt(uint64_t n) {
    return std::min(static_cast<uint64_t>(Uniform() * static_cast<double>(n)), n - 1);
  }

  // N(0, 1) by Box-Muller, using both values of each pair.
  double Normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - Uniform();  // (0, 1]: log(u1) is finite.
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * std::numbers::pi * u2);
    has_spare_ = true;
    return r * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::mt19937_64 engine_;
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_RANDOM_H_
