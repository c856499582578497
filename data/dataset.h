// Reading training and test examples from libsvm, CSV or Criteo files into memory (see
// data/criteo.h for streaming Criteo files larger than memory).
//
// A worker reads its share (partition) of a file into a Dataset: examples in CSR form with
// 0-based feature ids. Every partition parses and validates the whole file, so all workers of a
// job agree on errors, on num_features and on the index base without talking to each other.
//
// Thread-safety: ReadDataset is thread-safe (no shared state). A Dataset is a plain value:
// concurrent reads are safe, writes need external synchronization.
#ifndef SYNCLINE_DATA_DATASET_H_
#define SYNCLINE_DATA_DATASET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "syncline/options.h"

namespace syncline {

// DataFormat and IndexBase are option types (syncline/options.h).

struct ReadOptions {
  DataFormat format = DataFormat::kAuto;
  // libsvm only; CSV ids are always column positions. Pass the train file's detected
  // Dataset::index_base when reading its test file, so both number features the same way.
  IndexBase index_base = IndexBase::kAuto;
  // Keep the examples whose data-line number (0-based, counting only data lines: no header,
  // blank or comment lines) % num_partitions == partition. Strided rather than contiguous so that
  // the union of W workers' step-t batches equals a 1-worker run's step-t batch of W× the size.
  int partition = 0;
  int num_partitions = 1;
  // CSV: which column is the label. Every other column is a dense feature whose id is its
  // position among the feature columns (so with label column 0, column c is feature c-1).
  int csv_label_column = 0;
  // 2: binary labels, {0,1} or {-1,+1} (stored as 0/1). K > 2: integer labels 0..K-1.
  int num_classes = 2;
};

// Examples in CSR form: example i has features ids[row_offsets[i] .. row_offsets[i+1]) with
// values[...] at the same positions. Feature ids are 0-based after reading. CSV zeros are not
// stored (a zero feature contributes nothing to a linear model).
struct Dataset {
  std::vector<float> labels;          // One per example: 0/1, or the class index as a float.
  std::vector<uint64_t> row_offsets;  // size() + 1 entries, into ids/values.
  std::vector<uint64_t> ids;
  std::vector<float> values;
  // 1 + largest id seen in the WHOLE file (all partitions), so every worker agrees. For CSV, the
  // number of feature columns.
  uint64_t num_features = 0;
  // Examples in the WHOLE file (all partitions): what differential privacy's sampling rate
  // counts (job/privacy_plan.h). 0 for Criteo data, which is streamed.
  uint64_t file_examples = 0;
  // libsvm: the line (1-based, of the whole file) that holds the largest id, which set
  // num_features; 0 when no line did (CSV, or no feature at all). Errors about a model too
  // large for num_features name it.
  uint64_t largest_id_line = 0;
  // The base that was detected or used (kZero or kOne), so the test file can be read the same way.
  IndexBase index_base = IndexBase::kZero;

  size_t size() const { return labels.size(); }
};

// The format `format` means for the file at `path`: itself, unless it is kAuto.
DataFormat ResolveFormat(const std::string& path, DataFormat format);

// Reads the examples of options.partition from the file at `path`.
// Errors: NotFound / PermissionDenied (etc.) naming the path when it cannot be read;
// InvalidArgument "PATH:LINE: what is wrong ('token')" for the first malformed line, or naming
// the bad option.
absl::StatusOr<Dataset> ReadDataset(const std::string& path, const ReadOptions& options);

}  // namespace syncline

#endif  // SYNCLINE_DATA_DATASET_H_
