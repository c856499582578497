// Synthetic Criteo-format click data drawn from a known random model, for trying and testing
// the ctr model: lines "label \t I1..I13 \t C1..C26" as data/criteo.h reads them.
//
// The true model: each categorical field has its own vocabulary (from 3 to 1M values) with
// Zipf-distributed popularity; every (field, value) has a latent vector and a bias drawn from a
// hash of (seed, field, value), so no table of the large vocabularies is kept. The logit is
//   sum of biases  +  sum over pairs of "interacting" fields of latent dot products  +
//   a linear term of log1p(dense values)  +  an offset,
// and the label is Bernoulli(sigmoid(logit)). Most of the signal is in the pairwise terms,
// which a linear model over one-hot features cannot express; some fields are often empty.
//
// Output depends only on the options (same seed, same bytes).
//
// Thread-safety: WriteCriteoSynthetic has no shared state.
#ifndef SYNCLINE_TOOLS_CRITEO_GEN_H_
#define SYNCLINE_TOOLS_CRITEO_GEN_H_

#include <cstdint>
#include <ostream>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

struct CriteoGenOptions {
  uint64_t rows = 200000;    // Training rows.
  uint64_t test_rows = 0;    // Test rows, written only when a test stream is given.
  uint64_t seed = 1;         // Seeds the true model and the rows.
  double zipf = 1.1;         // Zipf exponent of each field's value popularity (> 0, != 1).
  double interaction = 1.0;  // Scale of the pairwise terms (0: a first-order model only).
};

struct CriteoGenSummary {
  uint64_t train_rows = 0;
  uint64_t test_rows = 0;
  uint64_t train_positives = 0;
  double PositiveRate() const;
};

// InvalidArgument naming the bad option, or OK.
absl::Status ValidateCriteoGenOptions(const CriteoGenOptions& options);

// Writes options.rows rows to `train` and, when `test` is not null, options.test_rows rows of
// the same model to *test. Train bytes do not depend on whether a test stream is given.
// Errors: InvalidArgument for bad options, DataLoss when a stream fails.
absl::StatusOr<CriteoGenSummary> WriteCriteoSynthetic(const CriteoGenOptions& options,
                                                      std::ostream& train, std::ostream* test);

}  // namespace syncline

#endif  // SYNCLINE_TOOLS_CRITEO_GEN_H_
