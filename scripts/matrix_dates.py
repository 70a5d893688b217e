"""Write each release's upload date into the matrix (``released:``), read from PyPI's JSON API.

    PYTHONPATH=$PWD python3 scripts/matrix_dates.py [--matrix DIR] [--check]

The date is the first upload of any file of that version (UTC, RFC 3339 to the second): torch,
deepspeed and horovod from their own projects, NCCL from the earliest of its
nvidia-nccl-cu11/cu12/cu13 wheels, CUDA toolkits from PyPI's ``cuda-toolkit`` meta-package
(its upload date, which for 12.9.2/13.0.3/13.1.2/13.2.1 is a bulk upload of 2026-04-14, later
than NVIDIA's release). Versions PyPI does not have keep no date. ``--check`` writes nothing
and exits 1 when a file would change. Needs the network (PyPI); the tests never run it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.request
from pathlib import Path

PROJECTS = {"torch.yaml": ["torch"], "deepspeed.yaml": ["deepspeed"], "horovod.yaml": ["horovod"],
            "nccl.yaml": ["nvidia-nccl-cu11", "nvidia-nccl-cu12", "nvidia-nccl-cu13"],
            "cuda.yaml": ["cuda-toolkit"]}


def upload_dates(project: str) -> dict[str, str]:
    req = urllib.request.Request(f"https://pypi.org/pypi/{project}/json",
                                 headers={"Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:  # noqa: S310 (a fixed https URL)
        data = json.load(r)
    out: dict[str, str] = {}
    for version, files in data["releases"].items():
        times = [f["upload_time_iso_8601"] for f in files if f.get("upload_time_iso_8601")]
        if times:
            out[version] = min(times)[:19] + "Z"
    return out


def _dates(name: str) -> dict[str, str]:
    merged: dict[str, str] = {}
    for project in PROJECTS[name]:
        for v, d in upload_dates(project).items():
            merged[v] = min(d, merged.get(v, d))
    return merged


def rewrite(name: str, text: str, dates: dict[str, str]) -> str:
    lines = [ln for ln in text.splitlines() if not re.match(r"^\s*released:", ln)]
    out: list[str] = []
    pending: str | None = None  # a released: line, written after the entry's requires: line
    for ln in lines:
        out.append(ln)
        if pending is not None:
            if re.match(r"^\s*requires:", ln):
                out.append(pending)
            else:
                out.insert(len(out) - 1, pending)
            pending = None
            continue
        m = re.match(r"^(\s*)versions:\s*\[(.*)\]\s*$", ln)
        if m and name in ("torch.yaml", "deepspeed.yaml", "horovod.yaml"):
            vs = [v.strip().strip("\"'") for v in m.group(2).split(",") if v.strip()]
            known = {v: dates[v] for v in vs if v in dates}
            if known:
                body = ", ".join(f'"{v}": "{d}"' for v, d in known.items())
                line = f"{m.group(1)}released: {{{body}}}"
                if name == "torch.yaml":
                    out.append(line)
                else:  # components: versions and requires stay together
                    pending = line
            continue
        m = re.match(r"^(\s*)- version:\s*[\"']?([0-9.]+)[\"']?\s*$", ln)
        if m and name in ("cuda.yaml", "nccl.yaml"):
            v = m.group(2)
            if v in dates:
                out.append(f"{m.group(1)}  released: \"{dates[v]}\"")
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matrix", default=str(Path(__file__).resolve().parent.parent / "matrices"))
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    changed = []
    for name in PROJECTS:
        path = Path(args.matrix) / name
        text = path.read_text()
        new = rewrite(name, text, _dates(name))
        if new != text:
            changed.append(name)
            if not args.check:
                path.write_text(new)
    print(("would change: " if args.check else "changed: ") + (", ".join(changed) or "nothing"))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
