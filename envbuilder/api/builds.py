"""build: the build's options checked before any work, the builds run, their summary."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder.errors import InputError
from envbuilder.core.spec import TargetSpec

from envbuilder.api.parts import Published, PublishedSmoke
from envbuilder.api.results import BuildSummary
from envbuilder.api.specs import make_spec

if TYPE_CHECKING:
    from envbuilder.run.metrics import MetricsTarget
    from envbuilder.run.sign import SignOptions
    from docker import DockerClient

    from envbuilder.run.build import BuildOptions, BuildReport, Prepared


def build(specs: Sequence[TargetSpec | Prepared], opts: BuildOptions, *, jobs: int = 1,
          matrix_dir: str | Path | None = None, client: DockerClient | None = None,
          on_event: Callable[[str, str, Any], None] | None = None) -> list[BuildReport]:
    """Build, verify, smoke-test and (with opts.push) push every spec (or target ``preflight``
    prepared), at most ``jobs`` at once; keep going past failures; one report per target
    (run.build)."""
    from envbuilder.run import build as b

    return b.build_many(specs, opts, jobs=jobs, matrix_dir=matrix_dir, client=client,
                        on_event=on_event)


def preflight(specs: Sequence[TargetSpec], *, matrix_dir: str | Path | None = None) -> list[Prepared]:
    """Bad input or a refused combination, before any build starts: one line, exit 2 or 3
    (for one TARGET; a set reports each target's failure and goes on). The targets come back
    resolved, for ``build`` (run.build.prepare: nothing is resolved twice)."""
    from envbuilder.run.build import prepare

    return [prepare(s, matrix_dir=matrix_dir) for s in specs]


def build_target(spec: TargetSpec | str, opts: BuildOptions, **kw: Any) -> BuildReport:
    """Render, build, smoke-test and (with opts.push) push one target (run.build)."""
    from envbuilder.run import build as b

    return b.build_target(spec if isinstance(spec, TargetSpec) else make_spec(spec), opts, **kw)


def build_options(*, lock: str | Path | None = None, lock_legacy: str | Path | None = None,
                  fmt: str = "docker", metrics_file: str | Path | None = None,
                  pushgateway: str | None = None, several: bool = False,
                  proxies: Mapping[str, str | None] | None = None, **kw: Any) -> BuildOptions:
    """The build's own options (run.build.BuildOptions), checked before any work: bad input is
    one line (exit 2) before any progress display starts."""
    from envbuilder.run.build import BuildOptions

    if several and kw.get("sif") is not None:
        raise InputError("--sif names one SIF: name one TARGET (without it each goes to ./<tag>.sif)")
    if lock_legacy is not None:  # the old `build --lock PATH`: --lock is render's flag
        if lock is not None:
            raise InputError("give the lock once: --lock-file PATH (--lock PATH is its old name)")
        lock = lock_legacy
    if several and (metrics_file is not None or kw.get("context") is not None):
        raise InputError("--metrics-file and --context hold one build: name one TARGET (with "
                         "several, use --pushgateway: one group per target)")
    if kw.pop("publish", False):  # --publish: the image's own REGISTRY/REPOSITORY (core.naming)
        if kw.get("push"):
            raise InputError("--publish pushes to the image's own REGISTRY/REPOSITORY: drop --push REPO, or --publish")
        from envbuilder.run.build import PUSH_OWN

        kw["push"] = PUSH_OWN
    sign, key, keyless = kw.pop("sign", False), kw.pop("key", None), kw.pop("keyless", False)
    opts = BuildOptions(lock=Path(lock) if lock is not None else None, runtime=fmt,
                        proxies={k: v for k, v in (proxies or {}).items() if v},
                        metrics=metrics_target(metrics_file, pushgateway),
                        sign=sign_options(key, keyless) if sign else None, **kw)
    return opts  # checked when made (BuildOptions.__post_init__)


def sign_options(key: str | None, keyless: bool = False) -> SignOptions:
    """build --sign's key (--key, else ENVBUILDER_COSIGN_KEY / COSIGN_KEY) or --keyless
    (run.sign.SignOptions), checked before any work (exit 2)."""
    from envbuilder.run.sign import SignOptions

    return SignOptions.from_cli(key, keyless)


def metrics_target(metrics_file: str | Path | None, pushgateway: str | None) -> MetricsTarget:
    """Where a build's smoke result goes as Prometheus metrics (checked before any work)."""
    from envbuilder.run.metrics import check_target

    return check_target(metrics_file, pushgateway)


def build_summary(reports: Sequence[BuildReport], *, single: bool,
                  fmt: str = "docker", project: Path | None = None) -> BuildSummary:
    """What build prints and writes with --report (``to_dict()``): one target's report, or
    for several each report and the manifest of everything published (what a registry now
    serves, and why). ``project``: the project file the specs came from (TargetSpec.project),
    if any."""
    if single:
        (r,) = reports
        return BuildSummary(ok=bool(r.ok), builds=(r,), single=True)
    published = tuple(
        Published(target=r.target, tag=r.tag, digest=r.pushed[0]["digest"] if r.pushed else None,
                  tags=tuple(p["tag"] for p in r.pushed),
                  smoke=None if r.smoke is None else PublishedSmoke(r.smoke["ok"], r.smoke["world_size"]))
        for r in reports if r.pushed)
    return BuildSummary(ok=all(r.ok for r in reports), builds=tuple(reports), published=published,
                        project=str(project) if project else None)


def write_report(path: str | Path, data: Mapping[str, Any]) -> None:
    """A JSON report written atomically (build --report)."""
    import json

    from envbuilder.render.templating import write_file_atomic

    write_file_atomic(Path(path), json.dumps(data, indent=2, default=str) + "\n", step="report",
                      option="--report")
