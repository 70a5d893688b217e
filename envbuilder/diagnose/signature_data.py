"""The packaged signatures as JSON: the same document as ``envbuilder/data/signatures.yaml``,
read without a YAML parser (building Python objects from YAML was a quarter of a short
``explain``'s own work; the JSON parser is C and needs no import).

``signatures.yaml`` stays the file people edit and review; ``signatures.json`` is made from it
by ``python -m envbuilder.diagnose.signature_data`` (``--check`` verifies) and records the
sha256 of the YAML text it was made from. At run time the JSON is used only when that digest
is the YAML's own (an edited checkout falls back to the YAML, so what is read is always the
YAML's content); ``tests/test_explain.py`` fails when the committed JSON is stale.
"""

from __future__ import annotations

import hashlib
import json
import sys
from typing import Any

from envbuilder.core.resources import data_path

SOURCE = data_path("signatures.yaml")
TWIN = SOURCE.with_name("signatures.json")  # may be missing: then the YAML is read
FORMAT = "envbuilder-signatures-json/1"


def twin(text: str) -> dict[str, Any] | None:
    """The JSON twin's document when it was made from exactly ``text`` (the YAML's text),
    else None (missing, stale, unreadable or of another format: the caller parses the YAML)."""
    try:
        doc = json.loads(TWIN.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or \
            doc.get("source_sha256") != _sha256(text) or not isinstance(doc.get("document"), dict):
        return None
    return doc["document"]


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def make(text: str) -> str:
    """The JSON twin of the YAML ``text``."""
    import yaml

    document = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    return json.dumps({"format": FORMAT, "source_sha256": _sha256(text), "document": document},
                      ensure_ascii=False, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = SOURCE.read_text(encoding="utf-8")
    if args == ["--check"]:
        if twin(text) is None:
            sys.stderr.write(f"{TWIN} is stale: run python -m envbuilder.diagnose.signature_data\n")
            return 1
        return 0
    if args:
        sys.stderr.write("usage: python -m envbuilder.diagnose.signature_data [--check]\n")
        return 2
    tmp = TWIN.with_name(f".{TWIN.name}.tmp")
    tmp.write_text(make(text), encoding="utf-8")
    tmp.replace(TWIN)
    sys.stdout.write(f"wrote {TWIN}\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
