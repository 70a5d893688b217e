"""Train explain's ranking model on tests/explain_corpus; write envbuilder/data/explain_model.json.

    python scripts/train-explain-model.py          # train on every case, write the model
    python scripts/train-explain-model.py --check  # exit 1 if the packaged model is not what training gives
    python scripts/train-explain-model.py --cv     # repository-held-out cross-validation, printed
    python scripts/train-explain-model.py --cv --folds 10 --json

Every case is read as an unseen log would be: the nearest-case index holds no case of its own
repository (a held-out case sees no held-out case, a case of an -unseen or -fresh batch no case
of such a batch), as benchmarks/explain_accuracy.py measures. Its features
(envbuilder/diagnose/ranking.py) and the thread's diagnosis are one example; the model is fitted
on all of them except the cases of ``-unseen`` batches, which are measured and never tuned on
(deterministic: same corpus, same weights). ``--cv`` splits the repositories into 5 folds
(``--folds N``; by a hash of the name), fits on the others and scores each fold in turn (an
``-unseen`` case is scored out of fold like every case, and never fitted on), and prints top-1 of
the model against the hand-set weighing it replaced, on the same features, for every case and per
batch, and the precision and coverage of the model's confident answers per threshold (the
threshold shipped is the lowest whose out-of-fold precision is at least 0.9).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from envbuilder.diagnose import ranking  # noqa: E402
from envbuilder.diagnose.explain import _Analysis, _confidences, _default_signatures, _iter_stream_lines  # noqa: E402
from envbuilder.diagnose.retrieval import MIN_SIMILARITY, confidence, default_index  # noqa: E402

CORPUS = ROOT / "tests" / "explain_corpus"
OUT = ROOT / "envbuilder" / "data" / ranking.MODEL_FILE
BLIND = ("-unseen", "-fresh")
FOLDS = 5
NEVER_TRAINED = ("-unseen",)  # batches measured once and never tuned on: not training examples
PRECISION = 0.9  # the shipped threshold: the lowest whose out-of-fold precision reaches this
THRESHOLDS = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7)


def repository(source: str) -> str:
    return "/".join(source.split("/")[3:5]).lower()


def load() -> list[dict]:
    return yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))["cases"]


def examples(cases: list[dict]) -> list[dict]:
    """Per case: its repository, label, feature rows, scores and nearest cases (for the
    baseline), read with the measuring index."""
    held = {r.lower() for r in yaml.safe_load((CORPUS / "heldout.yaml").read_text())["repositories"] or ()}
    blind_repos = {repository(c["source"]) for c in cases if str(c.get("batch", "")).endswith(BLIND)}
    sigs = _default_signatures()
    indexes: dict[tuple[str, bool, bool], object] = {}
    out = []
    for c in cases:
        repo = repository(c["source"])
        strict = repo in held
        blind = str(c.get("batch", "")).endswith(BLIND)
        key = (repo, strict, blind)
        if key not in indexes:
            indexes[key] = default_index().without(
                lambda k: k.repository == repo or (strict and k.repository in held)
                or (blind and k.repository in blind_repos))
        analysis = _Analysis(sigs, indexes[key])
        path = CORPUS / c["file"]
        with open(path, "rb") as fh:
            analysis.feed(_iter_stream_lines(fh, str(path), int(sigs.setting("max_line_chars"))), str(path))
        w = analysis.weighing()
        if w is None:
            rows, scores, near = {}, {}, []
        else:
            scores, _, near, rows = w
            near = [(n.case.category, n.similarity) for n in near]
        out.append({"file": c["file"], "repo": repo, "category": c["category"], "batch": c.get("batch", ""),
                    "rows": rows, "scores": scores, "near": near,
                    "label": c["category"] if c["category"] in rows else None})
    return out


def baseline_order(ex: dict) -> list[str]:
    """The order the hand-set weighing gave (signature/fact confidences, then families only
    the five nearest cases named, capped under the best), from the same evidence."""
    sigs = _default_signatures()
    conf = {c: v for c, v in _confidences(ex["scores"], sigs.setting("confidence_exponent"),
                                          sigs.setting("confidence_prior")).items()
            if v >= sigs.setting("min_confidence")}
    ranked = sorted(conf, key=lambda c: (-conf[c], -ex["scores"][c], c))
    cap = conf[ranked[0]] * 0.95 if ranked else 1.0
    families: dict[str, list[float]] = {}
    for cat, sim in ex["near"][:5]:
        if sim >= MIN_SIMILARITY:
            families.setdefault(cat, []).append(sim)
    extra = [(min(round(min(confidence(s[0]) + 0.04 * min(len(s) - 1, 3), 0.95), 3), cap), cat)
             for cat, s in families.items() if cat not in conf]
    merged = [(conf[c], c) for c in ranked] + extra
    merged.sort(key=lambda x: -x[0])
    return [c for _, c in merged]


def train(exs: list[dict], threshold: float = 0.5) -> ranking.Model:
    return ranking.fit([(e["rows"], e["label"]) for e in exs
                        if e["rows"] and not e["batch"].endswith(NEVER_TRAINED)], threshold=threshold)


def fold_of(repo: str, folds: int | None = None) -> int:
    return int(hashlib.sha256(repo.encode()).hexdigest(), 16) % (folds or FOLDS)


def cross_validate(exs: list[dict], folds: int = FOLDS) -> dict:
    """Out-of-fold predictions (folds by repository) and their figures. explain's answer is
    its confident causes, then its guesses (each in the model's order); top-1 is the first of
    that answer at the shipped threshold, "confident" the first confident cause per threshold."""
    preds = []
    for k in range(folds):
        model = train([e for e in exs if fold_of(e["repo"], folds) != k])
        for e in (e for e in exs if fold_of(e["repo"], folds) == k):
            probs, _ = model.probabilities(e["rows"])
            preds.append((e, probs, model.confidences(e["rows"], e["scores"])))
    n = len(preds)
    per_threshold = []
    for t in THRESHOLDS:
        answered = right = 0
        for e, probs, conf in preds:
            causes, _ = ranking.answer(probs, conf, e["scores"], t)
            answered += bool(causes)
            right += bool(causes) and causes[0] == e["category"]
        per_threshold.append({"threshold": t, "answered": answered, "right": right,
                              "precision": round(right / answered, 3) if answered else None,
                              "coverage": round(answered / n, 3), "top1_confident": round(right / n, 3)})
    chosen = next((p["threshold"] for p in per_threshold
                   if p["precision"] is not None and p["precision"] >= PRECISION), THRESHOLDS[-1])
    orders = []
    for e, probs, conf in preds:
        causes, guesses = ranking.answer(probs, conf, e["scores"], chosen)
        orders.append((e, causes + guesses, baseline_order(e), causes))
    groups = ["all", "no batch"] + sorted({e["batch"] for e in exs if e["batch"]})
    parts: dict[str, dict] = {}
    for name in groups:
        sel = [x for x in orders if name == "all" or (x[0]["batch"] or "no batch") == name]
        m = len(sel) or 1
        parts[name if name in ("all", "no batch") else f"batch {name}"] = {
            "cases": len(sel),
            "model_top1": round(sum(bool(o) and o[0] == e["category"] for e, o, _, _ in sel) / m, 3),
            "baseline_top1": round(sum(bool(b) and b[0] == e["category"] for e, _, b, _ in sel) / m, 3),
            "confident_top1": round(sum(bool(c) and c[0] == e["category"] for e, _, _, c in sel) / m, 3)}
    top1 = sum(bool(o) and o[0] == e["category"] for e, o, _, _ in orders)
    top3 = sum(e["category"] in o[:3] for e, o, _, _ in orders)
    b1 = sum(bool(b) and b[0] == e["category"] for e, _, b, _ in orders)
    b3 = sum(e["category"] in b[:3] for e, _, b, _ in orders)
    return {"cases": n, "folds": folds, "repositories": len({e["repo"] for e in exs}),
            "model_top1": round(top1 / n, 3), "model_top3": round(top3 / n, 3),
            "baseline_top1": round(b1 / n, 3), "baseline_top3": round(b3 / n, 3),
            "thresholds": per_threshold, "threshold": chosen, "parts": parts}


def render(exs: list[dict], threshold: float) -> str:
    return json.dumps(train(exs, threshold).to_dict(), indent=1) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--cv", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--folds", type=int, default=FOLDS, help=f"folds by repository for --cv (default {FOLDS})")
    args = ap.parse_args()
    if args.folds < 2:
        print("--folds: at least 2 folds are needed", file=sys.stderr)
        return 2
    exs = examples(load())
    if args.check:  # the packaged weights are what training gives (the threshold is the file's own)
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        threshold = json.loads(current).get("threshold", 0.5) if current else 0.5
        if current != render(exs, threshold):
            print(f"{OUT} is out of date: run python scripts/train-explain-model.py", file=sys.stderr)
            return 1
        return 0
    cv = cross_validate(exs, args.folds if args.cv else FOLDS)
    if args.cv:
        if args.json:
            print(json.dumps(cv, indent=2))
            return 0
        print(f"{cv['cases']} cases from {cv['repositories']} repositories, {cv['folds']} folds by repository")
        print(f"  learned model  top-1 {cv['model_top1']:.3f}  top-3 {cv['model_top3']:.3f}")
        print(f"  hand weighing  top-1 {cv['baseline_top1']:.3f}  top-3 {cv['baseline_top3']:.3f}")
        for name, p in cv["parts"].items():
            print(f"  {name:26s} {p['cases']:4d} cases: model {p['model_top1']:.3f}, hand {p['baseline_top1']:.3f}, "
                  f"confident {p['confident_top1']:.3f}")
        print("  threshold  answered  precision  coverage  top-1 (confident answers only)")
        for p in cv["thresholds"]:
            prec = "  n/a" if p["precision"] is None else f"{p['precision']:.3f}"
            print(f"  {p['threshold']:9.2f}  {p['answered']:8d}  {prec:>9s}  {p['coverage']:8.3f}  {p['top1_confident']:.3f}")
        print(f"  shipped threshold: {cv['threshold']} (lowest with out-of-fold precision >= {PRECISION})")
        return 0
    text = render(exs, cv["threshold"])
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT}: {text.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
