"""The CLI's output and error handling that need neither typer nor rich: the JSON document,
the one-line error with its exit code, explain's text, and the exit. ``envbuilder.ui.output``
builds the typer commands on these; ``envbuilder.ui.fastpath`` runs the plain ``explain``
with them alone, so both ways print the same bytes and exit with the same code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

from envbuilder.errors import EXIT_FAILED, EnvbuilderError


def echo_json(data: Any) -> None:
    from envbuilder.errors import redact  # no URL's credentials in any JSON output

    sys.stdout.write(redact(json.dumps(data, indent=2, default=str)) + "\n")


def say(*lines: Any, err: bool = False) -> None:
    """The one terminal writer: each argument is one line on stdout (stderr with ``err``), every
    control character, line break and invisible character of it shown escaped
    (``_safety.terminal_safe``): a string from data (an advisory, a source URL, a recorded
    value) can neither move the cursor nor print a line of its own."""
    from envbuilder._safety import terminal_safe

    stream = sys.stderr if err else sys.stdout
    stream.write("".join(terminal_safe(ln) + "\n" for ln in lines))


def report_error(err: EnvbuilderError, as_json: bool) -> int:
    """Print ``err`` (its JSON document with --json, and one line on stderr); its exit code."""
    from envbuilder._safety import cut, terminal_safe

    if as_json:
        doc = err.to_dict()
        doc["message"] = cut(doc["message"])
        doc["details"] = [cut(str(d), 500) for d in doc["details"][:40]]
        echo_json(doc)
    msg = terminal_safe(cut(str(err).replace("\n", " ")))
    say(f"envbuilder: error: {msg}", err=True)
    if not as_json:
        for line in err.details[:40]:
            say(f"  {terminal_safe(cut(str(line), 500))}", err=True)
    return err.exit_code


class Exit(Exception):
    """A command's own exit code (typer.Exit's role, without typer)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def guarded(fn: Callable[[], Any], as_json: bool,
            passthrough: tuple[type[BaseException], ...] = ()) -> int:
    """Run ``fn``: library errors become one line and their exit code, Ctrl-C exit 130, a bug
    one line and exit 1 (the traceback with ENVBUILDER_DEBUG=1). Returns the exit code; ``fn``
    ends early with :class:`Exit`; ``passthrough`` exceptions (typer.Exit) are raised on."""
    from envbuilder import _safety

    try:
        fn()
        return 0
    except passthrough:
        raise
    except Exit as e:
        return e.code
    except EnvbuilderError as e:
        return report_error(e, as_json)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP (_safety.Terminated)
        return _interrupted(e)
    except Exception as e:  # a bug: one line, the trace only on request
        # (unless it wraps a signal that landed while a class was made, as in an import)
        signal_ = _safety.interrupt_in(e)
        if signal_ is not None:
            return _interrupted(signal_)
        if _safety.is_broken_pipe(e):
            return _safety.stdout_gone()
        clean = _safety.as_clean_error(e)
        if clean is not None and not os.environ.get("ENVBUILDER_DEBUG"):
            return report_error(clean, as_json)
        if os.environ.get("ENVBUILDER_DEBUG"):
            raise
        say(f"envbuilder: internal error: {type(e).__name__}: {e} "
                         f"(set ENVBUILDER_DEBUG=1 for the traceback)", err=True)
        return EXIT_FAILED


def _interrupted(e: KeyboardInterrupt) -> int:
    from envbuilder import _safety

    _safety.say("envbuilder: interrupted; nothing was recorded for the step in progress\n")
    return _safety.interrupted_exit_code(e)


def print_explain(report: Any) -> None:
    """explain's human output: one line of facts, then each cause with its reasons, evidence,
    check, fix and source, then the low-confidence guesses, marked as such."""

    summary = report.facts.summary()
    if summary:
        say(f"facts: {summary}")
    for i, c in enumerate(report.causes, 1):
        team = " [team case]" if getattr(c, "team_match", False) else ""
        say(f"{i}. {c.category} ({c.confidence:.0%}){team}: {c.title}")
        _print_detail(c, reasons=3, lines=4)
    guesses = getattr(report, "guesses", ())
    if guesses:
        say("low-confidence guesses (too little evidence to name a cause):")
        for c in guesses:
            say(f"?  {c.category} ({c.confidence:.0%}): {c.title}")
            _print_detail(c, reasons=1, lines=2)


def _print_detail(c: Any, *, reasons: int, lines: int) -> None:
    for reason in c.reasons[:reasons]:
        said = reason if reason.startswith("like ") else f"because {reason}"
        say(f"   {said}")
    for ev in c.evidence[:lines]:
        say(f"   {ev.file}:{ev.line_no}: {ev.text.strip()[:160]}")
    say(f"   check: {c.check}", f"   fix:   {c.fix}", f"   see:   {c.source}")


_NO_CAUSE = {
    "no failure found": "no failure found in the log (warnings, deprecation notices, banners and INFO "
                        "lines are not evidence of one)",
    "low confidence": "no cause found with confidence (the guesses above are not a diagnosis)",
}


def explain_logs(logs: list[str], top: int, as_json: bool) -> None:
    """``explain LOG...``: the report; exit 1 (:class:`Exit`) unless a cause was found with
    confidence (the verdict says why: no failure found, low confidence, nothing matched)."""
    from envbuilder.api.explaining import explain_report

    report = explain_report(logs, top=top)
    echo_json(report.to_dict()) if as_json else print_explain(report)
    if not report.causes:
        said = _NO_CAUSE.get(getattr(report, "verdict", ""), "nothing in the log matched a known failure")
        say(f"envbuilder: {said}", err=True)
        raise Exit(EXIT_FAILED)


def finish(rv: Any) -> None:
    """Exit with ``rv``: a silent 130 from typer says which signal; stdout flushed (gone: 141)."""
    from envbuilder import _safety

    if rv == 130:  # typer turns a signal that lands while it parses into a silent exit 130
        if not _safety.INTERRUPT_SAID:
            _safety.say("envbuilder: interrupted\n")
        rv = _safety.interrupted_exit_code()  # and which signal
    _safety.restore_signal_handlers()  # the work is done: a late signal just ends us
    try:
        sys.stdout.flush()
    except OSError as e:
        if not _safety.is_broken_pipe(e):
            raise
        rv = _safety.stdout_gone()
    sys.exit(rv if isinstance(rv, int) else 0)
