#include "launch/trace_merge.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json_string.h"

namespace syncline {
namespace {

namespace fs = std::filesystem;

// The number after "key": in a header line; 0 when absent or malformed.
int64_t HeaderNumber(absl::string_view line, absl::string_view key) {
  const std::string field = absl::StrCat("\"", key, "\":");
  const size_t at = line.find(field);
  if (at == absl::string_view::npos) return 0;
  absl::string_view rest = line.substr(at + field.size());
  rest = rest.substr(0, rest.find_first_of(",}"));
  int64_t value = 0;
  return absl::SimpleAtoi(rest, &value) ? value : 0;
}

// The string after "process": in a header line, unescaped only as far as a process name
// needs; the file name's node when absent.
std::string HeaderProcess(absl::string_view line, absl::string_view fallback) {
  const absl::string_view field = "\"process\":\"";
  const size_t at = line.find(field);
  if (at == absl::string_view::npos) return std::string(fallback);
  std::string name;
  for (size_t i = at + field.size(); i < line.size() && line[i] != '"'; ++i) {
    if (line[i] == '\\' && i + 1 < line.size()) ++i;
    name += line[i];
  }
  return name.substr(0, 200);
}

// Servers first, then workers, each by rank ("ps2" < "ps10"); anything else after them.
int64_t SortKey(const std::string& node) {
  auto rank = [&](size_t prefix) {
    int64_t r = 0;
    return absl::SimpleAtoi(node.substr(prefix), &r) ? r : (int64_t{1} << 40);
  };
  if (absl::StartsWith(node, "ps")) return rank(2);
  if (absl::StartsWith(node, "w")) return (int64_t{1} << 41) + rank(1);
  return int64_t{1} << 42;
}

// An event line `{"ts":T,REST` as `{"pid":P,"ts":T+offset,REST`; false when it is not one.
bool Rewrite(absl::string_view line, int pid, int64_t offset, std::string* out) {
  const absl::string_view head = "{\"ts\":";
  if (!absl::StartsWith(line, head) || !absl::EndsWith(line, "}")) return false;
  const size_t comma = line.find(',', head.size());
  if (comma == absl::string_view::npos) return false;
  int64_t ts = 0;
  if (!absl::SimpleAtoi(line.substr(head.size(), comma - head.size()), &ts)) return false;
  absl::string_view rest = line.substr(comma);
  // Metadata (names of tracks) has no time; the rest moves onto the coordinator's clock.
  if (!absl::StrContains(rest.substr(0, 16), "\"ph\":\"M\"")) ts += offset;
  absl::StrAppend(out, "{\"pid\":", pid, ",\"ts\":", ts, rest);
  return true;
}

}  // namespace

absl::StatusOr<TraceMergeResult> MergeTraces(const std::string& dir, const std::string& out) {
  std::vector<std::pair<int64_t, fs::path>> files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::EndsWith(name, ".trace.jsonl")) continue;
    files.emplace_back(SortKey(name.substr(0, name.size() - 12)), entry.path());
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no node trace files (*.trace.jsonl) in ", dir));
  }
  std::sort(files.begin(), files.end());
  TraceMergeResult result;
  const std::string temp = out + ".tmp";
  std::ofstream merged(temp, std::ios::trunc);
  merged << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto emit = [&](const std::string& event) {
    merged << (first ? "" : ",\n") << event;
    first = false;
    ++result.events;
  };
  int pid = 0;
  for (const auto& [key, path] : files) {
    std::ifstream in(path);
    std::string header;
    if (!std::getline(in, header)) continue;
    ++pid;
    ++result.nodes;
    const std::string node = path.filename().string();
    const int64_t offset = HeaderNumber(header, "clock_offset_us");
    result.max_offset_us = std::max(result.max_offset_us, std::abs(offset));
    result.dropped += static_cast<uint64_t>(std::max<int64_t>(0, HeaderNumber(header, "dropped")));
    emit(
        absl::StrFormat("{\"pid\":%d,\"ts\":0,\"ph\":\"M\",\"tid\":0,\"name\":\"process_name\","
                        "\"args\":{\"name\":%s}}",
                        pid, JsonString(HeaderProcess(header, node.substr(0, node.size() - 12)))));
    emit(absl::StrFormat(
        "{\"pid\":%d,\"ts\":0,\"ph\":\"M\",\"tid\":0,\"name\":\"process_sort_index\",\"args\":{"
        "\"sort_index\":%d}}",
        pid, pid));
    std::string line, event;
    while (std::getline(in, line)) {
      event.clear();
      if (line.size() > (1 << 16) || !Rewrite(line, pid, offset, &event)) {
        ++result.malformed;
        continue;
      }
      emit(event);
    }
  }
  merged << "\n]}\n";
  merged.flush();
  if (!merged) return absl::PermissionDeniedError(absl::StrCat("cannot write ", temp));
  merged.close();
  fs::rename(temp, out, ec);
  if (ec)
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", out, ": ", ec.message()));
  result.bytes = fs::file_size(out, ec);
  return result;
}

}  // namespace syncline
