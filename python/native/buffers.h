// Buffers the Python caller lends the session: a view (the buffer protocol) of a numpy array or
// of a CPU torch tensor (taken through tensor.detach().numpy(), which shares its memory), checked
// for its type, its layout and, where the session writes into it, for being writable. The view
// keeps the array alive until the Borrowed is destroyed, which must happen with the GIL held.
//
// Thread-safety: a Borrowed is created and destroyed with the GIL held; its spans may be read
// and written without it.
#ifndef SYNCLINE_PYTHON_NATIVE_BUFFERS_H_
#define SYNCLINE_PYTHON_NATIVE_BUFFERS_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>

namespace syncline::python {

class Borrowed {
 public:
  Borrowed() = default;
  Borrowed(Borrowed&& other) noexcept;
  Borrowed& operator=(Borrowed&& other) noexcept;
  Borrowed(const Borrowed&) = delete;
  Borrowed& operator=(const Borrowed&) = delete;
  ~Borrowed();

  size_t size() const { return size_; }  // elements
  std::span<const float> floats() const { return {static_cast<const float*>(view_.buf), size_}; }
  std::span<float> mutable_floats() { return {static_cast<float*>(view_.buf), size_}; }
  // Keys of either signedness: an int64 id is taken as the 64-bit key of the same bits.
  std::span<const uint64_t> keys() const {
    return {static_cast<const uint64_t*>(view_.buf), size_};
  }

 private:
  friend Borrowed Borrow(pybind11::handle object, const char* name, char kind, bool writable);
  Py_buffer view_{};
  bool held_ = false;
  size_t size_ = 0;
};

// A C-contiguous buffer of float32 ('f') or of 64-bit integers ('k': int64 or uint64) under
// the argument name `name`; TypeError for another type, ValueError for a non-contiguous,
// read-only (when `writable`) or non-CPU one, each naming the argument.
Borrowed Borrow(pybind11::handle object, const char* name, char kind, bool writable);
inline Borrowed Floats(pybind11::handle object, const char* name, bool writable) {
  return Borrow(object, name, 'f', writable);
}
inline Borrowed Keys(pybind11::handle object, const char* name) {
  return Borrow(object, name, 'k', false);
}

}  // namespace syncline::python

#endif  // SYNCLINE_PYTHON_NATIVE_BUFFERS_H_
