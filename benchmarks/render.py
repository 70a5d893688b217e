"""Whole-process CPU time of `envbuilder render` against hpccm rendering one recipe.

    python benchmarks/render.py [--runs 7] [--json]

Each figure is the median of N runs of a fresh process (subprocess), measured as the CPU time
(user + system) the child used, from resource.getrusage(RUSAGE_CHILDREN) deltas. envbuilder and
hpccm runs alternate, so both see the same machine load. Measured:

- hpccm: `hpccm --recipe benchmarks/hpccm_cu118.py --format docker` (two stages, CUDA 11.8 +
  NCCL + a pip install of torch and DeepSpeed), the reference;
- `envbuilder render cu118` warm (envbuilder's cache folder filled by an earlier run) and cold
  (an empty cache folder: XDG_CACHE_HOME points at a new temporary folder every run);
- `envbuilder render --all` warm;
- `envbuilder --help`;
- the typer floor: a typer app whose one command declares the same parameters as
  `envbuilder render` and does nothing (Python start-up, typer's import and its per-option
  coercion: what any typer CLI pays before its own work starts; issue 14's goals are judged
  against it).

Ratios are envbuilder / hpccm. Both run in the same interpreter with the same environment;
Python's own bytecode is kept in a temporary PYTHONPYCACHEPREFIX for both (as an installed
package would have it), whatever PYTHONDONTWRITEBYTECODE says. hpccm comes from PyPI
(pip install hpccm); without it the absolute figures are printed. Reports only: exit 0.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECIPE = HERE / "hpccm_cu118.py"
# what the `envbuilder` console script runs (pyproject.toml's [project.scripts]); hpccm's
# console script is hpccm.cli:main, as below
ENVBUILDER = [sys.executable, "-c", "import sys; from envbuilder._entry import main; "
              "sys.argv[0] = 'envbuilder'; main()"]
HPCCM = [sys.executable, "-c", "import sys, hpccm.cli; sys.argv[0] = 'hpccm'; sys.exit(hpccm.cli.main())"]
# a do-nothing command with render's parameter declarations (copied from envbuilder.cli at run
# time, so the floor follows the real command): only typer's own cost remains
TYPER_FLOOR = [sys.executable, "-c", """
import inspect, sys, typer
from envbuilder import cli
cmd = next(c for c in cli.app.registered_commands if c.callback.__name__ == "render")
sig = inspect.signature(cmd.callback)  # what typer sees (pin options included)
ns = vars(cli)
params = [p.replace(annotation=eval(p.annotation, ns) if isinstance(p.annotation, str)
                    else p.annotation) for p in sig.parameters.values()]
def noop(**kw):
    pass
noop.__signature__ = sig.replace(parameters=params, return_annotation=None)
app = typer.Typer(add_completion=False)
app.command("render")(noop)
app.command("other")(lambda: None)
sys.argv[0] = "floor"
app()
"""]


def _cpu(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # cwd: a scratch folder, so `python -c` imports envbuilder from PYTHONPATH or the install,
    # never from whatever folder the benchmark was started in
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _have_hpccm() -> bool:
    return subprocess.run([sys.executable, "-c", "import hpccm.cli"], capture_output=True,
                          cwd=tempfile.gettempdir()).returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7, help="runs per measurement (median)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="envbuilder-bench-"))
    try:
        base = dict(os.environ)
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        base.pop("ENVBUILDER_NO_CACHE", None)
        base["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        warm = dict(base, XDG_CACHE_HOME=str(work / "cache"))
        hpccm = _have_hpccm()

        cases: dict[str, tuple[list[str], bool]] = {
            "hpccm one recipe": (HPCCM + ["--recipe", str(RECIPE), "--format", "docker"], False),
            "render cu118 warm": (ENVBUILDER + ["render", "cu118", "-o", str(work / "one")], False),
            "render cu118 cold": (ENVBUILDER + ["render", "cu118", "-o", str(work / "one")], True),
            "render --all warm": (ENVBUILDER + ["render", "--all", "-o", str(work / "all")], False),
            "--help": (ENVBUILDER + ["--help"], False),
            "typer floor": (TYPER_FLOOR + ["render", "cu118", "-o", str(work / "floor")], False),
        }
        if not hpccm:
            del cases["hpccm one recipe"]
        # one unmeasured run of each: Python's bytecode and envbuilder's cache in place
        for cmd, _ in cases.values():
            _cpu(cmd, warm, work)
        times: dict[str, list[float]] = {k: [] for k in cases}
        for i in range(args.runs):
            for name, (cmd, cold) in cases.items():  # alternating: hpccm, then each envbuilder case
                env = warm
                if cold:
                    env = dict(base, XDG_CACHE_HOME=str(work / f"cold-{i}"))
                times[name].append(_cpu(cmd, env, work))
        med = {k: statistics.median(v) for k, v in times.items()}
    finally:
        shutil.rmtree(work, ignore_errors=True)

    ref = med.get("hpccm one recipe")
    ratios = {k: v / ref for k, v in med.items() if ref and k not in ("hpccm one recipe", "--help")}
    if args.json:
        print(json.dumps({"runs": args.runs, "cpu_s": med, "ratio_to_hpccm": ratios,
                          "hpccm": hpccm}, indent=2))
        return 0
    print(f"whole processes, CPU time (user+system), median of {args.runs}")
    if not hpccm:
        print("hpccm is not installed (pip install hpccm): absolute figures only")
    for name, v in med.items():
        extra = f"   {ratios[name]:.2f}x hpccm" if name in ratios else ""
        print(f"  {name:<20} {v:7.3f} s{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
