#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <mutex>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace syncline {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_tag_mu;
std::string& Tag() {
  static std::string* tag = new std::string();
  return *tag;
}

}  // namespace

void SetLogTag(std::string_view tag) {
  std::lock_guard<std::mutex> lock(g_tag_mu);
  Tag() = std::string(tag);
}

void SetLogLevel(LogLevel level) { g_level.store(static_cast<int>(level)); }

bool LogEnabled(LogLevel level) { return static_cast<int>(level) >= g_level.load(); }

LogLine::LogLine(LogLevel level, const char* file, int line) : level_(level) {
  static constexpr char kLetters[] = {'I', 'W', 'E'};
  stream_ << kLetters[static_cast<int>(level)]
          << absl::FormatTime(" %H:%M:%E3S ", absl::Now(), absl::LocalTimeZone());
  std::lock_guard<std::mutex> lock(g_tag_mu);
  if (!Tag().empty()) stream_ << Tag() << " ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string text = stream_.str();
  // One write per line: atomic for pipes up to PIPE_BUF bytes.
  ssize_t ignored = write(STDERR_FILENO, text.data(), text.size());
  (void)ignored;
}

}  // namespace syncline
