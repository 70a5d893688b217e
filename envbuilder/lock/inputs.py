"""What a lock is made from, computed offline (no uv, no index): the record its header keeps
and compares (``lock --check``), its digest, and what uv is given."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from packaging.utils import canonicalize_name

from envbuilder.components import registry
from envbuilder.core.resolve import Stack
from envbuilder.lock import uv as _uv
from envbuilder.lock.checks import nccl_fact
from envbuilder.lock.entries import comment_safe
from envbuilder.lock.team import check_user_requirements, user_requirements
from envbuilder.render.plan import make_plan

if TYPE_CHECKING:
    from packaging.requirements import Requirement


@dataclass(frozen=True)
class LockInputs:
    """What a lock of a stack is made from, computed offline (no uv, no index): the record
    the lock's header keeps (key -> value; ``extra index`` and ``requirement`` are lists) and
    its digest, and what uv is given (the top-level requirement lines, the indexes as given,
    with any credentials, and the upload cut-off)."""

    record: dict[str, Any]
    digest: str
    requirements: list[str]
    idx: _uv.Indexes
    index_url: str | None
    extra_index_urls: tuple[str, ...]
    exclude_newer: str | None
    requirements_file: str | None
    stack_requirements: list[str] = field(default_factory=list)  # the stack's alone
    team: tuple[str, ...] = ()  # the team's lines, resolved together with the stack's


def record_digest(record: dict[str, Any]) -> str:
    import json

    canon = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return "sha256:" + hashlib.sha256(canon.encode("ascii")).hexdigest()


def lock_inputs(stack: Stack, *, requirements_file: str | Path | None = None,
                index_url: str | None = None, extra_index_urls: Sequence[str] = (),
                exclude_newer: str | None = None, team: Sequence[str] = (),
                compiled: Sequence[str] = (), index_strategy: str | None = None) -> LockInputs:
    """The inputs of a lock of ``stack``, offline: the stack's facts that decide its packages
    (target, Python, platform, torch and its variant, the NCCL wheel, the components), the
    top-level requirement lines, the ``--requirements`` file's sha256, the indexes (without
    credentials) and their strategy, ``--exclude-newer`` (a spec's: RFC 3339 UTC, checked when
    the spec was made) and the lock format. Tool versions
    (uv, envbuilder) are not inputs. A bad ``--requirements`` file is refused here (exit 2,
    or 3 when it contradicts the stack)."""
    from packaging.requirements import Requirement

    from envbuilder._fs import read_text_capped

    extras: list[Requirement] = []
    file_digest = "none"
    if requirements_file is not None:
        text = read_text_capped(Path(requirements_file), "--requirements", limit=1 << 20)
        extras = user_requirements(requirements_file, text)
        check_user_requirements(stack, extras, requirements_file)
        file_digest = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    extras += [Requirement(t) for t in team]  # a project's list, checked by team_requirements
    when = exclude_newer  # the spec's, as its check returned it (RFC 3339 UTC): checked there
    stack_reqs = input_requirements(stack)
    # the team's packages that compile against torch bring their build requirements (and are
    # refused here, exit 3, when the stack cannot build them): lock.compiled
    from envbuilder.lock.compiled import lock_build_requirements

    builds = lock_build_requirements(stack, [str(r) for r in extras], compiled)
    reqs = list(dict.fromkeys([*stack_reqs, *builds, *(str(r) for r in extras)]))
    idx = _uv.indexes(stack, index_url, extra_index_urls, index_strategy)
    nccl, pkg = nccl_fact(stack)
    record: dict[str, Any] = {
        "target": stack.target,
        "python": stack.python,
        "platform": _uv.python_platform(stack),
        "torch": f"{stack.torch.version} ({stack.variant})",
        "nccl": "none" if nccl is None else (f"{nccl} ({pkg})" if pkg else nccl),
        # each component on a matrix axis, in plan order: its release, or none
        **{c.axis: str(rel.version) if (rel := c.release(stack)) is not None else "none"
           for c in registry.components() if c.axis},
        "index": _uv.public_url(idx.index),
        "extra index": [_uv.public_url(u) for u in idx.extras],
        "index strategy": idx.strategy,
        "exclude newer": when or "none",
        "requirements file": file_digest,
        "requirement": reqs,
    }
    record = {k: [comment_safe(x) for x in v] if isinstance(v, list) else comment_safe(v)
              for k, v in record.items()}
    return LockInputs(record=record, digest=record_digest(record), requirements=reqs, idx=idx,
                      index_url=index_url, extra_index_urls=tuple(extra_index_urls),
                      exclude_newer=when,
                      requirements_file=str(requirements_file) if requirements_file else None,
                      stack_requirements=stack_reqs,
                      team=tuple(dict.fromkeys(str(r) for r in extras)))


def input_requirements(stack: Stack, extras: Sequence[Requirement] = ()) -> list[str]:
    """The top-level requirements a lock of ``stack`` resolves: every layer's requirements as
    the build plan states them (torch with numpy and the NCCL wheel it bundles, then each
    component's, in plan order) plus the build dependencies of the layers that compile, plus the user's
    extras, all resolved together (one ``uv pip compile``)."""

    lines: list[str] = []
    for layer in make_plan(stack).layers:
        lines += list(layer.requirements)
        if layer.name == "torch":
            lines += stack_pins(stack)
        lines += list(layer.build_requirements)
    lines += [str(r) for r in extras]
    return list(dict.fromkeys(lines))


def stack_pins(stack: Stack) -> list[str]:
    """The stack's own pins beyond its layers' lines: the NCCL wheel torch bundles (``==``).
    torch pins its triton and other ``nvidia-*`` wheels itself (``==`` in its metadata)."""
    nccl, pkg = nccl_fact(stack)
    return [f"{canonicalize_name(pkg)}=={nccl}"] if nccl and pkg else []


LIST_KEYS = ("extra index", "requirement")
