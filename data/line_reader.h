// LineReader: reads a text file line by line in large blocks, so a file of any size is read in
// bounded memory and the per-line cost is the caller's parsing alone.
//
// Thread-safety: thread-compatible. A LineReader owns its file descriptor.
#ifndef SYNCLINE_DATA_LINE_READER_H_
#define SYNCLINE_DATA_LINE_READER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline {

class LineReader {
 public:
  // Reads are this large; a longer line grows the buffer, up to kMaxLineBytes.
  static constexpr size_t kBlockBytes = size_t{4} << 20;
  static constexpr size_t kMaxLineBytes = size_t{256} << 20;

  // Errors: NotFound / PermissionDenied (etc.) "cannot open PATH: ...".
  static absl::StatusOr<std::unique_ptr<LineReader>> Open(const std::string& path);

  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader();

  // Sets *line to the next line without its '\n' (valid until the next call) and returns true;
  // false at the end of the file. A last line without '\n' counts when it is not empty.
  // Errors: a read error, or InvalidArgument "PATH:LINE: line longer than ..." .
  absl::StatusOr<bool> Next(std::string_view* line);

  // 1-based number of the line Next() returned last (0 before the first).
  uint64_t line_number() const { return line_no_; }
  const std::string& path() const { return path_; }

  // Starts again from the first line.
  absl::Status Rewind();

 private:
  LineReader(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
  std::string buffer_;
  size_t begin_ = 0;  // Unconsumed bytes are buffer_[begin_, end_).
  size_t end_ = 0;
  size_t scanned_ = 0;  // buffer_[begin_, scanned_) is known to hold no '\n'.
  uint64_t line_no_ = 0;
  bool eof_ = false;
};

// InvalidArgument "PATH:LINE: what ('token')", the token quoted and escaped (and cut short when
// long) so that binary garbage still makes a readable message.
absl::Status LineError(const std::string& path, uint64_t line_no, std::string_view what,
                       std::string_view token);

}  // namespace syncline

#endif  // SYNCLINE_DATA_LINE_READER_H_
