#include "python/native/errors.h"

#include <string>

#include "absl/container/flat_hash_map.h"

namespace py = pybind11;

namespace syncline::python {
namespace {

struct ErrorClass {
  absl::StatusCode code;
  const char* name;
  PyObject* builtin;  // the built-in exception it also is, or null
};

PyObject* g_base = nullptr;
absl::flat_hash_map<int, PyObject*>* g_classes = nullptr;

}  // namespace

void RegisterErrors(py::module_& m) {
  g_base = PyErr_NewExceptionWithDoc(
      "syncline._native.Error",
      "An error Syncline reported: a refused request, a lost job, a missed deadline.",
      PyExc_RuntimeError, nullptr);
  m.add_object("Error", py::handle(g_base));
  const ErrorClass classes[] = {
      {absl::StatusCode::kCancelled, "CancelledError", nullptr},
      {absl::StatusCode::kUnknown, "UnknownError", nullptr},
      {absl::StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {absl::StatusCode::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError},
      {absl::StatusCode::kNotFound, "NotFoundError", PyExc_LookupError},
      {absl::StatusCode::kAlreadyExists, "AlreadyExistsError", nullptr},
      {absl::StatusCode::kPermissionDenied, "PermissionDeniedError", PyExc_PermissionError},
      {absl::StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {absl::StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {absl::StatusCode::kAborted, "AbortedError", nullptr},
      {absl::StatusCode::kOutOfRange, "OutOfRangeError", PyExc_IndexError},
      {absl::StatusCode::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError},
      {absl::StatusCode::kInternal, "InternalError", nullptr},
      {absl::StatusCode::kUnavailable, "UnavailableError", PyExc_ConnectionError},
      {absl::StatusCode::kDataLoss, "DataLossError", nullptr},
      {absl::StatusCode::kUnauthenticated, "UnauthenticatedError", PyExc_PermissionError},
  };
  g_classes = new absl::flat_hash_map<int, PyObject*>();  // lives as long as the module
  for (const ErrorClass& c : classes) {
    const std::string qualified = std::string("syncline._native.") + c.name;
    PyObject* bases =
        c.builtin == nullptr ? PyTuple_Pack(1, g_base) : PyTuple_Pack(2, g_base, c.builtin);
    PyObject* cls = PyErr_NewException(qualified.c_str(), bases, nullptr);
    Py_DECREF(bases);
    if (cls == nullptr) throw py::error_already_set();
    (*g_classes)[static_cast<int>(c.code)] = cls;
    m.add_object(c.name, py::handle(cls));
  }
}

void Raise(const absl::Status& status) {
  PyObject* cls = g_base;
  if (auto it = g_classes->find(static_cast<int>(status.code())); it != g_classes->end()) {
    cls = it->second;
  }
  py::object error = py::handle(cls)(py::str(std::string(status.message())));
  error.attr("code") = absl::StatusCodeToString(status.code());
  PyErr_SetObject(cls, error.ptr());
  throw py::error_already_set();
}

}  // namespace syncline::python
