"""Nearest known cases: the labelled corpus of real failures, searched by TF-IDF similarity.

``envbuilder/data/explain_cases.json`` ships every case of ``tests/explain_corpus`` (made by
``scripts/make-explain-cases.py``): its normalised excerpt, category, root cause, fix and public
URL, and the term counts of the excerpt. A log is read into the same terms (``LogTerms``:
words and word pairs of its error-looking lines, logger prefixes taken off, plus the names of
its exceptions); ``CaseIndex.nearest`` ranks the cases by the cosine of their TF-IDF vectors
(sublinear term frequency, smoothed IDF), deterministically (ties by case id) and offline.

The similarity is calibrated (``confidence``): measured leave-one-repository-out over the
development cases (benchmarks/explain_accuracy.py --calibrate), a nearest case below
``MIN_SIMILARITY`` names the right family too rarely to be shown, so such a log stays
"nothing matched"; above it the confidence rises with the similarity to the measured precision.

A team's own cases (``explain --learn``) are JSON files of the same shape in the project's
explain-cases folder; they join the index for that project only and are marked ``team``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envbuilder.diagnose.normalise import strip_ansi, strip_prefix, tokens
from envbuilder.errors import InputError

__all__ = ["CaseIndex", "KnownCase", "LogTerms", "Neighbour", "confidence", "default_index",
           "load_team_cases", "MIN_SIMILARITY"]

CASES_FILE = "explain_cases.json"
MIN_SIMILARITY = 0.22  # below it a nearest case is not evidence (see confidence())
_TOP = 5
_HEAD_LINES = 1000  # distinct error-looking lines a log contributes from its start ...
_TAIL_LINES = 2000  # ... and from its last lines
_EXCERPT_CHARS = 1200
_INTERESTING = re.compile(
    r"error|fail|cannot|can't|could not|couldn't|unable|not (?:found|compatible|supported|defined|"
    r"permitted|available)|no such|invalid|unknown|exceed|timed? ?out|refused|denied|abort|(?<!de)fault|"
    r"fallen|killed|panic|exception|warn|missing|mismatch|incompatible|unsupported|undefined|"
    r"no space|out of memory|unreachable|xid|nvrm|segmentation|bus error|traceback|n.t support|is not|isn.t",
    re.IGNORECASE)
# what a launcher prints around any failure: torchrun's elastic agent summary, a traceback's
# head, its own banner. Real logs carry it whatever the cause, so it is nobody's evidence: a
# one-rank run that found no GPU once read as a DeepSpeed op build by it alone
# (tests/fixtures/gpu_runs/h200-1gpu, fault-cvd)
# The generic wrappers CUDA and NCCL put around any error are boilerplate too (issue 45): "CUDA
# kernel errors might be asynchronously reported" made an ECC error look like a bad ordinal, a
# lone "unhandled system error" looked like one network case
_BOILERPLATE = re.compile(
    r"torch/distributed/elastic/multiprocessing/|ChildFailedError|^Traceback \(most recent call last\)|"
    r"^\s*raise [A-Za-z_.]+\($|failed \(exitcode: -?\d+\) local_rank: \d+ \(pid: \d+\)|"
    r"^\s*(?:error_file|traceback)\s*: |To enable traceback see: |OMP_NUM_THREADS environment variable|"
    r"CUDA kernel errors might be asynchronously reported|consider passing CUDA_LAUNCH_BLOCKING=1|"
    r"Compile with `?TORCH_USE_CUDA_DSA`? to enable device-side assertions|"
    r"NCCL error in: \S*ProcessGroupNCCL\.cpp:\d+, unhandled (?:system|cuda) error|run with NCCL_DEBUG=\w+ for details|"
    r"ncclSystemError: System call \(e\.g\. socket, malloc\) or external library call failed|"
    r"ncclUnhandledCudaError: Call to CUDA function failed|This usually reflects invalid usage of NCCL library|"
    r"^Exception raised from \w+ at |^\s*frame #\d+: ")
# what healthy runs print as much as failed ones: deprecation notices and their source line
# (issue 45: two FutureWarnings made a passing smoke log "similar" to an RDMA failure)
_NOISE = re.compile(
    r"\b(?:Future|Deprecation|PendingDeprecation)Warning\b|\bis deprecated\b|will be removed in|"
    r"^\s*warnings\.warn\(|^\s*return func\(\*args, \*\*kwargs\)")
_STOP = frozenset("""the and for with that this from are was were been have has had not but you your
can will would should could into than then there their them they its it's via per all any our out
use using used one two when what which while who why how also only such more most other some may
please check see file line python site packages lib usr local home root dist bin opt envs conda
error errors info warning warn debug""".split())


@dataclass(frozen=True)
class KnownCase:
    """One labelled real failure (or a team's learned one)."""

    id: str  # "NVIDIA/pyxis#110", or "team:<name>"
    category: str
    cause: str  # the root cause, as diagnosed in the thread (or told by the team)
    fix: str
    url: str
    excerpt: str
    terms: dict[str, int]
    team: bool = False

    @property
    def repository(self) -> str:
        """owner/name (lower case) of the case's GitHub URL ("" for a team case)."""
        parts = self.url.split("/")
        return "/".join(parts[3:5]).lower() if self.url.startswith("https://github.com/") else ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "category": self.category, "cause": self.cause, "fix": self.fix,
                "url": self.url, "excerpt": self.excerpt, "terms": self.terms,
                **({"team": True} if self.team else {})}


@dataclass(frozen=True)
class Neighbour:
    case: KnownCase
    similarity: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.case.id, "url": self.case.url, "category": self.case.category,
                "cause": self.case.cause, "fix": self.case.fix,
                "similarity": round(self.similarity, 3), "team": self.case.team}

    def sentence(self) -> str:
        """'like NVIDIA/pyxis#110: <root cause>; fixed by <fix>' (the URL is shown beside it)."""
        who = f"team case {self.case.id.removeprefix('team:')}" if self.case.team else self.case.id
        fix = f"; fixed by {self.case.fix}" if self.case.fix else ""
        return f"like {who}: {self.case.cause}{fix}"


def confidence(similarity: float) -> float:
    """The calibrated confidence of a nearest case's family at ``similarity``: 0 below
    ``MIN_SIMILARITY``, then rising to ~0.85 at 0.6 and above (the measured precision)."""
    if similarity < MIN_SIMILARITY:
        return 0.0
    return round(min(0.85, 0.35 + (similarity - MIN_SIMILARITY) * 1.3), 3)


# ----------------------------------------------------------------------------- terms


def _terms_of(text: str) -> list[str]:
    words = [w for w in tokens(text) if w not in _STOP]
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


class LogTerms:
    """The terms of a log, gathered while it is read: distinct error-looking lines only,
    bounded (the first lines and the last lines of a huge log), prefixes and ANSI codes taken
    off. Past the first lines a line costs one append: the tail is filtered at the end."""

    __slots__ = ("first", "seen", "tail", "extra")

    def __init__(self) -> None:
        self.first: list[tuple[str, str, int]] = []  # (text, file, line_no)
        self.seen: set[str] = set()
        self.tail: deque[tuple[str, str, int]] = deque(maxlen=_TAIL_LINES)  # raw lines
        self.extra: Counter = Counter()

    def feed(self, line: str, file: str, line_no: int) -> None:
        if len(self.first) >= _HEAD_LINES:
            self.tail.append((line, file, line_no))
            return
        text = self._keep(line)
        if text is not None:
            self.first.append((text, file, line_no))

    def head_full(self) -> bool:
        """Whether the head is full (from then on a line only goes to ``tail``)."""
        return len(self.first) >= _HEAD_LINES

    def _keep(self, line: str) -> str | None:
        if len(line) > 2000 or _INTERESTING.search(line) is None:
            return None
        text = strip_prefix(strip_ansi(line)).strip()
        if not text or text in self.seen or _BOILERPLATE.search(text) or _NOISE.search(text):
            return None
        self.seen.add(text)
        return text

    def lines(self) -> list[tuple[str, str, int]]:
        out = list(self.first)
        for line, file, line_no in self.tail:
            text = self._keep(line)
            if text is not None:
                out.append((text, file, line_no))
        self.first, self.tail = out, deque(maxlen=_TAIL_LINES)  # filtered once
        return out

    def counts(self) -> Counter:
        out: Counter = Counter()
        for text, _, _ in self.lines():
            out.update(_terms_of(text))
        out.update(self.extra)
        return out


def terms_of_lines(lines: Iterable[str]) -> Counter:
    """The terms of a whole (small) text, as a log's would be read."""
    lt = LogTerms()
    for i, line in enumerate(lines, 1):
        lt.feed(line, "", i)
    return lt.counts()


# ----------------------------------------------------------------------------- index


class CaseIndex:
    """TF-IDF vectors of the known cases; ``nearest`` answers the most similar ones."""

    def __init__(self, cases: Sequence[KnownCase]) -> None:
        self.cases = tuple(cases)
        df: Counter = Counter()
        for c in self.cases:
            df.update(c.terms.keys())
        n = len(self.cases)
        self._idf = {t: math.log((1 + n) / (1 + d)) + 1.0 for t, d in df.items()}
        self._vectors = [self._vector(c.terms) for c in self.cases]
        self._postings: dict[str, list[int]] = {}
        for i, vec in enumerate(self._vectors):
            for t in vec:
                self._postings.setdefault(t, []).append(i)

    def _vector(self, counts: dict[str, int] | Counter) -> dict[str, float]:
        idf = self._idf
        vec = {t: (1.0 + math.log(c)) * idf[t] for t, c in counts.items() if c > 0 and t in idf}
        norm = math.sqrt(sum(v * v for v in vec.values())) or 1.0
        return {t: v / norm for t, v in vec.items()}

    def without(self, drop: Callable[[KnownCase], bool]) -> CaseIndex:
        """The index without the cases ``drop`` names (e.g. a query's own repository)."""
        return CaseIndex([c for c in self.cases if not drop(c)])

    def plus(self, extra: Sequence[KnownCase]) -> CaseIndex:
        return CaseIndex([*self.cases, *extra]) if extra else self

    def nearest(self, counts: Counter, k: int = _TOP) -> list[Neighbour]:
        """The ``k`` most similar cases (cosine > 0), most similar first, ties by id."""
        q = self._vector(counts)
        scores: dict[int, float] = {}
        for t, w in q.items():
            for i in self._postings.get(t, ()):
                scores[i] = scores.get(i, 0.0) + w * self._vectors[i][t]
        ranked = sorted(scores.items(), key=lambda kv: (-kv[1], self.cases[kv[0]].id))
        return [Neighbour(self.cases[i], s) for i, s in ranked[:k] if s > 0]

    def evidence(self, lines: Sequence[tuple[str, str, int]], case: KnownCase,
                 k: int) -> list[tuple[str, str, int]]:
        """The ``k`` log lines sharing the most (IDF-weighted) terms with ``case``, in log order."""
        idf = self._idf
        scored = []
        for i, (text, file, line_no) in enumerate(lines):
            score = sum(idf.get(t, 0.0) for t in set(_terms_of(text)) if t in case.terms)
            if score > 0:
                scored.append((-score, i, (text, file, line_no)))
        best = sorted(scored)[:k]
        return [item for _, _, item in sorted(best, key=lambda x: x[1])]


_DEFAULT: list[CaseIndex] = []


def _load_cases(path: Path) -> list[KnownCase]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return [KnownCase(c["id"], c["category"], c["cause"], c["fix"], c["url"], c["excerpt"],
                      c["terms"], bool(c.get("team", False))) for c in data["cases"]]


def default_index() -> CaseIndex:
    """The packaged corpus, loaded once per process."""
    if not _DEFAULT:
        from envbuilder.core.resources import data_path

        _DEFAULT.append(CaseIndex(_load_cases(data_path(CASES_FILE))))
    return _DEFAULT[0]


# ----------------------------------------------------------------------------- building


def case_from_log(lines: Sequence[str], *, id: str, category: str, cause: str, fix: str,
                  url: str, team: bool = False, every_line: bool = False) -> KnownCase:
    """A KnownCase from a log's lines: its error-looking lines (normalised) as the excerpt;
    ``every_line``: all its lines when none looks like an error (a corpus excerpt is all
    signal: a build step, a hang told by its last INFO lines)."""
    lt = LogTerms()
    for i, line in enumerate(lines, 1):
        lt.feed(line, "", i)
    if every_line and not lt.lines():
        lt.first = [(strip_prefix(strip_ansi(x)).strip(), "", i) for i, x in enumerate(lines, 1) if x.strip()]
    excerpt = "\n".join(t for t, _, _ in lt.lines())
    if len(excerpt) > _EXCERPT_CHARS:
        excerpt = excerpt[:_EXCERPT_CHARS] + " ..."
    counts = lt.counts()
    return KnownCase(id, category, " ".join(cause.split()), " ".join(fix.split()), url, excerpt,
                     dict(sorted(counts.items())), team)


def case_id(url: str) -> str:
    """``owner/name#N`` of a GitHub issue or pull request URL."""
    parts = url.rstrip("/").split("/")
    if len(parts) >= 7 and parts[2] == "github.com":
        return f"{parts[3]}/{parts[4]}#{parts[6]}"
    return url


def build_corpus(cases_yaml: Path, corpus: Path, fixes: dict[str, str] | None = None) -> dict[str, Any]:
    """The packaged corpus document from tests/explain_corpus (cases.yaml and the logs). A
    case's fix is its own ``fix:``; without one the root cause (``note``) says how it was fixed
    where the thread said, and the cause's family fix is shown beside it anyway. ``fixes``
    (each family's fix) is accepted for callers that pass it and not copied into cases."""
    import yaml

    entries = yaml.safe_load(cases_yaml.read_text(encoding="utf-8"))["cases"]
    out = []
    for e in entries:
        lines = (corpus / e["file"]).read_text(encoding="utf-8", errors="replace").splitlines()
        fix = e.get("fix") or ""  # else the note says how it was fixed, or the family's fix applies
        out.append(case_from_log(lines, id=case_id(e["source"]), category=e["category"],
                                 cause=e["note"], fix=fix, url=e["source"], every_line=True).to_dict()
                   | {"file": e["file"]})
    return {"version": 1, "source": "tests/explain_corpus (scripts/make-explain-cases.py)",
            "cases": out}


# ----------------------------------------------------------------------------- team cases


TEAM_CASE_CAP = 4 << 20  # one learned case (a log's excerpt and its terms): far below this


def load_team_cases(folder: Path | None) -> list[KnownCase]:
    """The team's learned cases (``*.json`` in ``folder``); none when the folder is absent.
    A file that is not a case is an InputError naming it."""
    if folder is None or not folder.is_dir():
        return []
    from envbuilder.core.readfile import read_text_capped

    out = []
    for path in sorted(folder.glob("*.json")):
        # the one capped reader: a FIFO, a device, a link to one or a 3 GiB file is refused
        # unread (exit 2 naming it and the cap), never read whole nor waited on
        text = read_text_capped(path, "team case", limit=TEAM_CASE_CAP)
        try:
            c = json.loads(text)
            out.append(KnownCase(str(c["id"]), str(c["category"]), str(c["cause"]), str(c["fix"]),
                                 str(c.get("url", "")), str(c.get("excerpt", "")),
                                 {str(k): int(v) for k, v in c["terms"].items()}, True))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"team case {path} is not a learned explain case ({exc}): "
                             "remove it or learn it again with explain --learn") from None
    return out
