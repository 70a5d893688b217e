"""The command line's own parts (the CLI layer): option declarations (``options``) and output
(``output``: tables, JSON, progress, errors). ``envbuilder.cli`` holds the commands."""
