"""The entry point (the ``envbuilder`` console script and ``python -m envbuilder``).

Light on purpose: it imports only the standard library and ``envbuilder._safety`` before it
guards the standard streams and the signals, so a closed stdout/stderr or a Ctrl-C that lands
while typer, rich or the library are still being imported is a clean exit (141 quiet, 130
"interrupted"), never a traceback. Then it runs ``envbuilder.cli.main``, and leaves without
the interpreter's teardown (where a late Ctrl-C would kill the process by the signal, or print
a traceback from whatever it interrupted): flush, the exit handlers, ``os._exit``.
"""

from __future__ import annotations

import os


def main() -> None:
    try:
        from envbuilder import _safety

        _safety.install_early()
    except KeyboardInterrupt:  # pragma: no cover - within the first milliseconds
        os._exit(130)
    code: object = 0
    try:
        import sys

        from envbuilder.ui import fastpath

        fast = fastpath.run(sys.argv[1:])  # the plain explain, without typer (ui.fastpath)
        if fast is not None:
            from envbuilder.ui.plain import finish

            finish(fast)
        from envbuilder.cli import main as cli_main

        cli_main()
    except SystemExit as e:
        code = 0 if e.code is None else e.code
    except KeyboardInterrupt as e:  # during the imports, or between two handlers
        _safety.say("envbuilder: interrupted\n")
        code = _safety.interrupted_exit_code(e)
    except OSError as e:
        if not _safety.is_broken_pipe(e):
            raise
        code = _safety.stdout_gone()
    except Exception as e:  # a signal wrapped by Python while a module was being imported
        signal_ = _safety.interrupt_in(e)
        if signal_ is None:
            raise
        _safety.say("envbuilder: interrupted\n")
        code = _safety.interrupted_exit_code(signal_)
    if not isinstance(code, int):  # sys.exit("message"): Python prints it and exits 1
        _safety.say(f"{code}\n")
        code = 1
    _safety.leaving()
    os._exit(_safety.finish(code))


if __name__ == "__main__":  # pragma: no cover
    main()
