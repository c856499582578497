#include "tools/criteo_gen.h"

#include <array>
#include <cmath>
#include <numbers>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/random.h"

namespace syncline {
namespace {

constexpr int kDense = 13;
constexpr int kFields = 26;
constexpr int kLatent = 4;
constexpr size_t kFlushBytes = size_t{1} << 20;

// Vocabulary size, probability of being empty and whether the field takes part in the pairwise
// terms. The interacting fields have small to medium vocabularies, whose popular values a
// model sees often enough to learn; the largest fields are mostly long-tail noise, as in the
// real logs.
struct Field {
  uint64_t vocabulary;
  double empty;
  bool interacts;
};
constexpr std::array<Field, kFields> kFieldSpecs = {{
    {3, 0.0, true},        {10, 0.0, true},      {30, 0.05, true},    {100, 0.0, true},
    {300, 0.1, true},      {1000, 0.0, true},    {3000, 0.2, false},  {10000, 0.0, false},
    {50, 0.0, true},       {200, 0.3, true},     {20, 0.0, true},     {5, 0.4, false},
    {1000000, 0.0, false}, {100000, 0.1, false}, {30000, 0.0, false}, {500, 0.0, true},
    {8, 0.0, true},        {2000, 0.5, false},   {15, 0.0, false},    {400000, 0.2, false},
    {60, 0.0, false},      {700, 0.0, false},    {40, 0.3, false},    {12, 0.0, true},
    {250000, 0.0, false},  {150, 0.0, false},
}};

// Dense fields: log-normal counts exp(N(mu, 1)) - 1, how often empty, and the true weight of
// log1p(x) in the logit. I2 is sometimes negative, as in the real logs.
struct DenseSpec {
  double mu;
  double empty;
  double weight;
};
constexpr std::array<DenseSpec, kDense> kDenseSpecs = {{
    {1.0, 0.4, 0.15},
    {2.0, 0.0, -0.1},
    {1.5, 0.2, 0.05},
    {1.0, 0.2, 0.0},
    {5.0, 0.05, -0.05},
    {2.0, 0.2, 0.1},
    {1.0, 0.05, 0.2},
    {2.5, 0.0, 0.0},
    {3.0, 0.05, -0.1},
    {0.3, 0.4, 0.1},
    {0.8, 0.05, 0.1},
    {0.2, 0.7, 0.0},
    {1.5, 0.2, -0.05},
}};

// splitmix64's finaliser.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A standard normal that depends only on (seed, field, value, k): the model's parameters for a
// value are recomputed whenever the value appears, instead of being stored.
double HashNormal(uint64_t seed, int field, uint64_t value, int k) {
  const uint64_t h = Mix(Mix(seed ^ Mix(static_cast<uint64_t>(field) << 8 | k)) ^ value);
  const double u1 = (static_cast<double>(h >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  const double u2 = static_cast<double>(Mix(h) >> 11) * 0x1.0p-53;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// A bijection of 32-bit values (murmur3's finaliser), so distinct values get distinct hex.
uint32_t Scramble(uint32_t x) {
  x ^= x >> 16;
  x *= 0x85ebca6bU;
  x ^= x >> 13;
  x *= 0xc2b2ae35U;
  return x ^ (x >> 16);
}

class CriteoGenerator {
 public:
  explicit CriteoGenerator(const CriteoGenOptions& options) : options_(options) {
    int interacting = 0;
    for (const Field& f : kFieldSpecs) interacting += f.interacts;
    const int pairs = interacting * (interacting - 1) / 2;
    // Each latent dot product has variance kLatent: scale the pairwise sum to a standard
    // deviation of about 2.5 logits, the biases' sum to about 0.7.
    pair_scale_ = options.interaction * 2.5 / std::sqrt(static_cast<double>(pairs) * kLatent);
    bias_scale_ = 0.7 / std::sqrt(static_cast<double>(kFields));
  }

  // Appends one line to *out; returns its label.
  int Row(Random& rng, std::string* out) {
    double logit = kOffset;
    std::string dense_text;
    for (int j = 0; j < kDense; ++j) {
      const DenseSpec& d = kDenseSpecs[j];
      const double normal = rng.Normal();
      if (rng.Uniform() < d.empty) {
        dense_text += '\t';
        continue;
      }
      int64_t x = std::max<int64_t>(0, static_cast<int64_t>(std::exp(d.mu + normal)) - 1);
      if (j == 1 && rng.Uniform() < 0.05) x = -1 - static_cast<int64_t>(rng.UniformInt(3));
      logit += d.weight * (std::log1p(static_cast<double>(std::max<int64_t>(x, 0))) - d.mu);
      absl::StrAppend(&dense_text, "\t", x);
    }
    std::string categorical_text;
    double latent[kFields][kLatent] = {};
    bool present[kFields] = {};
    for (int f = 0; f < kFields; ++f) {
      const Field& spec = kFieldSpecs[f];
      const double u = rng.Uniform();
      if (rng.Uniform() < spec.empty) {
        categorical_text += '\t';
        continue;
      }
      const uint64_t value = ZipfValue(u, spec.vocabulary);
      present[f] = true;
      logit += bias_scale_ * HashNormal(options_.seed, f, value, kLatent);
      if (spec.interacts) {
        for (int k = 0; k < kLatent; ++k) latent[f][k] = HashNormal(options_.seed, f, value, k);
      }
      absl::StrAppend(
          &categorical_text, "\t",
          absl::Hex(Scramble(static_cast<uint32_t>(value) + 0x9e3779b9U * f), absl::kZeroPad8));
    }
    double pairwise = 0;
    for (int f = 0; f < kFields; ++f) {
      if (!present[f] || !kFieldSpecs[f].interacts) continue;
      for (int g = f + 1; g < kFields; ++g) {
        if (!present[g] || !kFieldSpecs[g].interacts) continue;
        for (int k = 0; k < kLatent; ++k) pairwise += latent[f][k] * latent[g][k];
      }
    }
    logit += pair_scale_ * pairwise;
    const int label = rng.Uniform() < 1.0 / (1.0 + std::exp(-logit)) ? 1 : 0;
    absl::StrAppend(out, label, dense_text, categorical_text, "\n");
    return label;
  }

 private:
  // Sets the positive rate near a quarter, about that of the real logs.
  static constexpr double kOffset = -1.6;

  // Zipf over [0, n) by inverting the continuous power law's distribution function: O(1)
  // without a table, so vocabularies of millions cost nothing.
  uint64_t ZipfValue(double u, uint64_t n) const {
    const double a = 1.0 - options_.zipf;
    const double top = std::pow(static_cast<double>(n) + 1.0, a);
    const double x = std::pow(1.0 + u * (top - 1.0), 1.0 / a);
    return std::min<uint64_t>(static_cast<uint64_t>(x) - 1, n - 1);
  }

  const CriteoGenOptions options_;
  double pair_scale_ = 0;
  double bias_scale_ = 0;
};

absl::Status WriteRows(CriteoGenerator& gen, Random& rng, uint64_t rows, std::ostream& out,
                       const char* which, uint64_t* positives) {
  std::string buffer;
  for (uint64_t i = 0; i < rows; ++i) {
    *positives += gen.Row(rng, &buffer);
    if (buffer.size() >= kFlushBytes || i + 1 == rows) {
      out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
      buffer.clear();
      if (!out) return absl::DataLossError(absl::StrCat("writing the ", which, " data failed"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

double CriteoGenSummary::PositiveRate() const {
  return train_rows == 0 ? 0
                         : static_cast<double>(train_positives) / static_cast<double>(train_rows);
}

absl::Status ValidateCriteoGenOptions(const CriteoGenOptions& options) {
  if (options.rows < 1) return absl::InvalidArgumentError("--rows must be at least 1");
  if (!(options.zipf > 0) || options.zipf == 1 || options.zipf > 10) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--zipf must be in (0, 10] and not 1, got %g", options.zipf));
  }
  if (!(options.interaction >= 0) || options.interaction > 100) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--interaction must be in [0, 100], got %g", options.interaction));
  }
  return absl::OkStatus();
}

absl::StatusOr<CriteoGenSummary> WriteCriteoSynthetic(const CriteoGenOptions& options,
                                                      std::ostream& train, std::ostream* test) {
  if (absl::Status s = ValidateCriteoGenOptions(options); !s.ok()) return s;
  CriteoGenerator gen(options);
  CriteoGenSummary summary;
  Random train_rng(options.seed, 1);
  if (auto s = WriteRows(gen, train_rng, options.rows, train, "training", &summary.train_positives);
      !s.ok()) {
    return s;
  }
  summary.train_rows = options.rows;
  if (test != nullptr) {
    Random test_rng(options.seed, 2);
    uint64_t positives = 0;
    if (auto s = WriteRows(gen, test_rng, options.test_rows, *test, "test", &positives); !s.ok()) {
      return s;
    }
    summary.test_rows = options.test_rows;
  }
  return summary;
}

}  // namespace syncline
