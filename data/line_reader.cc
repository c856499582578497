#include "data/line_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace syncline {

absl::Status LineError(const std::string& path, uint64_t line_no, std::string_view what,
                       std::string_view token) {
  constexpr size_t kMaxShown = 64;
  // This absl build's string_view is its own type, not std::string_view.
  const absl::string_view shown(token.data(), std::min(token.size(), kMaxShown));
  return absl::InvalidArgumentError(absl::StrFormat("%s:%d: %s ('%s%s')", path, line_no,
                                                    std::string(what), absl::CHexEscape(shown),
                                                    token.size() > kMaxShown ? "..." : ""));
}

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::Open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", path));
  return std::unique_ptr<LineReader>(new LineReader(path, fd));
}

LineReader::~LineReader() { ::close(fd_); }

absl::Status LineReader::Rewind() {
  if (::lseek(fd_, 0, SEEK_SET) < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot rewind ", path_));
  }
  begin_ = end_ = scanned_ = 0;
  line_no_ = 0;
  eof_ = false;
  return absl::OkStatus();
}

absl::StatusOr<bool> LineReader::Next(std::string_view* line) {
  if (buffer_.empty()) buffer_.resize(kBlockBytes);
  while (true) {
    const void* newline = std::memchr(buffer_.data() + scanned_, '\n', end_ - scanned_);
    if (newline != nullptr) {
      const size_t pos = static_cast<const char*>(newline) - buffer_.data();
      *line = std::string_view(buffer_.data() + begin_, pos - begin_);
      ++line_no_;
      begin_ = scanned_ = pos + 1;
      return true;
    }
    if (eof_) {
      if (begin_ == end_) return false;
      *line = std::string_view(buffer_.data() + begin_, end_ - begin_);
      ++line_no_;
      begin_ = scanned_ = end_;
      return true;
    }
    // Move the partial line to the front and refill behind it.
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
    scanned_ = end_;
    if (end_ == buffer_.size()) {
      if (buffer_.size() >= kMaxLineBytes) {
        return absl::InvalidArgumentError(absl::StrFormat("%s:%d: line longer than %d bytes", path_,
                                                          line_no_ + 1, kMaxLineBytes));
      }
      buffer_.resize(buffer_.size() * 2);
    }
    ssize_t n;
    do {
      n = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path_));
    if (n == 0) eof_ = true;
    end_ += static_cast<size_t>(n);
  }
}

}  // namespace syncline
