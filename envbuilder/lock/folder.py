"""A build folder is locked whenever a lock exists in it.

``render`` reads the ``requirements.lock`` it finds in the folder (api.spec_files); ``lock``
re-renders the lock-dependent files of a folder ``render`` wrote (its Dockerfile, definition,
per-layer requirement files and stack.json) so they install from the lock it just wrote; and
``lock --check`` fails on a folder whose Dockerfile does not install from the lock it checks
(a folder rendered before the lock, or edited by hand), naming the command that fixes it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from envbuilder.errors import OperationError

LOCK_NAME = "requirements.lock"


def rendered_by_envbuilder(folder: Path) -> bool:
    """``folder`` holds a Dockerfile that envbuilder's render wrote (its manifest says so)."""
    from envbuilder._fs import read_manifest

    entry = read_manifest(folder).get("Dockerfile")
    return entry is not None and (folder / "Dockerfile").is_file()


def follows_lock_problem(folder: Path) -> str | None:
    """Why the folder's Dockerfile does not install from its requirements.lock (None: it does,
    or there is no rendered Dockerfile to judge)."""
    from envbuilder._fs import read_text_capped

    if not rendered_by_envbuilder(folder) or not (folder / LOCK_NAME).is_file():
        return None
    lock = read_text_capped(folder / LOCK_NAME, "lock", limit=64 << 20, follow_links=False)
    digest = "sha256:" + hashlib.sha256(lock.encode("utf-8")).hexdigest()
    docker = read_text_capped(folder / "Dockerfile", "Dockerfile", follow_links=False)
    try:
        stack = json.loads(read_text_capped(folder / "stack.json", "stack.json", follow_links=False))
        recorded = (stack.get("lock") or {}).get("digest")
    except (OSError, ValueError, AttributeError):
        recorded = None
    if "--require-hashes" not in docker:
        return f"{folder / 'Dockerfile'} does not install from {LOCK_NAME} (no --require-hashes: rendered before the lock)"
    if recorded != digest:
        return (f"{folder / 'Dockerfile'} installs from another lock ({recorded or 'none'} in stack.json; "
                f"{LOCK_NAME} is {digest[:19]}...)")
    return None


def check_follows_lock(folder: Path, command: str) -> None:
    """``lock --check``: OperationError (exit 1) when the folder's Dockerfile ignores its lock."""
    why = follows_lock_problem(folder)
    if why is not None:
        raise OperationError(f"{why}: run {command} to render it from the lock", step="lock")
