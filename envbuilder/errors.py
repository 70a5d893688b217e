"""Errors with exit codes.

Every failure a user can meet is one of these: a class, an exit code and one sentence that names
the input or the step and says what to do. The CLI prints ``str(err)`` on one line and exits
with ``err.exit_code``; no traceback reaches a user.
"""

from __future__ import annotations

import re
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1  # an operation failed: build, smoke, push, a doctor check
EXIT_USAGE = 2  # bad input or usage
EXIT_INCOMPATIBLE = 3  # an incompatible combination was refused


# the credentials of a URL (scheme://user:token@host, scheme://token@host): never shown
_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/\s:@'\"]*)"
                          r"(?::(?P<password>[^/\s@'\"]*))?@")


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it hidden: ``https://user:token@host/x``
    becomes ``https://user:***@host/x``, ``https://token@host/x`` becomes ``https://***@host/x``.
    Every error message goes through it, and so do JSON outputs and rendered files."""
    if "@" not in text:
        return text

    def hide(m: re.Match[str]) -> str:
        if m.group("password") is not None:
            return f"{m.group('scheme')}{m.group('user')}:***@"
        return f"{m.group('scheme')}***@"

    return _CREDENTIALS.sub(hide, text)


class EnvbuilderError(Exception):
    """Base class: a one-line message and an exit code. The message and details never show
    a URL's credentials (``redact``)."""

    exit_code: int = EXIT_FAILED

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        message = redact(message)
        super().__init__(message)
        self.message = message
        self.details = [redact(d) if isinstance(d, str) else d for d in (details or [])]

    def __str__(self) -> str:
        return self.message

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": type(self).__name__,
            "message": self.message,
            "details": self.details,
            "exit_code": self.exit_code,
        }


class InputError(EnvbuilderError):
    """Bad input or usage: an unknown name, a malformed version, a broken matrix file."""

    exit_code = EXIT_USAGE


class MatrixError(InputError):
    """A matrix file is missing, malformed or violates the schema."""


class IncompatibleError(EnvbuilderError):
    """A combination that cannot work was refused. ``violations`` say why."""

    exit_code = EXIT_INCOMPATIBLE

    def __init__(self, message: str, *, violations: list[Any] | None = None,
                 details: list[str] | None = None) -> None:
        super().__init__(message, details=details)
        self.violations = list(violations or [])

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["violations"] = [v.to_dict() if hasattr(v, "to_dict") else v for v in self.violations]
        return d


class OperationError(EnvbuilderError):
    """An operation failed (build, smoke, push, lock resolution, network)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, step: str | None = None,
                 details: list[str] | None = None) -> None:
        super().__init__(message, details=details)
        self.step = step

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        d["step"] = self.step
        return d


class MissingExtraError(InputError):
    """A command needs an optional dependency that is not installed."""

    def __init__(self, module: str, extra: str) -> None:
        from envbuilder import DISTRIBUTION

        super().__init__(
            f"this command needs the Python package {module!r}: "
            f"pip install '{DISTRIBUTION}[{extra}]' (envbuilder's distribution; the PyPI "
            f"project named 'envbuilder' is another one)"
        )
