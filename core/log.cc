#include "core/log.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>
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
  // The zone is loaded once, under the static's guard: abseil loads zones lazily behind
  // synchronisation of its own, which costs a lookup per line and which ThreadSanitizer
  // cannot see in Debian's uninstrumented build (two threads logging their first lines).
  static const absl::TimeZone* const kZone = new absl::TimeZone(absl::LocalTimeZone());
  stream_ << kLetters[static_cast<int>(level)]
          << absl::FormatTime(" %H:%M:%E3S ", absl::Now(), *kZone);
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

std::string ReadableDuration(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "forever";
  if (d < absl::ZeroDuration()) return "-" + ReadableDuration(-d);
  char text[64];
  if (d < absl::Seconds(1)) {
    std::snprintf(text, sizeof(text), "%.3g ms", absl::ToDoubleMilliseconds(d));
  } else if (d < absl::Seconds(59.95)) {
    std::snprintf(text, sizeof(text), "%.3g s", absl::ToDoubleSeconds(d));
  } else if (d < absl::Hours(1)) {
    const int64_t s = absl::ToInt64Seconds(d + absl::Milliseconds(500));
    std::snprintf(text, sizeof(text), "%d min %d s", static_cast<int>(s / 60),
                  static_cast<int>(s % 60));
  } else {
    const int64_t m = absl::ToInt64Minutes(d + absl::Seconds(30));
    std::snprintf(text, sizeof(text), "%d h %d min", static_cast<int>(m / 60),
                  static_cast<int>(m % 60));
  }
  return text;
}

}  // namespace syncline
