"""envbuilder: multi-GPU PyTorch training environments that work the first time."""

__version__ = "0.1.0"
