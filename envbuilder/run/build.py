"""envbuilder build: render, build with a real Docker engine, smoke-test, push by digest.

``build_target`` runs the steps in order and returns a ``BuildReport`` that says what was and
was not done. A failing step raises ``BuildFailed`` (an OperationError, exit 1) carrying the
report, so the CLI can print it and nothing is recorded for a step that did not complete: a
push appears in the report only when the registry confirmed its digest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from envbuilder import SMOKE_TIMEOUT
from envbuilder import labels as image_labels
from envbuilder.core import validate
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.assemble import folder_files
from envbuilder.core.resolve import Stack, resolve_target
from envbuilder.core.spec import TargetSpec
from envbuilder.diagnose.explain import explain_lines
from envbuilder.errors import EnvbuilderError, InputError, OperationError
from envbuilder.lock.requirements import lock_digest
from envbuilder.render.plan import BuildPlan
from envbuilder.render.templating import write_tree
from envbuilder.run import engine
from envbuilder.run import wheelhouse as wh
from envbuilder.run.smoke import SmokeResult, run_smoke_container

if TYPE_CHECKING:
    from docker import DockerClient

if TYPE_CHECKING:  # pragma: no cover
    from envbuilder.run.metrics import MetricsTarget

STEPS = ("render", "build", "verify", "smoke", "push")


@dataclass(frozen=True)
class BuildOptions:
    """How to build, test and publish (what a target's spec does not say): frozen, copied with
    dataclasses.replace, never through asdict."""

    verify: bool = True  # check the image against its labels before the smoke job
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    proxies: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()  # --tag: NAME[:TAG] (a local name) or a bare TAG (envbuilder:TAG)
    push: str | None = None
    smoke: bool = True
    backend: str = "auto"
    smoke_timeout: int = SMOKE_TIMEOUT
    shm_size: str = "2g"
    context: Path | None = None  # keep the build context here (default: a temp folder)
    nocache: bool = False
    lock: Path | None = None  # a requirements.lock: install with --require-hashes
    alias: bool = True  # push the moving alias (the target name, e.g. cu121) after the smoke passed
    metrics: MetricsTarget | None = None  # write/push the smoke result as Prometheus metrics

    def validate(self) -> None:
        if self.backend not in ("auto", "nccl", "gloo"):
            raise InputError(f"--backend {self.backend!r} is not one of auto, nccl, gloo")
        if self.push:
            validate.repository(self.push, "--push")
        for t in self.tags:
            validate.tag_ref(t, "--tag")
        for k, v in self.proxies.items():
            if any(c in v for c in "\n\r\"'`$ "):
                raise InputError(f"--{k.lower().replace('_', '-')} {v!r} is not a proxy URL")
        if self.ca_cert is not None:
            _read_ca(self.ca_cert)
        if self.wheelhouse is not None and not Path(self.wheelhouse).is_dir():
            raise InputError(f"--wheelhouse {self.wheelhouse} is not a folder of wheels")


def validate_spec(spec: TargetSpec) -> None:
    """The spec's build inputs, before any work (exit 2 naming the option)."""
    if spec.base_image:
        validate.image_ref(spec.base_image, "--base-image")
    if spec.builder_image:
        validate.image_ref(spec.builder_image, "--builder-image")
    if spec.pip_index_url:
        validate.url(spec.pip_index_url, "--pip-index-url")
    for u in spec.extra_index_urls:
        validate.url(u, "--extra-index-url")
    if spec.nproc is not None and spec.nproc < 1:
        raise InputError(f"--nproc {spec.nproc} must be at least 1")


@dataclass
class BuildReport:
    target: str
    tag: str | None = None
    image_id: str | None = None
    local_tags: list[str] = field(default_factory=list)
    context: str | None = None
    steps: dict[str, str] = field(default_factory=lambda: {s: "not run" for s in STEPS})
    seconds: dict[str, float] = field(default_factory=dict)
    cached_steps: int = 0
    total_steps: int = 0
    smoke: dict | None = None
    verify: dict | None = None
    size_bytes: int | None = None
    causes: list[dict] = field(default_factory=list)
    pushed: list[dict] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    error: str | None = None
    failed_step: str | None = None
    exit_code: int = 0  # the failure's (1 an operation failed, 2 bad input, 3 refused)
    # the error itself, for one TARGET's caller (not in the report's data)
    cause: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        d = asdict(replace(self, cause=None))
        d.pop("cause")
        d["ok"] = self.ok
        return d


class BuildFailed(OperationError):
    def __init__(self, report: BuildReport, err: OperationError) -> None:
        super().__init__(f"{report.target}: {err.step or 'build'} failed: {err}", step=err.step,
                         details=err.details)
        self.report = report

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["report"] = self.report.to_dict()
        return d


def _read_ca(path: Path) -> bytes:
    from envbuilder.core.readfile import read_bytes_capped

    data = read_bytes_capped(path, "--ca-cert", limit=4 << 20)
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise InputError(f"--ca-cert {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return data


def _proxy_args(opts: BuildOptions) -> dict[str, str]:
    out = {}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        v = opts.proxies.get(k) or os.environ.get(k) or os.environ.get(k.lower())
        if v:
            out[k] = v
            out[k.lower()] = v
    return out


def prepare_context(spec: TargetSpec, stack: Stack, opts: BuildOptions,
                    dest: Path) -> tuple[Path, BuildPlan]:
    """Write ``spec``'s build folder into ``dest`` through the one assembly path
    (envbuilder.assemble: the same files ``render`` writes), plus what a build brings itself:
    the wheelhouse's wheels and the extra CA bundle."""
    lock_text = None
    if opts.lock is not None:
        from envbuilder.core.readfile import read_text_capped

        lock_text = read_text_capped(opts.lock, "--lock-file", limit=64 << 20)
    plan, files = folder_files(spec, stack, lock_text=lock_text, lock_source=str(opts.lock),
                               wheelhouse=opts.wheelhouse is not None)
    split = None
    if opts.wheelhouse is not None and lock_text is not None:
        # a locked build: each layer's wheels are exactly its pins (installed --no-deps)
        from envbuilder.lock.requirements import layer_pins

        pins = layer_pins(plan, files)
        split = wh.split(Path(opts.wheelhouse), pins, stack.python,
                         required=[r for rs in pins.values() for r in rs], deps=False)
    elif opts.wheelhouse is not None:
        layers = {la.name: [*la.requirements, *la.build_requirements]
                  for la in plan.layers}
        split = wh.split(Path(opts.wheelhouse), layers, stack.python,
                         required=[r for la in plan.layers for r in la.requirements])
    ca = _read_ca(opts.ca_cert) if opts.ca_cert else None

    def extra(tmp: Path) -> None:
        if split is not None:
            wh.copy_into(split, tmp)
        if ca is not None:
            (tmp / "ca-certificates" / "envbuilder-extra-ca.crt").write_bytes(ca)

    write_tree(dest, files, extra=extra)
    return dest, plan


def build_target(spec: TargetSpec, opts: BuildOptions, *, matrix_dir: str | Path | None = None,
                 client: DockerClient | None = None,
                 on_event: Callable[[str, Any], None] | None = None,
                 matrix: Matrix | None = None) -> BuildReport:
    """Render, build, smoke-test and (with opts.push) push one target."""
    opts.validate()
    validate_spec(spec)
    target = spec.name
    m = matrix or load_matrix(matrix_dir, spec.matrix_overlay)
    stack = resolve_target(spec.target, m, spec.pins)
    report = BuildReport(target=target, tag=stack.tag)
    emit = on_event or (lambda kind, data: None)
    tmp_root: Path | None = None
    step = "render"
    try:
        t0 = time.monotonic()
        if opts.context is not None:
            ctx_dir = Path(opts.context)
        else:
            tmp_root = Path(tempfile.mkdtemp(prefix="envbuilder-build-"))
            ctx_dir = tmp_root / "context"
        _, plan = prepare_context(spec, stack, opts, ctx_dir)
        report.context = str(ctx_dir)
        report.steps["render"] = "ok"
        report.seconds["render"] = round(time.monotonic() - t0, 3)
        emit("step", ("render", "ok"))

        step = "build"
        if client is None:
            client = engine.connect()
        if stack.compiles and stack.builder is not None and stack.builder.image_kind == "devel":
            _require_builder(client, plan.builder_image, stack)
        base = spec.base_image or stack.runtime_image
        labels = image_labels.build_labels(
            base_digest=_base_digest(client, base),
            lock_digest=lock_digest(opts.lock) if opts.lock is not None else None)
        t0 = time.monotonic()
        res = engine.build(client, ctx_dir, tag=f"envbuilder:{stack.tag}", nocache=opts.nocache,
                           # index credentials travel as build arguments, in no file
                           buildargs={**_proxy_args(opts), **plan.index_build_args},
                           labels=labels,
                           on_step=lambda i, n, text: emit("build-step", (i, n, text)),
                           on_line=lambda ln: emit("build-line", ln))
        report.image_id = res.image_id
        report.local_tags = [f"envbuilder:{stack.tag}"]
        for name, t in (validate.tag_ref(v, "--tag") for v in opts.tags):
            report.local_tags.append(engine.tag(client, res.image_id, name or "envbuilder", t))
        report.cached_steps, report.total_steps = res.cached_steps, res.steps
        report.labels = engine.image_labels(client, res.image_id)
        report.size_bytes = engine.image_size(client, res.image_id)
        report.steps["build"] = "ok"
        report.seconds["build"] = round(time.monotonic() - t0, 3)
        emit("step", ("build", "ok"))

        step = "verify"
        if opts.verify:
            from envbuilder.run.verify import verify_image_labels

            t0 = time.monotonic()
            emit("step", ("verify", "running"))
            vr = verify_image_labels(client, res.image_id, report.labels,
                                     {n: o.module for n, o in m.toolchains.deepspeed_ops.items() if o.module})
            report.verify = vr.to_dict()
            report.seconds["verify"] = round(time.monotonic() - t0, 3)
            if not vr.ok:
                report.steps["verify"] = "failed"
                raise OperationError(f"{stack.tag} is not what its labels say: {vr.summary()}",
                                     step="verify")
            report.steps["verify"] = "ok"
            emit("step", ("verify", "ok"))
        else:
            report.steps["verify"] = "skipped"

        step = "smoke"
        smoke_passed = False
        if opts.smoke:
            t0 = time.monotonic()
            emit("step", ("smoke", "running"))
            result = run_smoke_container(client, res.image_id, nproc=plan.smoke_nproc,
                                         backend=opts.backend, timeout=opts.smoke_timeout,
                                         shm_size=opts.shm_size)
            report.seconds["smoke"] = round(time.monotonic() - t0, 3)
            report.smoke = _smoke_summary(result)
            if opts.metrics is not None:  # before the verdict: a failed run is a metric too
                from envbuilder.run.metrics import export_run

                exported = export_run(result, opts.metrics, image=f"envbuilder:{stack.tag}",
                                      client=client, target=target)
                report.smoke["metrics"] = exported.to_dict() if exported else None
            if not result.ok:
                report.steps["smoke"] = "failed"
                report.causes = explain_log(result.log, details=result.details)
                raise OperationError(
                    f"the smoke job failed in {stack.tag}: {', '.join(result.failed) or 'unknown check'}"
                    + (f" ({result.details.get(result.failed[0], '')[:200]})" if result.failed and result.details.get(result.failed[0]) else ""),
                    step="smoke")
            report.steps["smoke"] = "ok"
            smoke_passed = True
            emit("step", ("smoke", "ok"))
        else:
            report.steps["smoke"] = "skipped"

        step = "push"
        if opts.push:
            t0 = time.monotonic()
            # the tag part of every --tag goes to the --push repository too
            tags = [stack.tag, *(validate.tag_ref(v, "--tag")[1] for v in opts.tags)]
            if opts.alias and smoke_passed:
                # the moving alias is the target's own name (cu121, cu121-ds, cpu): it follows
                # the matrix to new releases, and moves only after the smoke job passed
                tags.append(validate.tag(target, "target (as alias tag)"))
            for t in dict.fromkeys(tags):
                engine.tag(client, res.image_id, opts.push, t)
                emit("step", ("push", f"{opts.push}:{t}"))
                digest = engine.push(client, opts.push, t)
                if not engine.verify_pushed(client, opts.push, digest):
                    raise OperationError(f"the registry did not confirm {opts.push}@{digest} after "
                                         f"the push; nothing was recorded as published", step="push")
                report.pushed.append({"repository": opts.push, "tag": t, "digest": digest,
                                      "ref": f"{opts.push}@{digest}"})
            report.steps["push"] = "ok"
            report.seconds["push"] = round(time.monotonic() - t0, 3)
        else:
            report.steps["push"] = "skipped"
        return report
    except OperationError as e:
        report.steps[step] = "failed"
        report.error = str(e)
        report.failed_step = step
        if step == "push":
            report.pushed = []  # a partial push is not a publication
        raise BuildFailed(report, e) from None
    except KeyboardInterrupt:
        report.steps[step] = "interrupted"
        report.error = f"interrupted during {step}"
        report.failed_step = step
        if step == "push":
            report.pushed = []
        raise BuildFailed(report, OperationError(
            f"interrupted during {step}; nothing was recorded for it — run the build again",
            step=step)) from None
    finally:
        if tmp_root is not None:
            shutil.rmtree(tmp_root, ignore_errors=True)


def _require_builder(client: DockerClient, image: str, stack: Stack) -> None:
    """A compiling build needs its devel builder: refuse before building when it is missing."""
    if engine.image_available(client, image):
        return
    what = " and ".join(x for x in (f"Horovod {stack.horovod.version}" if stack.horovod else "",
                                    f"DeepSpeed ops {','.join(stack.ds_ops)}" if stack.ds_ops else "") if x)
    raise InputError(f"the builder image {image} (CUDA {stack.cuda} devel, to compile {what}) is not "
                     f"available to this engine and cannot be pulled: pass --builder-image with a "
                     f"CUDA {stack.cuda} devel image of {stack.os.name}, or use --flavour os on an OS "
                     f"whose archive has nvcc")


def _base_digest(client: DockerClient, base: str) -> str:
    try:
        return engine.image_digest_ref(client, base)
    except OperationError:
        return base  # not local yet: the engine pulls it during the build


def _smoke_summary(result: SmokeResult) -> dict[str, Any]:
    return {"ok": result.ok, "world_size": result.world_size, "nproc_per_node": result.nproc_per_node,
            "nnodes": result.nnodes, "backend": result.backend, "checks": result.checks,
            "failed": result.failed, "details": result.details, "bandwidth": result.bandwidth,
            "seconds": round(result.seconds, 3), "exit_code": result.exit_code}


def explain_log(log: str, top: int = 3, details: dict | None = None) -> list[dict]:
    """The likely causes of a failed smoke job, from its log and the failed checks' details
    (what each rank recorded), through envbuilder explain."""
    try:
        lines = log.splitlines() + [f"{k}: {v}" for k, v in (details or {}).items()]
        causes = explain_lines(lines, name="smoke-log")
    except Exception:
        return []
    return [c.to_dict() for c in causes[:top]]


def build_many(specs: Sequence[TargetSpec], opts: BuildOptions, *, jobs: int = 1,
               matrix_dir: str | Path | None = None,
               client: DockerClient | None = None,
               on_event: Callable[[str, str, Any], None] | None = None) -> list[BuildReport]:
    """Build several targets, at most ``jobs`` at once; keep going past failures. Each build
    gets its own context folder (``opts`` is frozen: copied with replace, never asdict); a
    target that fails before its build started reports the step it failed in, with its own
    message."""
    from concurrent.futures import ThreadPoolExecutor

    per = replace(opts, context=None)

    def one(s: TargetSpec) -> BuildReport:
        try:
            return build_target(s, per, matrix_dir=matrix_dir, client=client,
                                on_event=(lambda k, d: on_event(s.name, k, d)) if on_event else None)
        except BuildFailed as e:
            e.report.exit_code, e.report.cause = e.exit_code, e
            return e.report
        except EnvbuilderError as e:  # refused or bad input, before or while building
            r = BuildReport(target=s.name, exit_code=e.exit_code, cause=e)
            r.error, r.failed_step = str(e), getattr(e, "step", None) or "render"
            r.steps[r.failed_step] = "failed"
            return r

    if jobs <= 1 or len(specs) <= 1:  # in this thread: Ctrl-C reaches the step that runs
        return [one(s) for s in specs]
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, specs))
