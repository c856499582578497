"""Syncline for Python: a worker of a running Syncline job.

`syncline._native.Session` is the worker session (push, pull and clock by ticket; see its
docstrings); `syncline.torch` puts PyTorch models on it. Errors Syncline reports are
`syncline.Error` and its subclasses (one per status code: `syncline.InvalidArgumentError`,
`syncline.DeadlineExceededError`, ...).
"""
from syncline._native import (  # noqa: F401
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    DataLossError,
    DeadlineExceededError,
    Error,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    Session,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
)

__all__ = [name for name in dir() if not name.startswith("_")]
