// Frame: one contiguous payload of a message (the header, a keys array, a values array).
//
// A frame either owns its bytes (a received ZeroMQ message, a moved-in vector) or borrows
// memory that the sender promises to keep alive and unchanged until the request that carries
// it has completed (KVClient::Wait). Borrowing is what lets a push of a large array go to the
// socket without a copy. Frames are cheap to copy: copies share the owned bytes.
//
// Thread-safety: a Frame is immutable; copies may be used from different threads.
#ifndef SYNCLINE_CORE_FRAME_H_
#define SYNCLINE_CORE_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"

namespace syncline {

class Frame {
 public:
  Frame() = default;

  // Refers to `size` bytes at `data` without owning them (see the class comment).
  static Frame Borrow(const void* data, size_t size) {
    return Frame(nullptr, static_cast<const std::byte*>(data), size);
  }
  template <typename T>
  static Frame Borrow(std::span<const T> items) {
    return Borrow(items.data(), items.size_bytes());
  }

  // Takes ownership of a vector's elements.
  template <typename T>
  static Frame Own(std::vector<T>&& items) {
    auto holder = std::make_shared<std::vector<T>>(std::move(items));
    const auto* data = reinterpret_cast<const std::byte*>(holder->data());
    const size_t size = holder->size() * sizeof(T);
    return Frame(std::move(holder), data, size);
  }

  // Copies `size` bytes.
  static Frame Copy(const void* data, size_t size) {
    std::vector<std::byte> bytes(size);
    if (size > 0) std::memcpy(bytes.data(), data, size);
    return Own(std::move(bytes));
  }

  // Wraps bytes that `owner` keeps alive.
  static Frame Shared(std::shared_ptr<const void> owner, const void* data, size_t size) {
    return Frame(std::move(owner), static_cast<const std::byte*>(data), size);
  }

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool owned() const { return owner_ != nullptr; }
  const std::shared_ptr<const void>& owner() const { return owner_; }

  // The frame as an array of T. Bytes from the network may sit at any address (ZeroMQ can
  // hand out views into its receive buffer), so a misaligned frame is copied once into an
  // aligned buffer; `*this` is updated to share that copy.
  template <typename T>
  absl::StatusOr<std::span<const T>> As() {
    if (size_ % sizeof(T) != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "frame of %d bytes is not a whole number of %d-byte elements", size_, sizeof(T)));
    }
    if (reinterpret_cast<uintptr_t>(data_) % alignof(T) != 0) {
      std::shared_ptr<T[]> aligned = std::make_shared_for_overwrite<T[]>(size_ / sizeof(T));
      std::memcpy(aligned.get(), data_, size_);
      const T* data = aligned.get();
      *this = Shared(std::move(aligned), data, size_);
    }
    return std::span<const T>(reinterpret_cast<const T*>(data_), size_ / sizeof(T));
  }

 private:
  Frame(std::shared_ptr<const void> owner, const std::byte* data, size_t size)
      : owner_(std::move(owner)), data_(data), size_(size) {}

  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace syncline

#endif  // SYNCLINE_CORE_FRAME_H_
