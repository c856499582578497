#include "data/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "data/criteo.h"
#include "data/line_reader.h"

namespace syncline {
namespace {

// Hand-rolled rather than string_view::find_first_of(" \t..."), which calls memchr per byte.
inline bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view Trim(std::string_view s) {
  size_t begin = 0;
  size_t end = s.size();
  while (begin < end && IsSpace(s[begin])) ++begin;
  while (end > begin && IsSpace(s[end - 1])) --end;
  return s.substr(begin, end - begin);
}

// Calls fn(line, line_number) for every line of the file (1-based numbers, without the '\n'),
// stopping at the first error fn returns.
template <typename Fn>
absl::Status ForEachLine(const std::string& path, Fn&& fn) {
  absl::StatusOr<std::unique_ptr<LineReader>> reader = LineReader::Open(path);
  if (!reader.ok()) return reader.status();
  std::string_view line;
  while (true) {
    absl::StatusOr<bool> more = (*reader)->Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) return absl::OkStatus();
    if (absl::Status status = fn(line, (*reader)->line_number()); !status.ok()) return status;
  }
}

// Parses all of `token` as a finite float. Returns nullptr on success, else what is wrong.
// Parsed as double so that values below float's range become 0 instead of an error.
const char* ParseValue(std::string_view token, float* out) {
  // One-hot data is mostly "1": skip the general parser for single digits.
  if (token.size() == 1 && token[0] >= '0' && token[0] <= '9') {
    *out = static_cast<float>(token[0] - '0');
    return nullptr;
  }
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  double d = 0;
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), d);
  if (token.empty() || ec == std::errc::invalid_argument || ptr != token.data() + token.size()) {
    return "not a number";
  }
  if (ec == std::errc::result_out_of_range || std::isinf(d) ||
      std::fabs(d) > std::numeric_limits<float>::max()) {
    return "value out of range";
  }
  if (std::isnan(d)) return "NaN value";
  *out = static_cast<float>(d);
  return nullptr;
}

bool IsNumber(std::string_view token) {
  float unused;
  return ParseValue(token, &unused) == nullptr;
}

// State shared by both formats: options, validation of labels, and which examples to keep.
class DatasetBuilder {
 public:
  DatasetBuilder(const std::string& path, const ReadOptions& options)
      : path_(path), options_(options) {
    data_.row_offsets.push_back(0);
  }

  const std::string& path() const { return path_; }
  const ReadOptions& options() const { return options_; }
  Dataset& data() { return data_; }

  // Parses a label token into 0/1 or a class index.
  absl::Status ParseLabel(std::string_view token, uint64_t line_no, float* label) const {
    if (!token.empty() && token.front() == '+') token.remove_prefix(1);
    double d = 0;
    const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), d);
    if (token.empty() || ec != std::errc() || ptr != token.data() + token.size() ||
        !std::isfinite(d)) {
      return LineError(path_, line_no, "label is not a number", token);
    }
    if (options_.num_classes == 2) {
      if (d != 0 && d != 1 && d != -1) {
        return LineError(path_, line_no,
                         "binary label must be 0/1 or -1/+1 (for labels 0..K-1 give --model "
                         "softmax --classes K)",
                         token);
      }
      *label = d == 1 ? 1.0f : 0.0f;
      return absl::OkStatus();
    }
    if (d != std::floor(d) || d < 0 || d >= options_.num_classes) {
      return LineError(
          path_, line_no,
          absl::StrFormat("label must be an integer class in [0, %d)", options_.num_classes),
          token);
    }
    *label = static_cast<float>(d);
    return absl::OkStatus();
  }

  // Starts the next data line; returns whether this partition keeps it.
  bool NextExample() {
    return data_line_++ % static_cast<uint64_t>(options_.num_partitions) ==
           static_cast<uint64_t>(options_.partition);
  }

  // Appends a kept example whose features were pushed onto data().ids / values.
  void EndExample(float label) {
    data_.labels.push_back(label);
    data_.row_offsets.push_back(data_.ids.size());
  }

  Dataset Release() { return std::move(data_); }
  // Data lines seen, in every partition.
  uint64_t lines_seen() const { return data_line_; }

 private:
  const std::string& path_;
  const ReadOptions& options_;
  Dataset data_;
  uint64_t data_line_ = 0;
};

// "label id:value id:value ... [# comment]". Ids are stored raw and re-based in Finish(),
// because with IndexBase::kAuto the base is known only after the whole file has been seen.
class LibsvmParser {
 public:
  explicit LibsvmParser(DatasetBuilder* builder) : b_(*builder) {}

  absl::Status ParseLine(std::string_view line, uint64_t line_no) {
    if (const size_t hash = line.find('#'); hash != std::string_view::npos) {
      line = line.substr(0, hash);
    }
    size_t pos = 0;
    std::string_view token;
    if (!NextToken(line, &pos, &token)) return absl::OkStatus();  // Blank or comment line.
    float label;
    if (absl::Status s = b_.ParseLabel(token, line_no, &label); !s.ok()) return s;
    const bool keep = b_.NextExample();
    Dataset& data = b_.data();
    while (NextToken(line, &pos, &token)) {
      const size_t colon = token.find(':');
      if (colon == std::string_view::npos) {
        return LineError(b_.path(), line_no, "feature is not id:value", token);
      }
      const std::string_view id_text = token.substr(0, colon);
      if (!id_text.empty() && id_text.front() == '-') {
        return LineError(b_.path(), line_no, "negative feature index", token);
      }
      uint64_t id = 0;
      const auto [ptr, ec] = std::from_chars(id_text.data(), id_text.data() + id_text.size(), id);
      if (id_text.empty() || ec == std::errc::invalid_argument ||
          ptr != id_text.data() + id_text.size()) {
        return LineError(b_.path(), line_no, "feature index is not a non-negative integer", token);
      }
      if (ec == std::errc::result_out_of_range || id == std::numeric_limits<uint64_t>::max()) {
        return LineError(b_.path(), line_no, "feature index too large", token);
      }
      if (id == 0) {
        if (b_.options().index_base == IndexBase::kOne) {
          return LineError(b_.path(), line_no, "feature index 0 in a 1-based file", token);
        }
        saw_zero_ = true;
      }
      float value;
      if (const char* what = ParseValue(token.substr(colon + 1), &value)) {
        return LineError(b_.path(), line_no, absl::StrCat("bad feature value: ", what), token);
      }
      if (id > max_id_ || !saw_id_) {
        max_id_ = std::max(max_id_, id);
        max_id_line_ = line_no;
      }
      saw_id_ = true;
      if (keep) {
        data.ids.push_back(id);
        data.values.push_back(value);
      }
    }
    if (keep) b_.EndExample(label);
    return absl::OkStatus();
  }

  Dataset Finish() {
    IndexBase base = b_.options().index_base;
    if (base == IndexBase::kAuto) base = saw_zero_ ? IndexBase::kZero : IndexBase::kOne;
    Dataset data = b_.Release();
    data.index_base = base;
    data.largest_id_line = max_id_line_;
    if (base == IndexBase::kOne) {
      for (uint64_t& id : data.ids) --id;
      data.num_features = max_id_;
    } else {
      data.num_features = saw_id_ ? max_id_ + 1 : 0;
    }
    return data;
  }

 private:
  // Finds the next whitespace-separated token of `line` at or after *pos.
  static bool NextToken(std::string_view line, size_t* pos, std::string_view* token) {
    size_t begin = *pos;
    while (begin < line.size() && IsSpace(line[begin])) ++begin;
    if (begin == line.size()) return false;
    size_t end = begin + 1;
    while (end < line.size() && !IsSpace(line[end])) ++end;
    *token = line.substr(begin, end - begin);
    *pos = end;
    return true;
  }

  DatasetBuilder& b_;
  uint64_t max_id_ = 0;
  uint64_t max_id_line_ = 0;  // where max_id_ was seen first
  bool saw_id_ = false;
  bool saw_zero_ = false;
};

// Dense "label,f0,f1,..." rows with an optional header line. Every row must have the column
// count of the first line (header or not).
class CsvParser {
 public:
  explicit CsvParser(DatasetBuilder* builder) : b_(*builder) {}

  absl::Status ParseLine(std::string_view line, uint64_t line_no) {
    line = Trim(line);
    if (line.empty() || line.front() == '#') return absl::OkStatus();
    fields_.clear();
    for (size_t begin = 0;;) {
      const size_t comma = line.find(',', begin);
      fields_.push_back(Trim(line.substr(begin, comma - begin)));
      if (comma == std::string_view::npos) break;
      begin = comma + 1;
    }
    if (num_columns_ == 0) {
      num_columns_ = fields_.size();
      const size_t label_column = static_cast<size_t>(b_.options().csv_label_column);
      if (label_column >= num_columns_) {
        return LineError(b_.path(), line_no,
                         absl::StrFormat("label column %d out of range for %d columns",
                                         label_column, num_columns_),
                         line);
      }
      bool all_numeric = true;
      for (std::string_view field : fields_) all_numeric = all_numeric && IsNumber(field);
      if (!all_numeric) return absl::OkStatus();  // A header.
    } else if (fields_.size() != num_columns_) {
      return LineError(
          b_.path(), line_no,
          absl::StrFormat("expected %d columns, found %d", num_columns_, fields_.size()), line);
    }

    const size_t label_column = static_cast<size_t>(b_.options().csv_label_column);
    float label;
    if (absl::Status s = b_.ParseLabel(fields_[label_column], line_no, &label); !s.ok()) {
      return s;
    }
    const bool keep = b_.NextExample();
    Dataset& data = b_.data();
    for (size_t column = 0; column < fields_.size(); ++column) {
      if (column == label_column) continue;
      float value;
      if (const char* what = ParseValue(fields_[column], &value)) {
        // Counted from 1, as editors, `cut -f` and spreadsheets count columns.
        return LineError(b_.path(), line_no,
                         absl::StrFormat("bad value in column %d: %s", column + 1, what),
                         fields_[column]);
      }
      if (keep && value != 0) {
        data.ids.push_back(column < label_column ? column : column - 1);
        data.values.push_back(value);
      }
    }
    if (keep) b_.EndExample(label);
    return absl::OkStatus();
  }

  Dataset Finish() {
    Dataset data = b_.Release();
    data.index_base = IndexBase::kZero;
    data.num_features = num_columns_ > 0 ? num_columns_ - 1 : 0;
    return data;
  }

 private:
  DatasetBuilder& b_;
  size_t num_columns_ = 0;                // 0 until the first non-blank line.
  std::vector<std::string_view> fields_;  // Reused across lines to avoid allocating per line.
};

template <typename Parser>
absl::StatusOr<Dataset> Parse(const std::string& path, DatasetBuilder* builder) {
  Parser parser(builder);
  absl::Status status = ForEachLine(path, [&parser](std::string_view line, uint64_t line_no) {
    return parser.ParseLine(line, line_no);
  });
  if (!status.ok()) return status;
  if (builder->lines_seen() == 0) {
    // Nothing to train on or to score: a wrong file, not a job of zero steps.
    return absl::InvalidArgumentError(
        absl::StrFormat("%s holds no examples (only blank lines, comments or a header)", path));
  }
  Dataset data = parser.Finish();
  data.file_examples = builder->lines_seen();
  return data;
}

absl::StatusOr<Dataset> ReadCriteo(const std::string& path, const ReadOptions& options) {
  if (options.num_classes != 2) {
    return absl::InvalidArgumentError(
        absl::StrFormat("reading %s: Criteo data is binary, num_classes must be 2, got %d", path,
                        options.num_classes));
  }
  CriteoOptions criteo;
  criteo.partition = options.partition;
  criteo.num_partitions = options.num_partitions;
  absl::StatusOr<std::unique_ptr<CriteoReader>> reader = CriteoReader::Open(path, criteo);
  if (!reader.ok()) return reader.status();
  Dataset data;
  absl::StatusOr<bool> read = (*reader)->ReadChunk(std::numeric_limits<size_t>::max(), &data);
  if (!read.ok()) return read.status();
  return data;
}

}  // namespace

DataFormat ResolveFormat(const std::string& path, DataFormat format) {
  if (format != DataFormat::kAuto) return format;
  if (absl::EndsWithIgnoreCase(path, ".csv")) return DataFormat::kCsv;
  if (absl::EndsWithIgnoreCase(path, ".tsv")) return DataFormat::kCriteo;
  return DataFormat::kLibsvm;
}

absl::StatusOr<Dataset> ReadDataset(const std::string& path, const ReadOptions& options) {
  if (options.num_partitions < 1 || options.partition < 0 ||
      options.partition >= options.num_partitions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reading %s: partition %d of %d is not a valid partition (need 0 <= partition < "
        "num_partitions)",
        path, options.partition, options.num_partitions));
  }
  if (options.num_classes < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reading %s: num_classes must be at least 2, got %d", path, options.num_classes));
  }
  if (options.csv_label_column < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reading %s: csv_label_column must be >= 0, got %d", path, options.csv_label_column));
  }
  const DataFormat format = ResolveFormat(path, options.format);
  if (format == DataFormat::kCriteo) return ReadCriteo(path, options);
  DatasetBuilder builder(path, options);
  if (format == DataFormat::kCsv) return Parse<CsvParser>(path, &builder);
  return Parse<LibsvmParser>(path, &builder);
}

}  // namespace syncline
