"""Render time of every built-in target, and the start-up time of the CLI.

    python benchmarks/render.py [--runs N] [--matrix DIR] [--json]

Prints, for each built-in target, the time to resolve and write its build folder (the matrix
is loaded once, and its load time is shown apart), the total, and the time of
`envbuilder --help` (a fresh interpreter importing envbuilder.cli) against a bare
`python -c pass`, with their ratio. Medians of N runs. Reports only: no goal, exit 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HELP = [sys.executable, "-c",
        "from envbuilder.cli import main; import sys; sys.argv=['envbuilder','--help']; main()"]
BARE = [sys.executable, "-c", "pass"]


def _median_run(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        times.append(time.perf_counter() - t0)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per measurement (median)")
    ap.add_argument("--matrix", default=None, help="a matrix folder instead of the built-in one")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from envbuilder.api import builtin_targets, render_target
    from envbuilder.core.matrix import load_matrix

    t0 = time.perf_counter()
    m = load_matrix(args.matrix)
    load_s = time.perf_counter() - t0

    per_target: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="envbuilder-render-bench-") as d:
        for name in builtin_targets(m):
            times = []
            for i in range(args.runs):
                t0 = time.perf_counter()
                render_target(name, Path(d) / f"{name}-{i}", matrix=m)
                times.append(time.perf_counter() - t0)
            per_target[name] = statistics.median(times)
    total = sum(per_target.values())

    help_s = _median_run(HELP, args.runs)
    bare_s = _median_run(BARE, args.runs)
    ratio = help_s / bare_s if bare_s else float("inf")

    if args.json:
        json.dump({"runs": args.runs, "matrix_load_s": load_s, "render_s": per_target,
                   "render_total_s": total, "help_s": help_s, "python_bare_s": bare_s,
                   "help_ratio": ratio}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    width = max(len(n) for n in per_target) if per_target else 6
    print(f"matrix load: {load_s * 1000:8.1f} ms")
    print(f"render (median of {args.runs}):")
    for name, s in per_target.items():
        print(f"  {name:<{width}} {s * 1000:8.1f} ms")
    print(f"  {'total':<{width}} {total * 1000:8.1f} ms")
    print(f"envbuilder --help: {help_s * 1000:8.1f} ms")
    print(f"python -c pass:    {bare_s * 1000:8.1f} ms")
    print(f"ratio:             {ratio:8.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
