// Helpers of the libFuzzer targets: reading a fuzz input piece by piece, and a file in memory
// (memfd) for parsers that take a path.
#ifndef SYNCLINE_FUZZ_FUZZ_UTIL_H_
#define SYNCLINE_FUZZ_FUZZ_UTIL_H_

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace syncline::fuzz {

// Consumes an input from the front: a byte, a little-endian integer, or a length-prefixed
// piece (the rest when the input is shorter than the length).
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t Byte() {
    if (size_ == 0) return 0;
    --size_;
    return *data_++;
  }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(Byte()) << (8 * i);
    return v;
  }
  std::string_view Piece(size_t max) {
    const size_t n = std::min<size_t>(U32() % (max + 1), size_);
    std::string_view p(reinterpret_cast<const char*>(data_), n);
    data_ += n;
    size_ -= n;
    return p;
  }
  std::string_view Rest() { return Piece(size_); }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
};

// A file in memory at /proc/self/fd/N, rewritten for each input.
class MemFile {
 public:
  MemFile() : fd_(memfd_create("syncline-fuzz", 0)) {}
  ~MemFile() { close(fd_); }
  // Replaces the contents and returns a path that opens them.
  std::string Write(std::string_view contents) {
    (void)ftruncate(fd_, 0);
    (void)pwrite(fd_, contents.data(), contents.size(), 0);
    return "/proc/self/fd/" + std::to_string(fd_);
  }

 private:
  int fd_;
};

}  // namespace syncline::fuzz

#endif  // SYNCLINE_FUZZ_FUZZ_UTIL_H_
