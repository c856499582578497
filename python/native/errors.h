// absl::Status as Python exceptions: syncline.Error (a RuntimeError) and one subclass per status
// code, each also a subclass of the built-in exception that fits where one does
// (InvalidArgumentError is a ValueError, DeadlineExceededError a TimeoutError, ...), carrying
// the status's message and its code name as `.code`.
//
// Thread-safety: raising needs the GIL.
#ifndef SYNCLINE_PYTHON_NATIVE_ERRORS_H_
#define SYNCLINE_PYTHON_NATIVE_ERRORS_H_

#include <pybind11/pybind11.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace syncline::python {

// Adds Error and its subclasses to the module.
void RegisterErrors(pybind11::module_& m);

// Raises the exception of `status`'s code (which must not be OK).
[[noreturn]] void Raise(const absl::Status& status);

inline void Check(const absl::Status& status) {
  if (!status.ok()) Raise(status);
}

template <typename T>
T Unwrap(absl::StatusOr<T> value) {
  if (!value.ok()) Raise(value.status());
  return std::move(*value);
}

}  // namespace syncline::python

#endif  // SYNCLINE_PYTHON_NATIVE_ERRORS_H_
