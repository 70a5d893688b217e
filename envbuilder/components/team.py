"""The team's own packages (a project's requirements that do not compile): the last layer,
installed with what the layers before it hold as constraints, so changing them rebuilds that
layer only."""

from __future__ import annotations

from envbuilder.components.base import Component, PipLayer, PlanContext

LAYER = "team"


class Team(Component):
    name = LAYER

    def active(self, stack: object) -> bool:
        return True  # the plan's team requirements decide (layer() is None without them)

    def layer(self, ctx: PlanContext) -> PipLayer | None:
        # a locked plan always has the top layer: it holds whatever the lock places above the
        # stack's layers (torch's small dependencies, the team's lines), so the stack layer
        # holds the same few big wheels with or without a team's requirements
        if not (ctx.team_lines or ctx.hashes):
            return None
        return PipLayer(LAYER, ctx.team.plain if ctx.team else tuple(ctx.team_lines), None)


COMPONENT = Team()
ORDER = 90
