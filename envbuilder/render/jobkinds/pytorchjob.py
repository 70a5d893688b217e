"""The Kubeflow training operator's PyTorchJob (kubeflow.org/v1), only as ``legacy``: the
operator gives every pod MASTER_ADDR/MASTER_PORT, RANK (the node rank) and WORLD_SIZE; the
arguments still pass them to torchrun explicitly (older operators set only those, and torchrun
reads only PET_-prefixed variables)."""

from __future__ import annotations

from typing import Any

from envbuilder.render.jobkinds.base import KubernetesKind, LayoutJob


class PyTorchJob(KubernetesKind):
    name = "legacy"
    stem = "pytorchjob"
    template = "jobs/pytorchjob.yaml.j2"
    title = "PyTorchJob (legacy)"

    def values(self, lay: LayoutJob) -> dict[str, Any]:
        return {"ptj_args": [*lay.head, "--node_rank=$(RANK)", "--master_addr=$(MASTER_ADDR)",
                             "--master_port=$(MASTER_PORT)", f"--max_restarts={lay.settings.max_restarts}", *lay.program]}


KIND = PyTorchJob()
