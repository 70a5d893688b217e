"""The legacy builder's stage images, which are its cache: keep the CPU ones, drop the CUDA ones.

A multi-stage build leaves each earlier stage's last image untagged. They are the build cache of
the next run: without the CPU torch layer's stage a warm run installs torch again (about a
minute per CPU variant). So the suite never runs ``docker image prune`` wholesale;
scripts/test-services.sh prunes untagged images only over a budget. A CUDA image build drops the
stages it made itself (several GB each; the CUDA image itself is kept, tagged by the digest of
its context, and a warm run reuses it without building): the ones its report names
(``stage_images``), never "whatever appeared meanwhile", which under two workers would take
another build's stages, even while that build runs.
"""

from __future__ import annotations

import contextlib


def drop_stages(client, images) -> None:
    """Remove these stage images (and their untagged parents) where nothing else uses them: an
    image with a tag, or with a child image, stays. The last stage goes first: removing it
    takes the stages it was built FROM along."""
    for ident in reversed(list(images)):
        with contextlib.suppress(Exception):  # in use, a parent of another image, or gone
            if not client.images.get(ident).tags:
                client.images.remove(ident, noprune=False)
