#include "tools/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/random.h"

namespace syncline {
namespace {

// The true model holds features * outputs floats; beyond this it would not fit in memory.
constexpr uint64_t kMaxModelWeights = uint64_t{1} << 28;
// Output is built in a string and handed to the stream in blocks of about this size.
constexpr size_t kFlushBytes = size_t{1} << 20;

// Draws feature ids from Zipf(s) over [0, n) by searching the cumulative weights.
class ZipfSampler {
 public:
  ZipfSampler(uint64_t n, double s) : s_(s), cdf_(n) {
    double total = 0;
    for (uint64_t i = 0; i < n; ++i) {
      total += Weight(i);
      cdf_[i] = total;
    }
    const size_t buckets = std::min<uint64_t>(n, kMaxBuckets);
    guide_.resize(buckets + 1);
    for (size_t b = 0; b <= buckets; ++b) guide_[b] = UpperBoundIn(0, n, b * (total / buckets));
  }

  double Weight(uint64_t id) const { return std::pow(static_cast<double>(id + 1), -s_); }
  double total() const { return cdf_.back(); }

  uint64_t Sample(Random& rng) const {
    return std::min<uint64_t>(UpperBound(rng.Uniform() * total()), cdf_.size() - 1);
  }

  // Draws an id not in `chosen` (ascending) with probability proportional to its weight, i.e.
  // from the distribution left after removing the chosen ids. prefix[j] is the total weight of
  // chosen[0..j). Costs O(chosen ids skipped * log n), independent of how much mass is chosen.
  uint64_t SampleExcluding(Random& rng, const std::vector<uint64_t>& chosen,
                           const std::vector<double>& prefix) const {
    const double x = rng.Uniform() * (total() - prefix.back());
    return Find(x, chosen, prefix);
  }

 private:
  // The smallest id with cdf[id] - (weight of chosen ids <= id) > x. That function of id is
  // flat at chosen ids, so the answer is never a chosen id (up to rounding, which callers
  // check). Iterating "skip the chosen mass below the candidate" only moves the candidate up
  // and stops at the answer.
  uint64_t Find(double x, const std::vector<uint64_t>& chosen,
                const std::vector<double>& prefix) const {
    size_t skipped = 0;  // Chosen ids <= the candidate.
    uint64_t id;
    while (true) {
      const double target = x + prefix[skipped];
      id = std::min<uint64_t>(UpperBound(target), cdf_.size() - 1);
      const size_t now_skipped =
          std::upper_bound(chosen.begin(), chosen.end(), id) - chosen.begin();
      if (now_skipped == skipped) return id;
      skipped = now_skipped;
    }
  }

  // The first id with cdf > x (n if none), as std::upper_bound over all of cdf_. The guide
  // table first narrows the search to x's bucket: popular ids then take a step or two, and the
  // long tail a much shorter search.
  uint64_t UpperBound(double x) const {
    const size_t buckets = guide_.size() - 1;
    const size_t b = std::min(static_cast<size_t>(x / total() * buckets), buckets - 1);
    const uint64_t lo = guide_[b];
    const uint64_t hi = std::min<uint64_t>(guide_[b + 1] + 1, cdf_.size());
    const uint64_t id = UpperBoundIn(lo, hi, x);
    // Rounding in the bucket arithmetic can put x in a neighbouring bucket: search everything.
    if ((lo > 0 && cdf_[lo - 1] > x) || (id == hi && hi < cdf_.size())) {
      return UpperBoundIn(0, cdf_.size(), x);
    }
    return id;
  }

  uint64_t UpperBoundIn(uint64_t lo, uint64_t hi, double x) const {
    return std::upper_bound(cdf_.begin() + lo, cdf_.begin() + hi, x) - cdf_.begin();
  }

  // 128 KiB of guide stays in cache; a bigger one costs more in misses than it saves in search.
  static constexpr uint64_t kMaxBuckets = uint64_t{1} << 14;

  double s_;
  std::vector<double> cdf_;
  std::vector<uint64_t> guide_;  // guide_[b]: first id with cdf > b * total / buckets.
};

struct Row {
  std::vector<uint64_t> ids;  // Ascending, distinct.
  std::vector<float> values;
  int label = 0;
};

// The known model and the random streams that draw rows from it.
class Generator {
 public:
  explicit Generator(const SyntheticOptions& options)
      : options_(options),
        outputs_(options.classes == 2 ? 1 : options.classes),
        zipf_(options.features, options.zipf),
        model_rng_(options.seed, 0),
        row_rng_(options.seed, 1),
        noise_rng_(options.seed, 2) {
    weights_.resize(options.features * outputs_);
    for (float& w : weights_) w = static_cast<float>(model_rng_.Normal());
    bias_.resize(outputs_);
    for (double& b : bias_) b = model_rng_.Normal();
  }

  void Next(Row* row) {
    DrawFeatures(&row->ids);
    row->values.resize(row->ids.size());
    for (float& v : row->values) {
      v = options_.values == SyntheticValues::kOnes ? 1.0f : static_cast<float>(row_rng_.Normal());
    }
    std::vector<double> z = bias_;
    for (size_t j = 0; j < row->ids.size(); ++j) {
      const float* w = &weights_[row->ids[j] * outputs_];
      for (int k = 0; k < outputs_; ++k) z[k] += w[k] * row->values[j];
    }
    row->label = DrawLabel(z);
    // Drawn for every row, so that the noise level changes labels only, not the other rows.
    const double flip = noise_rng_.Uniform();
    const int other = static_cast<int>(noise_rng_.UniformInt(options_.classes - 1));
    if (flip < options_.noise) row->label = (row->label + 1 + other) % options_.classes;
  }

 private:
  // Distinct Zipf-distributed ids: sampling without replacement, i.e. each id drawn from the
  // Zipf distribution restricted to the ids not yet chosen. Plain rejection does that cheaply
  // while the chosen ids hold under half the mass; past that (nnz near `features`, or a steep
  // Zipf) it would stall, so the rest are drawn from the remaining mass directly.
  void DrawFeatures(std::vector<uint64_t>* ids) {
    ids->clear();
    seen_.clear();
    const uint64_t nnz = options_.nnz;
    double chosen_mass = 0;
    while (ids->size() < nnz && chosen_mass < 0.5 * zipf_.total()) {
      const uint64_t id = zipf_.Sample(row_rng_);
      if (seen_.insert(id).second) {
        ids->push_back(id);
        chosen_mass += zipf_.Weight(id);
      }
    }
    std::sort(ids->begin(), ids->end());
    if (ids->size() == nnz) return;
    std::vector<double> prefix(ids->size() + 1, 0.0);
    for (size_t j = 0; j < ids->size(); ++j) prefix[j + 1] = prefix[j] + zipf_.Weight((*ids)[j]);
    int collisions = 0;
    while (ids->size() < nnz) {
      uint64_t id = zipf_.SampleExcluding(row_rng_, *ids, prefix);
      auto at = std::lower_bound(ids->begin(), ids->end(), id);
      if (at != ids->end() && *at == id) {
        // Only through rounding, e.g. tail weights too small to move the cumulative sum.
        if (++collisions < 64) continue;
        id = SmallestUnchosen(*ids);
        at = std::lower_bound(ids->begin(), ids->end(), id);
      }
      const size_t j = at - ids->begin();
      ids->insert(at, id);
      prefix.insert(prefix.begin() + j + 1, prefix[j] + zipf_.Weight(id));
      for (size_t k = j + 2; k < prefix.size(); ++k) prefix[k] += zipf_.Weight(id);
    }
  }

  // The smallest id not in `ids` (ascending, fewer than `features` of them).
  static uint64_t SmallestUnchosen(const std::vector<uint64_t>& ids) {
    uint64_t id = 0;
    while (id < ids.size() && ids[id] == id) ++id;
    return id;
  }

  int DrawLabel(const std::vector<double>& z) {
    const double u = row_rng_.Uniform();
    if (outputs_ == 1) {
      const double p = 1.0 / (1.0 + std::exp(-z[0]));
      return u < p ? 1 : 0;
    }
    const double max_z = *std::max_element(z.begin(), z.end());
    double sum = 0;
    for (double zk : z) sum += std::exp(zk - max_z);
    double cumulative = 0;
    for (int k = 0; k < outputs_; ++k) {
      cumulative += std::exp(z[k] - max_z) / sum;
      if (u < cumulative) return k;
    }
    return outputs_ - 1;  // Only reached through rounding.
  }

  const SyntheticOptions& options_;
  const int outputs_;  // Weights per feature: 1 for binary, K for K classes.
  ZipfSampler zipf_;
  Random model_rng_;
  Random row_rng_;
  Random noise_rng_;
  std::vector<float> weights_;  // features x outputs_, row-major.
  std::vector<double> bias_;
  absl::flat_hash_set<uint64_t> seen_;
};

void AppendRow(const SyntheticOptions& options, const Row& row, std::string* out) {
  absl::StrAppend(out, row.label);
  // Ones are written directly: float formatting would dominate the run time.
  const bool ones = options.values == SyntheticValues::kOnes;
  if (options.format == SyntheticFormat::kLibsvm) {
    for (size_t j = 0; j < row.ids.size(); ++j) {
      absl::StrAppend(out, " ", row.ids[j] + options.index_base);
      if (ones) {
        out->append(":1");
      } else {
        absl::StrAppend(out, ":", row.values[j]);
      }
    }
  } else {
    size_t j = 0;
    for (uint64_t id = 0; id < options.features; ++id) {
      if (j < row.ids.size() && row.ids[j] == id) {
        if (ones) {
          out->append(",1");
        } else {
          absl::StrAppend(out, ",", row.values[j]);
        }
        ++j;
      } else {
        out->append(",0");
      }
    }
  }
  out->push_back('\n');
}

absl::Status Flush(std::string* buffer, std::ostream& out, const char* which) {
  out.write(buffer->data(), static_cast<std::streamsize>(buffer->size()));
  buffer->clear();
  if (!out) return absl::DataLossError(absl::StrCat("writing the ", which, " output failed"));
  return absl::OkStatus();
}

absl::Status WriteRows(const SyntheticOptions& options, uint64_t rows, Generator& generator,
                       std::ostream& out, const char* which, std::vector<uint64_t>* class_counts) {
  std::string buffer;
  if (options.format == SyntheticFormat::kCsv) {
    buffer = "label";
    for (uint64_t id = 0; id < options.features; ++id) absl::StrAppend(&buffer, ",f", id);
    buffer.push_back('\n');
  }
  Row row;
  for (uint64_t i = 0; i < rows; ++i) {
    generator.Next(&row);
    if (class_counts != nullptr) ++(*class_counts)[row.label];
    AppendRow(options, row, &buffer);
    if (buffer.size() >= kFlushBytes) {
      if (absl::Status s = Flush(&buffer, out, which); !s.ok()) return s;
    }
  }
  if (absl::Status s = Flush(&buffer, out, which); !s.ok()) return s;
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat("writing the ", which, " output failed"));
  return absl::OkStatus();
}

}  // namespace

double SyntheticSummary::PositiveRate() const {
  if (train_rows == 0 || train_class_counts.size() < 2) return 0;
  return static_cast<double>(train_class_counts[1]) / static_cast<double>(train_rows);
}

absl::Status ValidateSyntheticOptions(const SyntheticOptions& o) {
  if (o.rows == 0) return absl::InvalidArgumentError("rows must be at least 1");
  if (o.features == 0) return absl::InvalidArgumentError("features must be at least 1");
  if (o.nnz == 0 || o.nnz > o.features) {
    return absl::InvalidArgumentError(
        absl::StrFormat("nnz must be in [1, features=%d], got %d", o.features, o.nnz));
  }
  if (!(o.zipf >= 0) || !std::isfinite(o.zipf)) {
    return absl::InvalidArgumentError(absl::StrFormat("zipf must be >= 0, got %g", o.zipf));
  }
  if (o.classes < 2) {
    return absl::InvalidArgumentError(absl::StrFormat("classes must be >= 2, got %d", o.classes));
  }
  if (!(o.noise >= 0 && o.noise <= 1)) {
    return absl::InvalidArgumentError(absl::StrFormat("noise must be in [0, 1], got %g", o.noise));
  }
  if (o.index_base != 0 && o.index_base != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("index base must be 0 or 1, got %d", o.index_base));
  }
  const uint64_t outputs = o.classes == 2 ? 1 : static_cast<uint64_t>(o.classes);
  if (o.features > kMaxModelWeights / outputs) {
    return absl::InvalidArgumentError(
        absl::StrFormat("features * classes must be at most %d so that the true model fits in "
                        "memory, got %d features",
                        kMaxModelWeights, o.features));
  }
  if (o.format == SyntheticFormat::kCsv && o.features > kMaxCsvFeatures) {
    return absl::InvalidArgumentError(
        absl::StrFormat("CSV writes dense rows and is limited to %d features, got %d; use libsvm",
                        kMaxCsvFeatures, o.features));
  }
  return absl::OkStatus();
}

absl::StatusOr<SyntheticSummary> WriteSynthetic(const SyntheticOptions& options,
                                                std::ostream& train, std::ostream* test) {
  if (absl::Status s = ValidateSyntheticOptions(options); !s.ok()) return s;
  Generator generator(options);
  SyntheticSummary summary;
  summary.train_class_counts.assign(options.classes, 0);
  if (absl::Status s =
          WriteRows(options, options.rows, generator, train, "train", &summary.train_class_counts);
      !s.ok()) {
    return s;
  }
  summary.train_rows = options.rows;
  if (test != nullptr) {
    if (absl::Status s = WriteRows(options, options.test_rows, generator, *test, "test", nullptr);
        !s.ok()) {
      return s;
    }
    summary.test_rows = options.test_rows;
  }
  return summary;
}

}  // namespace syncline
