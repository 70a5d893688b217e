"""Write envbuilder/data/explain_cases.json from tests/explain_corpus (the nearest-case corpus).

    python scripts/make-explain-cases.py          # rewrite the packaged file
    python scripts/make-explain-cases.py --check  # exit 1 if it is out of date

Each case: its normalised excerpt, category, root cause (cases.yaml `note`), fix (its own `fix`,
where cases.yaml gives one), public URL and term counts
(envbuilder/diagnose/retrieval.py). tests/test_explain_retrieval.py checks the file is current.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from envbuilder.diagnose.explain import load_signatures  # noqa: E402
from envbuilder.diagnose.retrieval import build_corpus  # noqa: E402

CORPUS = ROOT / "tests" / "explain_corpus"
OUT = ROOT / "envbuilder" / "data" / "explain_cases.json"


def render() -> str:
    fixes = {cat: body["fix"] for cat, body in load_signatures().categories.items()}
    doc = build_corpus(CORPUS / "cases.yaml", CORPUS, fixes)
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = [json.dumps(c, sort_keys=True, ensure_ascii=False) for c in doc["cases"]]
    body = ",\n".join(lines)
    return (json.dumps(head, sort_keys=True)[:-1] + ', "cases": [\n' + body + "\n]}\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = render()
    if args.check:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        if current != text:
            print(f"{OUT} is out of date: run python scripts/make-explain-cases.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUT} ({len(text)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
