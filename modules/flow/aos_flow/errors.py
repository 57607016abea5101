"""The interpreter's own exceptions. None of them leaves a handler: each becomes an outcome,
a failed execution, or (Missing) a read request."""

from __future__ import annotations


class ExprError(Exception):
    """A template, guard or path that could not be evaluated (error kind `expression`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class DefinitionError(Exception):
    """The CFD cannot be read or is malformed: the execution fails with kind `engine`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class EngineFailure(Exception):  # noqa: N818 -- an outcome of the execution, not a bug
    """An engine invariant or an execution limit is broken: the execution fails."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Missing(BaseException):
    """A CAS blob the host did not send. A BaseException so that no `except Exception` on
    the way (ours, Jinja's) swallows it: the handler turns it into one read request."""

    def __init__(self, blob_hash: str) -> None:
        super().__init__(blob_hash)
        self.blob_hash = blob_hash
