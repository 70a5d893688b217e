"""``python -m envbuilder ...``: the same command as the ``envbuilder`` console script."""

from envbuilder.cli import main

if __name__ == "__main__":  # pragma: no cover - run as a module
    main()
