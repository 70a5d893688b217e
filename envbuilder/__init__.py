"""envbuilder: multi-GPU PyTorch training environments that work the first time."""

__version__ = "0.1.0"

# the distribution on PyPI (pip install torch-envbuilder): the name `envbuilder` belongs to an
# unrelated project there; the command and the import package stay `envbuilder`
DISTRIBUTION = "torch-envbuilder"

# seconds before a collective of the smoke job counts as hung: one default for `smoke --timeout`,
# `build --smoke-timeout` and the job files
SMOKE_TIMEOUT = 120
