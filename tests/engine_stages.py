"""The legacy builder's stage images, which are its cache: keep the CPU ones, drop the CUDA ones.
(Since issue 42 the suite builds through BuildKit, whose stages are its build cache, bounded by
its garbage collection: ``stage_images`` is then empty, and ``make_room`` prunes that cache too.)

A multi-stage build leaves each earlier stage's last image untagged. They are the build cache of
the next run: without the CPU torch layer's stage a warm run installs torch again (about a
minute per CPU variant). So the suite never runs ``docker image prune`` wholesale;
scripts/test-services.sh prunes untagged images only over a budget. A CUDA image build drops the
stages it made itself (several GB each; the CUDA image itself is kept, tagged by the digest of
its context, and a warm run reuses it without building): the ones its report names
(``stage_images``), never "whatever appeared meanwhile", which under two workers would take
another build's stages, even while that build runs. Before a CUDA build, when the disk is
short, the untagged images go first (``make_room``): a cold run keeps every CPU stage it built,
and a CUDA build's peak is tens of GB.
"""

from __future__ import annotations

import contextlib
import os


def drop_stages(client, images) -> None:
    """Remove these stage images (and their untagged parents) where nothing else uses them: an
    image with a tag, or with a child image, stays. The last stage goes first: removing it
    takes the stages it was built FROM along."""
    for ident in reversed(list(images)):
        with contextlib.suppress(Exception):  # in use, a parent of another image, or gone
            if not client.images.get(ident).tags:
                client.images.remove(ident, noprune=False)


# a CUDA image build's peak on the engine's disk: its builder stage (up to ~11 GB with nvcc and
# the CUDA wheels), the runtime image (~6 GB) and the layers being committed
CUDA_BUILD_NEEDS_GB = 35


def free_gb(client) -> float | None:
    """The engine's data root's free space (None for a remote engine: not a path here)."""
    try:
        st = os.statvfs(client.info()["DockerRootDir"])
    except (OSError, KeyError, TypeError):
        return None
    return st.f_bavail * st.f_frsize / (1 << 30)


def drop_images_of(client, repository: str, *, keep: str) -> list[str]:
    """Remove every image tagged in ``repository`` but ``keep``'s, with all their names (the
    CUDA test images of the cases already done: a case's tests run together, in file order).
    The tags removed."""
    gone = []
    for img in client.images.list(name=repository):
        if any(t.startswith(keep) for t in img.tags):
            continue
        with contextlib.suppress(Exception):  # in use by a container: it stays
            client.images.remove(img.id, force=True)
            gone += img.tags
    return gone


def make_room(client, need_gb: int = CUDA_BUILD_NEEDS_GB) -> bool:
    """Before a build of many GB: when the engine's data root has less than ``need_gb`` free,
    the untagged images (the legacy builder's stages) and BuildKit's build cache (the stages
    of BuildKit's builds: the next run's cache) go first, since a cache is worth less than a
    build that runs out of disk. True when it pruned. A remote engine's disk is not read (its
    data root is not a path here)."""
    free = free_gb(client)
    if free is None or free >= need_gb:
        return False
    client.images.prune(filters={"dangling": True})
    with contextlib.suppress(Exception):  # an engine without BuildKit has no build cache
        client.api.prune_builds(all=True)
    return True
