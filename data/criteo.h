// Reading Criteo-format click logs: "label \t I1..I13 \t C1..C26", one example per line, where
// the 13 I fields are integers and the 26 C fields hexadecimal category values; any feature
// field may be empty.
//
// Every example becomes the same 39 entries of a Dataset row, so linear and CTR models read the
// same layout:
//   entries 0..12:  ids 0..12, value log1p(max(I, 0)) (an empty field is 0);
//   entries 13..38: id CriteoCategoricalId(field, value) (an empty field has its own id per
//                   field), value 1.
// Categorical ids have the top bit set, so they never meet the dense ids 0..12; the Dataset's
// num_features is 0 ("any 64-bit key").
//
// The file may be larger than memory: a CriteoReader streams it, reading only one chunk of this
// worker's strided partition at a time, and rewinds for the next epoch.
//
// Thread-safety: CriteoReader is thread-compatible; the free functions are thread-safe.
#ifndef SYNCLINE_DATA_CRITEO_H_
#define SYNCLINE_DATA_CRITEO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"
#include "data/example_source.h"
#include "data/line_reader.h"

namespace syncline {

inline constexpr int kCriteoDenseFields = 13;
inline constexpr int kCriteoCategoricalFields = 26;
inline constexpr int kCriteoEntries = kCriteoDenseFields + kCriteoCategoricalFields;
// Set in every categorical id.
inline constexpr uint64_t kCriteoCategoricalBit = uint64_t{1} << 63;

// The id of categorical field `field` (0-based, 0..25) holding hexadecimal value `value`, or
// the field's "missing" id when `present` is false. A 64-bit hash with the top bit set.
uint64_t CriteoCategoricalId(int field, uint64_t value, bool present);

// The value a dense entry stores for integer x: log1p(max(x, 0)).
float CriteoDenseValue(int64_t x);

struct CriteoOptions {
  // Keep the examples whose data-line number (0-based, blank lines not counted) %
  // num_partitions == partition, as ReadOptions does.
  int partition = 0;
  int num_partitions = 1;
};

class CriteoReader final : public ChunkedSource {
 public:
  // Opens `path` and validates every line of the file (all partitions, so that every worker
  // agrees on errors), counting the examples. Reads the file once, in bounded memory.
  // Errors: NotFound etc. naming the path; InvalidArgument "PATH:LINE: what (token)" for the
  // first malformed line (field count, label, a non-integer I field, a non-hex C field).
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Open(const std::string& path,
                                                            const CriteoOptions& options);

  // Examples of this partition, and of the whole file.
  uint64_t size() const override { return partition_examples_; }
  uint64_t total_examples() const { return total_examples_; }

  absl::Status Rewind() override;

  // Replaces *chunk with the next at most max_examples examples of the partition; returns false
  // (and an empty chunk) at the end of the pass.
  absl::StatusOr<bool> ReadChunk(size_t max_examples, Dataset* chunk) override;

  // ReadChunk into a chunk the reader owns; the slice covers all of it.
  absl::StatusOr<DataSlice> Next(size_t max_examples) override;

  // Parsing a line costs several times reading it: a PrefetchingSource may parse on several
  // threads. ReadRaw copies the partition's next lines (blank ones and other partitions'
  // skipped); ParseRaw parses them (const, thread-safe).
  bool ParsesApart() const override { return true; }
  absl::StatusOr<bool> ReadRaw(size_t max_examples, RawChunk* raw) override;
  absl::Status ParseRaw(const RawChunk& raw, Dataset* chunk) const override;

 private:
  CriteoReader(std::unique_ptr<LineReader> lines, const CriteoOptions& options)
      : lines_(std::move(lines)), options_(options) {}

  std::unique_ptr<LineReader> lines_;
  const CriteoOptions options_;
  uint64_t data_line_ = 0;  // Data lines of the current pass read so far.
  RawChunk raw_;            // ReadChunk's lines, before they are parsed
  uint64_t total_examples_ = 0;
  uint64_t partition_examples_ = 0;
  Dataset chunk_;
};

// Parses one Criteo line. Returns false for a blank line (no example). Otherwise appends the
// example's 39 entries and label to *out when it is not null, or only validates it.
// `path` and `line_no` name the line in errors.
absl::StatusOr<bool> ParseCriteoLine(std::string_view line, const std::string& path,
                                     uint64_t line_no, Dataset* out);

}  // namespace syncline

#endif  // SYNCLINE_DATA_CRITEO_H_
