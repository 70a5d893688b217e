"""How explain weighs its evidence: a small model learned from the labelled corpus.

Every family a log gives evidence for is a candidate, described by seven numbers: what the
signatures add for it and what the facts infer (log-scaled), its share of the best family's
score, whether it is that best family, and what the nearest known cases say (the similarity of
the nearest case of the family, the share of the nearest cases that are of the family, whether
the very nearest is). A candidate's score is the dot product of those numbers with learned
weights; a softmax over the candidates and one "none of these" option (a learned constant) turns
the scores into probabilities, which order the families. The confidence shown is that
probability shrunk by the strength of the family's evidence (``Model.confidences``): a family
under ``threshold`` is a low-confidence guess, not a cause.

The weights are data (``envbuilder/data/explain_model.json``), made by
``python scripts/train-explain-model.py`` from tests/explain_corpus: every case is read with the
nearest-case index of the corpus *without its own repository* (as an unseen log would be), and
the weights maximise the likelihood of the thread's diagnosis, with an L2 penalty, by a fixed
number of deterministic full-batch steps (no randomness, no download, standard library only).
The script's ``--cv`` prints the repository-held-out cross-validation (docs/explain.md).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["FEATURES", "Model", "Row", "answer", "default_model", "features", "fit", "rank_order", "strength"]

FEATURES: tuple[str, ...] = ("signatures", "facts", "share", "best", "similarity", "near", "nearest", "hand")
HAND_PRIOR = 2.5  # the hand-set weighing's prior (signatures.yaml confidence_prior before issue 45)
MODEL_FILE = "explain_model.json"
FORMAT = "envbuilder-explain-model/1"
NEIGHBOURS = 8  # nearest known cases read per log
MIN_NEIGHBOUR = 0.1  # a case less similar than this is not read at all

Row = tuple[float, ...]


@dataclass(frozen=True)
class Model:
    """Learned weights (one per feature), the score of "none of these", the confidence under
    which a family is shown as a guess, and the evidence ``prior`` that shrinks a probability by
    how much evidence stands behind it (``strength``)."""

    weights: tuple[float, ...]
    unknown: float
    threshold: float
    prior: float = 2.5

    def confidences(self, rows: Mapping[str, Row], scores: Mapping[str, float]) -> dict[str, float]:
        """The confidence shown per family: its probability times the strength of its evidence.

        The corpus cannot teach how often a weak message misleads (its logs were gathered for
        having a known cause: out of fold, the model's first family is right for 98% of them
        whatever the evidence), so the probability is shrunk by ``s^2 / (s^2 + prior^2)``, where
        s is the family's signature and fact score, or the calibrated confidence of its nearest
        case's similarity (retrieval.confidence) when that is larger: a lone generic message
        stays a guess, one strong message or a near-identical known case is a cause."""
        probabilities, _ = self.probabilities(rows)
        return {c: p * strength(scores.get(c, 0.0), rows[c][4], self.prior) for c, p in probabilities.items()}

    def probabilities(self, rows: Mapping[str, Row]) -> tuple[dict[str, float], float]:
        """(probability per candidate family, probability of none of them)."""
        if not rows:
            return {}, 1.0
        z = {c: sum(w * x for w, x in zip(self.weights, xs)) for c, xs in rows.items()}
        top = max(self.unknown, *z.values())
        e = {c: math.exp(v - top) for c, v in z.items()}
        none = math.exp(self.unknown - top)
        total = sum(e.values()) + none
        return {c: v / total for c, v in e.items()}, none / total

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "features": list(FEATURES),
                "weights": [round(w, 6) for w in self.weights], "unknown": round(self.unknown, 6),
                "threshold": self.threshold, "prior": self.prior}


def strength(score: float, similarity: float, prior: float) -> float:
    """How much evidence stands behind a family, in [0, 1): ``s^2 / (s^2 + prior^2)`` of its
    score, or the calibrated confidence of its nearest case (retrieval.confidence), the larger."""
    from envbuilder.diagnose.retrieval import confidence

    own = score * score / (score * score + prior * prior) if score > 0 else 0.0
    return max(own, confidence(similarity))


def features(scores: Mapping[str, float], facts: Mapping[str, float],
             neighbours: Sequence[tuple[str, float]]) -> dict[str, Row]:
    """The candidates' feature rows: ``scores`` per family (signatures and facts, after the
    signatures' context scaling), ``facts`` the part the facts inferred, ``neighbours`` the
    nearest known cases as (family, similarity), most similar first."""
    positive = {c: s for c, s in scores.items() if s > 0}
    best = max(positive.values(), default=0.0)
    top = min((c for c, s in positive.items() if s == best), default=None)
    near = [(c, s) for c, s in neighbours if s >= MIN_NEIGHBOUR][:NEIGHBOURS]
    hand = _hand(positive, near)
    rows: dict[str, Row] = {}
    for cat in sorted(set(positive) | {c for c, _ in near}):
        s = positive.get(cat, 0.0)
        sims = [v for c, v in near if c == cat]
        rows[cat] = (math.log1p(s), math.log1p(max(facts.get(cat, 0.0), 0.0)),
                     s / best if best else 0.0, 1.0 if cat == top else 0.0,
                     sims[0] if sims else 0.0, len(sims) / len(near) if near else 0.0,
                     1.0 if near and near[0][0] == cat else 0.0, hand.get(cat, 0.0))
    return rows


def _hand(positive: Mapping[str, float], near: Sequence[tuple[str, float]]) -> dict[str, float]:
    """The confidence the hand-set weighing gave (before issue 45) each family, as one feature
    among the others: ``s^2 / (sum s^2 + 2.5^2)`` for scored families, the calibrated
    similarity of the nearest case (+0.04 per further one) for the others, under the best."""
    from envbuilder.diagnose.retrieval import MIN_SIMILARITY, confidence

    total = sum(v * v for v in positive.values()) + HAND_PRIOR * HAND_PRIOR
    out = {c: v * v / total for c, v in positive.items()}
    cap = max(out.values(), default=1.0 / 0.95) * 0.95
    sims: dict[str, list[float]] = {}
    for cat, sim in near[:5]:
        if sim >= MIN_SIMILARITY and cat not in out:
            sims.setdefault(cat, []).append(sim)
    for cat, ss in sims.items():
        out[cat] = min(confidence(ss[0]) + 0.04 * min(len(ss) - 1, 3), 0.95, cap)
    return out


def rank_order(probabilities: Mapping[str, float], scores: Mapping[str, float]) -> list[str]:
    """Families, most probable first (ties: the larger score, then the name)."""
    return sorted(probabilities, key=lambda c: (-probabilities[c], -scores.get(c, 0.0), c))


def answer(probabilities: Mapping[str, float], confidences: Mapping[str, float], scores: Mapping[str, float],
           threshold: float, floor: float = 0.02) -> tuple[list[str], list[str]]:
    """(causes, guesses): the families in the model's order, those whose confidence reaches
    ``threshold`` first, then the others over ``floor`` (what explain shows, in that order)."""
    order = [c for c in rank_order(probabilities, scores) if confidences.get(c, 0.0) >= floor]
    causes = [c for c in order if confidences[c] >= threshold]
    return causes, [c for c in order if c not in causes]


# ----------------------------------------------------------------------------- training


def fit(examples: Sequence[tuple[Mapping[str, Row], str | None]], *, l2: float = 0.01,
        steps: int = 600, rate: float = 0.05, threshold: float = 0.5) -> Model:
    """Weights that maximise the likelihood of the labels (``None``: none of the candidates,
    e.g. the diagnosed family had no evidence), by ``steps`` full-batch Adam steps from zero:
    deterministic, standard library only."""
    n = len(FEATURES)
    params = [0.0] * (n + 1)  # the weights, then the "none" score
    m = [0.0] * (n + 1)
    v = [0.0] * (n + 1)
    data = [(list(rows.items()), label) for rows, label in examples]
    for step in range(1, steps + 1):
        grad = _gradient(params, data, l2)
        for i, g in enumerate(grad):
            m[i] = 0.9 * m[i] + 0.1 * g
            v[i] = 0.999 * v[i] + 0.001 * g * g
            mh, vh = m[i] / (1 - 0.9 ** step), v[i] / (1 - 0.999 ** step)
            params[i] -= rate * mh / (math.sqrt(vh) + 1e-8)
    return Model(tuple(params[:n]), params[n], threshold)


def _gradient(params: list[float], data: list[tuple[list[tuple[str, Row]], str | None]],
              l2: float) -> list[float]:
    """The gradient of the mean negative log-likelihood plus ``l2`` times the squared weights."""
    n = len(params) - 1
    grad = [0.0] * (n + 1)
    w, unknown = params[:n], params[n]
    for rows, label in data:
        z = [sum(a * b for a, b in zip(w, xs)) for _, xs in rows]
        top = max([unknown, *z])
        e = [math.exp(x - top) for x in z]
        none = math.exp(unknown - top)
        total = sum(e) + none
        # d(-log p_label)/dz_c = p_c - [c == label]
        for (cat, xs), ec in zip(rows, e):
            coef = ec / total - (1.0 if cat == label else 0.0)
            for i, x in enumerate(xs):
                grad[i] += coef * x
        grad[n] += none / total - (1.0 if label is None else 0.0)
    count = max(len(data), 1)
    return [g / count + (2 * l2 * params[i] if i < n else 0.0) for i, g in enumerate(grad)]


def model_from(doc: Mapping[str, Any]) -> Model:
    """The model a ``to_dict`` document describes (ValueError when it is not one)."""
    if doc.get("format") != FORMAT or list(doc.get("features", ())) != list(FEATURES):
        raise ValueError(f"not an {FORMAT} document with features {list(FEATURES)}")
    weights = tuple(float(x) for x in doc["weights"])
    if len(weights) != len(FEATURES):
        raise ValueError("one weight per feature expected")
    return Model(weights, float(doc["unknown"]), float(doc["threshold"]), float(doc.get("prior", 2.5)))


_DEFAULT: list[Model] = []


def default_model() -> Model:
    """The packaged model, loaded once per process."""
    if not _DEFAULT:
        from envbuilder.core.resources import data_path

        _DEFAULT.append(model_from(json.loads(data_path(MODEL_FILE).read_text(encoding="utf-8"))))
    return _DEFAULT[0]
