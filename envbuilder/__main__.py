"""``python -m envbuilder ...``: the same command as the ``envbuilder`` console script."""

from envbuilder._entry import main

if __name__ == "__main__":  # pragma: no cover - run as a module
    main()
