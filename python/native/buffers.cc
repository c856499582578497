#include "python/native/buffers.h"

#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"

namespace py = pybind11;

namespace syncline::python {
namespace {

// A torch tensor (or anything with .numpy() and .device) as an object with a buffer.
py::object AsBufferObject(py::handle object, const char* name) {
  if (PyObject_CheckBuffer(object.ptr())) return py::reinterpret_borrow<py::object>(object);
  if (py::hasattr(object, "numpy") && py::hasattr(object, "device")) {
    const std::string device = py::str(object.attr("device"));
    if (device != "cpu") {
      throw py::value_error(
          absl::StrCat(name, ": a tensor on ", device,
                       "; the session reads and writes host memory (copy it to the CPU, or use "
                       "syncline.torch, which stages CUDA tensors through pinned host buffers)"));
    }
    return object.attr("detach")().attr("numpy")();
  }
  throw py::type_error(absl::StrCat(name, ": expected a numpy array or a CPU torch tensor, not ",
                                    std::string(py::str(py::type::handle_of(object)))));
}

// The buffer format without its byte-order or alignment prefix.
std::string_view FormatCode(const char* format) {
  std::string_view f = format == nullptr ? "B" : format;
  while (!f.empty() && (f[0] == '@' || f[0] == '=' || f[0] == '<' || f[0] == '!'))
    f.remove_prefix(1);
  return f;
}

}  // namespace

Borrowed::Borrowed(Borrowed&& other) noexcept
    : view_(other.view_), held_(std::exchange(other.held_, false)), size_(other.size_) {}

Borrowed& Borrowed::operator=(Borrowed&& other) noexcept {
  if (this != &other) {
    if (held_) PyBuffer_Release(&view_);
    view_ = other.view_;
    held_ = std::exchange(other.held_, false);
    size_ = other.size_;
  }
  return *this;
}

Borrowed::~Borrowed() {
  if (held_) PyBuffer_Release(&view_);
}

Borrowed Borrow(py::handle object, const char* name, char kind, bool writable) {
  py::object exporter = AsBufferObject(object, name);
  Borrowed b;
  const int flags = PyBUF_STRIDES | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(exporter.ptr(), &b.view_, flags) != 0) {
    PyErr_Clear();
    throw py::value_error(
        absl::StrCat(name, writable ? ": not a writable buffer (the session writes into it)"
                                    : ": does not give a buffer"));
  }
  b.held_ = true;
  const std::string_view format = FormatCode(b.view_.format);
  const bool floats = format == "f" && b.view_.itemsize == 4;
  const bool keys =
      (format == "l" || format == "q" || format == "L" || format == "Q") && b.view_.itemsize == 8;
  if (kind == 'f' ? !floats : !keys) {
    throw py::type_error(absl::StrCat(name, ": elements of format '", std::string(format), "' (",
                                      b.view_.itemsize, " bytes); expected ",
                                      kind == 'f' ? "float32" : "int64 or uint64"));
  }
  if (!PyBuffer_IsContiguous(&b.view_, 'C')) {
    throw py::value_error(
        absl::StrCat(name, ": not contiguous (make a contiguous copy first: .contiguous())"));
  }
  b.size_ = static_cast<size_t>(b.view_.len / b.view_.itemsize);
  return b;
}

}  // namespace syncline::python
