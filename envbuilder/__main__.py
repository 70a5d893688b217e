"""``python -m envbuilder ...``: the same command as the ``envbuilder`` console script."""

try:  # a Ctrl-C that lands while the (tiny) entry module loads: exit 130 all the same
    from envbuilder._entry import main
except KeyboardInterrupt:  # pragma: no cover - a window of a millisecond
    import os

    os.write(2, b"envbuilder: interrupted\n")
    os._exit(130)

if __name__ == "__main__":  # pragma: no cover - run as a module
    main()
