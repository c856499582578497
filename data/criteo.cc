#include "data/criteo.h"

#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_format.h"

namespace syncline {
namespace {

constexpr int kFields = 1 + kCriteoEntries;  // The label, then the features.

// splitmix64's finaliser: a bijection of 64-bit values that mixes every input bit into every
// output bit.
inline uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

inline int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// CriteoDenseValue through a table for the small counts that most I fields hold: log1p is the
// costliest step of parsing a line. The table holds the function's own results, so the values
// are the same bit for bit.
float DenseValue(int64_t x) {
  static constexpr int64_t kTabled = 4096;
  static const std::array<float, kTabled> table = [] {
    std::array<float, kTabled> t;
    for (int64_t i = 0; i < kTabled; ++i) t[i] = CriteoDenseValue(i);
    return t;
  }();
  return x >= 0 && x < kTabled ? table[x] : CriteoDenseValue(x);
}

// Parses 1..16 hex digits. Returns nullptr on success, else what is wrong.
const char* ParseHex(std::string_view token, uint64_t* value) {
  if (token.size() > 16) return "is longer than 16 hexadecimal digits";
  uint64_t v = 0;
  for (const char c : token) {
    const int d = HexDigit(c);
    if (d < 0) return "is not hexadecimal";
    v = v << 4 | static_cast<uint64_t>(d);
  }
  *value = v;
  return nullptr;
}

// Parses an optionally signed decimal integer. Returns nullptr on success, else what is wrong.
const char* ParseInteger(std::string_view token, int64_t* value) {
  if (!token.empty() && token.front() == '+') token.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(token.data(), token.data() + token.size(), *value);
  if (token.empty() || ec == std::errc::invalid_argument || ptr != token.data() + token.size()) {
    return "is not an integer";
  }
  if (ec == std::errc::result_out_of_range) return "is out of range";
  return nullptr;
}

// The field and presence choose one of 52 independent hash functions of the value: salt
// 2 * field + present.
inline uint64_t Salt(int field, bool present) {
  return Mix(0x5ca1ab1e00000000ULL + 2 * static_cast<uint64_t>(field) + present);
}

// Hex digit values by character; -1 for any other character.
constexpr std::array<int8_t, 256> kHexValue = [] {
  std::array<int8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    t[c] = static_cast<int8_t>(c >= '0' && c <= '9'   ? c - '0'
                               : c >= 'a' && c <= 'f' ? c - 'a' + 10
                               : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                      : -1);
  }
  return t;
}();

// A line as the common case has it, parsed in one pass over its bytes: a label of 0 or 1, then
// 13 integers of at most 18 digits (an optional sign) and 26 hex values of at most 16 digits,
// any of them empty, 40 fields in all. False for anything else (or any doubt), which the
// careful path of ParseCriteoLine then judges and names: both paths give the same example.
// Without `values` (validation alone) the dense values and ids are not computed.
bool ParseCommonLine(std::string_view line, bool values, float* label,
                     float dense[kCriteoDenseFields],
                     uint64_t categorical[kCriteoCategoricalFields]) {
  static const std::array<uint64_t, 2 * kCriteoCategoricalFields> salts = [] {
    std::array<uint64_t, 2 * kCriteoCategoricalFields> t;
    for (int f = 0; f < kCriteoCategoricalFields; ++f) {
      t[2 * f] = Salt(f, false);
      t[2 * f + 1] = Salt(f, true);
    }
    return t;
  }();
  const char* p = line.data();
  const char* const end = p + line.size();
  if (end - p < 2 || (p[0] != '0' && p[0] != '1') || p[1] != '\t') return false;
  *label = p[0] == '1' ? 1.0f : 0.0f;
  p += 2;
  for (int i = 0; i < kCriteoDenseFields; ++i) {
    const char* const start = p;
    bool negative = false;
    if (p < end && (*p == '-' || *p == '+')) negative = *p++ == '-';
    const char* const first = p;
    uint64_t x = 0;  // unsigned: past 18 digits it wraps (defined), and the line goes below
    while (p < end && *p != '\t') {
      const unsigned d = static_cast<unsigned char>(*p) - '0';
      if (d > 9) return false;
      x = 10 * x + d;
      ++p;
    }
    // A sign without digits, or a number from_chars might find out of range: the careful path.
    if ((p == first && first != start) || p - first > 18) return false;
    if (p == end) return false;  // the categorical fields follow
    ++p;
    const auto value = static_cast<int64_t>(x);  // at most 18 digits: below 2^63
    if (values) dense[i] = DenseValue(negative ? -value : value);
  }
  for (int c = 0; c < kCriteoCategoricalFields; ++c) {
    const char* const first = p;
    uint64_t v = 0;
    while (p < end && *p != '\t') {
      const int d = kHexValue[static_cast<unsigned char>(*p)];
      if (d < 0) return false;
      v = v << 4 | static_cast<uint64_t>(d);
      ++p;
    }
    if (p - first > 16) return false;
    if (values) {
      const bool present = p != first;
      categorical[c] = Mix(salts[2 * c + present] ^ Mix(v)) | kCriteoCategoricalBit;
    }
    if (c + 1 < kCriteoCategoricalFields) {
      if (p == end) return false;
      ++p;
    }
  }
  return p == end;
}

}  // namespace

uint64_t CriteoCategoricalId(int field, uint64_t value, bool present) {
  return Mix(Salt(field, present) ^ Mix(value)) | kCriteoCategoricalBit;
}

float CriteoDenseValue(int64_t x) {
  return x <= 0 ? 0.0f : static_cast<float>(std::log1p(static_cast<double>(x)));
}

namespace {

void AppendExample(float label, const float dense[kCriteoDenseFields],
                   const uint64_t categorical[kCriteoCategoricalFields], Dataset* out) {
  if (out->row_offsets.empty()) out->row_offsets.push_back(0);
  const size_t at = out->ids.size();
  out->ids.resize(at + kCriteoEntries);
  out->values.resize(at + kCriteoEntries);
  uint64_t* ids = out->ids.data() + at;
  float* values = out->values.data() + at;
  for (int i = 0; i < kCriteoDenseFields; ++i) {
    ids[i] = static_cast<uint64_t>(i);
    values[i] = dense[i];
  }
  for (int c = 0; c < kCriteoCategoricalFields; ++c) {
    ids[kCriteoDenseFields + c] = categorical[c];
    values[kCriteoDenseFields + c] = 1.0f;
  }
  out->labels.push_back(label);
  out->row_offsets.push_back(out->ids.size());
}

}  // namespace

absl::StatusOr<bool> ParseCriteoLine(std::string_view line, const std::string& path,
                                     uint64_t line_no, Dataset* out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.empty()) return false;
  float label;
  float dense[kCriteoDenseFields];
  uint64_t categorical[kCriteoCategoricalFields];
  if (ParseCommonLine(line, out != nullptr, &label, dense, categorical)) {
    if (out != nullptr) AppendExample(label, dense, categorical, out);
    return true;
  }
  // The careful path, which names what is wrong. Split first: a wrong field count is the likeliest
  // mistake (a CSV, a libsvm file, a truncated line) and deserves its own message before any field
  // is judged.
  std::string_view fields[kFields];
  int count = 0;
  for (size_t begin = 0;;) {
    const size_t tab = line.find('\t', begin);
    if (count < kFields) fields[count] = line.substr(begin, tab - begin);
    ++count;
    if (tab == std::string_view::npos) break;
    begin = tab + 1;
  }
  if (count != kFields) {
    return LineError(path, line_no,
                     absl::StrFormat("expected %d tab-separated fields (label, 13 integer, 26 "
                                     "categorical), got %d",
                                     kFields, count),
                     line);
  }
  if (fields[0] == "0") {
    label = 0;
  } else if (fields[0] == "1") {
    label = 1;
  } else {
    return LineError(path, line_no, "label must be 0 or 1", fields[0]);
  }
  for (int i = 0; i < kCriteoDenseFields; ++i) {
    const std::string_view token = fields[1 + i];
    int64_t x = 0;
    if (!token.empty()) {
      if (const char* what = ParseInteger(token, &x)) {
        return LineError(path, line_no, absl::StrFormat("integer feature I%d %s", i + 1, what),
                         token);
      }
    }
    dense[i] = out != nullptr ? DenseValue(x) : 0.0f;
  }
  for (int c = 0; c < kCriteoCategoricalFields; ++c) {
    const std::string_view token = fields[1 + kCriteoDenseFields + c];
    uint64_t value = 0;
    if (!token.empty()) {
      if (const char* what = ParseHex(token, &value)) {
        return LineError(path, line_no, absl::StrFormat("categorical feature C%d %s", c + 1, what),
                         token);
      }
    }
    // Validation alone (Open's pass over every partition) needs no ids.
    categorical[c] = out != nullptr ? CriteoCategoricalId(c, value, !token.empty()) : 0;
  }
  if (out != nullptr) AppendExample(label, dense, categorical, out);
  return true;
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Open(const std::string& path,
                                                                 const CriteoOptions& options) {
  if (options.num_partitions < 1 || options.partition < 0 ||
      options.partition >= options.num_partitions) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "reading %s: partition %d of %d is not a valid partition (need 0 <= partition < "
        "num_partitions)",
        path, options.partition, options.num_partitions));
  }
  absl::StatusOr<std::unique_ptr<LineReader>> lines = LineReader::Open(path);
  if (!lines.ok()) return lines.status();
  std::unique_ptr<CriteoReader> reader(new CriteoReader(std::move(*lines), options));
  LineReader& in = *reader->lines_;
  std::string_view line;
  while (true) {
    absl::StatusOr<bool> more = in.Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    absl::StatusOr<bool> example = ParseCriteoLine(line, path, in.line_number(), nullptr);
    if (!example.ok()) return example.status();
    reader->total_examples_ += *example;
  }
  if (reader->total_examples_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s holds no examples (only blank lines)", path));
  }
  const uint64_t p = static_cast<uint64_t>(options.partition);
  const uint64_t n = static_cast<uint64_t>(options.num_partitions);
  const uint64_t total = reader->total_examples_;
  reader->partition_examples_ = total > p ? (total - p + n - 1) / n : 0;
  if (absl::Status s = reader->Rewind(); !s.ok()) return s;
  return reader;
}

absl::Status CriteoReader::Rewind() {
  data_line_ = 0;
  return lines_->Rewind();
}

absl::StatusOr<bool> CriteoReader::ReadChunk(size_t max_examples, Dataset* chunk) {
  absl::StatusOr<bool> more = ReadRaw(max_examples, &raw_);
  if (!more.ok()) return more.status();
  if (absl::Status s = ParseRaw(raw_, chunk); !s.ok()) return s;
  return chunk->size() > 0;
}

absl::StatusOr<bool> CriteoReader::ReadRaw(size_t max_examples, RawChunk* raw) {
  raw->Clear();
  const uint64_t n = static_cast<uint64_t>(options_.num_partitions);
  const uint64_t p = static_cast<uint64_t>(options_.partition);
  std::string_view line;
  while (raw->lines() < max_examples) {
    absl::StatusOr<bool> more = lines_->Next(&line);
    if (!more.ok()) return more.status();
    if (!*more) break;
    if (line.empty() || (line.size() == 1 && line[0] == '\r')) continue;  // Blank: no example.
    // Lines of other partitions are skipped unparsed; Open() validated them.
    if (data_line_++ % n != p) continue;
    raw->bytes.append(line);
    raw->ends.push_back(raw->bytes.size());
    raw->line_numbers.push_back(lines_->line_number());
  }
  return raw->lines() > 0;
}

absl::Status CriteoReader::ParseRaw(const RawChunk& raw, Dataset* chunk) const {
  chunk->labels.clear();
  chunk->ids.clear();
  chunk->values.clear();
  chunk->row_offsets.assign(1, 0);
  chunk->num_features = 0;
  chunk->index_base = IndexBase::kZero;
  chunk->ids.reserve(raw.lines() * kCriteoEntries);
  chunk->values.reserve(raw.lines() * kCriteoEntries);
  chunk->labels.reserve(raw.lines());
  chunk->row_offsets.reserve(raw.lines() + 1);
  for (size_t i = 0; i < raw.lines(); ++i) {
    absl::StatusOr<bool> example =
        ParseCriteoLine(raw.line(i), lines_->path(), raw.line_numbers[i], chunk);
    if (!example.ok()) return example.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<DataSlice> CriteoReader::Next(size_t max_examples) {
  absl::StatusOr<bool> more = ReadChunk(max_examples, &chunk_);
  if (!more.ok()) return more.status();
  return DataSlice{&chunk_, 0, static_cast<uint32_t>(chunk_.size())};
}

}  // namespace syncline
