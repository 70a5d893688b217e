"""Accuracy of `envbuilder explain` on the real-log corpus, held-out part first.

Usage: python benchmarks/explain_accuracy.py [--json] [--min-top1 0.90] [--min-top3 0.95]
       python benchmarks/explain_accuracy.py --cv [--folds N] [--json]   # the learned weighing, 5 folds by repository

tests/explain_corpus/cases.yaml names every log, its expected top cause and its public source;
tests/explain_corpus/heldout.yaml lists the source REPOSITORIES whose cases are held out (no
signature or rule was written against them; no development case comes from them). The script
prints, for the held-out part, the development part and all: top-1 and top-3 accuracy, per
family precision and recall of the top-1 answer, and a confusion table (expected family x
top-1 answer, ``-`` = no cause); it names every held-out miss and exits 1 when the held-out
figures are below the thresholds.

Batches (``batch:`` in cases.yaml, issue 33) are reported apart, per batch and per ``family``,
with the "nothing matched" rate (no cause at all). The development and held-out parts exclude
them, so each figure keeps the meaning it had when it was first recorded in docs/explain.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.diagnose.explain import CATEGORIES, NO_FAILURE, analyse_files  # noqa: E402
from envbuilder.diagnose.retrieval import default_index  # noqa: E402

CORPUS = ROOT / "tests" / "explain_corpus"
NONE = "-"
HELD: set[str] = set()
UNSEEN: set[str] = set()  # repositories of the "-unseen" and "-fresh" batches
BLIND = ("-unseen", "-fresh")  # batches measured with none of their kind in the index


def repository(source: str) -> str:
    """owner/name (lower case) of a https://github.com/owner/name/... source URL."""
    parts = source.split("/")
    return "/".join(parts[3:5]).lower()


def heldout_repositories() -> set[str]:
    data = yaml.safe_load((CORPUS / "heldout.yaml").read_text(encoding="utf-8"))
    return {r.lower() for r in data.get("repositories") or ()}


def split(cases: list[dict]) -> tuple[list[dict], list[dict]]:
    """(held-out, development) by source repository."""
    held = heldout_repositories()
    return ([c for c in cases if repository(c["source"]) in held],
            [c for c in cases if repository(c["source"]) not in held])


_INDEXES: dict[tuple[str, bool, bool], object] = {}


def known_cases(case: dict, held: set[str]):
    """The nearest-case index a case is measured with: never its own repository's cases; for
    a held-out case no held-out case at all, and for a case of an "-unseen" batch no case of
    an unseen batch (those parts stay unseen)."""
    repo = repository(case["source"])
    strict = repo in held
    unseen = str(case.get("batch", "")).endswith(BLIND)
    key = (repo, strict, unseen)
    if key not in _INDEXES:
        _INDEXES[key] = default_index().without(
            lambda k: k.repository == repo or (strict and k.repository in held)
            or (unseen and k.repository in UNSEEN))
    return _INDEXES[key]


def score(cases: list[dict]) -> dict:
    """top-1/top-3 over explain's answer (its causes, then its low-confidence guesses: what the
    figures meant before issue 45, when every cause over 2% was listed), ``confident`` the share
    whose first cause at or over the model's threshold is right, ``guessed`` the share answered
    by guesses only, ``no_failure`` the share read as "no failure found"."""
    top1 = top3 = nothing = confident = guessed = no_failure = 0
    misses = []
    pairs: list[tuple[str, str]] = []
    for c in cases:
        report = analyse_files([str(CORPUS / c["file"])], cases=known_cases(c, HELD))
        got = [x.category for x in report.causes + report.guesses]
        first = got[0] if got else NONE
        nothing += not got
        no_failure += report.verdict == NO_FAILURE
        guessed += bool(got) and not report.causes
        confident += bool(report.causes) and report.causes[0].category == c["category"]
        pairs.append((c["category"], first))
        top1 += first == c["category"]
        top3 += c["category"] in got[:3]
        if first != c["category"]:
            misses.append({"file": c["file"], "expected": c["category"], "got": got[:3],
                           "verdict": report.verdict})
    n = len(cases) or 1
    confusion = Counter(pairs)
    families = {}
    for fam in sorted({e for e, _ in pairs} | {g for _, g in pairs if g != NONE}):
        tp = confusion[(fam, fam)]
        predicted = sum(v for (_, g), v in confusion.items() if g == fam)
        actual = sum(v for (e, _), v in confusion.items() if e == fam)
        families[fam] = {"cases": actual, "predicted": predicted,
                         "precision": round(tp / predicted, 3) if predicted else None,
                         "recall": round(tp / actual, 3) if actual else None}
    return {"cases": len(cases), "top1": round(top1 / n, 3), "top3": round(top3 / n, 3),
            "nothing_matched": round(nothing / n, 3), "confident": round(confident / n, 3),
            "guessed": round(guessed / n, 3), "no_failure": round(no_failure / n, 3), "families": families,
            "confusion": [{"expected": e, "got": g, "count": v} for (e, g), v in sorted(confusion.items())],
            "misses": misses}


def _fmt(x: float | None) -> str:
    return "  n/a" if x is None else f"{x:5.2f}"


def print_part(name: str, p: dict) -> None:
    print(f"\n== {name}: {p['cases']} cases  top-1 {p['top1']:.3f}  top-3 {p['top3']:.3f}  "
          f"nothing matched {p['nothing_matched']:.3f}  confident top-1 {p['confident']:.3f}  "
          f"guessed {p['guessed']:.3f}  no failure found {p['no_failure']:.3f}")
    print(f"   {'family':22s} cases  pred  precision  recall")
    for fam, f in p["families"].items():
        print(f"   {fam:22s} {f['cases']:5d} {f['predicted']:5d}      {_fmt(f['precision'])}   {_fmt(f['recall'])}")
    off = [c for c in p["confusion"] if c["expected"] != c["got"]]
    if off:
        print("   confusion (expected -> top-1, off the diagonal):")
        for c in off:
            print(f"     {c['expected']:22s} -> {c['got']:22s} {c['count']}")


def cross_validation(as_json: bool, folds: int) -> int:
    """The learned weighing against the hand-set one, in folds by repository (issue 45)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_explain_model", ROOT / "scripts" / "train-explain-model.py")
    assert spec is not None and spec.loader is not None
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    sys.argv = [sys.argv[0], "--cv", "--folds", str(folds)] + (["--json"] if as_json else [])
    return int(train.main())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--min-top1", type=float, default=0.90)
    ap.add_argument("--min-top3", type=float, default=0.95)
    ap.add_argument("--cv", action="store_true",
                    help="repository-held-out cross-validation of the learned weighing (scripts/train-explain-model.py)")
    ap.add_argument("--folds", type=int, default=5, help="folds by repository for --cv (default 5)")
    args = ap.parse_args()
    if args.cv:
        return cross_validation(args.json, args.folds)
    cases = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    unknown = {c["category"] for c in cases} - set(CATEGORIES)
    if unknown:
        print(f"cases.yaml names unknown categories: {sorted(unknown)}", file=sys.stderr)
        return 2
    HELD.update(heldout_repositories())
    UNSEEN.update(repository(c["source"]) for c in cases if str(c.get("batch", "")).endswith(BLIND))
    batched = [c for c in cases if c.get("batch")]
    held, dev = split([c for c in cases if not c.get("batch")])
    parts = {"heldout": score(held), "development": score(dev), "all": score(cases)}
    for batch in sorted({c["batch"] for c in batched}):
        members = [c for c in batched if c["batch"] == batch]
        parts[f"batch {batch}"] = score(members)
        for family in sorted({c.get("family", "-") for c in members}):
            parts[f"batch {batch} / {family}"] = score(
                [c for c in members if c.get("family", "-") == family])
    parts["heldout"]["repositories"] = len({repository(c["source"]) for c in held})
    parts["development"]["repositories"] = len({repository(c["source"]) for c in dev})
    ok = parts["heldout"]["top1"] >= args.min_top1 and parts["heldout"]["top3"] >= args.min_top3
    if args.json:
        print(json.dumps(parts | {"ok": ok}, indent=2))
    else:
        for name, p in parts.items():
            if " / " in name:  # one line per family of a batch
                print(f"   {name:40s} {p['cases']:3d} cases  top-1 {p['top1']:.3f}  "
                      f"top-3 {p['top3']:.3f}  nothing matched {p['nothing_matched']:.3f}  "
                      f"confident {p['confident']:.3f}")
            else:
                print_part(name, p)
        print()
        for name, p in parts.items():
            if name.startswith("batch ") and " / " not in name:
                for m in p["misses"]:
                    print(f"{name} miss: {m['file']}: expected {m['expected']}, got {m['got']} ({m['verdict']})")
        for m in parts["heldout"]["misses"]:
            print(f"held-out miss: {m['file']}: expected {m['expected']}, got {m['got']} ({m['verdict']})")
        print(f"held-out: {parts['heldout']['cases']} cases from {parts['heldout']['repositories']} "
              f"repositories; thresholds top-1 >= {args.min_top1}, top-3 >= {args.min_top3}: "
              f"{'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
