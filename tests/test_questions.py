"""The fresh sourced questions of issue 44 (tests/data/questions-2026-12.yaml), put to envbuilder.

Each question's answer was taken from its source, not from envbuilder; this asks envbuilder the
same (resolve or check, through the library) against the built-in matrix, and holds the count the
file records: which questions it answers right and which it misses. A change to the matrix or the
rules that moves the count must update the file, so the count reported is the one the suite runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from envbuilder.api import check_combination, resolve_target
from envbuilder.core.matrix import load_matrix
from envbuilder.core.target import Pins
from envbuilder.errors import IncompatibleError, InputError

DATA = Path(__file__).parent / "data" / "questions-2026-12.yaml"
DOC = yaml.safe_load(DATA.read_text(encoding="utf-8"))
QUESTIONS = DOC["questions"]
AXES = ("cuda", "driver", "torch", "python", "os", "flavour")


def ask(q: dict[str, Any]) -> tuple[str, dict[str, Any], set[str]]:
    """envbuilder's answer: accept | refuse | bad-input, the --json document of an accepted
    question, and the rules that refused it."""
    a = dict(q["ask"])
    command = a.pop("command")
    try:
        if command == "resolve":
            st = resolve_target(a.pop("target"), matrix=load_matrix(), pins=Pins.of(**a))
            return "accept", st.to_dict(), set()
        axes = {k: a.pop(k) for k in AXES if k in a}
        return "accept", check_combination(**axes, **a).to_dict(), set()
    except IncompatibleError as e:
        return "refuse", {}, {v.rule for v in e.violations}
    except InputError:
        return "bad-input", {}, set()


def right(q: dict[str, Any]) -> tuple[bool, str]:
    """Whether envbuilder's answer is the source's, and if not, how it differs."""
    exp = q["expect"]
    verdict, doc, rules = ask(q)
    if verdict != exp["verdict"]:
        if exp["verdict"] == "accept" and verdict == "refuse" and "builder_gcc_below" in exp:
            return False, f"refused ({', '.join(sorted(rules))}) though an older GCC builds it"
        return False, f"{verdict} ({', '.join(sorted(rules))}), the source says {exp['verdict']}"
    if "rule" in exp and exp["rule"] not in rules:
        return False, f"refused by {sorted(rules)}, not by {exp['rule']} (the fact that decides)"
    if "torch_index" in exp and doc.get("torch_index") != exp["torch_index"]:
        return False, f"torch from {doc.get('torch_index')}, the source says {exp['torch_index']}"
    if "torch_arch_sm" in exp:
        sm = sorted((a for a in doc.get("torch_arch") or () if a.startswith("sm_")), key=lambda a: int(a[3:]))
        if sm != exp["torch_arch_sm"]:
            return False, f"arch {sm}, the source says {exp['torch_arch_sm']}"
    if "base_image_has" in exp:
        image = doc.get("base_image") or ""
        if not all(w in image for w in exp["base_image_has"]):
            return False, f"base image {image!r}"
    if "builder_gcc_below" in exp:
        gcc = (doc.get("builder") or {}).get("gcc")
        if gcc is None or gcc >= exp["builder_gcc_below"]:
            return False, f"builds with GCC {gcc}"
    return True, ""


def test_the_set_is_forty_sourced_questions_of_the_issue_classes():
    assert len(QUESTIONS) == 40
    assert len({q["id"] for q in QUESTIONS}) == 40
    classes = {q["class"] for q in QUESTIONS}
    assert classes == {"aarch64", "index-only", "forward-compat", "deepspeed-import", "deepspeed-python",
                       "os-family", "horovod"}
    for q in QUESTIONS:
        assert q["question"] and q["answer"], q["id"]
        assert q["source"] and all(s.startswith("https://") for s in q["source"]), q["id"]
        assert q["ask"]["command"] in ("resolve", "check") and q["expect"]["verdict"] in ("accept", "refuse")


@pytest.mark.parametrize("q", QUESTIONS, ids=[q["id"] for q in QUESTIONS])
def test_each_question_is_answered_as_recorded(q):
    ok, why = right(q)
    if q["id"] in DOC["misses"]:
        assert not ok, f"{q['id']} is now answered right: move it out of misses and raise right"
    else:
        assert ok, f"{q['id']} ({q['question']}): {why}"


def test_the_recorded_count():
    assert DOC["right"] == len(QUESTIONS) - len(DOC["misses"])
    assert set(DOC["misses"]) <= {q["id"] for q in QUESTIONS}
    assert DOC["right"] >= 36  # the issue's bar
