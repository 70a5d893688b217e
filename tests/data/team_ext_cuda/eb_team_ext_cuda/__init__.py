"""envbuilder's test CUDA extension: ``add_one`` is a kernel compiled by nvcc."""
import torch  # noqa: F401  (loads libtorch and the CUDA runtime before the extension)

from eb_team_ext_cuda._C import add_one  # noqa: E402

__all__ = ["add_one"]
