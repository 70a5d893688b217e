"""torch: the first layer (torch and numpy from torch's index), the base every later layer
builds on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from packaging.version import Version

from envbuilder.components.base import Component, PipLayer, PlanContext

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

PYPI = "https://pypi.org/simple"


class Torch(Component):
    name = "torch"

    def active(self, stack: Stack) -> bool:
        return True

    def layer(self, ctx: PlanContext) -> PipLayer:
        stack = ctx.stack
        # numpy belongs with torch: torch.distributed's object collectives (all_gather_object,
        # broadcast_object_list) fail with "Numpy is not available" without it (found by the smoke
        # job). Wheels before torch 2.3 were built against NumPy 1.x and break under NumPy 2
        # (https://github.com/pytorch/pytorch/issues/107302, fixed for 2.3: https://github.com/pytorch/pytorch/releases/tag/v2.3.0).
        numpy = "numpy" if stack.torch.version >= Version("2.3") else "numpy<2"
        index = None if ctx.wheelhouse else stack.torch_index
        if index == PYPI or index == ctx.index:
            index = None
        return PipLayer(self.name, (f"torch=={stack.torch.version}", numpy), index,
                        extra_index_url=index is not None)

    def source(self, stack: Stack) -> tuple[str, ...]:
        return tuple(stack.torch.source)

    def lock_pins(self, stack: Stack) -> dict[str, tuple[str, str]]:
        v = stack.torch.version
        return {"torch": (str(v), f"torch {v} ({stack.target})")}


COMPONENT = Torch()
ORDER = 0
