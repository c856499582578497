// DpRandom: the random numbers of differentially private training (--dp): which examples a
// step samples, which clients a round picks, and the Gaussian noise. DP's guarantee holds only
// against someone who cannot predict them, so they come from a cryptographic generator, not a
// statistics one: a ChaCha20 keystream (libsodium) under a subkey of the job's privacy key,
// derived with keyed BLAKE2b from what the numbers are for (labels such as purpose, node,
// step). Every node can make any stream from the key alone, so servers and clients agree on a
// round's picks without a message, and nobody without the key can tell them.
//
// The key is drawn from the operating system by the launcher for every run, unless the job
// gives --dp-noise-seed, which makes the run repeat (and the noise known to whoever knows the
// seed: for experiments only).
//
// Thread-safety: a DpRandom is thread-compatible; the free functions are thread-safe.
#ifndef SYNCLINE_PRIVACY_DP_RANDOM_H_
#define SYNCLINE_PRIVACY_DP_RANDOM_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace syncline {

inline constexpr size_t kDpKeyBytes = 32;
using DpKey = std::array<uint8_t, kDpKeyBytes>;

// 32 bytes from the operating system's generator.
DpKey FreshDpKey();
// The key of --dp-noise-seed: BLAKE2b of a fixed label and the seed.
DpKey DpKeyFromSeed(uint64_t seed);
// The key's text form in the job spec: 64 lowercase hex digits; the parse refuses anything else.
std::string DpKeyHex(const DpKey& key);
absl::StatusOr<DpKey> ParseDpKeyHex(std::string_view hex);

// What a stream's numbers are for: the first label of every stream, so that no two uses share
// one.
enum class DpStream : uint64_t {
  kExampleSampling = 1,  // labels: worker, step
  kExampleNoise = 2,     // labels: worker, step
  kClientPicks = 3,      // labels: round
  kRoundNoise = 4,       // labels: table, shard, round
  kClientNoise = 5,      // labels: client, round (distributed DP under --dp-noise-seed only)
  kRounding = 6,         // labels: client, round (secure aggregation's stochastic rounding)
};

class DpRandom {
 public:
  // The stream of `key` for `purpose` and `labels` (at most 6).
  DpRandom(const DpKey& key, DpStream purpose, std::initializer_list<uint64_t> labels);

  uint64_t NextU64();
  // Uniform in [0, 1), 53 bits.
  double Uniform();
  // Uniform in (0, 1]: a logarithm's argument.
  double UniformPositive();
  // Standard normal (Box-Muller over two uniforms; the second value is kept for the next call).
  double Gaussian();
  // Adds N(0, stddev^2) to every element.
  void AddGaussian(std::span<float> values, double stddev);
  // Poisson(lambda) for lambda in [0, 2^50], exactly up to double arithmetic: multiplication
  // of uniforms below 10, else Hörmann 1993's transformed rejection (PTRS), whose acceptance
  // test uses a log-density that stays accurate for large lambda (Loader 2000's deviance form,
  // not lgamma, which loses the digits that matter at lambda 1e12).
  int64_t Poisson(double lambda);
  // Symmetric Skellam noise of the given variance: Poisson(v/2) - Poisson(v/2).
  int64_t Skellam(double variance);
  // floor(x) + 1 with probability x - floor(x), else floor(x): E = x (unbiased rounding).
  int64_t StochasticRound(double x);
  // The indices in [0, n) of a Poisson sample at rate q in [0, 1]: each one independently with
  // probability q (geometric gaps, so the cost is that of the sample, not of n).
  std::vector<uint32_t> PoissonSample(uint32_t n, double q);

 private:
  void Refill();

  std::array<uint8_t, kDpKeyBytes> subkey_;
  std::array<uint8_t, 4096> block_;
  size_t used_ = 4096;
  uint32_t counter_ = 0;  // ChaCha20 blocks of 64 bytes drawn
  bool has_spare_ = false;
  double spare_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_PRIVACY_DP_RANDOM_H_
