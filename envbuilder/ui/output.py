"""What the commands print: tables (rich), one JSON document (--json), warnings, build
progress on stderr, and errors as one line with their exit code (``command``). Also the
readable metavars every command's --help shows."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from pathlib import Path
from typing import Any, Callable, Optional

import typer

from envbuilder.errors import EXIT_FAILED
from envbuilder.ui import plain
from envbuilder.ui.plain import echo_json, say  # noqa: F401 - the CLI's names for them
from envbuilder.ui.options import COMPONENTS

def console(stderr: bool = False) -> Any:
    """A rich Console that honours NO_COLOR (no escapes at all, not even bold) and the
    terminal's width, or COLUMNS; tables on stdout get 200 columns in a file or a pipe (rows
    stay whole for grep), progress on stderr rich's default."""
    from rich.console import Console

    sized = stderr or sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit()
    no_color = bool(os.environ.get("NO_COLOR"))  # https://no-color.org: set and not empty
    kw: dict[str, Any] = {"color_system": None} if no_color else {}
    return Console(stderr=stderr, width=None if sized else 200, **kw)



def command(fn: Callable) -> Callable:
    """Turn library errors into one line and an exit code; Ctrl-C into exit 130
    (``envbuilder.ui.plain.guarded``, which the typer-free explain shares)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from envbuilder import _safety

        result: list[Any] = [None]

        def call() -> None:
            _safety.check_arguments(kwargs)
            result[0] = fn(*args, **kwargs)

        code = plain.guarded(call, bool(kwargs.get("as_json")), passthrough=(typer.Exit,))
        if code:
            raise typer.Exit(code)
        return result[0]

    return wrapper


def table(title: str, columns: list[str], rows: list[list[Any]]) -> None:
    from rich.table import Table

    from envbuilder._safety import rich_text

    # the title and headers are text too (they carry arguments, image names, registry labels):
    # never markup, never escapes
    t = Table(title=rich_text(title), title_justify="left")
    for i, c in enumerate(columns):
        t.add_column(rich_text(c), no_wrap=i == 0)  # names stay whole, so they can be grepped
    for r in rows:
        t.add_row(*[rich_text(v) for v in r])  # user text: never markup, never escapes
    console().print(t)


def warn(w: dict) -> None:

    # warnings go to stderr: stdout stays the answer (a table, or one JSON document)
    say(f"warning: {w['rule']}: {w['message']}. {w['fix']}", err=True)


def evidence(e: dict) -> None:
    """One fact that decided an acceptance at an edge, with its source (stdout: part of the answer)."""
    src = f" [source: {e['source'][0]}]" if e.get("source") else ""
    say(f"evidence: {e['rule']}: {e['message']}{src}")


def print_stack(d: dict) -> None:
    rows = [[k, d[k] if not isinstance(d[k], dict) else d[k].get("version"),
             d["choices"].get(k, {}).get("reason", "") if k in d["choices"] else ""]
            for k in ("cuda_toolkit", "driver_min", "torch", "torch_variant", "python", "nccl",
                      *COMPONENTS, "os", "base_image", "builder_image")]
    rows[0][2] = d["choices"]["cuda"]["reason"]
    if d.get("driver_min"):  # whose floor: the base's or the wheel's cuda-toolkit patch
        rows[1][2] = d["driver_min"].get("note") or f"CUDA {d['driver_min'].get('toolkit')}'s minimum driver"
    table(f"{d['target']} -> {d['tag']}", ["axis", "value", "why"], rows)
    for e in d.get("overlay", ()):
        say(f"overlay{' (used)' if e['used'] else ''}: {e['file']} {e['key']} "
                         f"{e['entry']} {e['action']} from {e['overlay']} (source: {', '.join(e['source'])})")
    for e in d.get("evidence", ()):
        evidence(e)
    for w in d["warnings"]:
        warn(w)



class Progress:
    """Build progress on stderr with rich (a bar over Dockerfile steps); silent under --json."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.progress: Any = None
        self.tasks: dict[str, int] = {}

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("{task.completed}/{task.total}"),
                                     TimeElapsedColumn(), console=console(stderr=True),
                                     transient=False)
            self.progress.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def event(self, target: str, kind: str, data: Any) -> None:
        if self.progress is None:
            return
        if kind == "build-step":
            i, n, text = data
            if target not in self.tasks:
                self.tasks[target] = self.progress.add_task(f"{target}: build", total=n)
            from rich.markup import escape

            from envbuilder._safety import terminal_safe

            self.progress.update(self.tasks[target], completed=i, total=n,
                                 description=escape(terminal_safe(f"{target}: {text[:60]}")))
        elif kind == "step":
            from envbuilder._safety import rich_text

            name, state = data
            self.progress.console.print(rich_text(f"{target}: {name} {state}"))



def print_smoke(title: str, result: Any, runs: list, causes: list, exported: Any,
                pushgateway: Optional[str]) -> None:
    """A smoke run: each size of a progressive run, the checks, bandwidth, causes, metrics."""
    for r in runs:
        say(f"{r.world_size:3d} ranks: {'ok' if r.ok else 'FAILED ' + ', '.join(r.failed)}")
    if runs and not runs[-1].ok:
        say(f"progressive: stopped at {runs[-1].world_size} ranks")
    table(f"{title}: world size {result.world_size}, {result.backend}", ["check", "status", "detail"],
          [[k, v, result.details.get(k, "")[:100]] for k, v in result.checks.items()])
    say(*result.bandwidth_table().splitlines())
    say(*(ln.rstrip("\n") for ln in proof_lines(result)))
    for name in result.failed:  # in full: the table cuts them
        if len(result.details.get(name, "")) > 100:
            say(f"{name}: {result.details[name]}")
    for c in causes:
        say(f"likely cause: {c['category']} ({c['confidence']:.2f}): {c['title']}", f"  fix: {c['fix']}")
    if exported:
        say(f"metrics: {exported.series} series"
                         + (f", written to {exported.written}" if exported.written else "")
                         + (f", pushed to {pushgateway}{exported.pushed}" if exported.pushed else ""))


def proof_lines(result: Any) -> list[str]:
    """What the run proved beyond the checks: the transport, busbw against its floor, /dev/shm,
    what the components initialised, and the warnings."""
    out = []
    t = result.transport or {}
    if t:
        out.append(f"transport: {t.get('summary')}"
                   + (f" (NCCL {t['nccl_version']}" + (f", net plugin {t['net_plugin']}" if t.get("net_plugin") else "")
                      + ")" if t.get("nccl_version") else "")
                   + (f"; declared fabric {t['declared_fabric']}" if t.get("declared_fabric") else "") + "\n")
    fl = result.floors or {}
    for r in fl.get("rows") or ():
        out.append(f"busbw {r['size']:>6}: {r['busbw_gbps']:.1f} GB/s = {r['percent']:.0f}% of the "
                   f"published {r['published_gbps']:g} GB/s ({'ok' if r['ok'] else 'BELOW'} the floor, "
                   f"{fl['fraction']:.0%})\n")
    if fl and not fl.get("rows"):
        out.append(f"busbw floor: {fl.get('why')}\n")
    shm = result.fact("shm") or {}
    if shm.get("needed_bytes") is not None and shm.get("free_bytes") is not None:
        out.append(f"/dev/shm: {shm['free_bytes'] / 2**20:.1f} MiB free, {shm['needed_bytes'] / 2**20:.1f} MiB "
                   f"needed ({'ok' if shm.get('ok') else 'too small'})\n")
    out += [component_line(name, c) + "\n" for name, c in (result.fact("components") or {}).items()]
    out += [f"warning: {w}\n" for w in result.warnings]
    return out


def component_line(name: str, c: dict) -> str:
    """What a component initialised in the smoke job: version, accelerator, ops, optimizer."""
    return (f"{name} {c.get('version')} ({c.get('accelerator')}): ops {', '.join(c.get('ops') or []) or 'none'}"
            + (f", optimizer {c['optimizer']}" if c.get("optimizer") else ""))


def print_build(d: dict) -> None:
    out = sys.stdout
    out.write(f"{d['target']}: {d.get('tag')}\n")
    for step, state in d["steps"].items():
        secs = d["seconds"].get(step)
        out.write(f"  {step:7} {state}{f' ({secs:.1f} s)' if secs else ''}\n")
    if d.get("image_id"):
        out.write(f"  image   {d['image_id'][:19]} {' '.join(d['local_tags'])}\n")
    for k in d.get("kept_tags") or ():  # a name another image holds: left to it (core.naming)
        out.write(f"  kept    {k['tag']} on {k['image_id'][:19]} ({k['why']})\n")
    s = d.get("smoke")
    if s:
        bw = max((b.get("busbw_gbps", 0) for b in s.get("bandwidth") or []
                  if b.get("collective", "all_reduce") == "all_reduce"), default=None)
        out.write(f"  smoke   world size {s['world_size']} ({s['backend']}), "
                  f"{sum(v == 'pass' for v in s['checks'].values())} checks passed"
                  + (f", failed: {', '.join(s['failed'])}" if s["failed"] else "")
                  + (f", busbw {bw:.2f} GB/s" if bw else "") + "\n")
    for p in d.get("pushed") or []:
        out.write(f"  pushed  {p['repository']}:{p['tag']} {p['digest']}\n")
    _print_sif(d.get("apptainer"))
    if d.get("signed"):
        sg = d["signed"]
        out.write(f"  signed  {sg['ref']} ({sg['signature']}; attestations: "
                  f"{', '.join(sg['attestations']) or 'none added'})\n")
    for c in d.get("causes") or []:
        out.write(f"  cause   {c['category']} ({c['confidence']:.2f}): {c['title']} -> {c['fix']}\n")


def _print_sif(a: dict | None) -> None:
    """build --runtime apptainer|both: the SIF, its steps and the smoke job in it."""
    if not a:
        return
    out = sys.stdout
    steps = ", ".join(f"{k} {v}" for k, v in a["steps"].items())
    if a.get("sif"):
        out.write(f"  sif     {a['sif']} ({(a.get('size_bytes') or 0) / 2**20:.0f} MiB, {a.get('sha256')})\n")
    out.write(f"  sif     {steps}\n")
    s = a.get("smoke")
    if s:
        out.write(f"  sif     smoke world size {s['world_size']} ({s['backend']}): {' '.join(s['command'])}\n")


def print_warnings(reports: list) -> None:
    for r in reports:
        for w in r.get("warnings", r.get("stack", {}).get("warnings", ())):
            warn(w | {"rule": f"{r['target']}: {w['rule']}"} if len(reports) > 1 else w)


def exit_for_failures(outcomes: list) -> None:
    """Report each failed target on stderr; exit with the first failure's code."""
    from envbuilder._safety import terminal_safe as safe_text

    failed = [o for o in outcomes if not o.ok]
    for o in failed:
        say(f"envbuilder: error: {safe_text(o.spec.name)}: {o.step} failed: "
                         f"{safe_text(str(o.error))}", err=True)
    if failed:
        raise typer.Exit(failed[0].error.exit_code if failed[0].error else EXIT_FAILED)


def print_lock(d: dict, check_: bool, named: bool) -> None:
    rep, n = d["lock"], len(d["lock"]["packages"])
    who = f"{d['name']}: " if named else ""
    if check_:
        line = f"ok: {rep['path']} matches its inputs ({n} packages, each pinned with hashes; checked offline)"
    elif rep["status"] == "unchanged":
        line = f"{rep['path']}: unchanged, its inputs match ({n} packages, {rep['digest']}); --upgrade resolves again"
    else:
        line = f"{rep['path']}: {n} packages, {rep['digest']}"
        if rep["changed"]:
            more = len(rep["changed"]) - 1
            line += f"\n  resolved again: {rep['changed'][0]}" + (f" (and {more} more)" if more else "")
    say(*(who + line).split("\n"))
    print_package_diff(rep.get("package_diff"), "since the lock was made" if check_ else "from the lock that was there")
    for extra in ("conda", "sbom"):
        if extra in d:
            v = d[extra]
            say(f"{extra}: {v if isinstance(v, str) else ', '.join(str(x) for k, x in v.items() if k.endswith(('path', 'file')))}")


def print_wheelhouse(d: dict) -> None:
    """envbuilder wheelhouse: what was downloaded, kept (or, with --check, is there)."""
    where = f"{d['out']} (Python {d['python']}, {d['platform']})"
    if d["checked"]:
        say(f"ok: {where} holds every file of {d['lock']} ({len(d['files'])}, hashes checked offline)")
    else:
        say(f"{where}: {d['downloaded']} downloaded, {d['kept']} kept, every hash the lock's")


def print_package_diff(d: Optional[dict], when: str) -> None:
    """The package diff of lock --upgrade / --check (lock.pkgdiff), one line per change."""
    if not d or not (d["added"] or d["removed"] or d["changed"]):
        return
    lines = [f"+ {n} {v}" for n, v in d["added"].items()] + [f"- {n} {v}" for n, v in d["removed"].items()]
    lines += [f"~ {n} {c['from']} -> {c['to']}" for n, c in d["changed"].items()]
    say(f"packages {when}: {len(d['added'])} added, {len(d['removed'])} removed, {len(d['changed'])} changed")

    for ln in sorted(lines, key=lambda s: s.split()[1]):
        say(f"  {ln}")


# -- readable metavars ---------------------------------------------------------------------
# typer shows Python types (<str>, <list[str]>, <int range>) where a value goes; the help shows
# what to write instead. By parameter name first, then by type; a parameter with its own
# metavar keeps it. tests/test_cli.py scans every command's --help for Python types.
_METAVARS = {
    "target": "TARGET", "logs": "LOG", "axis": "AXIS",
    "image": "IMAGE", "base_image": "IMAGE", "push": "REPO", "registry": "REPO",
    "tag": "NAME[:TAG]", "label": "KEY=VALUE", "layout": "N,N,...",
    "torch": "VERSION", "python": "VERSION", **{c: "VERSION" for c in COMPONENTS},
    "nccl": "VERSION", "driver": "VERSION", "cuda": "VERSION", "os_": "OS",
    "with_": "NAME,...", "without": "NAME,...", "only": "TEXT", "conda_channel": "CHANNEL",
    "pip_index_url": "URL", "extra_index_url": "URL", "pushgateway": "URL", "pypi": "URL",
    "torch_index": "URL", "http_proxy": "URL", "https_proxy": "URL", "no_proxy": "HOSTS",
    "out": "DIR", "wheelhouse": "DIR", "context": "DIR", "records": "PATH",
    "backend": "auto|nccl|gloo", "fmt": "docker|apptainer|both", "shm_size": "SIZE",
    "min_busbw": "GB/S", "timeout": "SECONDS", "smoke_timeout": "SECONDS",
}
_METAVAR_BY_TYPE = {str: "TEXT", int: "N", float: "NUMBER", Path: "FILE"}


def readable_metavars(group: typer.Typer) -> None:
    from typing import get_args

    from typer.models import ArgumentInfo, OptionInfo
    from typer.utils import get_params_from_function

    for info in group.registered_commands:
        if info.callback is None:
            continue
        declared = inspect.signature(info.callback).parameters  # the objects typer will copy
        for name, p in get_params_from_function(info.callback).items():  # resolved annotations
            d = declared[name].default
            if not isinstance(d, (OptionInfo, ArgumentInfo)) or d.metavar is not None:
                continue
            ann = p.annotation
            while get_args(ann):  # Optional[X], List[X] -> X
                ann = next(a for a in get_args(ann) if a is not type(None))
            if ann is bool:
                continue
            d.metavar = _METAVARS.get(name) or _METAVAR_BY_TYPE.get(ann, "TEXT")
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            readable_metavars(sub.typer_instance)



def argument_types_off() -> None:
    """typer prints an argument as ``TARGET <str>`` even with a metavar: the metavar alone.
    And an argument that takes many values reads ``[LOG]...`` in the usage line, with a
    metavar too (typer 0.28 drops the dots when a metavar is given)."""
    from typer import core

    TyperArgument: Any = core.TyperArgument  # its methods differ between typer releases
    shown = getattr(TyperArgument, "display_type_rich", None)
    if shown is not None:  # a typer with per-argument types (0.29)

        def display_type_rich(self: Any, ctx: Any) -> Any:
            return None if self.metavar else shown(self, ctx)

        TyperArgument.display_type_rich = display_type_rich
    make = TyperArgument.__dict__.get("make_metavar")
    if make is not None:  # typer's own usage line (up to 0.28)

        def make_metavar(self: Any, ctx: Any, **kw: Any) -> str:
            var: str = make(self, ctx, **kw)
            return var + "..." if kw.get("usage") and self.nargs != 1 and not var.endswith("...") else var

        TyperArgument.make_metavar = make_metavar


def _show_completion(argv: list[str]) -> int | None:
    """``--show-completion [SHELL]`` and ``--install-completion [SHELL]``: typer takes it as a flag and detects the shell from the
    parent processes, so ``--show-completion bash`` ignored ``bash`` and, with no shell among
    the parents (CI, a script), failed with "Shell  not supported" (exit 1). The shell named is
    used; an unknown or undetectable one is one line, exit 2. None: not this option."""
    if not argv or argv[0] not in ("--show-completion", "--install-completion") or len(argv) > 2:
        return None
    from typer._completion_shared import Shells, _get_shell_name, get_completion_script, install

    opt = argv[0]
    known = [sh.value for sh in Shells.__members__.values()]
    shell = argv[1] if len(argv) == 2 else (_get_shell_name() or "")
    if shell not in known:
        from envbuilder._safety import terminal_safe

        what = (f"shell {terminal_safe(shell[:40])!r} is not supported" if shell
                else "cannot tell which shell runs envbuilder")
        say(f"envbuilder: error: {opt}: {what}: name one of "
                         f"{', '.join(known)}, e.g. envbuilder {opt} bash", err=True)
        return 2
    if opt == "--install-completion":  # the shell named, not the one typer would detect
        shell, path = install(shell=shell, prog_name="envbuilder", complete_var="_ENVBUILDER_COMPLETE")
        say(f"{shell} completion installed in {path}",
                "Completion will take effect once you restart the terminal")
        return 0
    say(*get_completion_script(prog_name="envbuilder", complete_var="_ENVBUILDER_COMPLETE",
                               shell=shell).splitlines())
    return 0


def _only_the_invoked(app: typer.Typer, argv: list[str]) -> typer.Typer:
    """``app`` with only the command ``argv`` names: typer builds every command's parameters
    before it parses anything (a tenth of a short command's CPU). The whole app when ``argv``
    names no command of its own (no argument, an option, a group such as ``matrix``, a word
    that is no command: click's help and messages then list every command)."""
    if not argv or argv[0].startswith("-") or app.registered_callback is None:
        return app  # (without a callback, typer would make a lone command the app itself)
    import copy

    from typer.main import get_command_name

    for info in app.registered_commands:
        name = info.name or (get_command_name(info.callback.__name__) if info.callback else None)
        if name == argv[0]:
            one = copy.copy(app)
            one.registered_commands = [info]
            one.registered_groups = []
            return one
    return app


def run_app(app: typer.Typer) -> None:
    """Run the CLI; usage errors (unknown option, missing argument) become one line, exit 2."""
    try:
        from typer._click.exceptions import NoArgsIsHelpError, UsageError
    except ImportError:  # pragma: no cover - typer before it vendored click
        from click.exceptions import UsageError  # type: ignore[assignment]

        NoArgsIsHelpError = ()  # type: ignore[assignment,misc]
    import typer.main

    from envbuilder import _safety

    _safety.install_early()  # a no-op under envbuilder._entry, which did it before any import
    _safety.guard_rich()
    shown = _show_completion(sys.argv[1:])
    if shown is not None:
        sys.exit(shown)
    try:  # building the command is inside: Ctrl-C there is "interrupted" too, not a traceback
        rv = typer.main.get_command(_only_the_invoked(app, sys.argv[1:])).main(
            prog_name="envbuilder", standalone_mode=False)
    except KeyboardInterrupt as e:  # outside a command (while parsing)
        say("envbuilder: interrupted", err=True)
        rv = _safety.interrupted_exit_code(e)

    except OSError as e:
        if not _safety.is_broken_pipe(e):
            raise
        rv = _safety.stdout_gone()
    except SystemExit:  # click's own EPIPE handling exits 1: a closed pipe is 141 here
        if not _safety.click_saw_broken_pipe():
            raise
        rv = _safety.stdout_gone()
    except NoArgsIsHelpError as e:  # type: ignore[misc]
        say(*e.ctx.get_help().splitlines())
        rv = 0
    except UsageError as e:
        where = e.ctx.command_path if e.ctx else "envbuilder"
        msg = " ".join(e.format_message().split())
        if "--json" in sys.argv[1:]:
            echo_json({"error": "UsageError", "message": msg, "details": [], "exit_code": 2})
        say(f"envbuilder: error: {msg} (see: {where} --help)", err=True)
        rv = 2
    except typer.Abort:
        say("envbuilder: interrupted", err=True)
        rv = EXIT_FAILED
    plain.finish(rv)
