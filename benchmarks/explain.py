"""Time of `envbuilder explain` on hostile and huge logs (the matching engine runs in linear
time: RE2, repeated lines matched once, lines cut).

    python benchmarks/explain.py [--mb 200] [--keep DIR] [--json]

Logs made in a temp folder:
* ``ib-one-line``: 410 KB of ``NET/IB:error1`` repeated on one line (it took 92 s with
  backtracking regexes);
* ``ib-lines``: the same 410 KB as one ``NET/IB:error1`` per line;
* ``corpus-<N>mb``: N MB (default 200) made of the real logs in tests/explain_corpus, repeated,
  with a line of 410 KB of ``NET/IB:error1`` between copies;
* ``distinct-<N>mb``: N MB of NCCL ``NET/IB`` error lines that all differ (the worst case:
  every line passes the keyword filter and no line repeats).

Prints each log's size, the seconds `envbuilder explain` (a fresh interpreter, the CLI as a
user runs it) took, the MB/s, and the ratio to the budget the issue set (2 s for the 410 KB
logs, 30 s for the big one): below 1.0 is within budget. Reports only: exit 0.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-c",
       "import sys; from envbuilder.cli import main; sys.argv[0] = 'envbuilder'; main()"]
CORPUS = Path(__file__).resolve().parent.parent / "tests" / "explain_corpus"


def make_logs(folder: Path, mb: int) -> list[tuple[str, Path, float]]:
    one = folder / "ib-one-line.log"
    one.write_text("NET/IB:error1" * 31500)
    lines = folder / "ib-lines.log"
    lines.write_text("NET/IB:error1\n" * 29300)
    corpus = b"".join(p.read_bytes() for p in sorted(CORPUS.glob("*.log")))
    hostile = b"NET/IB:error1" * 31500 + b"\n"
    big = folder / f"corpus-{mb}mb.log"
    target = mb << 20
    with open(big, "wb") as f:
        written = 0
        while written < target:
            block = corpus + hostile
            f.write(block)
            written += len(block)
    distinct = folder / f"distinct-{mb}mb.log"
    with open(distinct, "w") as f:
        written = i = 0
        while written < target:
            line = (f"[rank{i % 12}] host{i}:1234:5678 [0] NCCL WARN NET/IB : Got completion "
                    f"from peer 10.0.{i % 255}.{i % 7} with status=12 opcode=0 len=0 vendor err "
                    f"{i % 200} (Recv) localGid ::ffff:10.0.0.{i % 9} remoteGids fe80::{i}\n")
            f.write(line)
            written += len(line)
            i += 1
    return [("ib-one-line (410 KB)", one, 2.0), ("ib-lines (410 KB)", lines, 2.0),
            (f"corpus ({mb} MB)", big, 30.0), (f"distinct ({mb} MB)", distinct, 30.0)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=200, help="size of the big log in MB")
    ap.add_argument("--keep", type=Path, help="make the logs in this folder and keep them")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="envbuilder-bench-explain-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        rows = []
        for name, path, budget in make_logs(folder, args.mb):
            t0 = time.perf_counter()
            p = subprocess.run([*CLI, "explain", "--json", str(path)], capture_output=True,
                               text=True)
            secs = time.perf_counter() - t0
            size = path.stat().st_size
            causes = [c["category"] for c in json.loads(p.stdout)["causes"]] if p.stdout else []
            rows.append({"log": name, "bytes": size, "seconds": round(secs, 2),
                         "mb_per_s": round(size / (1 << 20) / secs, 1),
                         "budget_s": budget, "ratio_to_budget": round(secs / budget, 3),
                         "exit_code": p.returncode, "causes": causes[:3]})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for r in rows:
            print(f"{r['log']:22} {r['bytes'] / (1 << 20):8.1f} MB {r['seconds']:7.2f} s "
                  f"{r['mb_per_s']:7.1f} MB/s  {r['ratio_to_budget']:.3f} of the "
                  f"{r['budget_s']:.0f} s budget  exit {r['exit_code']} "
                  f"{', '.join(r['causes']) or 'no cause'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
