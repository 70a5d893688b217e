"""envbuilder build: render, build with a real Docker engine, smoke-test, push by digest.

A build is a list of steps (``BUILD_STEPS``: render, build, verify, smoke, apptainer, push,
sign), each a function of one ``_Build`` (the prepared target, the frozen options, what the
steps before it made). ``_run_steps`` writes the bookkeeping once: whether a step runs or is
skipped, its time, its report entry, its progress events, and the wrapping of its failure.
``build_target`` returns a ``BuildReport`` that says what was and was not done. A failing step
raises ``BuildFailed`` (an OperationError, exit 1) carrying the report, so the CLI can print it
and nothing is recorded for a step that did not complete: a push appears in the report only
when the registry confirmed its digest.

The options are checked once, when a ``BuildOptions`` is made (the CA bundle read then, once);
a target is checked and resolved once, by ``prepare`` (the CLI's preflight), and the
``Prepared`` target it returns is what the build steps use.
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
from envbuilder.core.builder import compiled_parts
from envbuilder.core.matrix import Matrix, load_matrix
from envbuilder.assemble import as_built, folder_files, image_names, image_tag
from envbuilder.core.naming import PROJECT_LABEL, ImageNames
from envbuilder.core.resolve import Stack
from envbuilder.core.spec import TargetSpec
from envbuilder.diagnose.explain import Cause, explain_lines
from envbuilder.errors import EnvbuilderError, InputError, OperationError
from envbuilder.lock.requirements import lock_digest
from envbuilder.render.plan import BuildPlan
from envbuilder.render.templating import write_tree
from envbuilder.run import engine
from envbuilder.run import wheelhouse as wh
from envbuilder.run.smoke import SmokeResult, judge, run_smoke_container

if TYPE_CHECKING:
    from docker import DockerClient

if TYPE_CHECKING:  # pragma: no cover
    from envbuilder.run.metrics import MetricsTarget
    from envbuilder.run.sign import SignOptions

STEPS = ("render", "build", "verify", "smoke", "push")
BUILDERS = ("auto", "buildkit", "legacy")
PUSH_OWN = "-"  # build --publish: the image's own REGISTRY/REPOSITORY (core.naming)


@dataclass(frozen=True)
class BuildOptions:
    """How to build, test and publish (what a target's spec does not say): frozen, copied with
    dataclasses.replace, never through asdict."""

    verify: bool = True  # check the image against its labels before the smoke job
    ca_cert: Path | None = None
    wheelhouse: Path | None = None
    proxies: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()  # --tag: NAME[:TAG] (a local name) or a bare TAG (the image's repository)
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
    # --runtime: docker (the image), apptainer (a SIF from envbuilder.def), or both (issue 28)
    runtime: str = "docker"
    sif: Path | None = None  # where the SIF goes (default ./<tag>.sif)
    apptainer: str | None = None  # the apptainer command (default $ENVBUILDER_APPTAINER, PATH)
    sign: SignOptions | None = None  # --sign: sign and attest the pushed digest (run.sign)
    # --builder: auto (BuildKit when the engine builds reproducibly, else the legacy builder,
    # saying why), buildkit (refuse otherwise), legacy (the engine's legacy builder)
    builder: str = "auto"
    # --no-reproducible: a BuildKit build without rewritten timestamps (the image straight into
    # the engine: about a third of the disk and minutes less for a CUDA image of several GB);
    # the report and provenance then say reproducible: false
    reproducible: bool = True
    # what a rebuild (run.rebuild) takes from the image's provenance instead of making it: the
    # date, the images by digest as build arguments, the labels the engine added
    source_date_epoch: int | None = None
    image_args: Mapping[str, str] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)

    # what checking the options found, kept so no step reads or looks up again
    ca_pem: bytes | None = field(default=None, init=False, repr=False, compare=False)  # ca_cert's bytes
    apptainer_argv: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        """Checked once, when made (as torchrun's LaunchConfig): a BuildOptions that exists is
        valid; bad input is one line (exit 2) naming the option, before any work. The CA
        bundle is read here, once (``ca_pem``), and the apptainer command found once."""
        if self.backend not in ("auto", "nccl", "gloo"):
            raise InputError(f"--backend {self.backend!r} is not one of auto, nccl, gloo")
        if self.builder not in BUILDERS:
            raise InputError(f"--builder {self.builder!r} is not one of {', '.join(BUILDERS)}")
        if self.push and self.push != PUSH_OWN:
            validate.repository(self.push, "--push")
        for t in self.tags:
            validate.tag_ref(t, "--tag")
        for k, v in self.proxies.items():
            if any(c in v for c in "\n\r\"'`$ "):
                raise InputError(f"--{k.lower().replace('_', '-')} {v!r} is not a proxy URL")
        if self.ca_cert is not None:
            object.__setattr__(self, "ca_pem", _read_ca(self.ca_cert))
        if self.wheelhouse is not None and not Path(self.wheelhouse).is_dir():
            raise InputError(f"--wheelhouse {self.wheelhouse} is not a folder of wheels")
        if self.sign is not None:
            _validate_sign(self)
        self._validate_runtime()

    def _validate_runtime(self) -> None:
        if self.runtime not in ("docker", "apptainer", "both"):
            raise InputError(f"--runtime {self.runtime!r} is not one of docker, apptainer, both")
        if self.runtime == "apptainer" and self.push:
            raise InputError("--push publishes the Docker image: use --runtime docker or both with it")
        if self.runtime != "docker":
            from envbuilder.run.apptainer import apptainer_command

            object.__setattr__(self, "apptainer_argv", tuple(apptainer_command(self.apptainer)))


@dataclass
class BuildReport:
    target: str
    tag: str | None = None
    image_id: str | None = None
    local_tags: list[str] = field(default_factory=list)
    # names the build left on other images (the generic stack tag another project or a CI holds)
    kept_tags: list[dict] = field(default_factory=list)
    context: str | None = None
    steps: dict[str, str] = field(default_factory=lambda: {s: "not run" for s in STEPS})
    seconds: dict[str, float] = field(default_factory=dict)
    cached_steps: int = 0
    total_steps: int = 0
    # the untagged images of the build's earlier stages (builder, layers): the engine's cache
    # for the next build; docker rmi them to take their disk back
    stage_images: list[str] = field(default_factory=list)
    smoke: dict | None = None
    verify: dict | None = None
    size_bytes: int | None = None
    causes: list[dict] = field(default_factory=list)
    pushed: list[dict] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    apptainer: dict | None = None  # --runtime apptainer|both: the SIF, its verify and smoke
    signed: dict | None = None  # --sign: the signed ref and its attestations (run.sign)
    # reproducibility (run.buildkit): the builder, whether two builds of these inputs make
    # these bits and why (not), the date of every file, the manifest digest built
    builder: str | None = None  # "buildkit" | "legacy"
    reproducible: bool | None = None
    reproducible_why: str = ""
    source_date_epoch: int | None = None
    digest: str | None = None  # the manifest digest BuildKit made: the one a push sends
    # --wheelhouse: its folder, and whether its files had to be copied into the build folder
    # (another file system) instead of hard-linked
    wheelhouse: dict | None = None
    error: str | None = None
    failed_step: str | None = None
    exit_code: int = 0  # the failure's (1 an operation failed, 2 bad input, 3 refused)
    # the error itself, for one TARGET's caller (not in the report's data)
    cause: EnvbuilderError | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict:
        d = asdict(replace(self, cause=None))
        d.pop("cause")
        if d["signed"] is None:  # only a --sign build reports it
            d.pop("signed")
        if d["wheelhouse"] is None:  # only a --wheelhouse build reports it
            d.pop("wheelhouse")
        d["ok"] = self.ok
        return d


class BuildFailed(OperationError):
    """A step of one target's build failed (exit 1): ``report`` says what was and was not
    done, ``step`` which step failed."""

    report: BuildReport

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


def proxy_args(opts: BuildOptions) -> dict[str, str]:
    out = {}
    for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"):
        v = opts.proxies.get(k) or os.environ.get(k) or os.environ.get(k.lower())
        if v:
            out[k] = v
            out[k.lower()] = v
    return out


@dataclass(frozen=True)
class Prepared:
    """One target checked and resolved before any build starts (``prepare``; the CLI's
    preflight): the build's steps use this stack and matrix, and resolve nothing again."""

    spec: TargetSpec
    stack: Stack
    matrix: Matrix


def prepare(spec: TargetSpec, *, matrix_dir: str | Path | None = None,
            matrix: Matrix | None = None) -> Prepared:
    """``spec`` (checked when it was made: core.spec.TargetSpec) resolved (refused: exit 3),
    with the team's compiled packages (assemble.as_built), once, before any work."""
    m = matrix or load_matrix(matrix_dir, spec.matrix_overlay)
    return Prepared(spec, as_built(spec, spec.resolve(m)), m)


def prepare_context(spec: TargetSpec, stack: Stack, opts: BuildOptions, dest: Path, *,
                    lock: Path | None = None,
                    on_note: Callable[[str], None] | None = None) -> tuple[Path, BuildPlan]:
    """Write ``spec``'s build folder into ``dest`` through the one assembly path
    (envbuilder.assemble: the same files ``render`` writes), plus what a build brings itself:
    the wheelhouse's wheels and the extra CA bundle. ``lock``: the lock to install when
    ``opts.lock`` names none (the build folder's, ``folder_lock``). The wheelhouse's files are
    hard-linked into the folder, never copied, unless it is on another file system: then
    ``on_note`` is told how many were copied."""
    lock = opts.lock or lock
    lock_text = _read_lock(lock)
    plan, files = folder_files(spec, stack, lock_text=lock_text, lock_source=str(lock),
                               wheelhouse=opts.wheelhouse is not None)
    if opts.wheelhouse is not None:  # a team package that builds against torch, left in the plain layer
        from envbuilder.lock.compiled import check_wheelhouse

        check_wheelhouse(Path(opts.wheelhouse), next((la.requirements for la in plan.layers if la.name == "team"), ()))
    split = None
    if opts.wheelhouse is not None and lock_text is not None:
        # a locked build: each layer's wheels are exactly its pins (installed --no-deps)
        from envbuilder.lock.requirements import layer_pins

        import shlex

        pins = layer_pins(plan, files)
        fetch = (f"envbuilder wheelhouse {shlex.quote(str(lock))} -o "
                 f"{shlex.quote(str(opts.wheelhouse))} fetches them") if lock is not None else None
        split = wh.split(Path(opts.wheelhouse), pins, stack.python,
                         required=[r for rs in pins.values() for r in rs], deps=False, fetch=fetch)
    elif opts.wheelhouse is not None:
        split = _split_wheelhouse(plan, stack, opts.wheelhouse)
    copied: list[Path] = []
    write_tree(dest, files, extra=_extra_files(split, opts.ca_pem, copied))
    if copied and on_note is not None:
        size = sum(p.stat().st_size for p in copied)
        on_note(f"copied {len(copied)} wheelhouse files ({size >> 20} MiB) into {dest}: "
                f"{opts.wheelhouse} is on another file system than the build folder (on the same "
                f"one they are hard-linked)")
    return dest, plan


def _read_lock(lock: Path | None) -> str | None:
    if lock is None:
        return None
    from envbuilder.core.readfile import read_text_capped

    return read_text_capped(lock, "--lock-file", limit=64 << 20)


def _split_wheelhouse(plan: BuildPlan, stack: Stack, wheelhouse: Path) -> dict[str, list[Path]]:
    """The wheelhouse's wheels cut by layer: each layer's requirements and build requirements."""
    layers = {la.name: [*la.requirements, *la.build_requirements] for la in plan.layers}
    return wh.split(Path(wheelhouse), layers, stack.python,
                    required=[r for la in plan.layers for r in la.requirements])


def _extra_files(split: dict[str, list[Path]] | None, ca: bytes | None,
                 copied: list[Path] | None = None) -> Callable[[Path], None] | None:
    """What a build folder gets beside its rendered files: each layer's wheels (hard links;
    ``copied`` gets the files that had to be copied), the extra CA."""
    if split is None and ca is None:
        return None

    def extra(tmp: Path) -> None:
        if split is not None:
            done = wh.copy_into(split, tmp)
            if copied is not None:
                copied.extend(done)
        if ca is not None:
            (tmp / "ca-certificates" / "envbuilder-extra-ca.crt").write_bytes(ca)

    return extra


def context_extra(spec: TargetSpec, stack: Stack, opts: BuildOptions) -> Callable[[Path], None] | None:
    """What a build folder gets beside its rendered files (``bake --wheelhouse/--ca-cert``, as
    prepare_context for ``build``): each layer's wheels from opts.wheelhouse, the extra CA."""
    split = None
    if opts.wheelhouse is not None:
        plan, _ = folder_files(spec, stack, wheelhouse=True)
        split = _split_wheelhouse(plan, stack, opts.wheelhouse)
    return _extra_files(split, opts.ca_pem)


# -- the steps ---------------------------------------------------------------------------------

@dataclass
class _Build:
    """One target's build while its steps run: what each step reads, and what it leaves for
    the steps after it (the plan from render, the image from build, the smoke result)."""

    job: Prepared
    opts: BuildOptions
    lock: Path | None  # the lock installed: --lock-file, or the build folder's (folder_lock)
    report: BuildReport
    emit: Callable[[str, Any], None]
    client: DockerClient | None
    ctx_dir: Path
    plan: BuildPlan | None = None
    smoke: SmokeResult | None = None
    build_labels: dict[str, str] = field(default_factory=dict)  # the labels the engine added

    @property
    def names(self) -> ImageNames:
        """What the image is called, locally and pushed (core.naming)."""
        return image_names(self.job.spec, self.job.stack)

    @property
    def image(self) -> str:
        return self.names.ref

    @property
    def smoke_passed(self) -> bool:
        return self.smoke is not None and self.smoke.ok

    def rendered(self) -> BuildPlan:
        """The plan the render step made (every step after it has one)."""
        assert self.plan is not None
        return self.plan

    def built(self) -> tuple[DockerClient, str]:
        """The engine and the image the build step made (verify, smoke, push and sign use them)."""
        assert self.client is not None and self.report.image_id is not None
        return self.client, self.report.image_id


@dataclass(frozen=True)
class Step:
    """One step of a build: ``run`` does the work (a failure raises OperationError), ``when``
    says whether it runs; the bookkeeping around it is ``_run_steps``'s."""

    name: str
    run: Callable[[_Build], None]
    when: Callable[[_Build], bool]


def _render(b: _Build) -> None:
    notes: list[str] = []

    def note(text: str) -> None:
        notes.append(text)
        b.emit("step", ("wheelhouse", text))

    _, b.plan = prepare_context(b.job.spec, b.job.stack, b.opts, b.ctx_dir, lock=b.lock,
                                on_note=note)
    if b.opts.wheelhouse is not None:
        b.report.wheelhouse = {"path": str(b.opts.wheelhouse), "copied": bool(notes),
                               "note": notes[0] if notes else None}
    b.report.context = str(b.ctx_dir)


def _build_image(b: _Build) -> None:
    stack, opts, plan, report = b.job.stack, b.opts, b.rendered(), b.report
    client = b.client = b.client or engine.connect()
    if stack.compiles and stack.builder is not None and stack.builder.image_kind == "devel":
        _require_builder(client, plan.builder_image, stack)
    elif plan.compiled_packages and "-devel-" in plan.builder_image:  # the team's compiled packages
        _require_builder(client, plan.builder_image, stack, plan.compiled_packages)
    labels = b.build_labels = dict(opts.labels) or image_labels.build_labels(
        base_digest=_base_digest(client, plan.runtime_image),
        lock_digest=lock_digest(b.lock) if b.lock is not None else None)
    if b.names.project is not None:  # the project it was built for: who may take its generic tag
        labels[PROJECT_LABEL] = b.names.project
    sde = report.source_date_epoch = opts.source_date_epoch or source_date_epoch(plan, locked=b.lock is not None)
    # index credentials travel as build arguments, in no file; a rebuild names the images it
    # was built from by digest (BUILDER_IMAGE, RUNTIME_IMAGE)
    args = {**proxy_args(opts), **plan.index_build_args, **opts.image_args,
            "SOURCE_DATE_EPOCH": str(sde)}
    use_buildkit, why = choose_builder(client, opts.builder)
    if use_buildkit and not opts.reproducible:
        why = "--no-reproducible: BuildKit without rewritten timestamps (files dated as built)"
    report.builder, report.reproducible, report.reproducible_why = (
        "buildkit" if use_buildkit else "legacy", use_buildkit and opts.reproducible, why)
    on_step = lambda i, n, text: b.emit("build-step", (i, n, text))  # noqa: E731
    on_line = lambda ln: b.emit("build-line", ln)  # noqa: E731
    if use_buildkit:
        from envbuilder.run import buildkit

        bk = buildkit.build(client, b.ctx_dir, image=b.image, build_args=args, labels=labels,
                            source_date_epoch=sde, nocache=opts.nocache,
                            rewrite=opts.reproducible, on_step=on_step,
                            on_line=on_line)
        report.digest = bk.manifest_digest
        image_id = engine.image_id(client, b.image)
        report.cached_steps, report.total_steps = bk.cached_steps, bk.steps
    else:
        res = engine.build(client, b.ctx_dir, tag=b.image, nocache=opts.nocache, buildargs=args,
                           labels=labels, on_step=on_step, on_line=on_line)
        image_id = res.image_id
        report.cached_steps, report.total_steps = res.cached_steps, res.steps
        report.stage_images = list(res.stage_images)
    report.image_id = image_id
    report.local_tags = [b.image]
    _generic_tag(b, client, image_id)
    for name, t in (validate.tag_ref(v, "--tag") for v in opts.tags):
        report.local_tags.append(engine.tag(client, image_id, name or b.names.repository, t))
    report.labels = engine.image_labels(client, image_id)
    report.size_bytes = engine.image_size(client, image_id)


def source_date_epoch(plan: BuildPlan, *, locked: bool) -> int:
    """The build's SOURCE_DATE_EPOCH: the plan's (a lock's date, else the stack's newest
    release); an unlocked build takes $SOURCE_DATE_EPOCH when it is set (the convention's
    variable, https://reproducible-builds.org/specs/source-date-epoch/), a locked one never."""
    env = os.environ.get("SOURCE_DATE_EPOCH", "").strip()
    if not locked and env:
        if not env.isdigit():
            raise InputError(f"SOURCE_DATE_EPOCH={env[:40]!r} is not a number of seconds since "
                             f"1970-01-01 (unset it, or give an integer)")
        return int(env)
    return plan.source_date_epoch


def choose_builder(client: DockerClient, wanted: str) -> tuple[bool, str]:
    """(BuildKit or not, why): ``auto`` takes BuildKit when the engine builds reproducibly
    (run.buildkit.support) and says why not otherwise; ``buildkit`` refuses an engine that
    cannot (exit 1 naming why); ``legacy`` is asked for."""
    if wanted == "legacy":
        return False, "--builder legacy: the engine's legacy builder dates every file at build time"
    from envbuilder.run import buildkit

    sup = buildkit.support(client)
    if sup.ok:
        return True, f"{sup.why}: SOURCE_DATE_EPOCH and rewrite-timestamp=true"
    if wanted == "buildkit":
        raise OperationError(f"--builder buildkit: this engine cannot build reproducibly: {sup.why}",
                             step="build")
    return False, f"the legacy builder dates every file at build time: {sup.why}"


def _generic_tag(b: _Build, client: DockerClient, image_id: str) -> None:
    """Inside a project, the generic ``envbuilder:<stack tag>`` as a second local name, only
    when no image holds it or one built for this same project (its io.envbuilder.project
    label): never moved away from a CI's or another project's image (report.kept_tags)."""
    generic = b.names.generic
    if generic is None:
        return
    holder = engine.tag_holder(client, generic)
    if holder is not None and holder[0] != image_id and holder[1].get(PROJECT_LABEL) != b.names.project:
        owner = holder[1].get(PROJECT_LABEL)
        b.report.kept_tags.append({"tag": generic, "image_id": holder[0],
                                   "project": owner,
                                   "why": f"held by an image built for {owner}" if owner
                                   else "held by an image built outside a project"})
        return
    repo, _, t = generic.rpartition(":")
    b.report.local_tags.append(engine.tag(client, image_id, repo, t))


def _verify(b: _Build) -> None:
    from envbuilder.run.verify import verify_image_labels

    client, image_id = b.built()
    vr = verify_image_labels(client, image_id, b.report.labels, b.job.matrix)
    b.report.verify = vr.to_dict()
    if not vr.ok:
        raise OperationError(f"{b.job.stack.tag} is not what its labels say: {vr.summary()}",
                             step="verify")


def _smoke(b: _Build) -> None:
    client, image_id = b.built()
    opts, report = b.opts, b.report
    result = run_smoke_container(client, image_id, nproc=b.rendered().host_nproc,
                                 backend=opts.backend, timeout=opts.smoke_timeout,
                                 shm_size=opts.shm_size)
    # the transport against the target's fabric, busbw against the published floors on GPUs
    fabric = getattr(b.job.stack, "fabric", None)
    result = b.smoke = judge(result, fabric=fabric if fabric in ("ib", "efa") else None)
    report.smoke = _smoke_summary(result)
    if opts.metrics is not None:  # before the verdict: a failed run is a metric too
        from envbuilder.run.metrics import export_run

        exported = export_run(result, opts.metrics, image=b.image, client=client, target=b.job.spec.name)
        report.smoke["metrics"] = exported.to_dict() if exported else None
    if not result.ok:
        report.causes = explain_log(result.log, details=result.details)
        first = result.details.get(result.failed[0]) if result.failed else None
        raise OperationError(
            f"the smoke job failed in {b.job.stack.tag}: {', '.join(result.failed) or 'unknown check'}"
            + (f" ({first[:200]})" if first else ""), step="smoke")


def _apptainer(b: _Build) -> None:
    """--runtime apptainer|both: ``apptainer build`` of the folder's envbuilder.def (a local base
    as a docker save archive), then verify and the smoke job in the SIF with ``apptainer exec``;
    ``report.apptainer`` says what was done (a failure raises, naming its step)."""
    from envbuilder.run import apptainer

    opts, plan = b.opts, b.rendered()
    cmd = list(opts.apptainer_argv)
    client = b.client
    if client is None:
        try:
            client = engine.connect()
        except EnvbuilderError:
            client = None  # no engine: every base is a registry image (Bootstrap: docker)
    sif = Path(opts.sif) if opts.sif is not None else Path.cwd() / f"{b.job.stack.tag}.sif"
    app: dict[str, Any] = {"command": cmd, "steps": {"build": "not run", "verify": "not run", "smoke": "not run"},
                           "seconds": {}}
    b.report.apptainer = app
    app["steps"]["build"] = "failed"
    sde = source_date_epoch(plan, locked=b.lock is not None)
    built = apptainer.build_sif(cmd, plan, b.ctx_dir, sif, client=client,
                                build_env={**proxy_args(opts), **plan.index_build_args},
                                source_date_epoch=sde,
                                on_line=lambda ln: b.emit("build-line", ln))
    _sif_checks(b, app, built, cmd, plan)


def _sif_checks(b: _Build, app: dict[str, Any], built: Any, cmd: list[str], plan: Any) -> None:
    """The built SIF's record in ``app``, then verify and the smoke job in it (apptainer exec)."""
    from envbuilder.run import apptainer

    opts = b.opts
    app.update({k: v for k, v in built.to_dict().items() if k != "seconds"})
    app["steps"]["build"] = "cached" if built.cached else "ok"
    app["seconds"]["build"] = round(built.seconds, 3)
    app["labels"] = apptainer.sif_labels(cmd, Path(built.sif))
    app["steps"]["verify"] = app["steps"]["smoke"] = "skipped"
    if opts.verify:
        t0 = time.monotonic()
        app["steps"]["verify"] = "failed"
        vr = apptainer.verify_sif(cmd, Path(built.sif), app["labels"], b.job.matrix)
        app["verify"] = vr.to_dict()
        app["seconds"]["verify"] = round(time.monotonic() - t0, 3)
        if not vr.ok:
            raise OperationError(f"{built.sif} is not what its labels say: {vr.summary()}", step="apptainer")
        app["steps"]["verify"] = "ok"
    if opts.smoke:
        t0 = time.monotonic()
        app["steps"]["smoke"] = "failed"
        # one node's ranks, as the Docker smoke job and smoke/run.sh's default (NPROC): the
        # %help command run by hand starts the same job
        result, argv = apptainer.smoke_sif(cmd, Path(built.sif), plan.home, nproc=plan.host_nproc,
                                           backend=opts.backend, timeout=opts.smoke_timeout)
        app["smoke"] = {**_smoke_summary(result), "command": argv}
        app["seconds"]["smoke"] = round(time.monotonic() - t0, 3)
        if not result.ok:
            b.report.causes = explain_log(result.log, details=result.details)
            raise OperationError(f"the smoke job failed in {built.sif}: {', '.join(result.failed) or 'unknown check'}",
                                 step="apptainer")
        app["steps"]["smoke"] = "ok"


def _sif(b: _Build) -> None:
    """--runtime both --push REPO: the SIF of the pushed image (``docker save`` of the image
    whose config the registry serves for the pushed digest: the same layers), labelled with
    REPO@DIGEST, verified and smoke-tested in it; with --sign attested as a file
    (``X.sif.att.json``: its sha256, the digest and config it came from). ``envbuilder verify
    X.sif --key PUB`` checks it."""
    from envbuilder.run import apptainer, sign

    opts, plan, report = b.opts, b.rendered(), b.report
    client, image_id = b.built()
    cmd = list(opts.apptainer_argv)
    ref = report.pushed[0]["ref"]
    sif = Path(opts.sif) if opts.sif is not None else Path.cwd() / f"{b.job.stack.tag}.sif"
    app: dict[str, Any] = {"command": cmd, "from_image": ref, "seconds": {},
                           "steps": {"build": "not run", "verify": "not run", "smoke": "not run"}}
    report.apptainer = app
    app["steps"]["build"] = "failed"
    built = apptainer.build_sif_from_image(cmd, client, image_id, ref, sif,
                                           on_line=lambda ln: b.emit("build-line", ln))
    _sif_checks(b, app, built, cmd, plan)
    if opts.sign is not None and report.signed is not None:
        app["steps"]["attest"] = "failed"
        predicate = sign.sif_predicate(b.job.spec.name, ref, app["labels"][apptainer.IMAGE_CONFIG_LABEL],
                                       Path(built.sif))
        app["attestation"] = sign.attest_sif(Path(built.sif), opts.sign, predicate,
                                             cosign=sign.Cosign(on_command=lambda ln: b.emit("step", ("sif", ln))))
        app["steps"]["attest"] = "ok"


def _push(b: _Build) -> None:
    spec, stack, opts, report = b.job.spec, b.job.stack, b.opts, b.report
    assert opts.push is not None
    client, image_id = b.built()
    repo = push_repository(spec, b.names, opts.push)
    # the image's version tag (a project target's own: never the generic stack tag, which
    # another target of the same stack would overwrite), then the tag part of every --tag
    tags = [b.names.tag, *(validate.tag_ref(v, "--tag")[1] for v in opts.tags)]
    if opts.alias and b.smoke_passed:
        # the moving alias is the target's own name (cu121, cu121-ds, cpu): it follows
        # the matrix to new releases, and moves only after the smoke job passed
        tags.append(validate.tag(spec.name, "target (as alias tag)"))
    for t in dict.fromkeys(tags):
        engine.tag(client, image_id, repo, t)
        b.emit("step", ("push", f"{repo}:{t}"))
        digest = engine.push(client, repo, t)
        if not engine.verify_pushed(client, repo, digest):
            raise OperationError(f"the registry did not confirm {repo}@{digest} after "
                                 f"the push; nothing was recorded as published", step="push")
        if report.reproducible and report.digest and digest != report.digest:
            report.reproducible = False  # the engine sent other bits than BuildKit made
            report.reproducible_why = (f"the registry got {digest}, not the manifest BuildKit "
                                       f"built ({report.digest}): the engine recompressed it")
        report.pushed.append({"repository": repo, "tag": t, "digest": digest,
                              "ref": f"{repo}@{digest}"})
    if opts.context is not None:  # the kept build folder's jobs/ pull the digest
        pin_job_files(spec, stack, opts, b.ctx_dir, report.pushed[0]["ref"], lock=b.lock)


def push_repository(spec: TargetSpec, names: ImageNames, push: str) -> str:
    """Where ``build --push REPO`` sends ``spec``'s image: REPO as given, or for ``--publish``
    the image's own ``REGISTRY/REPOSITORY`` (exit 2 when it has no registry)."""
    if push != PUSH_OWN:
        return push
    if names.registry is None:
        raise InputError(f"{spec.name}: --publish pushes to REGISTRY/REPOSITORY, and no registry is set: "
                         f"set registry in the project file, or give --registry HOST/NAMESPACE (or --push REPO)")
    return names.repository


def _sign(b: _Build) -> None:
    """After verify, the smoke job and the push passed: sign the pushed digest once (the tags
    share it) and attach the verify, smoke, SBOM and provenance attestations (run.sign)."""
    from envbuilder.run import sign

    spec, stack, opts, plan, report = b.job.spec, b.job.stack, b.opts, b.rendered(), b.report
    client, image_id = b.built()
    assert opts.sign is not None and report.verify is not None and b.smoke is not None
    ref = report.pushed[0]["ref"]
    debs, os_id, python = sign.image_packages(client, image_id)
    predicates = {
        "verify": sign.verify_predicate(spec.name, report.labels, report.verify),
        "smoke": sign.smoke_predicate(spec.name, b.smoke),
        "sbom": sign.sbom_predicate(stack, lock=b.lock, debs=debs, os_id=os_id, python=python),
        "provenance": sign.provenance_predicate(
            target=spec.name, stack=stack,
            build_args={**proxy_args(opts), **plan.index_build_args},
            base_image=spec.base_image or stack.runtime_image,
            base_digest=report.labels.get(image_labels.BASE_DIGEST, ""),
            builder_image=plan.builder_image,
            builder_digest=_base_digest(client, plan.builder_image),
            lock_digest=report.labels.get(image_labels.LOCK_DIGEST), push=report.pushed[0]["repository"],
            seconds=sum(report.seconds.values()), image_id=image_id,
            reproducible={"builder": report.builder or "legacy", "reproducible": bool(report.reproducible),
                          "why": report.reproducible_why, "digest": report.digest,
                          "source_date_epoch": int(report.source_date_epoch or 0)},
            rebuild=rebuild_inputs(b)),
    }
    commands: list[str] = []

    def echo(line: str) -> None:  # every cosign command is shown before it runs
        commands.append(line)
        b.emit("step", ("sign", line))

    signed = sign.sign_and_attest(ref, opts.sign, predicates, cosign=sign.Cosign(on_command=echo))
    report.signed = {**signed.to_dict(), "commands": commands}


def spec_record(spec: TargetSpec, names: ImageNames) -> dict[str, Any]:
    """What makes ``spec`` again (run.rebuild.spec_of): the target and a project target's
    name (its image's io.envbuilder.target label and tag), its pins by the option table's
    names, and its build options: the indexes (PyTorch's included, without credentials), the
    index strategy, and the image's names (core.naming) as the registry and repository that
    make them again (an older project file's whole-repository registry split the same way)."""
    from envbuilder.errors import redact
    from envbuilder.run.rebuild import pin_record

    registry, _, repository = names.repository.rpartition("/")
    options: dict[str, Any] = {
        "base_image": spec.base_image, "builder_image": spec.builder_image,
        "cuda_arch": list(spec.cuda_arch), "cpu_isa": spec.cpu_isa, "apt_snapshot": spec.apt_snapshot,
        "pip_index_url": redact(spec.pip_index_url) if spec.pip_index_url else None,
        "extra_index_urls": [redact(u) for u in spec.extra_index_urls],
        "torch_index_url": redact(spec.torch_index_url) if spec.torch_index_url else None,
        "index_strategy": spec.index_strategy, "nproc": spec.nproc,
        "layouts": list(spec.layouts), "compiled": list(spec.compiled),
        "registry": registry or None, "repository": repository}
    return {"target": spec.target, "name": spec.name if spec.from_project else None,
            "pins": pin_record(spec.pins),
            "options": {k: v for k, v in options.items() if v not in (None, [], "")}}


def rebuild_inputs(b: _Build) -> dict[str, Any]:
    """What ``envbuilder rebuild`` builds this image again from (the provenance's
    ``externalParameters.rebuild``): the spec (``spec_record``), the team's requirement lines,
    the lock's text, the images by digest, the labels the engine added (io.envbuilder.project
    among them), SOURCE_DATE_EPOCH."""
    spec, stack, plan = b.job.spec, b.job.stack, b.rendered()
    client, _ = b.built()
    team: tuple[str, ...] = ()
    if spec.requirements_file is not None or spec.requirements:
        from envbuilder.lock.requirements import team_requirements

        team = team_requirements(stack, requirements_file=spec.requirements_file,
                                 lines=spec.requirements, source=spec.requirements_source)
    return {**spec_record(spec, b.names),
            "requirements": list(team), "wheelhouse": b.opts.wheelhouse is not None,
            "lock": _read_lock(b.lock), "source_date_epoch": int(b.report.source_date_epoch or 0),
            "images": {"BUILDER_IMAGE": _by_digest(client, plan.builder_image),
                       "RUNTIME_IMAGE": _by_digest(client, plan.runtime_image)},
            "labels": dict(b.build_labels)}


def _by_digest(client: DockerClient, image: str) -> str:
    """``image`` (NAME[:TAG]) with the digest the engine has for it: NAME[:TAG]@sha256:..."""
    ref = _base_digest(client, image)
    digest = ref.rpartition("@")[2] if "@sha256:" in ref else ref if ref.startswith("sha256:") else None
    return f"{image.split('@', 1)[0]}@{digest}" if digest else image


def _docker(b: _Build) -> bool:
    return b.opts.runtime != "apptainer"  # --runtime apptainer: the SIF alone, no Docker image


# in order; a step whose ``when`` is false is "skipped" in the report (apptainer and sign, not in
# STEPS, appear only when they run)
BUILD_STEPS = (
    Step("render", _render, lambda b: True),
    Step("build", _build_image, _docker),
    Step("verify", _verify, lambda b: _docker(b) and b.opts.verify),
    Step("smoke", _smoke, lambda b: _docker(b) and b.opts.smoke),
    # --runtime both --push: the SIF is made of the pushed image (the sif step), not of the definition
    Step("apptainer", _apptainer, lambda b: b.opts.runtime == "apptainer"
         or (b.opts.runtime == "both" and not b.opts.push)),
    Step("push", _push, lambda b: _docker(b) and bool(b.opts.push)),
    Step("sign", _sign, lambda b: b.opts.sign is not None and b.smoke_passed and bool(b.report.pushed)),
    Step("sif", _sif, lambda b: b.opts.runtime == "both" and bool(b.report.pushed)),
)


def _run_steps(b: _Build, steps: Sequence[Step] = BUILD_STEPS) -> None:
    """The bookkeeping, once for every step: skipped or run, its time, its report entry and
    progress events; a failure (OperationError or Ctrl-C) marks the step, drops a partial
    push (not a publication) and raises BuildFailed with the report."""
    report = b.report
    for step in steps:
        if not step.when(b):
            if step.name in report.steps:
                report.steps[step.name] = "skipped"
            continue
        t0 = time.monotonic()
        report.steps[step.name] = "running"
        b.emit("step", (step.name, "running"))
        try:
            step.run(b)
        except OperationError as e:
            _stopped(report, step.name, "failed", str(e))
            raise BuildFailed(report, e if e.step else OperationError(str(e), step=step.name,
                                                                        details=e.details)) from None
        except KeyboardInterrupt as e:  # Ctrl-C, SIGTERM/SIGHUP: the report, then 130/143/129
            _stopped(report, step.name, "interrupted", f"interrupted during {step.name}")
            from envbuilder._safety import interrupted_exit_code

            raise BuildInterrupted(report, OperationError(
                f"interrupted during {step.name}; nothing was recorded for it — run the build again",
                step=step.name), interrupted_exit_code(e)) from None
        finally:
            report.seconds[step.name] = round(time.monotonic() - t0, 3)
        report.steps[step.name] = "ok"
        b.emit("step", (step.name, "ok"))


class BuildInterrupted(BuildFailed):
    """A signal ended a step (Ctrl-C, SIGTERM): the report says which; the exit code is the
    signal's, as for any interrupted command (130 for Ctrl-C, 143 for SIGTERM). A set of builds
    stops there."""

    def __init__(self, report: BuildReport, err: OperationError, code: int) -> None:
        super().__init__(report, err)
        self.code = code

    @property  # type: ignore[override]
    def exit_code(self) -> int:  # type: ignore[override]
        return self.code


def _stopped(report: BuildReport, step: str, state: str, error: str) -> None:
    report.steps[step] = state
    report.error = error
    report.failed_step = step
    if step == "push":
        report.pushed = []  # a partial push is not a publication


def _build(job: Prepared, opts: BuildOptions, *, lock: Path | None, client: DockerClient | None,
           on_event: Callable[[str, Any], None] | None) -> BuildReport:
    """Run BUILD_STEPS for one prepared target in its own build folder (``opts.context``, else
    a temporary one, removed afterwards)."""
    tmp_root: Path | None = None
    if opts.context is not None:
        ctx_dir = Path(opts.context)
    else:
        tmp_root = Path(tempfile.mkdtemp(prefix="envbuilder-build-"))
        ctx_dir = tmp_root / "context"
    b = _Build(job, opts, opts.lock or lock, BuildReport(target=job.spec.name, tag=job.stack.tag),
               on_event or (lambda kind, data: None), client, ctx_dir)
    if opts.push:  # bad input before any work: --publish needs a registry
        push_repository(job.spec, b.names, opts.push)
    try:
        _run_steps(b)
    finally:
        if tmp_root is not None:
            shutil.rmtree(tmp_root, ignore_errors=True)
    return b.report


def build_target(spec: TargetSpec | Prepared, opts: BuildOptions, *,
                 matrix_dir: str | Path | None = None, client: DockerClient | None = None,
                 on_event: Callable[[str, Any], None] | None = None,
                 matrix: Matrix | None = None) -> BuildReport:
    """Render, build, smoke-test and (with opts.push) push one target: ``spec`` as ``prepare``
    returned it (the CLI's preflight), or a TargetSpec prepared here. ``opts`` were checked
    when they were made."""
    job = spec if isinstance(spec, Prepared) else prepare(spec, matrix_dir=matrix_dir, matrix=matrix)
    return _build(job, opts, lock=opts.lock, client=client, on_event=on_event)


def _validate_sign(opts: BuildOptions) -> None:
    """--sign signs what passed: it needs --push, verify and the smoke job (exit 2)."""
    if not opts.push:
        raise InputError("--sign signs the pushed digest: add --push REPO")
    if not opts.verify or not opts.smoke:
        raise InputError("--sign attests the verify report and the smoke result: drop "
                         "--no-verify and --no-smoke")


def pin_job_files(spec: TargetSpec, stack: Stack, opts: BuildOptions, folder: Path,
                  ref: str, *, lock: Path | None = None) -> None:
    """After a push: (re)write ``folder``'s ``jobs/`` so every file pulls ``ref``
    (``REPO@sha256:...``), not the moving tag; the rest of the folder stays as built.
    ``lock``: as prepare_context's."""
    lock = opts.lock or lock
    # the tag pushed with the digest: a tag-pinned pyxis file for enroot < 4.0
    _, files = folder_files(spec, stack, lock_text=_read_lock(lock), lock_source=str(lock),
                            wheelhouse=opts.wheelhouse is not None, image=ref,
                            tag_image=f"{ref.partition('@')[0]}:{image_tag(spec, stack)}")
    write_tree(folder, {k: v for k, v in files.items() if k.startswith("jobs/")},
               group="render", prune=False)


def _require_builder(client: DockerClient, image: str, stack: Stack, team: Sequence[str] = ()) -> None:
    """A compiling build needs its devel builder: refuse before building when it is missing."""
    if engine.image_available(client, image):
        return
    what = " and ".join(compiled_parts(stack.assignment, stack.matrix, stack.ops)
                        + ([f"the team's {', '.join(team)}"] if team else []))
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
            "transport": result.transport, "floors": result.floors, "warnings": result.warnings,
            "seconds": round(result.seconds, 3), "exit_code": result.exit_code}


def explain_causes(log: str, top: int = 3, details: dict | None = None) -> list[Cause]:
    """The likely causes of a failed smoke job, from its log and the failed checks' details
    (what each rank recorded), through envbuilder explain."""
    try:
        lines = log.splitlines() + [f"{k}: {v}" for k, v in (details or {}).items()]
        causes = explain_lines(lines, name="smoke-log")
    except Exception:  # noqa: BLE001 - the causes are a hint beside the failure: never a second failure
        return []
    return list(causes[:top])


def explain_log(log: str, top: int = 3, details: dict | None = None) -> list[dict]:
    """``explain_causes`` as the build report writes them."""
    return [c.to_dict() for c in explain_causes(log, top, details)]


def folder_lock(spec: TargetSpec, opts: BuildOptions) -> Path | None:
    """Locked whenever a lock exists: without --lock-file, the requirements.lock that
    ``envbuilder lock`` wrote in the target's build folder (build/<name>, under the project's
    root inside a project) is installed with --require-hashes."""
    if opts.lock is not None or "/" in spec.name or spec.name in (".", ".."):
        return opts.lock
    root = spec.project.parent / "build" if spec.project is not None else Path("build")
    found = root / spec.name / "requirements.lock"
    return found if found.is_file() and not found.is_symlink() else None


def build_many(specs: Sequence[TargetSpec | Prepared], opts: BuildOptions, *, jobs: int = 1,
               matrix_dir: str | Path | None = None,
               client: DockerClient | None = None,
               on_event: Callable[[str, str, Any], None] | None = None) -> list[BuildReport]:
    """Build several targets (each a TargetSpec, or as ``prepare`` returned it), at most
    ``jobs`` at once; keep going past failures. With several, each build gets its own context
    folder (``opts`` is frozen: copied with replace, never asdict); a target that fails before
    its build started reports the step it failed in, with its own message."""
    from concurrent.futures import ThreadPoolExecutor

    per = replace(opts, context=None) if len(specs) > 1 and opts.context is not None else opts

    def one(s: TargetSpec | Prepared) -> BuildReport:
        spec = s.spec if isinstance(s, Prepared) else s
        try:
            job = s if isinstance(s, Prepared) else prepare(s, matrix_dir=matrix_dir)
            return _build(job, per, lock=folder_lock(spec, per), client=client,
                          on_event=(lambda k, d: on_event(spec.name, k, d)) if on_event else None)
        except BuildFailed as e:
            e.report.exit_code, e.report.cause = e.exit_code, e
            return e.report
        except EnvbuilderError as e:  # refused or bad input, before or while building
            r = BuildReport(target=spec.name, exit_code=e.exit_code, cause=e)
            r.error, r.failed_step = str(e), e.step or "render"
            r.steps[r.failed_step] = "failed"
            return r

    if jobs <= 1 or len(specs) <= 1:  # in this thread: Ctrl-C reaches the step that runs
        done: list[BuildReport] = []
        for s in specs:
            done.append(one(s))
            if isinstance(done[-1].cause, BuildInterrupted):  # an interruption ends the set
                break
        return done
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(pool.map(one, specs))
