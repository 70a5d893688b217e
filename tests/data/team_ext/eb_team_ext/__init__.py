"""envbuilder's test extension: ``add_one`` is compiled C++ against torch."""
import torch  # noqa: F401  (loads libtorch before the extension)

from eb_team_ext._C import add_one  # noqa: E402

__all__ = ["add_one"]
