"""Signatures, facts and nearest known cases, weighed into one ranked list of causes.

The evidence for each family (what the signatures and the facts found, what the nearest known
cases say) goes through the learned model (``ranking``): its probabilities order the families
and are the confidences shown. A family with a near case gets that case as evidence: "like
NVIDIA/pyxis#110: <root cause>; fixed by <fix>" with the thread's URL. A family only near
cases name is a cause of its own (``basis: "similar cases"``), with the log lines that share the
most terms with its case as evidence. A team's own case (``explain --learn``) that is the
nearest case keeps at least the confidence of its similarity (``retrieval.confidence``, a little
ahead: the team's diagnosis of its own cluster), its family is never a guess, and its fix is the
team's.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from envbuilder.diagnose.retrieval import MIN_SIMILARITY, CaseIndex, LogTerms, Neighbour, confidence

__all__ = ["neighbours", "team_match", "weigh"]

_TEAM_BONUS = 0.1
_AGREE_BONUS = 0.04  # each further near case of the same family
_EVIDENCE_LINES = 3


def neighbours(index: CaseIndex | None, terms: LogTerms, facts: Any, k: int) -> list[Neighbour]:
    """The ``k`` known cases nearest to the log's terms (and the names of its exceptions)."""
    if index is None or not index.cases:
        return []
    counts = terms.counts()
    for kind, _ in facts.exceptions[-3:]:
        counts[f"exception {kind.lower()}"] += 1
    return index.nearest(counts, k) if counts else []


def team_match(near: list[Neighbour]) -> bool:
    """Whether the nearest case is one of the team's own, near enough to count."""
    return bool(near) and near[0].case.team and near[0].similarity >= MIN_SIMILARITY


def weigh(found: dict[str, Any], confidences: dict[str, float], order: list[str],
          near: list[Neighbour], index: CaseIndex | None, terms: LogTerms,
          categories: dict[str, dict[str, str]], floor: float) -> list[Any]:
    """The causes in ``order`` (the model's, most probable first): ``found`` holds the
    explain.Cause of every family the signatures or facts named (its confidence is replaced by
    ``confidences``), the others are made from their nearest case. Families whose confidence is
    under ``floor`` are dropped."""
    from envbuilder.diagnose.explain import Cause, Evidence

    by_family: dict[str, list[Neighbour]] = {}
    for n in near:
        if n.similarity >= MIN_SIMILARITY:
            by_family.setdefault(n.case.category, []).append(n)
    team = near[0] if team_match(near) else None
    out = []
    for family in order:
        conf = confidences[family]
        ns = by_family.get(family, [])
        if team is not None and team.case.category == family:
            conf = max(conf, _confidence(ns))
        if conf < floor or family not in categories:
            continue
        cause = found.get(family)
        if cause is not None:
            reasons = (*cause.reasons, _said(ns[0])) if ns else cause.reasons
            cause = replace(cause, confidence=round(conf, 3), similar=tuple(ns[:2]), reasons=reasons)
            if ns and ns[0].case.team:
                cause = replace(cause, fix=ns[0].case.fix)
        elif ns and index is not None:
            info = categories[family]
            lines = [Evidence(f, n, t) for t, f, n in index.evidence(terms.lines(), ns[0].case, _EVIDENCE_LINES)]
            fix = ns[0].case.fix if ns[0].case.team else info["fix"]  # the team's own fix
            cause = Cause(family, info["title"], round(conf, 3), tuple(lines), info["check"], fix,
                          info["source"], (_said(ns[0]),), tuple(ns[:2]), "similar cases")
        else:
            continue  # a family only a faint case named: not shown
        out.append(cause)
    return out


def _confidence(ns: list[Neighbour]) -> float:
    conf = confidence(ns[0].similarity) + _AGREE_BONUS * min(len(ns) - 1, 3)
    if ns[0].case.team:
        conf += _TEAM_BONUS
    return round(min(conf, 0.95), 3)


def _said(n: Neighbour) -> str:
    where = f" ({n.case.url})" if n.case.url else ""
    return n.sentence() + where
