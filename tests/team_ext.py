"""The suite's team extensions (tests/data/team_ext, tests/data/team_ext_cuda) as sdists.

The archive is reproducible (sorted members, fixed times and owners, gzip without a time
stamp): tests/test_cuda_images.py keys its cached image by the build context, wheel files by
name and size.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

MTIME = 1700000000  # any fixed time


def ext_sdist(src: Path, name: str, version: str, dest: Path) -> Path:
    """``src`` (a pyproject.toml/setup.py package) as ``dest/<name>-<version>.tar.gz`` with a
    PKG-INFO of static metadata, so uv locks it without building it."""
    stem = f"{name.replace('-', '_')}-{version}"
    pkg_info = (f"Metadata-Version: 2.2\nName: {name}\nVersion: {version}\n"
                "Summary: an envbuilder test extension\nRequires-Python: >=3.9\n").encode()
    members: list[tuple[str, bytes | None]] = [(stem, None), (f"{stem}/PKG-INFO", pkg_info)]
    for p in sorted(src.rglob("*")):
        if "__pycache__" in p.parts or p.suffix in (".pyc", ".so") or ".egg-info" in p.as_posix():
            continue
        rel = f"{stem}/{p.relative_to(src).as_posix()}"
        members.append((rel, None if p.is_dir() else p.read_bytes()))
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
        for arcname, data in members:
            info = tarfile.TarInfo(arcname)
            info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                t.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                t.addfile(info, io.BytesIO(data))
    out = dest / f"{stem}.tar.gz"
    with open(out, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0) as z:
        z.write(raw.getvalue())
    return out
