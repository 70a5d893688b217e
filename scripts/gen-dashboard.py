#!/usr/bin/env python3
"""Regenerate templates/monitoring/dashboard.json with grafana-foundation-sdk.

    pip install 'envbuilder[monitoring]' && python scripts/gen-dashboard.py [--check]

``envbuilder render`` ships the generated file, so the default install needs no SDK.
``--check`` exits 1 when the shipped file differs from what the SDK builds now.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from envbuilder.render.monitoring import build_dashboard, dashboard_text  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "templates" / "monitoring" / "dashboard.json"


def main(argv: list[str]) -> int:
    text = dashboard_text(build_dashboard())
    if "--check" in argv:
        if not OUT.is_file() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is out of date: run python scripts/gen-dashboard.py", file=sys.stderr)
            return 1
        return 0
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(OUT)
    print(OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
