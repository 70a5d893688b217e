"""Signatures and nearest known cases, merged into one ranked list of causes.

When a signature (or a fact) names a family, the nearest known case of that family is its
evidence: "like NVIDIA/pyxis#110: <root cause>; fixed by <fix>" with the thread's URL. When no
signature names a family that a near case has, that family becomes a cause of its own
(``basis: "similar cases"``) with the calibrated confidence of its similarity
(``retrieval.confidence``): a log with no case above ``retrieval.MIN_SIMILARITY`` adds nothing,
so "nothing matched" stays honest. A team's own case (``explain --learn``) that matches is
ranked by its similarity like any case, a little ahead (the team's diagnosis of its own
cluster), and the output says it is a team case. A family only near cases name ranks after
the families the signatures and facts named (they read the log's own words); a team case's
family is not held back.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from envbuilder.diagnose.retrieval import MIN_SIMILARITY, CaseIndex, LogTerms, Neighbour, confidence

__all__ = ["merge"]

_TEAM_BONUS = 0.1
_AGREE_BONUS = 0.04  # each further near case of the same family
_EVIDENCE_LINES = 3


def merge(found: list[Any], index: CaseIndex, terms: LogTerms, facts: Any,
          categories: dict[str, dict[str, str]]) -> list[Any]:
    """``found`` (explain.Cause, best first) with the nearest cases attached, plus the
    families only the nearest cases name; sorted by confidence (stable)."""
    from envbuilder.diagnose.explain import Cause, Evidence

    counts = terms.counts()
    for kind, _ in facts.exceptions[-3:]:
        counts[f"exception {kind.lower()}"] += 1
    if not counts or not index.cases:
        return found
    near = [n for n in index.nearest(counts) if n.similarity >= MIN_SIMILARITY]
    if not near:
        return found
    by_family: dict[str, list[Neighbour]] = {}
    for n in near:
        by_family.setdefault(n.case.category, []).append(n)
    out = []
    named = set()
    for cause in found:
        named.add(cause.category)
        ns = by_family.get(cause.category)
        if ns:
            conf = cause.confidence
            if ns[0].case.team:
                conf = max(conf, _confidence(ns))
            cause = replace(cause, confidence=round(conf, 3), similar=tuple(ns[:2]),
                            reasons=(*cause.reasons, _said(ns[0])))
        out.append(cause)
    # a family only the near cases name ranks after what the signatures found (they read the
    # log's own words), unless the near case is the team's own
    cap = found[0].confidence * 0.95 if found else 1.0
    for family, ns in by_family.items():
        if family in named or family not in categories:
            continue
        info = categories[family]
        conf = _confidence(ns) if ns[0].case.team else min(_confidence(ns), round(cap, 3))
        lines = [Evidence(f, n, t) for t, f, n in
                 index.evidence(terms.lines(), ns[0].case, _EVIDENCE_LINES)]
        fix = ns[0].case.fix if ns[0].case.team else info["fix"]  # the team's own fix
        out.append(Cause(family, info["title"], conf, tuple(lines), info["check"],
                         fix, info["source"], (_said(ns[0]),), tuple(ns[:2]),
                         "similar cases"))
    out.sort(key=lambda c: -c.confidence)
    return out


def _confidence(ns: list[Neighbour]) -> float:
    conf = confidence(ns[0].similarity) + _AGREE_BONUS * min(len(ns) - 1, 3)
    if ns[0].case.team:
        conf += _TEAM_BONUS
    return round(min(conf, 0.95), 3)


def _said(n: Neighbour) -> str:
    where = f" ({n.case.url})" if n.case.url else ""
    return n.sentence() + where
