// Minimal leveled logging to stderr (this abseil has no absl/log). One line per message,
// prefixed with the level, time and the process's tag, written with a single write() so that
// lines of concurrent threads and processes do not interleave.
#ifndef SYNCLINE_CORE_LOG_H_
#define SYNCLINE_CORE_LOG_H_

#include <sstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace syncline {

enum class LogLevel { kInfo, kWarning, kError };

// Sets the tag printed on every line (e.g. "ps0"); empty by default. Call once from main.
void SetLogTag(std::string_view tag);
// Messages below `level` are dropped. Default: kInfo.
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& value) {
    stream_ << value;
    return *this;
  }
  LogLine& operator<<(const absl::Status& status) {
    stream_ << status.ToString();
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

// A duration as people read it in a log line: "117 ms", "2.35 s", "3 min 20 s", "2 h 5 min"
// (three significant digits below a minute), where absl's "117.254536ms" is too precise.
std::string ReadableDuration(absl::Duration d);

// Turns a LogLine expression into void; & binds looser than <<.
struct LogVoidify {
  void operator&(const LogLine&) {}
};

}  // namespace syncline

#define SYNCLINE_LOG_INFO ::syncline::LogLevel::kInfo
#define SYNCLINE_LOG_WARNING ::syncline::LogLevel::kWarning
#define SYNCLINE_LOG_ERROR ::syncline::LogLevel::kError
// The conditional expression (not an if) keeps the macro safe inside if/else without braces.
#define SYNCLINE_LOG(level)                     \
  !::syncline::LogEnabled(SYNCLINE_LOG_##level) \
      ? (void)0                                 \
      : ::syncline::LogVoidify() & ::syncline::LogLine(SYNCLINE_LOG_##level, __FILE__, __LINE__)

#endif  // SYNCLINE_CORE_LOG_H_
