#include "core/trace.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/json_string.h"

namespace syncline {

std::string TraceFileName(absl::string_view node) { return absl::StrCat(node, ".trace.jsonl"); }

TraceRecorder::TraceRecorder(std::string node, std::string process, size_t max_events)
    : node_(std::move(node)), process_(std::move(process)), max_events_(max_events) {}

int TraceRecorder::Track(absl::string_view name) {
  absl::MutexLock lock(&mu_);
  tracks_.emplace_back(name);
  return static_cast<int>(tracks_.size());  // tids from 1
}

bool TraceRecorder::Room() {
  if (lines_.size() < max_events_) return true;
  ++dropped_;
  return false;
}

void TraceRecorder::Slice(int track, absl::string_view name, absl::string_view category,
                          absl::Time begin, absl::Time end, absl::string_view args) {
  const int64_t ts = absl::ToUnixMicros(begin);
  const int64_t dur = std::max<int64_t>(0, absl::ToUnixMicros(end) - ts);
  std::string line =
      absl::StrFormat("{\"ts\":%d,\"ph\":\"X\",\"dur\":%d,\"tid\":%d,\"name\":%s,\"cat\":%s", ts,
                      dur, track, JsonString(std::string_view(name.data(), name.size())),
                      JsonString(std::string_view(category.data(), category.size())));
  if (!args.empty()) absl::StrAppend(&line, ",\"args\":{", args, "}");
  line += "}";
  absl::MutexLock lock(&mu_);
  if (Room()) lines_.push_back(std::move(line));
}

void TraceRecorder::AsyncSlice(absl::string_view name, absl::string_view category, uint64_t id,
                               absl::Time begin, absl::Time end, absl::string_view args) {
  const std::string common =
      absl::StrFormat(",\"tid\":0,\"id\":\"0x%x\",\"name\":%s,\"cat\":%s", id,
                      JsonString(std::string_view(name.data(), name.size())),
                      JsonString(std::string_view(category.data(), category.size())));
  std::string b = absl::StrCat("{\"ts\":", absl::ToUnixMicros(begin), ",\"ph\":\"b\"", common);
  if (!args.empty()) absl::StrAppend(&b, ",\"args\":{", args, "}");
  b += "}";
  std::string e =
      absl::StrCat("{\"ts\":", std::max(absl::ToUnixMicros(end), absl::ToUnixMicros(begin)),
                   ",\"ph\":\"e\"", common, "}");
  absl::MutexLock lock(&mu_);
  // Both or neither: an unmatched begin would run to the end of the trace.
  if (lines_.size() + 2 > max_events_) {
    dropped_ += 2;
    return;
  }
  lines_.push_back(std::move(b));
  lines_.push_back(std::move(e));
}

size_t TraceRecorder::events() const {
  absl::MutexLock lock(&mu_);
  return lines_.size();
}

size_t TraceRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

absl::Status TraceRecorder::Write(const std::string& path, int64_t clock_offset_us,
                                  int64_t round_trip_us) const {
  absl::MutexLock lock(&mu_);
  const std::string temp = absl::StrCat(path, ".tmp");
  {
    std::ofstream out(temp, std::ios::trunc);
    out << absl::StrFormat(
        "{\"node\":%s,\"process\":%s,\"clock_offset_us\":%d,\"round_trip_us\":%d,\"events\":%d,"
        "\"dropped\":%d}\n",
        JsonString(node_), JsonString(process_), clock_offset_us, round_trip_us, lines_.size(),
        dropped_);
    // The tracks' names: metadata events at time 0.
    for (size_t i = 0; i < tracks_.size(); ++i) {
      out << absl::StrFormat(
          "{\"ts\":0,\"ph\":\"M\",\"tid\":%d,\"name\":\"thread_name\",\"args\":{\"name\":%s}}\n",
          i + 1, JsonString(tracks_[i]));
      out << absl::StrFormat(
          "{\"ts\":0,\"ph\":\"M\",\"tid\":%d,\"name\":\"thread_sort_index\",\"args\":{"
          "\"sort_index\":%d}}\n",
          i + 1, i + 1);
    }
    for (const std::string& line : lines_) out << line << "\n";
    out.flush();
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", temp));
  }
  std::error_code ec;
  std::filesystem::rename(temp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", temp, ": ", ec.message()));
  return absl::OkStatus();
}

}  // namespace syncline
