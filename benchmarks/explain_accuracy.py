"""Accuracy of `envbuilder explain` on the real-log corpus, held-out part first.

Usage: python benchmarks/explain_accuracy.py [--json] [--min-top1 0.90] [--min-top3 0.95]

tests/explain_corpus/cases.yaml names every log, its expected top cause and its public source;
tests/explain_corpus/heldout.yaml lists the logs that no signature was written against. The
script prints top-1 and top-3 accuracy for the held-out part, the development part and all,
names every held-out miss, and exits 1 when the held-out figures are below the thresholds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.diagnose.explain import explain_files  # noqa: E402

CORPUS = ROOT / "tests" / "explain_corpus"


def heldout_names() -> set[str]:
    data = yaml.safe_load((CORPUS / "heldout.yaml").read_text(encoding="utf-8"))
    return set(data["cases"] or ())


def score(cases: list[dict]) -> dict:
    top1 = top3 = 0
    misses = []
    for c in cases:
        got = [x.category for x in explain_files([str(CORPUS / c["file"])])]
        top1 += got[:1] == [c["category"]]
        top3 += c["category"] in got[:3]
        if got[:1] != [c["category"]]:
            misses.append({"file": c["file"], "expected": c["category"], "got": got[:3]})
    n = len(cases) or 1
    return {"cases": len(cases), "top1": round(top1 / n, 3), "top3": round(top3 / n, 3),
            "misses": misses}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--min-top1", type=float, default=0.90)
    ap.add_argument("--min-top3", type=float, default=0.95)
    args = ap.parse_args()
    cases = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    held = heldout_names()
    unknown = held - {c["file"] for c in cases}
    if unknown:
        print(f"heldout.yaml names files not in cases.yaml: {sorted(unknown)}", file=sys.stderr)
        return 2
    parts = {"heldout": score([c for c in cases if c["file"] in held]),
             "development": score([c for c in cases if c["file"] not in held]),
             "all": score(cases)}
    ok = parts["heldout"]["top1"] >= args.min_top1 and parts["heldout"]["top3"] >= args.min_top3
    if args.json:
        print(json.dumps(parts | {"ok": ok}, indent=2))
    else:
        for name, p in parts.items():
            print(f"{name:12s} {p['cases']:4d} cases  top-1 {p['top1']:.3f}  top-3 {p['top3']:.3f}")
        for m in parts["heldout"]["misses"]:
            print(f"held-out miss: {m['file']}: expected {m['expected']}, got {m['got']}")
        print(f"held-out thresholds top-1 >= {args.min_top1}, top-3 >= {args.min_top3}: "
              f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
