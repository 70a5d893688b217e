"""The legacy builder's stage images, which are its cache: keep the CPU ones, drop the CUDA ones.

A multi-stage build leaves each stage's last image untagged ("dangling"). They are the build
cache of the next run: without the CPU torch layer's stage a warm run installs torch again
(about a minute per CPU variant). So the suite never runs ``docker image prune`` wholesale;
scripts/test-services.sh prunes dangling images only over a budget. A CUDA image build drops the
stages it made itself (several GB each): the CUDA image itself is kept, tagged by the digest of
its context, and a warm run reuses it without building.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def dropping_new_stages(client) -> Iterator[None]:
    """Remove the dangling images that appear inside the block (the block's own build stages),
    and only those: the other builds' stages stay the cache they are."""
    before = {img.id for img in client.images.list(filters={"dangling": True})}
    try:
        yield
    finally:
        for img in client.images.list(filters={"dangling": True}):
            if img.id not in before:
                with contextlib.suppress(Exception):  # a parent removed with its child, or in use
                    client.images.remove(img.id, noprune=False)
