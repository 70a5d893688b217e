"""Errors with exit codes.

Every failure a user can meet is one of these: a class, an exit code and one sentence that names
the input or the step and says what to do. The CLI prints ``str(err)`` on one line and exits
with ``err.exit_code``; no traceback reaches a user.

What an error carries beyond its message is declared on its class, as a dataclass declares its
fields: ``step`` on every error (None unless an operation names it), ``violations`` and
``alternatives`` on a refusal, ``report`` on the failures that come with one (run.build's
``BuildFailed``, lock's ``LockCheckFailed``). Nothing is attached to an error after it is made.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

EXIT_OK = 0
EXIT_FAILED = 1  # an operation failed: build, smoke, push, a doctor check
EXIT_USAGE = 2  # bad input or usage
EXIT_INCOMPATIBLE = 3  # an incompatible combination was refused


# the credentials of a URL (scheme://user:token@host, scheme://token@host): never shown
# (found from the literal "://", which the regex engine finds fast in a long text, rather than
# by trying a scheme at every word boundary: every rendered file goes through it)
_CREDENTIALS = re.compile(r"(?<=[A-Za-z0-9+.-])://(?P<user>[^/\s:@'\"]*)"
                          r"(?::(?P<password>[^/\s@'\"]*))?@")


# a URL's query parameter that carries a secret (?token=, ?access_token=, a signed URL's ?sig=)
_SECRET_QUERY = re.compile(r"(?P<key>[?&](?:token|access_token|auth_token|private_token|api_key|"
                           r"apikey|key|secret|password|passwd|auth|sig|signature|credential|"
                           r"x-amz-signature|x-amz-security-token|x-goog-signature)=)"
                           r"[^&\s'\"#<>]+", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the credentials of every URL in it hidden: ``https://user:token@host/x``
    becomes ``https://user:***@host/x``, ``https://token@host/x`` becomes ``https://***@host/x``,
    ``?token=abc`` becomes ``?token=***``.
    Every error message goes through it, and so do JSON outputs and rendered files."""
    if "=" in text and ("?" in text or "&" in text):
        text = _SECRET_QUERY.sub(lambda m: m.group("key") + "***", text)
    if "@" not in text:
        return text

    def hide(m: re.Match[str]) -> str:
        if m.group("password") is not None:
            return f"://{m.group('user')}:***@"
        return "://***@"

    return _CREDENTIALS.sub(hide, text)


class EnvbuilderError(Exception):
    """Base class: a one-line message and an exit code. The message and details never show
    a URL's credentials (``redact``)."""

    exit_code: ClassVar[int] = EXIT_FAILED
    message: str
    details: list[str]  # more lines a user can read (each reason, each difference)
    step: str | None = None  # the step it failed in (build, smoke, push, lock); an OperationError names it

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
    """A combination that cannot work was refused. ``violations`` say why; ``alternatives``
    what resolves instead (each pin dropped alone), when the resolver looked for them."""

    exit_code = EXIT_INCOMPATIBLE
    violations: list[Any]
    alternatives: list[str]

    def __init__(self, message: str, *, violations: list[Any] | None = None,
                 details: list[str] | None = None, alternatives: list[str] | None = None) -> None:
        super().__init__(message, details=details)
        self.violations = list(violations or [])
        self.alternatives = list(alternatives or [])

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
