#include "data/criteo.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace syncline {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string WriteFile(const std::string& contents) {
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  const std::string name =
      absl::StrReplaceAll(absl::StrCat(info->test_suite_name(), "_", info->name()), {{"/", "_"}});
  const std::string path = absl::StrCat(testing::TempDir(), name, ".tsv");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  EXPECT_TRUE(out.good()) << "cannot write " << path;
  return path;
}

// A Criteo line: label, dense values I1.. (the rest empty), categorical values C1.. (the rest
// empty).
std::string Line(const std::string& label, std::vector<std::string> dense,
                 std::vector<std::string> categorical) {
  dense.resize(kCriteoDenseFields);
  categorical.resize(kCriteoCategoricalFields);
  return absl::StrCat(label, "\t", absl::StrJoin(dense, "\t"), "\t",
                      absl::StrJoin(categorical, "\t"), "\n");
}

// Line i of a file made by Lines(n): label i % 2, I1 = i, C1 = hex of i.
std::string Lines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    text += Line(absl::StrCat(i % 2), {absl::StrCat(i)}, {absl::StrCat(absl::Hex(i))});
  }
  return text;
}

TEST(CriteoTest, EveryExampleHasTheFixedLayout) {
  const std::string path = WriteFile(Line("1", {"3", "", "-2", "0"}, {"68fd1e64", "", "A0"}));
  absl::StatusOr<Dataset> data = ReadDataset(path, {.format = DataFormat::kCriteo});
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->size(), 1u);
  EXPECT_EQ(data->labels[0], 1.0f);
  EXPECT_EQ(data->num_features, 0u);  // Any 64-bit id.
  ASSERT_EQ(data->row_offsets.size(), 2u);
  ASSERT_EQ(data->row_offsets[1], static_cast<uint64_t>(kCriteoEntries));
  for (int j = 0; j < kCriteoDenseFields; ++j) EXPECT_EQ(data->ids[j], static_cast<uint64_t>(j));
  EXPECT_FLOAT_EQ(data->values[0], std::log1p(3.0f));
  EXPECT_EQ(data->values[1], 0.0f);  // Empty.
  EXPECT_EQ(data->values[2], 0.0f);  // Negative: clamped.
  EXPECT_EQ(data->values[3], 0.0f);
  EXPECT_EQ(data->ids[13], CriteoCategoricalId(0, 0x68fd1e64, true));
  EXPECT_EQ(data->ids[14], CriteoCategoricalId(1, 0, false));  // Empty: the field's own id.
  EXPECT_EQ(data->ids[15], CriteoCategoricalId(2, 0xa0, true));
  for (int j = kCriteoDenseFields; j < kCriteoEntries; ++j) {
    EXPECT_GE(data->ids[j], kCriteoCategoricalBit) << j;
    EXPECT_EQ(data->values[j], 1.0f);
  }
}

TEST(CriteoTest, CategoricalIdsDependOnFieldValueAndPresence) {
  EXPECT_NE(CriteoCategoricalId(0, 5, true), CriteoCategoricalId(1, 5, true));
  EXPECT_NE(CriteoCategoricalId(0, 5, true), CriteoCategoricalId(0, 6, true));
  EXPECT_NE(CriteoCategoricalId(0, 0, true), CriteoCategoricalId(0, 0, false));
  EXPECT_NE(CriteoCategoricalId(0, 0, false), CriteoCategoricalId(1, 0, false));
  // Hex digits are case-insensitive: "ab" and "AB" are the same value.
  const std::string path = WriteFile(Line("0", {}, {"ab"}) + Line("0", {}, {"AB"}));
  absl::StatusOr<Dataset> data = ReadDataset(path, {.format = DataFormat::kCriteo});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->ids[13], data->ids[kCriteoEntries + 13]);
}

TEST(CriteoTest, TsvExtensionMeansCriteo) {
  EXPECT_EQ(ResolveFormat("a/b.TSV", DataFormat::kAuto), DataFormat::kCriteo);
  EXPECT_EQ(ResolveFormat("a/b.tsv", DataFormat::kLibsvm), DataFormat::kLibsvm);
  absl::StatusOr<Dataset> data = ReadDataset(WriteFile(Lines(3)), {});
  ASSERT_TRUE(data.ok()) << data.status();
  EXPECT_EQ(data->size(), 3u);
}

TEST(CriteoTest, ErrorsNameFileLineAndField) {
  struct Case {
    std::string line;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"1\t2\t3\n", "expected 40 tab-separated fields (label, 13 integer, 26 categorical), got 3"},
      {Line("2", {}, {}), "label must be 0 or 1 ('2')"},
      {Line("", {}, {}), "label must be 0 or 1 ('')"},
      {Line("1", {"", "", "4.5"}, {}), "integer feature I3 is not an integer ('4.5')"},
      {Line("1", {"99999999999999999999"}, {}), "integer feature I1 is out of range"},
      {Line("1", {}, {"", "", "", "xyz"}), "categorical feature C4 is not hexadecimal ('xyz')"},
      {Line("1", {}, {"0123456789abcdef0"}), "categorical feature C1 is longer than 16"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteFile(Lines(2) + "\n" + c.line);
    absl::StatusOr<Dataset> data = ReadDataset(path, {.format = DataFormat::kCriteo});
    ASSERT_FALSE(data.ok()) << c.line;
    EXPECT_EQ(data.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(data.status().message(), HasSubstr(absl::StrCat(path, ":4: ", c.message)));
    // The reader validates the whole file when it opens, whichever partition it keeps.
    auto reader = CriteoReader::Open(path, {.partition = 1, .num_partitions = 2});
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kInvalidArgument) << c.line;
  }
  EXPECT_THAT(ReadDataset("/nonexistent.tsv", {}).status().message(),
              HasSubstr("/nonexistent.tsv"));
  EXPECT_EQ(ReadDataset(WriteFile(Lines(1)), {.num_classes = 3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Lines are parsed in one pass when they look as usual and judged field by field otherwise;
// both ways must give the same example, and reject the same lines. Random lines mix the usual
// tokens with the rarer ones (signs, 18 to 20 digits, upper-case hex, 16 and 17 hex digits, a
// carriage return) and, now and then, a broken one; each is checked against a reference made
// from the tokens alone. The seed is printed: a failure replays.
TEST(CriteoTest, EveryLineParsesAsItsTokensSay) {
  constexpr uint64_t kSeed = 20261205;
  SCOPED_TRACE(absl::StrCat("seed ", kSeed));
  std::mt19937_64 rng(kSeed);
  auto pick = [&](int n) { return static_cast<int>(rng() % n); };
  auto digits = [&](int n, const char* alphabet, int size) {
    std::string s;
    for (int i = 0; i < n; ++i) s += alphabet[pick(size)];
    return s;
  };
  auto integer = [&]() -> std::string {
    switch (pick(10)) {
      case 0:
        return "";
      case 1:
        return absl::StrCat("-", digits(1 + pick(5), "0123456789", 10));
      case 2:
        return absl::StrCat("+", digits(1 + pick(5), "0123456789", 10));
      case 3:
        return digits(18 + pick(3), "0123456789", 10);  // 18 to 20 digits
      case 4:
        return absl::StrCat("+-", digits(2, "0123456789", 10));
      default:
        return digits(1 + pick(4), "0123456789", 10);
    }
  };
  auto hex = [&]() -> std::string {
    switch (pick(8)) {
      case 0:
        return "";
      case 1:
        return digits(16 + pick(2), "0123456789abcdefABCDEF", 22);  // 16 or 17 digits
      default:
        return digits(1 + pick(8), "0123456789abcdef", 16);
    }
  };
  int accepted = 0, rejected = 0;
  for (int n = 0; n < 20000; ++n) {
    std::string label = pick(2) ? "1" : "0";
    std::vector<std::string> dense(kCriteoDenseFields), categorical(kCriteoCategoricalFields);
    for (std::string& t : dense) t = integer();
    for (std::string& t : categorical) t = hex();
    std::string line = absl::StrCat(label, "\t", absl::StrJoin(dense, "\t"), "\t",
                                    absl::StrJoin(categorical, "\t"));
    // Now and then a broken line: a missing or extra field, a bad character, a bad label.
    switch (pick(40)) {
      case 0:
        line += "\t";
        break;
      case 1:
        line = line.substr(0, line.rfind('\t'));
        break;
      case 2:
        line[pick(static_cast<int>(line.size()))] = 'x';
        break;
      case 3:
        line[0] = '2';
        break;
      case 4:
        line += "\r";
        break;  // not broken: a carriage return is dropped
      default:
        break;
    }
    // The reference, from the tokens alone.
    const std::vector<std::string> fields =
        absl::StrSplit(line.substr(0, line.size() - (line.ends_with("\r") ? 1 : 0)), '\t');
    bool valid = fields.size() == kCriteoEntries + 1 && (fields[0] == "0" || fields[0] == "1");
    std::vector<float> values;
    std::vector<uint64_t> ids;
    for (int i = 0; valid && i < kCriteoDenseFields; ++i) {
      std::string_view t = fields[1 + i];
      int64_t x = 0;  // a field's value: its token, less a leading '+'
      if (!t.empty()) {
        if (t.front() == '+') t.remove_prefix(1);
        const auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), x);
        valid = !t.empty() && ec == std::errc() && ptr == t.data() + t.size();
      }
      ids.push_back(static_cast<uint64_t>(i));
      values.push_back(CriteoDenseValue(x));
    }
    for (int c = 0; valid && c < kCriteoCategoricalFields; ++c) {
      const std::string& t = fields[1 + kCriteoDenseFields + c];
      uint64_t v = 0;
      valid = t.size() <= 16;
      for (char ch : t) {
        const int d = std::isxdigit(static_cast<unsigned char>(ch))
                          ? std::stoi(std::string(1, ch), nullptr, 16)
                          : -1;
        valid = valid && d >= 0;
        v = v << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
      }
      ids.push_back(CriteoCategoricalId(c, v, !t.empty()));
      values.push_back(1.0f);
    }
    Dataset got;
    absl::StatusOr<bool> parsed = ParseCriteoLine(line, "f.tsv", 7, &got);
    absl::StatusOr<bool> validated = ParseCriteoLine(line, "f.tsv", 7, nullptr);
    ASSERT_EQ(parsed.ok(), valid) << line << "\n" << parsed.status();
    ASSERT_EQ(validated.ok(), valid) << line;
    if (!valid) {
      ++rejected;
      EXPECT_THAT(parsed.status().message(), HasSubstr("f.tsv:7: ")) << line;
      continue;
    }
    ++accepted;
    ASSERT_EQ(got.size(), 1u) << line;
    EXPECT_EQ(got.labels[0], fields[0] == "1" ? 1.0f : 0.0f) << line;
    EXPECT_THAT(got.ids, ElementsAreArray(ids)) << line;
    ASSERT_EQ(got.values.size(), values.size()) << line;
    EXPECT_EQ(std::memcmp(got.values.data(), values.data(), values.size() * sizeof(float)), 0)
        << line;
  }
  // Both kinds were seen in numbers.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

// I1 of each example of a chunk, i.e. its line index in a Lines(n) file.
std::vector<int> FirstDense(const Dataset& chunk) {
  std::vector<int> out;
  for (size_t i = 0; i < chunk.size(); ++i) {
    out.push_back(static_cast<int>(std::lround(std::expm1(chunk.values[i * kCriteoEntries]))));
  }
  return out;
}

TEST(CriteoTest, StreamsStridedPartitionsInChunksAndRewinds) {
  const std::string path = WriteFile(Lines(11) + "\n");  // A blank line is no example.
  for (int p = 0; p < 3; ++p) {
    auto reader = CriteoReader::Open(path, {.partition = p, .num_partitions = 3});
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_EQ((*reader)->total_examples(), 11u);
    std::vector<int> expected;
    for (int i = p; i < 11; i += 3) expected.push_back(i);
    EXPECT_EQ((*reader)->size(), expected.size());
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<int> seen;
      Dataset chunk;
      size_t chunks = 0;
      while (true) {
        absl::StatusOr<bool> more = (*reader)->ReadChunk(2, &chunk);
        ASSERT_TRUE(more.ok()) << more.status();
        if (!*more) break;
        EXPECT_LE(chunk.size(), 2u);
        ASSERT_EQ(chunk.row_offsets.size(), chunk.size() + 1);
        for (const int i : FirstDense(chunk)) seen.push_back(i);
        ++chunks;
      }
      EXPECT_EQ(chunk.size(), 0u);
      EXPECT_EQ(chunks, (expected.size() + 1) / 2);
      EXPECT_THAT(seen, ElementsAreArray(expected)) << "partition " << p << " pass " << pass;
      ASSERT_TRUE((*reader)->Rewind().ok());
    }
  }
}

TEST(CriteoTest, StreamedChunksEqualTheWholePartitionInMemory) {
  const std::string path = WriteFile(Lines(9));
  absl::StatusOr<Dataset> whole =
      ReadDataset(path, {.format = DataFormat::kCriteo, .partition = 1, .num_partitions = 2});
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto reader = CriteoReader::Open(path, {.partition = 1, .num_partitions = 2});
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<uint64_t> ids;
  std::vector<float> labels;
  while (true) {
    absl::StatusOr<DataSlice> slice = (*reader)->Next(3);
    ASSERT_TRUE(slice.ok()) << slice.status();
    if (slice->size() == 0) break;
    ids.insert(ids.end(), slice->data->ids.begin(), slice->data->ids.end());
    labels.insert(labels.end(), slice->data->labels.begin(), slice->data->labels.end());
  }
  EXPECT_EQ(ids, whole->ids);
  EXPECT_EQ(labels, whole->labels);
}

}  // namespace
}  // namespace syncline
