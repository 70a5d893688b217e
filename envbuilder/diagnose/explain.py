"""Explain why a multi-GPU training job failed, from its logs.

``explain`` reads torchrun / per-rank / NCCL_DEBUG=INFO / pip / nvcc / docker build output and
returns the likely causes, most likely first. The knowledge lives in
``envbuilder/data/signatures.yaml``: each signature is a regular expression that adds weight to
one or more categories when it matches a line. Generic messages ("unhandled system error") only
spread a little weight, so the other lines of the log decide; context modifiers (``requires``)
only count next to another signature and may ``scale`` a category (e.g. a watchdog timeout on
``SeqNum=1`` is a setup problem, not a slow collective).

Logs are streamed line by line with a cap on line length and on evidence kept, so memory stays
bounded on multi-gigabyte logs.

Matching runs in linear time: patterns are compiled with RE2 (``google-re2``), which never
backtracks, so no log line can make a pattern take exponential or quadratic time. The pattern
dialect is therefore RE2's: no lookaround and no backreferences; a negative condition on the
whole line is the signature's ``unless`` pattern instead. A pattern RE2 cannot compile (or every
pattern, when google-re2 is not installed) falls back to Python's ``re`` on the line cut to
``_FALLBACK_LINE_CHARS``. Repeated lines (every rank printing the same warning) are matched once.
"""

from __future__ import annotations

import codecs
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from envbuilder.errors import InputError
from envbuilder.core import schema
from envbuilder.core.resources import data_path
from envbuilder.diagnose.facts import DEPRECATION, NOT_EVIDENCE, QUIET, FactCollector, Facts, infer
from envbuilder.diagnose.normalise import Joiner, strip_ansi

__all__ = [
    "CATEGORIES",
    "Cause",
    "Evidence",
    "Report",
    "Signature",
    "SignatureSet",
    "analyse_files",
    "analyse_lines",
    "explain_files",
    "explain_lines",
    "load_signatures",
]

CATEGORIES: tuple[str, ...] = (
    "driver_mismatch", "network_interface", "shm", "ib_rdma", "undefined_symbol",
    "deepspeed_op_build", "nccl_timeout", "p2p_topology", "rendezvous", "fabric_manager",
    "arch_mismatch", "oom", "invalid_device_ordinal", "gpu_visibility", "duplicate_gpu",
    "mpi_mismatch", "container_build", "horovod_build", "lib_shadowing", "container_runtime",
    "gpu_device_access", "gpu_xid", "compute_mode", "slurm_gpu_binding", "extension_arch",
)

DEFAULT_SIGNATURES = data_path("signatures.yaml")

_SNIFF_BYTES = 8192
_FALLBACK_LINE_CHARS = 512
_LINE_CACHE = 4096  # distinct recent lines whose matches are remembered
_CHUNK_BYTES = 1 << 16
_EVIDENCE_TEXT_CHARS = 500

_DEFAULT_SETTINGS: dict[str, float] = {
    "max_evidence_per_signature": 3,
    "max_evidence_per_cause": 8,
    "max_line_chars": 4096,
    "repeat_bonus": 0.15,
    "repeat_cap": 4,
    "confidence_exponent": 2.0,
    "confidence_prior": 2.5,
    "min_confidence": 0.02,
}
_CATEGORY_KEYS = ("title", "check", "fix", "source")


# ----------------------------------------------------------------------------- public types


@dataclass(frozen=True)
class Evidence:
    """One log line that supports a cause."""

    file: str
    line_no: int
    text: str


@dataclass(frozen=True)
class Cause:
    """A likely cause of the failure, with what to check and how to fix it."""

    category: str
    title: str
    confidence: float
    evidence: tuple[Evidence, ...]
    check: str
    fix: str
    source: str
    reasons: tuple[str, ...] = ()  # what the facts say, in words (from facts.infer)
    similar: tuple[Any, ...] = ()  # retrieval.Neighbour: the nearest known cases of this family
    basis: str = "signatures"  # "signatures" (and facts), or "similar cases" (retrieval alone)

    @property
    def team_match(self) -> bool:
        """The nearest known case of this cause is one of the team's own (explain --learn)."""
        return bool(self.similar) and self.similar[0].case.team

    def to_dict(self) -> dict:
        """JSON-ready form: evidence as ``{"file", "line", "text"}`` objects."""
        return {
            "category": self.category,
            "title": self.title,
            "confidence": self.confidence,
            "evidence": [{"file": e.file, "line": e.line_no, "text": e.text}
                         for e in self.evidence],
            "check": self.check,
            "fix": self.fix,
            "source": self.source,
            "reasons": list(self.reasons),
            "basis": self.basis,
            "similar_cases": [n.to_dict() for n in self.similar],
        }


CAUSE_FOUND = "cause found"
LOW_CONFIDENCE = "low confidence"
NOTHING_MATCHED = "nothing matched"
NO_FAILURE = "no failure found"


@dataclass(frozen=True)
class Report:
    """The ranked causes, the low-confidence guesses and the facts they were drawn from.

    ``verdict``: "cause found" (causes at or over the model's threshold), "low confidence" (only
    guesses), "nothing matched" (a failure, but no known cause), "no failure found" (nothing in
    the logs says a failure happened: warnings, deprecation notices, banners and NCCL INFO lines
    are not evidence)."""

    causes: list[Cause]
    facts: Facts
    guesses: list[Cause] = field(default_factory=list)
    verdict: str = CAUSE_FOUND

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "facts": self.facts.to_dict(),
                "causes": [c.to_dict() for c in self.causes],
                "guesses": [c.to_dict() for c in self.guesses]}


@dataclass(frozen=True)
class Signature:
    """One compiled pattern and the weights it adds."""

    id: str
    regex: re.Pattern[str]
    adds: dict[str, float]
    requires: tuple[str, ...] = ()
    scale: dict[str, float] = field(default_factory=dict)
    evidence: bool = True
    keywords: tuple[str, ...] = ()  # lower-case literals, one of which every match contains
    unless: Any = None  # a compiled pattern: the signature does not count on lines it matches
    linear: bool = True  # compiled with RE2 (else Python re on a shortened line)
    fix: str = ""  # the fix for this message when it is the cause's main evidence (else the family's)
    source: str = ""  # where the message and its meaning are documented

    def may_match(self, lowered: str) -> bool:
        """Cheap test on the lower-cased line before running the regex."""
        return not self.keywords or any(k in lowered for k in self.keywords)

    def matches(self, line: str) -> bool:
        text = line if self.linear else line[:_FALLBACK_LINE_CHARS]
        if self.regex.search(text) is None:
            return False
        return self.unless is None or self.unless.search(line if self.linear
                                                          else line[:_FALLBACK_LINE_CHARS]) is None


@dataclass(frozen=True)
class SignatureSet:
    """Validated knowledge base: categories, signatures and scoring settings."""

    path: str
    categories: dict[str, dict[str, str]]
    signatures: tuple[Signature, ...]
    settings: dict[str, float]
    prefilter: re.Pattern[str] | None
    matcher: Any = None  # an RE2 Set of every linear pattern: one pass names all that match

    def setting(self, name: str) -> float:
        """A scoring setting (from the file, else the default)."""
        return self.settings.get(name, _DEFAULT_SETTINGS[name])


# ----------------------------------------------------------------------------- loading


def load_signatures(path: str | os.PathLike | None = None, *, trusted: bool = False) -> SignatureSet:
    """Load and validate a signatures file (default: the packaged one).

    Raises ``InputError`` naming the file and the offending key when the file is missing,
    is not YAML, or does not follow the schema. ``trusted`` (the packaged file, which the test
    suite validates: test_packaged_signatures_follow_the_schema) skips the JSON-Schema pass and
    the second compilation with Python's ``re`` of patterns RE2 accepts, which are most of
    explain's start-up; the semantic checks (unknown categories, ids, ``requires``) still run.
    """
    file = Path(path) if path is not None else DEFAULT_SIGNATURES
    name = str(file)
    try:
        from envbuilder.core.readfile import read_text_capped

        text = read_text_capped(file, "signatures file", limit=4 << 20)
    except FileNotFoundError:
        raise InputError(f"signatures file {name} does not exist") from None
    except IsADirectoryError:
        raise InputError(f"signatures file {name} is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read signatures file {name}: {exc}") from None
    raw = None
    if path is None:  # the packaged file: its JSON twin, when it was made from this very text
        from envbuilder.diagnose.signature_data import twin

        raw = twin(text)
    if raw is None:
        raw = _parse_yaml(text, name)
    if not isinstance(raw, dict):
        raise InputError(f"{name}: top level must be a mapping with 'categories' and 'signatures'")
    if not trusted:
        _check_schema(raw, name)
    settings = _parse_settings(raw.get("settings") or {}, name)
    categories = _parse_categories(raw["categories"], name)
    signatures = _parse_signatures(raw["signatures"], categories, name, trusted)
    return SignatureSet(name, categories, signatures, settings, _build_prefilter(signatures),
                        _build_matcher(signatures))


def _parse_yaml(text: str, name: str) -> Any:
    import yaml

    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: not valid YAML: {exc}") from None


def _build_matcher(signatures: Sequence[Signature]) -> Any:
    """An RE2 Set of the linear signatures' patterns (None without google-re2)."""
    if _re2 is None:
        return None
    try:
        options = _re2.Options()
        options.max_mem = 64 << 20
        matcher = _re2.Set.SearchSet(options)
        for sig in signatures:
            # one index per signature; a non-linear one gets a pattern that never matches
            matcher.Add(sig.regex.pattern if sig.linear else r"[^\x00-\x{10FFFF}]")
        matcher.Compile()
        return matcher
    except Exception:  # noqa: BLE001 - fall back to one search per signature
        return None


def _bad(file: str, key: str, message: str) -> InputError:
    return InputError(f"{file}: {key}: {message}")


def _check_schema(raw: dict[str, Any], file: str) -> None:
    """The file's shape, by the schema machinery the matrix uses (core/schema.py)."""
    err = schema.first_error(raw, schema.signatures_schema(CATEGORIES, tuple(_DEFAULT_SETTINGS)),
                             name_key=True)
    if err is None:
        return
    key = ""
    for i, part in enumerate(err.path):
        if isinstance(part, int):  # signatures[3] (its id), as the semantic checks name it
            sig_id = raw["signatures"][part].get("id") if err.path[i - 1] == "signatures" and \
                isinstance(raw["signatures"][part], dict) else None
            key += f"[{part}]" + (f" ({sig_id})" if isinstance(sig_id, str) else "")
        else:
            key += f".{part}" if key else str(part)
    raise _bad(file, key or "(top level)", err.message)


def _parse_settings(raw: dict[str, Any], file: str) -> dict[str, float]:
    return {key: float(value) for key, value in raw.items()}


def _parse_categories(raw: dict[str, Any], file: str) -> dict[str, dict[str, str]]:
    return {cat: {key: " ".join(body[key].split()) for key in _CATEGORY_KEYS}
            for cat, body in raw.items()}


def _parse_weights(raw: dict[str, Any], key: str, categories: dict, file: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for cat, weight in raw.items():
        if cat not in categories:
            raise _bad(file, f"{key}.{cat}", "unknown category")
        out[cat] = float(weight)
    return out


def _parse_signatures(raw: Any, categories: dict, file: str, trusted: bool = False) -> tuple[Signature, ...]:
    out: list[Signature] = []
    seen: set[str] = set()
    for i, item in enumerate(raw):
        sig_id = item["id"]
        where = f"signatures[{i}] ({sig_id})"
        if sig_id in seen:
            raise _bad(file, f"{where}.id", "duplicate id")
        seen.add(sig_id)
        out.append(_parse_signature(item, sig_id, where, categories, file, trusted))
    for sig in out:
        for req in sig.requires:
            if req not in seen:
                raise _bad(file, f"signatures ({sig.id}).requires", f"unknown signature id {req!r}")
    return tuple(out)


def _parse_signature(item: dict, sig_id: str, where: str, categories: dict, file: str,
                     trusted: bool = False) -> Signature:
    pattern = item.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise _bad(file, f"{where}.pattern", "must be a non-empty string")
    regex, linear = _compile(pattern, file, f"{where}.pattern", trusted)
    unless = None
    if "unless" in item:
        if not isinstance(item["unless"], str) or not item["unless"]:
            raise _bad(file, f"{where}.unless", "must be a non-empty string")
        unless, ulinear = _compile(item["unless"], file, f"{where}.unless", trusted)
        linear = linear and ulinear
    adds = _parse_weights(item["adds"], f"{where}.adds", categories, file)
    scale = _parse_weights(item["scale"], f"{where}.scale", categories, file) if "scale" in item else {}
    requires = item.get("requires", [])
    show = item.get("evidence", True)
    if not isinstance(show, bool):
        raise _bad(file, f"{where}.evidence", "must be true or false")
    unknown = set(item) - {"id", "pattern", "adds", "scale", "requires", "evidence", "unless", "fix", "source"}
    if unknown:
        raise _bad(file, f"{where}.{sorted(unknown)[0]}", "unknown key")
    fix, source = (" ".join(str(item.get(k, "")).split()) for k in ("fix", "source"))
    # the literal keywords serve the prefilter, which only runs without an RE2 set: an RE2
    # pattern needs none (parsing every pattern again was a tenth of explain's start-up)
    keywords = () if linear and _re2 is not None else _required_keywords(pattern)
    return Signature(sig_id, regex, adds, tuple(requires), scale, show, keywords, unless, linear, fix, source)


_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=")  # lookaround, backreferences


def _compile(pattern: str, file: str, key: str, trusted: bool = False) -> tuple[Any, bool]:
    """(compiled, linear): RE2 when it can take the pattern, else Python's re. A pattern is
    also compiled with Python's re (it validates the syntax for every engine) unless the file
    is trusted and RE2 took it."""
    if trusted and _re2 is not None and not _NOT_RE2.search(pattern):
        # compiled when a line first needs it (the RE2 set finds the lines; most signatures
        # never match a given log); test_packaged_patterns_compile_with_re2 holds that RE2
        # takes every packaged pattern this way
        return _LazyRE2("(?i)" + pattern), True
    try:
        compiled = re.compile(pattern, re.IGNORECASE)  # validates the syntax for every engine
    except re.error as exc:
        raise _bad(file, key, f"invalid regular expression: {exc}") from None
    if _re2 is not None and not _NOT_RE2.search(pattern):
        try:
            return _re2.compile("(?i)" + pattern), True
        except Exception:  # noqa: BLE001 - an RE2 gap: keep Python's, on shortened lines
            pass
    return compiled, False


class _LazyRE2:
    """An RE2 pattern compiled at its first search; then its own search is the compiled one's."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern

    def search(self, *args: Any) -> Any:
        compiled = _re2.compile(self.pattern)
        self.search = compiled.search  # type: ignore[method-assign]
        return compiled.search(*args)


try:
    import re2 as _re2  # google-re2: linear-time matching
except ImportError:  # pragma: no cover - a default dependency; the fallback stays correct
    _re2 = None


# ----------------------------------------------------------------------------- prefilter
#
# Running ~100 case-insensitive regexes on every line of a 2 GB log is far too slow. Each
# pattern is parsed once to find literal strings one of which every match must contain; all
# those literals form one trie-shaped regex run on the lower-cased line. Only lines that hit it
# are matched against the signatures whose own literals they contain.

try:  # Python 3.11+: the regex parser is re._parser (sre_parse is its deprecated alias)
    import re._constants as _sre_constants
    import re._parser as _sre_parser
except ImportError:  # pragma: no cover - other interpreters: no prefilter, still correct
    _sre_parser = _sre_constants = None  # type: ignore[assignment]

_MIN_KEYWORD = 3


def _required_keywords(pattern: str) -> tuple[str, ...]:
    """Lower-case literals one of which every match of ``pattern`` contains (``()``: unknown)."""
    if _sre_parser is None:
        return ()
    try:
        found = _alternatives(list(_sre_parser.parse(pattern, re.IGNORECASE)))
    except Exception:  # noqa: BLE001 - any parser surprise only disables the shortcut
        return ()
    return tuple(sorted({k.lower() for k in found})) if found else ()


def _alternatives(items: list) -> set[str] | None:
    """Literal alternatives required by a parsed (sub)pattern, or None if none are."""
    if len(items) == 1 and items[0][0] is _sre_constants.BRANCH:
        union: set[str] = set()
        for branch in items[0][1][1]:
            alt = _alternatives(list(branch))
            if alt is None:
                return None
            union |= alt
        return union
    best: set[str] | None = None
    run = ""

    def consider(candidate: set[str] | None) -> None:
        nonlocal best
        if candidate and min(map(len, candidate)) >= _MIN_KEYWORD:
            if best is None or min(map(len, candidate)) > min(map(len, best)):
                best = candidate

    for op, av in items:
        if op is _sre_constants.LITERAL:
            run += chr(av)
            continue
        consider({run} if run else None)
        run = ""
        if op is _sre_constants.SUBPATTERN:
            consider(_alternatives(list(av[-1])))
        elif op is _sre_constants.BRANCH:
            consider(_alternatives([(op, av)]))
    consider({run} if run else None)
    return best


def _build_prefilter(signatures: Sequence[Signature]) -> re.Pattern[str] | None:
    """One trie-shaped regex of every keyword (None when some signature has no keyword)."""
    if any(not s.keywords for s in signatures):
        return None
    trie: dict = {}
    for word in {k for s in signatures for k in s.keywords}:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}
    return re.compile(_trie_pattern(trie))


def _trie_pattern(node: dict) -> str:
    if "" in node:  # a shorter keyword ends here: it alone suffices
        return ""
    alts = [re.escape(ch) + _trie_pattern(sub) for ch, sub in sorted(node.items())]
    return alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


# ----------------------------------------------------------------------------- reading


def _sniff_encoding(head: bytes, name: str) -> str:
    """Pick a codec from the first bytes (BOMs, or the NUL pattern of BOM-less UTF-16/32
    text); refuse other binary data."""
    if head.startswith((codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)):
        return "utf-32"
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "utf-16"
    if b"\x00" in head:
        n = len(head) - len(head) % 4
        quads = [head[i:i + 4] for i in range(0, n, 4)]
        if quads and sum(q[0] != 0 and q[1:] == b"\0\0\0" for q in quads) >= 0.9 * len(quads):
            return "utf-32-le"
        if quads and sum(q[3] != 0 and q[:3] == b"\0\0\0" for q in quads) >= 0.9 * len(quads):
            return "utf-32-be"
        n = len(head) - len(head) % 2
        pairs = [head[i:i + 2] for i in range(0, n, 2)]
        if pairs and sum(p[1] == 0 and p[0] != 0 for p in pairs) >= 0.9 * len(pairs):
            return "utf-16-le"
        if pairs and sum(p[0] == 0 and p[1] != 0 for p in pairs) >= 0.9 * len(pairs):
            return "utf-16-be"
        raise InputError(f"{name} looks binary (NUL bytes in the first {_SNIFF_BYTES} bytes): "
                         f"give a text log (UTF-8, UTF-16 or UTF-32)")
    return "utf-8-sig"


def _iter_stream_lines(stream: IO[bytes], name: str, max_chars: int) -> Iterator[str]:
    """Yield decoded lines of a binary stream, each cut to ``max_chars``.

    Memory stays bounded by one chunk plus one capped line, however long the lines are.
    """
    head = stream.read(_SNIFF_BYTES) or b""
    decoder = codecs.getincrementaldecoder(_sniff_encoding(head, name))(errors="replace")
    pending = ""
    chunk = head
    while True:
        final = not chunk
        text = decoder.decode(chunk, final=final)
        if text:
            pieces = text.split("\n")
            for piece in pieces[:-1]:
                yield (pending + piece[: max_chars]).rstrip("\r")[:max_chars]
                pending = ""
            if len(pending) < max_chars:
                pending += pieces[-1][: max_chars - len(pending)]
        if final:
            break
        chunk = stream.read(_CHUNK_BYTES)
    if pending:
        yield pending.rstrip("\r")


def _open_source(path: str) -> IO[bytes]:
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{path} is a directory, not a log file")
    try:
        return open(p, "rb")
    except FileNotFoundError:
        raise InputError(f"log file {path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read log file {path}: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------- scoring


class _Analysis:
    """Accumulates signature hits over one or more sources, then ranks causes."""

    def __init__(self, sigs: SignatureSet, cases: Any = None) -> None:
        from envbuilder.diagnose.retrieval import LogTerms

        self.sigs = sigs
        self.cases = cases  # a retrieval.CaseIndex, or None: no nearest-case search
        self.terms = LogTerms()
        self.hits: dict[str, int] = {}
        self.evidence: dict[str, list[Evidence]] = {}
        self._max_ev = int(sigs.setting("max_evidence_per_signature"))
        self._slow = any(not s.linear for s in sigs.signatures)
        # the RE2 set's own Match on bytes (the Python wrapper only type-checks and encodes)
        m = sigs.matcher
        self._set_match: Any = getattr(getattr(m, "_set", None), "Match", None) or getattr(m, "Match", None)
        self.collector = FactCollector()
        self.reasons: dict[str, str] = {}
        self._by_id = {s.id: s for s in sigs.signatures}
        self.failing: set[str] = set()  # signatures that matched a line saying the job failed

    def feed(self, lines: Iterable[str], name: str) -> None:
        """Match every line against the signatures (one prefilter search per line); a
        message wrapped over two lines is matched re-joined too (normalise.Joiner)."""
        max_chars = int(self.sigs.setting("max_line_chars"))
        prefilter = self.sigs.prefilter.search if self.sigs.prefilter is not None else None
        seen: dict[str, tuple[Signature, ...]] = {}  # repeated lines are matched once
        collect = self.collector.feed
        terms = self.terms
        remember = terms.feed if self.cases is not None else None
        tail = terms.tail.append
        head_full = False
        joiner = Joiner()
        push = joiner.push
        hits = self.hits
        full: set[str] = set()  # signatures whose evidence is kept in full: only counted
        prev_found: tuple[Signature, ...] = ()
        for line_no, line in enumerate(lines, start=1):
            if len(line) > max_chars:
                line = line[:max_chars]
            if "\x1b" in line:
                line = strip_ansi(line)
            collect(line, name, line_no)
            found = seen.get(line)
            if found is None:
                found = self._match(line, prefilter)
                if found:
                    self._note_failing(found, line)
                if len(seen) >= _LINE_CACHE:
                    seen.clear()
                seen[line] = found
                if remember is not None:
                    if head_full:  # past the head a line costs one append (retrieval.LogTerms)
                        tail((line, name, line_no))
                    else:
                        remember(line, name, line_no)
                        head_full = terms.head_full()
            for sig in found:
                if sig.id in full:
                    hits[sig.id] += 1
                elif not self._record(sig, name, line_no, line):
                    full.add(sig.id)
            first = line[:1]
            if first.islower() or first == " " or first == "\t":  # only these continue a line
                joined = push(line)
                if joined is not None:
                    self._joined(joined, prefilter, prev_found + found, name, line_no)
            else:
                joiner.restart(line)
            prev_found = found

    def _note_failing(self, found: tuple[Signature, ...], line: str) -> None:
        """Signatures whose hit says the job failed: a message shown as evidence, of weight 3
        or more on any line (NCCL says "Call to connect returned Connection timed out" at INFO
        level, torch "The NVIDIA driver on your system is too old" as a UserWarning), or of
        weight 2 or more on a line that is not a warning, a deprecation notice or an INFO line;
        never on a deprecation notice, and on torch's own INFO lines or a banner (facts.QUIET)
        only with weight 6 or more (a device plugin logs "could not load NVML library" at INFO)."""
        new = [(sig, weight) for sig in found if sig.id not in self.failing and sig.evidence
               and (weight := max(sig.adds.values(), default=0.0)) >= 2]
        if not new or DEPRECATION.search(line):  # (a huge log's repeated kinds cost nothing here)
            return
        plain = quiet = None
        for sig, weight in new:
            if weight < 6:
                if quiet is None:
                    quiet = QUIET.search(line) is not None
                if quiet:
                    continue
            if weight < 3:
                if plain is None:
                    plain = NOT_EVIDENCE.search(line) is None
                if not plain:
                    continue
            self.failing.add(sig.id)

    def _joined(self, text: str, prefilter, alone: tuple[Signature, ...], name: str,
                line_no: int) -> None:
        """The signatures the re-joined text matches that neither line matched alone."""
        found = tuple(sig for sig in self._match(text, prefilter) if sig not in alone)
        if found:
            self._note_failing(found, text)
        for sig in found:
            self._record(sig, name, line_no - 1, text)

    def _match(self, line: str, prefilter) -> tuple[Signature, ...]:
        sigs = self.sigs.signatures
        matcher = self.sigs.matcher
        if matcher is not None:
            if not self._slow:  # only the signatures RE2 named, in file order
                found = self._set_match(line.encode("utf-8", "surrogatepass"))
                if not found:
                    return ()
                return tuple(sigs[i] for i in sorted(found)
                             if sigs[i].unless is None or sigs[i].matches(line))
            hit = set(matcher.Match(line) or ())
            lowered = line.lower()
            return tuple(sig for i, sig in enumerate(sigs)
                         if (i in hit and (sig.unless is None or sig.matches(line)))
                         or (not sig.linear and sig.may_match(lowered) and sig.matches(line)))
        lowered = line.lower()
        if prefilter is not None and prefilter(lowered) is None:
            return ()
        return tuple(sig for sig in sigs if sig.may_match(lowered) and sig.matches(line))

    def _record(self, sig: Signature, name: str, line_no: int, line: str) -> bool:
        """Count a hit and keep its line as evidence; False once no more evidence is kept."""
        self.hits[sig.id] = self.hits.get(sig.id, 0) + 1
        kept = self.evidence.setdefault(sig.id, [])
        if sig.evidence and len(kept) < self._max_ev:
            text = line.strip()[:_EVIDENCE_TEXT_CHARS]
            kept.append(Evidence(name, line_no, text))
            return True
        return False

    def _active(self, sig: Signature) -> bool:
        if sig.id not in self.hits:
            return False
        return not sig.requires or any(r in self.hits for r in sig.requires)

    def scores(self) -> tuple[dict[str, float], dict[str, list[tuple[float, str]]]]:
        """Per-category score, and per category the contributing signatures (weight, id) and
        inferences from the facts (weight, ``fact:<n>``)."""
        bonus, cap = self.sigs.setting("repeat_bonus"), self.sigs.setting("repeat_cap")
        scores: dict[str, float] = {}
        contributors: dict[str, list[tuple[float, str]]] = {}
        factors: dict[str, float] = {}
        for sig in self.sigs.signatures:
            if not self._active(sig):
                continue
            extra = min(self.hits[sig.id] - 1, cap)
            for cat, weight in sig.adds.items():
                gained = weight * (1.0 + bonus * extra)
                scores[cat] = scores.get(cat, 0.0) + gained
                contributors.setdefault(cat, []).append((gained, sig.id))
            for cat, factor in sig.scale.items():
                factors[cat] = factors.get(cat, 1.0) * factor
        for i, inf in enumerate(infer(self.collector.facts)):
            if inf.category not in self.sigs.categories:
                continue  # a custom signatures file without this category
            key = f"fact:{i}"
            self.evidence[key] = [Evidence(f, n, t) for f, n, t in inf.evidence]
            self.reasons[key] = inf.reason
            if inf.weight:
                scores[inf.category] = scores.get(inf.category, 0.0) + inf.weight
                contributors.setdefault(inf.category, []).append((inf.weight, key))
            if inf.scale != 1.0:
                factors[inf.category] = factors.get(inf.category, 1.0) * inf.scale
        for cat, factor in factors.items():
            if cat in scores:
                scores[cat] *= factor
        return scores, contributors

    def causes(self) -> list[Cause]:
        """The ranked causes (at or over the model's threshold)."""
        return self.outcome()[0]

    def outcome(self) -> tuple[list[Cause], list[Cause], str]:
        """(causes, low-confidence guesses, verdict): the evidence weighed by the learned model
        (``ranking``), with the nearest known cases as evidence; nothing at all when nothing in
        the logs says that something failed."""
        from envbuilder.diagnose import nearest, ranking

        w = self.weighing()
        if w is None:
            return [], [], NO_FAILURE
        scores, contributors, near, rows = w
        model = ranking.default_model()
        probabilities, _ = model.probabilities(rows)
        confidences = model.confidences(rows, scores)
        found = {cat: self._cause(cat, confidences.get(cat, 0.0), contrib)
                 for cat, contrib in contributors.items() if scores.get(cat, 0.0) > 0}
        ranked = nearest.weigh(found, confidences, ranking.rank_order(probabilities, scores), near,
                               self.cases, self.terms, self.sigs.categories, self.sigs.setting("min_confidence"))
        causes = [c for c in ranked if c.confidence >= model.threshold or c.team_match]
        guesses = [c for c in ranked if c not in causes]
        return causes, guesses, CAUSE_FOUND if causes else LOW_CONFIDENCE if guesses else NOTHING_MATCHED

    def weighing(self) -> tuple[dict[str, float], dict[str, list[tuple[float, str]]], list[Any],
                                dict[str, tuple[float, ...]]] | None:
        """What the model weighs (scripts/train-explain-model.py reads the corpus through it):
        (scores, contributors, nearest cases, feature rows), or None when nothing failed."""
        from envbuilder.diagnose import nearest, ranking

        scores, contributors = self.scores()
        failed = self._failed(contributors)
        if not failed and not (self.cases is not None and any(c.team for c in self.cases.cases)):
            return None
        near = nearest.neighbours(self.cases, self.terms, self.collector.facts, ranking.NEIGHBOURS)
        if not failed and not nearest.team_match(near):  # a team's own case is evidence of its own
            return None
        facts = {cat: sum(w for w, k in contrib if k.startswith("fact:")) for cat, contrib in contributors.items()}
        rows = ranking.features(scores, facts, [(n.case.category, n.similarity) for n in near])
        return scores, contributors, near, rows

    def _failed(self, contributors: dict[str, list[tuple[float, str]]]) -> bool:
        """Whether the logs say that something failed: a line that says so (not a warning, a
        deprecation notice, a banner or an NCCL INFO line), a message a signature knows (on such
        a line, or a strong one anywhere), an inference from the facts, a flight-recorder dump."""
        f = self.collector.facts
        if f.failure or f.flight or any(r.reading() for r in f.ras):
            return True
        if any(k.startswith("fact:") for contrib in contributors.values() for _, k in contrib):
            return True
        return any(self._active(self._by_id[i]) for i in self.failing)

    def _cause(self, cat: str, confidence: float, contrib: list[tuple[float, str]]) -> Cause:
        info = self.sigs.categories[cat]
        limit = int(self.sigs.setting("max_evidence_per_cause"))
        seen: set[Evidence] = set()
        evidence: list[Evidence] = []
        for _, sig_id in sorted(contrib, key=lambda c: -c[0]):
            for ev in self.evidence.get(sig_id, ()):
                if ev not in seen and len(evidence) < limit:
                    seen.add(ev)
                    evidence.append(ev)
        evidence.sort(key=lambda e: (e.file, e.line_no))
        reasons = tuple(self.reasons[k] for _, k in sorted(contrib, key=lambda c: -c[0]) if k in self.reasons)
        return Cause(cat, info["title"], round(confidence, 3), tuple(evidence),
                     info["check"], self._fix(cat, contrib), info["source"], reasons)

    def _fix(self, cat: str, contrib: list[tuple[float, str]]) -> str:
        """The fix of the strongest signature behind the cause that names one (a message with a
        fix of its own: DeepSpeed's shm_comm op, the DataLoader's shm), else the family's."""
        by_id = self._by_id
        for _, sig_id in sorted(contrib, key=lambda c: -c[0]):
            sig = by_id.get(sig_id)
            if sig is not None and sig.fix:
                return sig.fix
        return self.sigs.categories[cat]["fix"]


def _confidences(scores: dict[str, float], exponent: float, prior: float) -> dict[str, float]:
    """The hand-set weighing used before issue 45 (the learned model replaced it; kept as the
    baseline scripts/train-explain-model.py --cv compares the model with): ``s^e / (sum s^e + prior^e)``.

    The prior is the mass of "something this knowledge base does not know": one weak match
    stays unsure, one strong match among weak ones is confident, two strong ones share.
    """
    powered = {cat: max(s, 0.0) ** exponent for cat, s in scores.items() if s > 0}
    total = sum(powered.values()) + prior ** exponent
    return {cat: p / total for cat, p in powered.items()}


# ----------------------------------------------------------------------------- public API


def explain_lines(lines: Iterable[str], *, name: str = "<stdin>",
                  signatures: SignatureSet | None = None, cases: Any = "default") -> list[Cause]:
    """Rank the likely causes of the failure shown by ``lines`` (most likely first).
    ``cases``: the known-case index (retrieval.CaseIndex; "default": the packaged corpus;
    None: signatures and facts only)."""
    sigs = signatures if signatures is not None else _default_signatures()
    analysis = _Analysis(sigs, _case_index(cases))
    analysis.feed((line.rstrip("\r\n") for line in lines), name)
    return analysis.causes()


def analyse_lines(lines: Iterable[str], *, name: str = "<stdin>",
                  signatures: SignatureSet | None = None, cases: Any = "default") -> Report:
    """The facts, causes, guesses and verdict for ``lines`` (``explain_lines`` gives the causes)."""
    sigs = signatures if signatures is not None else _default_signatures()
    analysis = _Analysis(sigs, _case_index(cases))
    analysis.feed((line.rstrip("\r\n") for line in lines), name)
    causes, guesses, verdict = analysis.outcome()
    return Report(causes, analysis.collector.facts, guesses, verdict)


def explain_files(paths: Sequence[str], *, signatures: SignatureSet | None = None,
                  stdin: IO[bytes] | None = None, cases: Any = "default") -> list[Cause]:
    """Rank the likely causes over several logs read together (``"-"`` is stdin).

    All files are validated before any is analysed, so a bad path fails fast.
    """
    return analyse_files(paths, signatures=signatures, stdin=stdin, cases=cases).causes


def analyse_files(paths: Sequence[str], *, signatures: SignatureSet | None = None,
                  stdin: IO[bytes] | None = None, cases: Any = "default") -> Report:
    """The facts read from several logs (and PyTorch flight-recorder dumps) and the causes
    ranked over them. A dump (pickled or JSON, named by its rank) is recognised by its
    content; see envbuilder/diagnose/flightrecorder.py."""
    from envbuilder.diagnose import flightrecorder

    dumps = _checked_paths(paths)
    sigs = signatures if signatures is not None else _default_signatures()
    analysis = _Analysis(sigs, _case_index(cases))
    loaded = {}
    for path in dumps:  # every dump is read (and refused) before any log is analysed
        rank, dump = flightrecorder.load_dump(path)
        if rank in loaded:
            raise InputError(f"{path}: a second flight-recorder dump for rank {rank}")
        loaded[rank] = dump
    if loaded:
        where = dumps[0] if len(dumps) == 1 else f"{len(dumps)} flight-recorder dumps"
        analysis.collector.facts.flight = flightrecorder.analyse_dumps(loaded, where)
    max_chars = int(sigs.setting("max_line_chars"))
    for path in paths:
        if path in dumps:
            continue
        if path == "-":
            _feed_stdin(analysis, stdin, max_chars)
            continue
        with _open_source(path) as fh:
            try:
                analysis.feed(_iter_stream_lines(fh, path, max_chars), path)
            except OSError as exc:
                raise InputError(f"cannot read log file {path}: {exc.strerror or exc}") from None
    causes, guesses, verdict = analysis.outcome()
    return Report(causes, analysis.collector.facts, guesses, verdict)


def _checked_paths(paths: Sequence[str]) -> list[str]:
    """Every path checked before any is analysed (a bad one fails fast, exit 2); returns the
    ones that are flight-recorder dumps (recognised by their content)."""
    from envbuilder.diagnose import flightrecorder

    if isinstance(paths, (str, bytes)):
        raise InputError("explain_files takes a list of paths, not a single string")
    if not paths:
        raise InputError("no log file given (use '-' for stdin)")
    dumps: list[str] = []
    for path in paths:
        if path == "-":
            continue
        if Path(path).is_dir():
            raise InputError(f"{path} is a directory, not a log file")
        if not Path(path).exists():
            raise InputError(f"log file {path} does not exist")
        with _open_source(path) as fh:
            if flightrecorder.is_dump(fh.read(_SNIFF_BYTES)):
                dumps.append(path)
    return dumps


def _feed_stdin(analysis: _Analysis, stdin: IO[bytes] | None, max_chars: int) -> None:
    stream = stdin if stdin is not None else getattr(sys.stdin, "buffer", None)
    if stream is None:
        raise InputError("explain -: stdin is closed; pipe a log in or name a file")
    try:
        analysis.feed(_iter_stream_lines(stream, "<stdin>", max_chars), "<stdin>")
    except (OSError, ValueError) as exc:
        raise InputError(f"explain -: cannot read stdin: {exc}") from None


_DEFAULT_CACHE: list[SignatureSet] = []


def _case_index(cases: Any) -> Any:
    """The known-case index to search: the packaged corpus for "default", else as given."""
    if isinstance(cases, str) and cases == "default":
        from envbuilder.diagnose.retrieval import default_index

        return default_index()
    return cases


def _default_signatures() -> SignatureSet:
    """The packaged signatures, loaded and compiled once per process."""
    if not _DEFAULT_CACHE:
        _DEFAULT_CACHE.append(load_signatures(trusted=True))
    return _DEFAULT_CACHE[0]
