"""Lock time for one target: a cold resolution (fresh UV_CACHE_DIR) and a warm one (same cache).

    python benchmarks/lock.py [TARGET] [--warm-runs N] [--json]

Prints the cold time, the median warm time and their ratio; exits 1 when the warm lock takes
5 s or more (the goal). Needs network access to the target's package index (PyPI for
cu121-torch2.1-py310, the default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

WARM_GOAL_S = 5.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", nargs="?", default="cu121-torch2.1-py310")
    ap.add_argument("--warm-runs", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    from envbuilder.api import resolve_target
    from envbuilder.lock.write import lock_stack

    stack = resolve_target(args.target)
    with tempfile.TemporaryDirectory(prefix="envbuilder-lock-bench-") as d:
        root = Path(d)
        os.environ["UV_CACHE_DIR"] = str(root / "uv-cache")  # fresh: cold
        os.environ.setdefault("UV_PYTHON_DOWNLOADS", "never")
        t0 = time.perf_counter()
        cold_report = lock_stack(stack, root / "cold")
        cold = time.perf_counter() - t0
        warm_times = []
        for i in range(max(1, args.warm_runs)):
            t0 = time.perf_counter()
            r = lock_stack(stack, root / f"warm{i}")
            warm_times.append(time.perf_counter() - t0)
            assert r.digest == cold_report.digest, "a warm lock differs from the cold one"
    warm = statistics.median(warm_times)
    result = {"target": args.target, "stack": stack.tag, "packages": len(cold_report.packages),
              "cold_s": round(cold, 3), "warm_s": round(warm, 3),
              "warm_runs_s": [round(t, 3) for t in warm_times],
              "cold_over_warm": round(cold / warm, 2) if warm else None,
              "warm_goal_s": WARM_GOAL_S, "warm_ok": warm < WARM_GOAL_S}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{args.target} ({result['packages']} packages): cold {cold:.2f} s, "
              f"warm {warm:.2f} s (median of {len(warm_times)}), "
              f"cold/warm {result['cold_over_warm']}x; goal warm < {WARM_GOAL_S:.0f} s: "
              f"{'ok' if result['warm_ok'] else 'MISSED'}")
    return 0 if result["warm_ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
