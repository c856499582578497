// Synthetic classification data drawn from a known random sparse linear model, so that anyone
// can make reproducible train/test files (libsvm or CSV) for trying and testing Syncline.
//
// Output depends only on the options: the same seed gives the same bytes from run to run and
// across compilers, because the random draws are built on std::mt19937_64 alone rather than on
// the implementation-defined std:: distributions (only a different libm could, rarely, flip a
// borderline label).
//
// Thread-safety: WriteSynthetic has no shared state; concurrent calls on different streams are
// safe.
#ifndef SYNCLINE_TOOLS_SYNTHETIC_H_
#define SYNCLINE_TOOLS_SYNTHETIC_H_

#include <cstdint>
#include <ostream>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

enum class SyntheticFormat {
  kLibsvm,  // Sparse "label id:value ..." lines, ids ascending.
  kCsv,     // A header "label,f0,f1,..." then dense rows; only for small feature counts.
};

enum class SyntheticValues {
  kOnes,      // Every present feature has value 1 (typical of hashed categorical data).
  kGaussian,  // Values ~ N(0, 1).
};

struct SyntheticOptions {
  uint64_t rows = 20000;      // Training rows.
  uint64_t test_rows = 2000;  // Test rows, written only when a test stream is given.
  uint64_t features = 10000;  // Feature ids are drawn from [0, features).
  uint64_t nnz = 20;          // Distinct features per row, at most `features`.
  double zipf = 1.1;          // Zipf exponent s >= 0 of feature popularity: P(id) ∝ (id+1)^-s.
  int classes = 2;            // 2: binary labels 0/1; K > 2: labels 0..K-1.
  uint64_t seed = 1;          // Seeds the true model, the rows and the label noise.
  double noise = 0.0;         // Probability that a label is replaced by another random class.
  SyntheticFormat format = SyntheticFormat::kLibsvm;
  int index_base = 1;  // libsvm: first feature id written (0 or 1).
  SyntheticValues values = SyntheticValues::kOnes;
};

// Most features CSV will write as dense columns.
inline constexpr uint64_t kMaxCsvFeatures = 1000;

struct SyntheticSummary {
  uint64_t train_rows = 0;
  uint64_t test_rows = 0;
  std::vector<uint64_t> train_class_counts;  // Training rows per class.
  // Fraction of training rows with label 1 (the positive rate for binary data).
  double PositiveRate() const;
};

// InvalidArgument naming the offending option, or OK.
absl::Status ValidateSyntheticOptions(const SyntheticOptions& options);

// Draws the true model, then writes options.rows rows to `train` and, when `test` is not null,
// options.test_rows rows from the same model to *test. Train bytes do not depend on whether a
// test stream is given, nor (apart from labels) on `noise`.
// Errors: InvalidArgument for bad options, DataLoss when a stream fails.
absl::StatusOr<SyntheticSummary> WriteSynthetic(const SyntheticOptions& options,
                                                std::ostream& train, std::ostream* test);

}  // namespace syncline

#endif  // SYNCLINE_TOOLS_SYNTHETIC_H_
