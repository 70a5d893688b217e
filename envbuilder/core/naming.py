"""An image's names: the one place that says what a target's image is called, locally, when it
is pushed and in the job files that pull it.

``image_names(spec, stack_tag)`` is the whole rule (docs/commands.md, "Image names"):

- ``registry`` is a registry plus a namespace (``127.0.0.1:5077/ml``, ``ghcr.io/acme``), as a
  docker user reads it; ``repository`` names the image under it. The repository defaults to the
  project's name (its folder's name, made a valid repository name) inside a project, else to
  ``envbuilder``. The image is ``[<registry>/]<repository>``.
- The version tag is the stack's tag (``cpu-torch2.13.0-py311-debian12``); a project target's
  is its name before it (``train-cpu-torch2.13.0-py311-debian12``): two targets of one stack
  never share a tag, and a repository's tags list by target.
- Outside a project, with neither key, the image is the local ``envbuilder:<stack tag>`` it has
  always been. Inside a project the generic ``envbuilder:<stack tag>`` is a second local name
  (``generic``) that the build gives the image only when no other image holds it, or one built
  for the same project (run.build reads the holder's ``io.envbuilder.project`` label): it is
  never moved away from a CI's or another project's image.
- Backwards compatibility: a project file that sets ``registry`` and no ``repository`` (the
  meaning ``registry`` had before: a whole repository, ``host/ns/repo``) keeps that meaning;
  ``legacy_warning`` says so, with the two keys that state it the new way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from envbuilder.core import validate
from envbuilder.errors import InputError

if TYPE_CHECKING:
    from envbuilder.core.spec import TargetSpec

LOCAL_REPOSITORY = "envbuilder"  # the local name of images built outside a project
PROJECT_LABEL = "io.envbuilder.project"  # the project an image was built for (its image name)


@dataclass(frozen=True)
class ImageNames:
    """What one target's image is called (``image_names``)."""

    repository: str  # [registry/]repository: where it is tagged and pushed
    tag: str  # its version tag
    registry: str | None = None  # the registry and namespace it goes under (None: local only)
    generic: str | None = None  # inside a project: envbuilder:<stack tag>, given only when free
    project: str | None = None  # inside a project: the value of its io.envbuilder.project label
    legacy: bool = False  # a project file's registry read the old way (a whole repository)

    @property
    def ref(self) -> str:
        return f"{self.repository}:{self.tag}"


def repository_name(text: str, what: str) -> str:
    """``text`` (a project folder's name) as a repository name: lowercase, runs of other
    characters as one '-', no separator at either end; bad input when nothing is left."""
    name = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    if not name:
        raise InputError(f"{what} {text!r} gives no repository name: set repository = \"NAME\" "
                         f"in the project file (or --repository NAME)")
    return validate.repository(name, what)


def project_repository(project: Path) -> str:
    """The repository a project's images get by default: its folder's name."""
    return repository_name(Path(project).parent.name, f"the project folder name of {project}")


def repository_of(registry: str | None, repository: str | None, project: Path | None) -> str:
    """``[registry/]repository``: the repository given, else the project's (``project``: its
    file), else envbuilder."""
    name = repository or (project_repository(project) if project is not None else LOCAL_REPOSITORY)
    return validate.repository(f"{registry}/{name}" if registry else name, "--registry/--repository")


def _legacy(spec: TargetSpec) -> bool:
    """A registry from the project file with no repository anywhere: the old meaning."""
    where = spec.origin.get("registry", "")
    return (spec.project is not None and spec.registry is not None and spec.repository is None
            and where.startswith("project file"))


def image_names(spec: TargetSpec, stack_tag: str) -> ImageNames:
    """The names of ``spec``'s image, whose stack's tag is ``stack_tag`` (module docstring)."""
    validate.tag(stack_tag, "stack tag")
    tag = stack_tag
    if spec.from_project and spec.name != stack_tag:
        tag = validate.tag(f"{spec.name}-{stack_tag}"[:128].rstrip(".-"), "image tag")
    if _legacy(spec):
        assert spec.registry is not None
        return ImageNames(spec.registry, tag, registry=spec.registry,
                          generic=f"{LOCAL_REPOSITORY}:{stack_tag}", project=spec.registry,
                          legacy=True)
    repo = repository_of(spec.registry, spec.repository, spec.project)
    if spec.project is None:
        return ImageNames(repo, tag, registry=spec.registry)
    generic = f"{LOCAL_REPOSITORY}:{stack_tag}"
    return ImageNames(repo, tag, registry=spec.registry,
                      generic=None if f"{repo}:{tag}" == generic else generic, project=repo)


def legacy_warning(spec: TargetSpec) -> str | None:
    """The warning for a project file whose ``registry`` is read the old way, with the fix."""
    if not _legacy(spec):
        return None
    assert spec.registry is not None
    where = spec.origin["registry"].rstrip(":")
    head, _, last = spec.registry.rpartition("/")
    fix = (f'registry = "{head}" and repository = "{last}"' if head
           else f'repository = "{last}" without registry')
    return (f"warning: {where} = {spec.registry!r} is read as a whole repository (its meaning "
            f"before registry became a registry and namespace): images go to "
            f"{spec.registry}:<tag>. Write {fix} to keep them there, or add repository = \"NAME\" "
            f"to push to {spec.registry}/NAME")
