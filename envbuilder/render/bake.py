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


def _builder_key(files: Mapping[str, str | bytes], dockerfile: str, builder_image: str) -> str | None:
    stage = _builder_stage(dockerfile)
    if not stage:
        return None
    h = hashlib.sha256()
    h.update(builder_image.encode() + b"\0" + stage.encode() + b"\0")
    for rel in sorted(r for r in files if r.startswith("ca-certificates/")):
        data = files[rel]
        h.update(rel[len("ca-certificates/"):].encode() + b"\0"
                 + (data.encode() if isinstance(data, str) else data) + b"\0")
    return h.hexdigest()[:12]


PIP_CACHE_MOUNT = "--mount=type=cache,target=/root/.cache/pip,sharing=locked"
APT_CACHE_MOUNT = "--mount=type=cache,target=/var/cache/apt,sharing=locked"


def with_cache_mounts(dockerfile: str) -> str:
    """The Dockerfile with BuildKit cache mounts (``bake --cache-mounts``): pip's cache on each
    RUN that runs pip (its ``--no-cache-dir`` and PIP_NO_CACHE_DIR dropped there, so a rebuilt
    layer reuses the wheels pip downloaded or built before), apt's package cache on each RUN that
    runs apt-get. The caches live in the builder, never in a layer. Only BuildKit builds this
    file (the legacy builder refuses ``RUN --mount``); plain ``render`` output stays as it was."""
    lines = dockerfile.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("RUN "):
            out.append(lines[i])
            i += 1
            continue
        j = i
        while lines[j].rstrip("\n").endswith("\\") and j + 1 < len(lines):
            j += 1
        body = "".join(lines[i:j + 1])[len("RUN "):]
        mounts = []
        if "pip install" in body:
            mounts.append(PIP_CACHE_MOUNT)
            body = "unset PIP_NO_CACHE_DIR \\\n && " + body.replace("pip install --no-cache-dir ", "pip install ")
        if "apt-get " in body:
            mounts.append(APT_CACHE_MOUNT)
        out.append("RUN " + "".join(m + " " for m in mounts) + body)
        i = j + 1
    text = "".join(out)
    head, _, rest = text.partition("\nARG BUILDER_IMAGE=")
    note = ("\n# BuildKit cache mounts for pip and apt (envbuilder bake --cache-mounts): build it with "
            "BuildKit\n# (docker buildx bake); the legacy builder refuses RUN --mount.")
    return head + note + "\nARG BUILDER_IMAGE=" + rest if rest else text


def _folder_files(folder: Path) -> dict[str, str | bytes]:
    """A rendered folder's files that the bake file reads (stack.json, Dockerfile, CA files)."""
    out: dict[str, str | bytes] = {}
    try:
        out["stack.json"] = (folder / "stack.json").read_text()
        out["Dockerfile"] = (folder / "Dockerfile").read_text()
    except OSError as e:
        raise InputError(f"{folder} is not a rendered build folder (envbuilder render): {e}") from None
    certs = folder / "ca-certificates"
    if certs.is_dir():
        for p in sorted(certs.rglob("*")):
            if p.is_file():
                out[str(p.relative_to(folder))] = p.read_bytes()
    return out


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
               alias_tags: bool = True, share_builders: bool = True) -> str:
    """Write docker-bake.hcl for folders already rendered (``[(name, folder), ...]``); ``out``
    is the file or its folder. Returns the HCL text (bake_hcl)."""
    out = Path(out)
    path = out / "docker-bake.hcl" if out.is_dir() or out.suffix != ".hcl" else out
    text = bake_hcl([(n, Path(f), _folder_files(Path(f))) for n, f in targets], path,
                    registry=registry, alias_tags=alias_tags, share_builders=share_builders)
    write_file_atomic(path, text, step="bake", group="bake")
    return text


def _image(name: str, folder: Path, files: Mapping[str, str | bytes], share: bool) -> dict:
    _ident(name)
    try:
        stack = json.loads(files["stack.json"])
        dockerfile = str(files["Dockerfile"])
    except (KeyError, ValueError) as e:
        raise InputError(f"{folder} is not a rendered build folder (envbuilder render): {e}") from None
    img = stack["image"]
    builder, runtime = img["builder"], img["runtime"]
    validate.image_ref(builder, "builder image")
    validate.image_ref(runtime, "runtime image")
    # a project target's own tag (assemble.image_tag) when it has one: its job files pull it
    tag = stack.get("image_tag") or stack["tag"]
    return {"name": name, "folder": folder, "tag": validate.tag(tag, "stack tag"),
            "flavour": stack.get("flavour") or "",
            "alias": validate.tag(stack.get("torch_variant") or name, "alias"),
            "labels": img["labels"], "builder": builder, "runtime": runtime,
            "platform": validate.platform(stack["platform"]) if stack.get("platform") else None,
            "key": _builder_key(files, dockerfile, builder) if share else None}


def _unique_tags(images: list[dict]) -> None:
    """Two targets must not share a version tag: the flavour goes in when it tells them apart,
    else the target's name."""
    by_tag: dict[str, list[dict]] = {}
    for i in images:
        by_tag.setdefault(i["tag"], []).append(i)
    for same in by_tag.values():
        if len(same) < 2:
            continue
        flavours = [i["flavour"] for i in same]
        for i in same:
            extra = i["flavour"] if i["flavour"] and len(set(flavours)) == len(flavours) else i["name"]
            i["tag"] = validate.tag(f"{i['tag']}-{extra}", "tag")


def _tags_and_caches(images: list[dict], registry: str | None, alias_tags: bool,
                     registries: Mapping[str, str | None] | None = None,
                     local: Mapping[str, str] | None = None) -> None:
    """Each image's version tag (to push), its moving alias (listed apart) and its caches,
    under its own registry (``registries``, by target) else ``registry``, else its local
    repository (``local``, by target; default envbuilder)."""
    # the moving alias is the CUDA line (cu121, cpu); when several targets share a line only the
    # one named after it carries the alias, else they would overwrite each other's tag
    by_alias: dict[str, list[str]] = {}
    for i in images:
        by_alias.setdefault(i["alias"], []).append(i["name"])
    for i in images:
        reg = (registries or {}).get(i["name"], registry)
        repo = reg or (local or {}).get(i["name"], LOCAL_REPOSITORY)
        owners = by_alias[i["alias"]]
        own = alias_tags and (len(owners) == 1 or i["name"] == i["alias"])
        i["tags"] = [f"{repo}:{i['tag']}"]
        i["moving"] = f"{repo}:{i['alias']}" if own else None
        if reg is not None:
            ref = f"{reg}:buildcache-{i['name']}"
            i["cache"] = ([f"type=registry,ref={ref}"], [f"type=registry,ref={ref},mode=max"])
        else:
            i["cache"] = ([f"type=local,src=.buildx-cache/{i['name']}"],
                          [f"type=local,dest=.buildx-cache/{i['name']},mode=max"])


def _shared_builders(images: list[dict]) -> dict[str, dict]:
    """Builder stages shared by several images (same key): one common bake target each."""
    counts: dict[str, int] = {}
    for i in images:
        if i["key"]:
            counts[i["key"]] = counts.get(i["key"], 0) + 1
    shared: dict[str, dict] = {}
    for i in images:
        k = i["key"]
        if k and counts[k] > 1 and k not in shared:
            shared[k] = {"name": f"builder-{k}", "folder": i["folder"], "builder": i["builder"]}
    return shared


def bake_hcl(targets: Sequence[tuple[str, Path, Mapping[str, str | bytes]]], path: Path, *,
             registry: str | None = None, alias_tags: bool = True,
             share_builders: bool = True, docker_driver: bool = False,
             registries: Mapping[str, str | None] | None = None,
             local: Mapping[str, str] | None = None) -> str:
    """The docker-bake.hcl text for rendered targets ``[(name, folder, files)]`` (the files in
    memory: bake renders and writes them in one transaction with this file).

    ``registries``: each target's own repository (a spec's, by name), else ``registry``;
    ``local``: the local repository of a target with neither (default envbuilder).
    ``registry``: a repository such as ``ghcr.io/acme/envbuilder`` (no tag); images are tagged
    ``<registry>:<version tag>`` (unique per target). The moving aliases (``<registry>:cu121``)
    are listed apart, in comments: ``envbuilder build --push`` moves them after the smoke job
    passed; ``bake --push`` pushes only version tags. Each target caches to and from the
    registry (``<registry>:buildcache-<name>``), or a local folder without one.

    ``docker_driver``: for buildx's ``docker`` driver, i.e. a Docker engine's built-in BuildKit
    (Debian 12's dockerd 20.10 has v0.8): it exports no cache ("Cache export is not supported
    for the docker driver") and its Dockerfile frontend has no named contexts ("unsupported
    frontend capability moby.buildkit.frontend.contexts"), so the file names neither; identical
    builder stages are still built once (BuildKit dedupes equal steps by cache key)."""
    for r in (registry, *(registries or {}).values(), *(local or {}).values()):
        if r is not None:
            validate.repository(r, "--registry")
    base = Path(path).parent
    if not targets:
        raise InputError("no targets to bake")
    seen: set[str] = set()
    images = []
    for name, folder, files in targets:
        if name in seen:
            raise InputError(f"target {name} is given twice")
        seen.add(name)
        images.append(_image(name, folder, files, share_builders and not docker_driver))
    _unique_tags(images)
    _tags_and_caches(images, registry, alias_tags, registries, local)
    shared = _shared_builders(images)

    aliases = [f"# alias {i['name']}: {i['moving']}" for i in images if i["moving"]]
    blocks = [
        f"# Rendered by envbuilder {__version__}: docker buildx bake -f {Path(path).name}   (run from this folder)\n"
        "# Builds every target below; `--load` to load them, `--push` to push their version tags.\n"
        "# The moving alias tags are not among them: `envbuilder build --push` moves each only after\n"
        "# its smoke job passed." + ("\n" + "\n".join(aliases) if aliases else ""),
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
            ("args", {"BUILDER_IMAGE": i["builder"], "RUNTIME_IMAGE": i["runtime"]}),
            ("cache-from", None if docker_driver else i["cache"][0]),
            ("cache-to", None if docker_driver else i["cache"][1])]
        if i["platform"]:  # the stack's own platform (amd64 is the default and stays implicit)
            fields.append(("platforms", [i["platform"]]))
        if i["key"] in shared:
            fields.append(("contexts", {"builder": f"target:{shared[i['key']]['name']}"}))
        blocks.append(_block("target", i["name"], fields))
    return "\n\n".join(blocks) + "\n"


def moving_aliases(text: str) -> tuple[str, ...]:
    """The moving aliases a bake file lists apart (envbuilder build moves them)."""
    import re

    return tuple(re.findall(r"^# alias [^:]+: (\S+)$", text, flags=re.M))
