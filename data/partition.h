// Splitting a training set among the workers by label, for non-IID (federated) experiments:
// strided, seeded IID, per-label Dirichlet proportions (Hsu et al. 2019) or label-sorted shards
// (McMahan et al. 2017), and per-worker label histograms to report what each worker got. The
// text forms of PartitionSpec are job/options.h's ParsePartition and PartitionName.
//
// Every random draw comes from core/random.h's Random (std::mt19937_64 seeded through
// std::seed_seq, both fully specified by the standard) through this file's own Fisher-Yates
// shuffle and Marsaglia-Tsang gamma sampler, never a std:: distribution or std::shuffle, so the
// same seed gives the same partition with every standard library.
//
// Thread-safety: stateless (pure functions).
#ifndef SYNCLINE_DATA_PARTITION_H_
#define SYNCLINE_DATA_PARTITION_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "syncline/options.h"

namespace syncline {

// Assigns each example i (labels[i] an integer in [0, classes)) to one of `workers` workers and
// returns, per worker, its example indices in ascending order. Every example is assigned to
// exactly one worker; a worker may get none (dirichlet, or fewer examples than workers).
//   strided:   example i to worker i % workers (no random draws).
//   iid:       a seeded permutation of all examples dealt out in consecutive equal parts (the
//              first examples % workers workers get one more).
//   dirichlet: for each label c = 0, 1, ... in order, the label's examples in a seeded shuffled
//              order, cut into consecutive runs, one per worker, of sizes round(p_w * count) for
//              p ~ Dirichlet(alpha, ..., alpha) over the workers; the runs end at the rounded
//              cumulative sums, so the sizes add up to the count exactly.
//   shards:    the examples sorted by label (stable: ties by index), cut into workers * K
//              consecutive shards whose sizes differ by at most one, dealt out by a seeded
//              permutation of the shards, K to each worker.
// The same arguments give the same result on every machine.
// Errors: InvalidArgument for classes < 1, workers < 1, more than 2^32 examples, a label that is
// not an integer in [0, classes), dirichlet alpha not finite and > 0, shards K < 1, or
// workers * K > the number of examples.
absl::StatusOr<std::vector<std::vector<uint32_t>>> PartitionByLabel(std::span<const float> labels,
                                                                    int classes, int workers,
                                                                    const PartitionSpec& spec,
                                                                    uint64_t seed);

// Per worker (part), how many of its examples have each label: result[w][c], c in [0, classes).
// Indices >= labels.size() and labels that are not an integer in [0, classes) are not counted.
std::vector<std::vector<uint64_t>> LabelHistograms(std::span<const float> labels, int classes,
                                                   const std::vector<std::vector<uint32_t>>& parts);

// The histograms as TSV text, every line ending in '\n': the header
// "worker\tlabel0\tlabel1...\ttotal", then one row "W\tN0\tN1...\tTOTAL" per worker. The label
// columns are as many as the longest row has (shorter rows are padded with 0).
std::string LabelHistogramsTsv(const std::vector<std::vector<uint64_t>>& histograms);

// The examples of `data` with the given indices, in the given order (an index may repeat), as a
// new Dataset with the same num_features and index_base. Every index must be < data.size().
Dataset SelectExamples(const Dataset& data, std::span<const uint32_t> examples);

}  // namespace syncline

#endif  // SYNCLINE_DATA_PARTITION_H_
