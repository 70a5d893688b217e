"""A ``docker-bake.hcl`` that builds every rendered target with one ``docker buildx bake``.

Call ``envbuilder.api.bake_all(out, matrix_dir=None, registry=None)`` for ``envbuilder bake -o
DIR``: it renders every built-in target into ``DIR/<target>/`` (envbuilder.api.render_target) and
writes ``DIR/docker-bake.hcl``, returning a report. ``write_bake(targets, out, registry=...)``
writes the file for folders already rendered (``[(name, folder), ...]``) and returns its text.

Each image target: ``context`` = its rendered folder, ``dockerfile``, ``target = "runtime"``,
``tags`` (the version tag ``<stack.tag>`` and the moving CUDA-line alias, e.g. ``cu121``, the
one ``envbuilder build`` pushes; when targets share a line, as cu121 and cu121-ds do, only the
target named after the line carries it; under ``registry`` when given, else under the local
name ``envbuilder``), ``labels`` (the plan's
OCI/io.envbuilder labels) and ``args`` (BUILDER_IMAGE, RUNTIME_IMAGE). ``group "default"`` names
them all.

Shared builder stages: targets whose ``builder`` stage is identical (same stage text in the
Dockerfile, same BUILDER_IMAGE, same ca-certificates/ files) get one common target
``builder-<hash>`` (``target = "builder"`` of the first such folder) and use it through
``contexts = { builder = "target:builder-<hash>" }``. That is sound: a named build context
replaces a stage of the same name ("When Dockerfile defines a stage with the same name it is
overwritten", buildx build --build-context docs), so ``FROM builder`` and ``COPY --from=builder``
read the shared result, and the hash covers everything the stage reads. BuildKit would also
dedupe identical stages by cache key when they run in one bake; the explicit target makes the
sharing visible and independent of cache state. Later stages (the pip layers) are left to
BuildKit's content cache.

The moving alias must only be pushed after the smoke job passed: ``envbuilder build --push``
does that. Use this file to build and load (``docker buildx bake --load``), or build then push
the version tags; pushing with ``bake --push`` would move the aliases before any smoke test.
Context paths are written relative to the bake file's folder: run bake from there.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Mapping, Sequence

from envbuilder import __version__
from envbuilder.core import validate
from envbuilder.errors import InputError
from envbuilder.render.templating import write_file_atomic

LOCAL_REPOSITORY = "envbuilder"


def _s(value: str) -> str:
    """An HCL string literal: JSON escapes, and no template interpolation."""
    return json.dumps(str(value)).replace("${", "$${").replace("%{", "%%{")


def _ident(name: str) -> str:
    import re

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise InputError(f"target name {name!r} cannot name a bake target: use letters, digits, '-' and '_'")
    return name


def _builder_stage(dockerfile: str) -> str:
    lines = dockerfile.splitlines()
    start = next((i for i, ln in enumerate(lines)
                  if ln.startswith("FROM ") and ln.rstrip().endswith(" AS builder")), None)
    if start is None:
        return ""
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("FROM ")), len(lines))
    # comments and blank lines do not change what the stage builds (the parser drops them)
    return "\n".join(ln for ln in lines[start:end] if ln.strip() and not ln.lstrip().startswith("#"))


def _builder_key(folder: Path, dockerfile: str, builder_image: str,
                 staged: Mapping[str, str | bytes] | None = None) -> str | None:
    stage = _builder_stage(dockerfile)
    if not stage:
        return None
    h = hashlib.sha256()
    h.update(builder_image.encode() + b"\0" + stage.encode() + b"\0")
    if staged is not None:  # the files about to be written (one transaction with the HCL)
        for rel in sorted(r for r in staged if r.startswith("ca-certificates/")):
            data = staged[rel]
            data = data.encode() if isinstance(data, str) else data
            h.update(rel.removeprefix("ca-certificates/").encode() + b"\0" + data + b"\0")
        return h.hexdigest()[:12]
    certs = folder / "ca-certificates"
    if certs.is_dir():
        for p in sorted(certs.rglob("*")):
            if p.is_file():
                h.update(str(p.relative_to(certs)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _rel(folder: Path, base: Path) -> str:
    try:
        rel = os.path.relpath(folder.resolve(), base.resolve())
    except ValueError:  # another drive (Windows)
        return str(folder.resolve())
    return rel


def _block(kind: str, name: str, fields: Sequence[tuple[str, object]]) -> str:
    out = [f'{kind} "{name}" {{']
    for key, value in fields:
        if value is None:
            continue
        if isinstance(value, str):
            out.append(f"  {key} = {_s(value)}")
        elif isinstance(value, (list, tuple)):
            items = ",\n".join(f"    {_s(v)}" for v in value)
            out.append(f"  {key} = [\n{items}\n  ]")
        elif isinstance(value, Mapping):
            items = "\n".join(f"    {_s(k)} = {_s(v)}" for k, v in value.items())
            out.append(f"  {key} = {{\n{items}\n  }}")
        else:
            raise TypeError(key)
    out.append("}")
    return "\n".join(out)


def write_bake(targets: list[tuple[str, Path]], out: Path, *, registry: str | None = None,
               alias_tags: bool = True, share_builders: bool = True,
               staged: Mapping[str, Mapping[str, str | bytes]] | None = None,
               write: bool = True) -> str:
    """Write docker-bake.hcl for rendered folders; ``out`` is the file or its folder.

    ``registry``: a repository such as ``ghcr.io/acme/envbuilder`` (no tag); images are tagged
    ``<registry>:<stack.tag>`` and ``<registry>:<target>``. Returns the HCL text.
    ``staged`` (target name -> its files) takes each folder's files from memory instead of
    disk, and ``write=False`` only returns the text: the caller writes it in the same
    transaction as the folders (all or nothing).
    """
    if registry is not None:
        validate.repository(registry, "--registry")
    repo = registry or LOCAL_REPOSITORY
    out = Path(out)
    path = out / "docker-bake.hcl" if out.is_dir() or out.suffix != ".hcl" else out
    base = path.parent
    if not targets:
        raise InputError("no targets to bake")

    seen: set[str] = set()
    images = []
    for name, folder in targets:
        _ident(name)
        if name in seen:
            raise InputError(f"target {name} is given twice")
        seen.add(name)
        folder = Path(folder)
        files = staged.get(name) if staged is not None else None
        try:
            if files is not None:
                raw_stack, raw_df = files["stack.json"], files["Dockerfile"]
                stack = json.loads(raw_stack)
                dockerfile = raw_df.decode() if isinstance(raw_df, bytes) else raw_df
            else:
                stack = json.loads((folder / "stack.json").read_text())
                dockerfile = (folder / "Dockerfile").read_text()
        except (OSError, ValueError, KeyError) as e:
            raise InputError(f"{folder} is not a rendered build folder (envbuilder render): {e}") from None
        img = stack["image"]
        builder, runtime = img["builder"], img["runtime"]
        validate.image_ref(builder, "builder image")
        validate.image_ref(runtime, "runtime image")
        tag = validate.tag(stack["tag"], "stack tag")
        alias = validate.tag(stack.get("torch_variant") or name, "alias")
        images.append({"name": name, "folder": folder, "tag": tag, "alias": alias,
                       "labels": img["labels"],
                       "builder": builder, "runtime": runtime,
                       "key": _builder_key(folder, dockerfile, builder, files) if share_builders else None})

    # the moving alias is the CUDA line (cu121, cpu), as envbuilder build pushes it; when several
    # targets share a line (cu121, cu121-ds) only the one named after it carries the alias, else
    # they would overwrite each other's tag
    by_alias: dict[str, list[str]] = {}
    for i in images:
        by_alias.setdefault(i["alias"], []).append(i["name"])
    for i in images:
        owners = by_alias[i["alias"]]
        own = len(owners) == 1 or i["name"] == i["alias"]
        i["tags"] = [f"{repo}:{i['tag']}"] + ([f"{repo}:{i['alias']}"] if alias_tags and own else [])

    counts: dict[str, int] = {}
    for i in images:
        if i["key"]:
            counts[i["key"]] = counts.get(i["key"], 0) + 1
    shared: dict[str, dict] = {}
    for i in images:
        k = i["key"]
        if k and counts[k] > 1 and k not in shared:
            shared[k] = {"name": f"builder-{k}", "folder": i["folder"], "builder": i["builder"]}

    blocks = [
        f"# Rendered by envbuilder {__version__}: docker buildx bake -f {path.name}   (run from this folder)\n"
        "# Builds every target below; `--load` to load them. The moving alias tags (the CUDA line)\n"
        "# are pushed by `envbuilder build --push` after the smoke job passed: do not `bake --push` them.",
        _block("group", "default", [("targets", [i["name"] for i in images])]),
    ]
    for s in shared.values():
        blocks.append(f"# the builder stage shared by {', '.join(i['name'] for i in images if i['key'] == s['name'][8:])}\n"
                      + _block("target", s["name"], [
                          ("context", _rel(s["folder"], base)), ("dockerfile", "Dockerfile"),
                          ("target", "builder"), ("args", {"BUILDER_IMAGE": s["builder"]})]))
    for i in images:
        fields: list[tuple[str, object]] = [
            ("context", _rel(i["folder"], base)), ("dockerfile", "Dockerfile"),
            ("target", "runtime"), ("tags", i["tags"]), ("labels", i["labels"]),
            ("args", {"BUILDER_IMAGE": i["builder"], "RUNTIME_IMAGE": i["runtime"]})]
        if i["key"] in shared:
            fields.append(("contexts", {"builder": f"target:{shared[i['key']]['name']}"}))
        blocks.append(_block("target", i["name"], fields))
    text = "\n\n".join(blocks) + "\n"
    if write:
        write_file_atomic(path, text, step="bake", group="bake")
    return text
