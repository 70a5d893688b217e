"""The compatibility rules.

Each rule has a name, the axes it reads, and a check that returns the violations it finds in a
(partial) assignment of versions. A violation explains itself: what is wrong, the fact and its
source, and what would work instead. The resolver applies a rule as soon as every axis it
reads is assigned, so the same rules judge a full stack (``resolve``) and a partial one
(``check``).

An assignment maps axis names to matrix objects:
``cuda`` Toolkit | None (CPU), ``torch`` TorchRelease, ``python`` str, ``os`` OsInfo,
``nccl`` NcclRelease | None, and each component of the matrix (by name) ComponentRelease | None.
``flavour`` str (the runtime base flavour: cuda-base, cuda-runtime, cudnn-runtime, os).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from packaging.version import Version

from envbuilder.core.builder import NoBuilder, builder_for, compiled
from envbuilder.core.matrix import ComponentRelease, Matrix, OsInfo, Toolkit, TorchRelease, minor, python_key
from envbuilder.core.target import Pin

Assignment = Mapping[str, Any]


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    source: tuple[str, ...]
    fix: str = ""
    # "error" refuses; "warning" is reported with the stack; "info" is evidence: the fact that
    # decided an acceptance at an edge (the stack's evidence, never a reason to refuse)
    severity: str = "error"
    detail: str = ""  # the longer explanation, when the message is its first sentence

    def to_dict(self) -> dict[str, Any]:
        d = {"rule": self.rule, "severity": self.severity, "message": self.message,
             "fix": self.fix, "source": list(self.source)}
        if self.detail:
            d["detail"] = self.detail
        return d

    def __str__(self) -> str:
        src = f" [source: {self.source[0]}]" if self.source else ""
        fix = f" Instead: {self.fix}" if self.fix else ""
        return f"{self.rule}: {self.message}.{fix}{src}"


@dataclass(frozen=True)
class Context:
    """What a rule may read besides the assignment: the matrix and the request's extras."""

    matrix: Matrix
    driver: str | None = None
    nccl_pin: str | None = None
    # the ops each component with ops pre-builds at install time (--<tag>-ops), by name
    ops: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    platform: str = "linux/amd64"  # the image's platform (--platform)
    # components whose advised-against releases (critical/high advisories) the search steers
    # around: those the request does not pin to an exact version
    avoid: frozenset[str] = frozenset()


CheckFn = Callable[[Assignment, Context], list[Violation]]


@dataclass(frozen=True)
class Rule:
    name: str
    axes: tuple[str, ...]
    doc: str
    check: CheckFn
    unless: tuple[str, ...] = ()  # not applied when these axes are part of the search
    components: bool = False  # it also reads every component of the matrix (all_rules adds them)


RULES: list[Rule] = []


def rule(name: str, *axes: str, unless: tuple[str, ...] = (),
         components: bool = False) -> Callable[[CheckFn], CheckFn]:
    def deco(fn: CheckFn) -> CheckFn:
        RULES.append(Rule(name, tuple(axes), (fn.__doc__ or "").strip(), fn, unless, components))
        return fn
    return deco


def variant_of(cuda: Toolkit | None) -> str:
    return "cpu" if cuda is None else cuda.variant


def needs_devel(a: Assignment, m: Matrix, ops: Mapping[str, tuple[str, ...]] | None = None) -> bool:
    """Something compiles against CUDA: a component that compiles, or pre-built ops."""
    return compiled(a, m, ops or {})[1]


# -- driver ---------------------------------------------------------------------------------

def _driver_cuda(a: Assignment, ctx: Context) -> list[Violation]:
    """The host driver must be new enough for the image's CUDA toolkit (minor-version
    compatibility works with every base flavour; forward compatibility needs the cuda-compat
    package of the nvidia/cuda bases); a driver branch past its end of life is a warning."""
    return _driver_floor(a, ctx) + _driver_lifecycle(ctx)


def _driver_floor(a: Assignment, ctx: Context) -> list[Violation]:
    t: Toolkit | None = a["cuda"]
    if t is None or ctx.driver is None:
        return []
    if "torch" in a:  # the wheel's own cuda-toolkit pin may need a newer driver than the base
        t = floor_toolkit(ctx.matrix, t, a["torch"])
    drv = Version(ctx.driver)
    floor = ctx.matrix.minor_compat.get(t.version.major)
    if drv >= Version(t.driver_min):
        return []
    if floor is not None and drv >= Version(floor.driver_min):
        return [Violation(
            "driver_cuda",
            f"driver {ctx.driver} is older than {t.driver_min}, which CUDA {t.version} needs; it runs "
            f"only through minor-version compatibility (>= {floor.driver_min} for CUDA {floor.major}.x): "
            f"no PTX JIT, some APIs return cudaErrorCallRequiresNewerDriver",
            t.source + floor.source,
            f"update the driver to >= {t.driver_min}, or install cuda-compat (forward compatibility) on datacenter GPUs",
            severity="warning")]
    need = f">= {t.driver_min}" + (
        f" (>= {floor.driver_min} with minor-version compatibility)" if floor else "")
    fname = a.get("flavour")
    if fname is not None:
        fl = ctx.matrix.toolchains.flavour(fname)
        if fl.forward_compat:
            return [Violation(
                "driver_cuda",
                f"driver {ctx.driver} is older than CUDA {t.version}'s minimum ({need}); it can run only "
                f"through forward compatibility: the {fname} image's cuda-compat package, on datacenter "
                f"GPUs (not GeForce/RTX) with a driver branch NVIDIA supports for it",
                t.source + (floor.source if floor else ()) + fl.source,
                f"update the driver to >= {t.driver_min}, or check NVIDIA's forward-compatibility "
                f"support table for your GPUs and driver branch", severity="warning")]
        if fl.nvidia_tag is None:
            return [Violation(
                "driver_cuda",
                f"CUDA {t.version} needs driver {need}; driver {ctx.driver} could run it only through "
                f"forward compatibility, which needs the cuda-compat package of the nvidia/cuda bases: "
                f"the {fname} flavour has none",
                t.source + (floor.source if floor else ()) + fl.source,
                f"--flavour cuda-base (on an OS nvidia/cuda publishes), or update the driver to >= {t.driver_min}")]
    ok = [x.minor for x in ctx.matrix.toolkits if _driver_runs(ctx.matrix, x, drv)]
    alt = f"a CUDA this driver runs: {', '.join(dict.fromkeys(ok))}" if ok else "a newer driver"
    return [Violation(
        "driver_cuda",
        f"CUDA {t.version} needs driver {need}; driver {ctx.driver} is too old",
        t.source + (floor.source if floor else ()),
        f"update the driver to >= {t.driver_min}, or use {alt}")]


# applied with the base flavour when the search has one (resolve), without it otherwise
# (check); with torch when the search has it (its wheel's cuda-toolkit pin sets the floor)
rule("driver_cuda", "cuda", unless=("flavour", "torch"))(_driver_cuda)
rule("driver_cuda", "cuda", "torch", unless=("flavour",))(_driver_cuda)
rule("driver_cuda", "cuda", "torch", "flavour")(_driver_cuda)


def _driver_lifecycle(ctx: Context) -> list[Violation]:
    """The host driver's branch should be one NVIDIA still supports (cuda.yaml driver_branches):
    a warning from driver_cuda, for CPU targets too."""
    if ctx.driver is None:
        return []
    from envbuilder.core.advisories import branch_status, driver_eol_warning

    msg = driver_eol_warning(ctx.driver, ctx.matrix)
    if msg is None:
        return []
    st = branch_status(ctx.driver, ctx.matrix) or {}
    oldest = st.get("oldest_supported")
    # its own name: "runs natively" (init, resolve any) means no driver_cuda finding
    return [Violation("driver_lifecycle", msg.split(" [source:")[0], tuple(st.get("source", ())),
                      f"move the cluster to a supported branch (R{oldest} or newer)" if oldest
                      else "move the cluster to a supported driver branch", severity="warning")]


def wheel_toolkit(m: Matrix, torch: TorchRelease, cuda: Toolkit | None) -> Toolkit | None:
    """The toolkit patch torch's wheel pins (Requires-Dist cuda-toolkit==X.Y.Z), when the
    variant records one and the matrix lists that patch."""
    if cuda is None:
        return None
    var = torch.variants.get(cuda.variant)
    if var is None or var.cuda_toolkit is None:
        return None
    return next((k for k in m.toolkits if k.version == var.cuda_toolkit), None)


def floor_toolkit(m: Matrix, cuda: Toolkit, torch: TorchRelease) -> Toolkit:
    """Of the base image's toolkit and the one torch's wheel pins, the one needing the newer
    driver: driver floors are per toolkit patch (13.2.2 needs more than 13.2.1)."""
    w = wheel_toolkit(m, torch, cuda)
    if w is not None and Version(w.driver_min) > Version(cuda.driver_min):
        return w
    return cuda


def runs_natively(t: Toolkit, driver: str) -> bool:
    """The driver is at least the toolkit patch's own minimum (no compatibility mode)."""
    return Version(driver) >= Version(t.driver_min)


def driver_mode(m: Matrix, t: Toolkit, driver: str) -> str:
    """How a driver runs a toolkit patch: ``native`` (at least its own floor), ``minor-compat``
    (at least its major's minor-version-compatibility floor) or ``forward-compat`` (only with
    the cuda-compat package of an nvidia/cuda base, datacenter GPUs). The one answer check,
    resolve, resolve any and init give."""
    drv = Version(driver)
    if drv >= Version(t.driver_min):
        return "native"
    floor = m.minor_compat.get(t.version.major)
    return "minor-compat" if floor is not None and drv >= Version(floor.driver_min) else "forward-compat"


def _driver_runs(m: Matrix, t: Toolkit, drv: Version) -> bool:
    floor = m.minor_compat.get(t.version.major)
    need = Version(floor.driver_min) if floor else Version(t.driver_min)
    return drv >= min(need, Version(t.driver_min))


# -- torch ----------------------------------------------------------------------------------

@rule("torch_cuda_variant", "cuda", "torch")
def _torch_variant(a: Assignment, ctx: Context) -> list[Violation]:
    """PyTorch must publish Linux wheels for the target's CUDA variant (or CPU)."""
    t: TorchRelease = a["torch"]
    v = variant_of(a["cuda"])
    if v in t.variants:
        return []
    have = sorted(t.variants, key=lambda n: (n != "cpu", len(n), n))
    others = [r.line for r in ctx.matrix.torch if v in r.variants]
    alt = (f"torch {', '.join(dict.fromkeys(others))} for {v}" if others
           else f"a CUDA variant torch {t.version} has: {', '.join(have)}")
    none = "" if others else f"; no torch release in the matrix has {v} wheels"
    return [Violation("torch_cuda_variant",
                      f"torch {t.version} has no {v} wheels (it has {', '.join(have)}){none}",
                      t.source, f"use {alt}")]


@rule("torch_platform", "cuda", "torch")
def _torch_platform(a: Assignment, ctx: Context) -> list[Violation]:
    """PyTorch must publish wheels of the variant for the image's platform (linux/arm64 wheels
    exist only for some variants)."""
    t: TorchRelease = a["torch"]
    var = t.variants.get(variant_of(a["cuda"]))
    if var is None:
        return []
    if ctx.platform in var.platforms:
        return _platform_evidence(t, var, ctx)
    have = [n for n, v in t.variants.items() if ctx.platform in v.platforms]
    others = [r.line for r in ctx.matrix.torch for n, v in r.variants.items()
              if n == var.name and ctx.platform in v.platforms]
    elsewhere = {n: r.line for r in reversed(ctx.matrix.torch) for n, v in r.variants.items()
                 if ctx.platform in v.platforms}  # variant -> newest line with the platform
    fix = (f"use {', '.join(have)} for torch {t.version} on {ctx.platform}" if have else
           f"use torch {', '.join(dict.fromkeys(others))} for {var.name} on {ctx.platform}" if others
           else f"use a variant with {ctx.platform} wheels ("
           + ", ".join(f"{n}: torch {ln}" for n, ln in sorted(elsewhere.items())) + ") or --platform linux/amd64"
           if elsewhere else "use --platform linux/amd64")
    none = "" if others else f"; no torch release in the matrix has {var.name} wheels for {ctx.platform}"
    return [Violation("torch_platform",
                      f"torch {t.version} has no {var.name} wheels for {ctx.platform} (it has them for "
                      f"{', '.join(var.platforms)}){none}", tuple(dict.fromkeys(var.source + t.source)), fix)]


def _platform_evidence(t: TorchRelease, var: Any, ctx: Context) -> list[Violation]:
    """On a platform other than linux/amd64, the fact that lets the variant stand: where its
    wheels for the platform are and which GPU architectures that build carries."""
    if ctx.platform == "linux/amd64":
        return []
    where = (f"on PyTorch's index only ({ctx.matrix.torch_index.format(variant=var.name)}; PyPI's "
             f"{ctx.platform} wheels are another build)" if ctx.platform in var.index_only
             else "on PyPI" if t.pypi_default == var.name
             else f"on PyTorch's index ({ctx.matrix.torch_index.format(variant=var.name)})")
    arch = var.arch_for(ctx.platform)
    own = ctx.platform in var.platform_arch
    what = (f"its {ctx.platform} build carries {', '.join(arch)}" + ("" if own else " (the matrix "
            "records no separate arch list for this platform: the amd64 build's)")) if arch else \
        "the matrix records no arch list for it"
    return [Violation("torch_platform", f"torch {t.version} has {var.name} wheels for {ctx.platform} "
                      f"{where}; {what}", tuple(dict.fromkeys(var.source + t.source)), severity="info")]


@rule("torch_python", "torch", "python")
def _torch_python(a: Assignment, ctx: Context) -> list[Violation]:
    """PyTorch must publish wheels for the Python version."""
    t: TorchRelease = a["torch"]
    py = a["python"]
    if py.endswith("t"):  # free-threaded: its own wheels (cp314t)
        if py in t.python_ft:
            return []
        tag = "cp" + py.replace(".", "")
        others = [r.line for r in ctx.matrix.torch if py in r.python_ft]
        return [Violation("torch_python",
                          f"torch {t.version} has no {tag} (free-threaded Python {py}) wheels"
                          + (f" (it has {', '.join(t.python_ft)})" if t.python_ft else ""),
                          t.source + ("https://pypi.org/simple/torch/",),
                          f"use torch {', '.join(dict.fromkeys(others))} for Python {py}"
                          if others else f"use Python {py[:-1]} (with the GIL)")]
    if py in t.python:
        return []
    return [Violation("torch_python",
                      f"torch {t.version} has no wheels for Python {py} (it has {', '.join(t.python)})",
                      t.source, f"use Python {t.python[-1]}, or a torch release with Python {py} wheels")]


# -- OS and base image ----------------------------------------------------------------------

@rule("os_python", "os", "python")
def _os_python(a: Assignment, ctx: Context) -> list[Violation]:
    """The base OS must be able to install the Python version with apt."""
    o: OsInfo = a["os"]
    py = a["python"]
    if py in o.python:
        return []
    return [Violation("os_python",
                      f"{o.name} cannot install Python {py} with apt (it has {', '.join(sorted(o.python, key=python_key))})",
                      o.source, f"use Python {o.python_default} on {o.name}, or another OS")]


@rule("base_image", "cuda", "os", "flavour")
def _base_image(a: Assignment, ctx: Context) -> list[Violation]:
    """The runtime base image must exist: an nvidia/cuda tag of the flavour for the CUDA toolkit
    and OS, or the plain OS image (os flavour; the only flavour of CPU images)."""
    t: Toolkit | None = a["cuda"]
    o: OsInfo = a["os"]
    m = ctx.matrix
    fl = m.toolchains.flavour(a["flavour"])
    if t is None:
        if fl.nvidia_tag is None:
            return []
        return [Violation("base_image", f"a CPU image has no CUDA base: flavour {fl.name} needs a CUDA target",
                          fl.source, "use --flavour os (the default for CPU targets), or a CUDA target")]
    if fl.nvidia_tag is None:
        return []
    if m.base_images_for(t.version) is None:
        return [Violation("base_image", f"{m.base_repository} has no images for CUDA {t.version}",
                          t.source, "use another CUDA toolkit of the matrix, --flavour os, or --base-image")]
    imgs = m.base_images_for(t.version, o.name)
    if imgs is None:
        have = m.base_image_oses(t.version)
        return [Violation("base_image",
                          f"{m.base_repository} has no CUDA {t.version} image for {o.name} "
                          f"(it has {', '.join(have)})", _images_source(m, t.version),
                          f"use one of {', '.join(have)}, or --flavour os")]
    if fl.nvidia_tag not in imgs.flavours:
        return [Violation("base_image",
                          f"{m.base_repository} has no {fl.nvidia_tag} image for CUDA {t.version} on {o.name}",
                          imgs.source, "use another flavour or CUDA toolkit")]
    if fl.cudnn and (imgs.cudnn is None or (imgs.cudnn_os is not None and o.name not in imgs.cudnn_os)):
        return [Violation("base_image",
                          f"{m.base_repository} has no cuDNN image for CUDA {t.version} on {o.name}",
                          imgs.source, "use --flavour cuda-runtime or cuda-base (torch's wheels bring cuDNN)")]
    if ctx.platform not in imgs.platforms:
        return [Violation("base_image",
                          f"{m.base_repository} has no {ctx.platform} image for CUDA {t.version} on {o.name} "
                          f"(the matrix lists {', '.join(imgs.platforms)})", imgs.source,
                          "use a CUDA toolkit whose images are multi-arch, or --flavour os")]
    if imgs.removed:
        return [Violation("base_image",
                          f"{m.base_repository} no longer serves CUDA {t.version} tags (end of life)",
                          imgs.source, "use a supported CUDA toolkit, --flavour os, or --base-image with your mirror")]
    return []


def driver_cuda_of(m: Matrix, driver: str) -> Version | None:
    """The newest CUDA minor a driver runs natively: the newest toolkit whose floor it meets
    (the CUDA version nvidia-smi and nvidia-container-cli read from the driver)."""
    drv = Version(driver)
    ok = [t.version for t in m.toolkits if drv >= Version(t.driver_min)]
    return Version(minor(max(ok))) if ok else None


def image_require(m: Matrix, t: Toolkit, os_name: str | None) -> tuple[Any, Any] | None:
    """The image set of a toolkit (on the OS when given) and its NVIDIA_REQUIRE_CUDA, when the
    matrix records one."""
    sets = [b for b in m.base_images if b.cuda == t.version and (os_name is None or os_name in b.os)]
    for b in sets:
        if b.require_cuda is not None:
            return b, b.require_cuda
    return None


@rule("image_driver_branch", "cuda", "flavour")
def _image_driver_branch(a: Assignment, ctx: Context) -> list[Violation]:
    """An nvidia/cuda image starts only where its NVIDIA_REQUIRE_CUDA allows: on a driver whose
    CUDA is at least the image's, or on one of the driver branches its brand clauses list
    (forward compatibility through the image's cuda-compat package, or minor-version
    compatibility within a CUDA major); a listed branch past its end of life is a warning where
    forward compatibility is what runs it."""
    t: Toolkit | None = a["cuda"]
    if t is None or ctx.driver is None:
        return []
    m = ctx.matrix
    fl = m.toolchains.flavour(a["flavour"])
    if fl.nvidia_tag is None:
        return []
    os_name = getattr(a.get("os"), "name", None)
    # the rule runs once CUDA and flavour are known, mostly before the OS is: a set of the patch on
    # any OS stands in (every set read lists the same branches for each OS of a patch)
    found = image_require(m, t, os_name)
    have = driver_cuda_of(m, ctx.driver)
    if found is None:
        return _require_unknown(m, t, os_name, ctx.driver, have)
    imgs, req = found
    if have is not None and have >= req.cuda:
        return []
    branch = Version(ctx.driver).release[0]
    listed = ", ".join(f"R{b}" for b in req.branches) or "none"
    image = f"{imgs.repository or m.base_repository}:{t.version} images"
    said = req.note.split(":")[0]
    if said.startswith("unverified") and ("this patch" in said or os_name is None or os_name in said):
        image += f" ({said})"  # read in another patch's or OS's image: say so where it decides
    runs = f", CUDA {have}" if have is not None else ""
    if branch not in req.branches:
        return [Violation(
            "image_driver_branch",
            f"{image} set NVIDIA_REQUIRE_CUDA=cuda>={req.cuda} with driver branches {listed}: "
            f"nvidia-container-cli refuses to start them on driver {ctx.driver} (R{branch}{runs})",
            req.source,
            f"a driver of CUDA {req.cuda} or newer (>= {_floor_of(m, req.cuda)}), a branch the image lists, or "
            f"a CUDA this driver runs natively")]
    from envbuilder.core.advisories import branch_status

    st = branch_status(ctx.driver, m) or {}
    same_major = have is not None and have.major == req.cuda.major  # minor-version compatibility
    if st.get("eol_passed") and not same_major:
        return [Violation(
            "image_driver_branch",
            f"{image} list R{branch} in NVIDIA_REQUIRE_CUDA: they start on driver {ctx.driver} and run "
            f"by forward compatibility (their cuda-compat package), but R{branch} "
            + (f"reached end of life in {st['eol']}" if st.get("eol") else
               "is end of life (NVIDIA: every branch older than those in its support table is)")
            + ": no more fixes for the driver the stack leans on",
            req.source + tuple(st.get("source", ())),
            f"a driver of CUDA {req.cuda} or newer (>= {_floor_of(m, req.cuda)}), or a supported branch "
            f"the image lists", severity="warning")]
    return [Violation(
        "image_driver_branch",
        f"driver {ctx.driver} (R{branch}{runs}) is older than {image}' CUDA {req.cuda}; the image "
        f"starts on it because its NVIDIA_REQUIRE_CUDA lists R{branch} (branches {listed})"
        + ("; it runs by minor-version compatibility" if same_major else "; it runs by forward compatibility"),
        req.source, severity="info")]


def _require_unknown(m: Matrix, t: Toolkit, os_name: str | None, driver: str,
                     have: Version | None) -> list[Violation]:
    """A set without a recorded NVIDIA_REQUIRE_CUDA, on a driver of an older CUDA: whether
    nvidia-container-cli starts it is not known (a warning, never agreement)."""
    sets = [b for b in m.base_images if b.cuda == t.version and (os_name is None or os_name in b.os)]
    if not sets or (have is not None and have >= Version(minor(t.version))):
        return []
    b = sets[0]
    return [Violation(
        "image_driver_branch",
        f"the matrix has no NVIDIA_REQUIRE_CUDA for {b.repository or m.base_repository}:{t.version} images: "
        f"whether nvidia-container-cli starts them on driver {driver} (R{Version(driver).release[0]}"
        + (f", CUDA {have}" if have is not None else "") + ") is not known",
        b.source, "read it (envbuilder matrix refresh --source nvidia-images) or use a driver of CUDA "
        f"{minor(t.version)} or newer", severity="warning")]


def _floor_of(m: Matrix, cuda: Version) -> str:
    """The driver floor of a CUDA minor's first toolkit patch (its GA)."""
    tks = sorted(m.toolkits_for(minor(cuda)), key=lambda k: k.version)
    return tks[0].driver_min if tks else "?"


@rule("builder", "cuda", "os", "flavour", components=True)
def _builder(a: Assignment, ctx: Context) -> list[Violation]:
    """What compiles (a compiled component, pre-built ops) needs a builder with nvcc of torch's
    CUDA major and a host GCC that nvcc accepts."""
    try:
        b = builder_for(a, ctx.matrix, ctx.ops)
    except NoBuilder as e:
        return [Violation("builder", str(e), e.source, e.fix)]
    if b is None:
        return []
    return ([Violation("builder", msg, src, fix, severity="warning") for msg, fix, src in b.warnings]
            + [Violation("builder", msg, src, severity="info") for msg, src in b.evidence])


# -- NCCL -----------------------------------------------------------------------------------

@rule("nccl_pin", "cuda", "torch", "nccl")
def _nccl_pin(a: Assignment, ctx: Context) -> list[Violation]:
    """A pinned NCCL must be the NCCL the torch wheel bundles (another one breaks torch's import or hangs)."""
    if ctx.nccl_pin is None:
        return []
    if a["cuda"] is None:
        return [Violation("nccl_pin",
                          f"NCCL {ctx.nccl_pin} is pinned, but CPU torch wheels bundle no NCCL",
                          a["torch"].source, "drop the NCCL pin, or use a CUDA target")]
    t: TorchRelease = a["torch"]
    var = t.variants.get(variant_of(a["cuda"]))
    if var is None:
        return []  # torch_cuda_variant reports it
    if var.nccl is None:
        return [Violation("nccl_pin",
                          f"the matrix does not know which NCCL torch {t.version} {var.name} bundles",
                          t.source, "drop the NCCL pin, or add the fact to torch.yaml")]
    if Pin.parse(ctx.nccl_pin, "nccl").matches(var.nccl):
        return []
    with_pin = [f"{r.version}" for r in ctx.matrix.torch
                if (rv := r.variants.get(var.name)) and rv.nccl
                and Pin.parse(ctx.nccl_pin, "nccl").matches(rv.nccl)]
    alt = (f"torch {', '.join(dict.fromkeys(with_pin[:4]))} bundles NCCL {ctx.nccl_pin}" if with_pin
           else f"drop the NCCL pin (torch {t.version} brings NCCL {var.nccl})")
    return [Violation("nccl_pin",
                      f"torch {t.version} {var.name} bundles NCCL {var.nccl} ({var.nccl_package or 'linked in'}), "
                      f"not {ctx.nccl_pin}", t.source, alt)]


@rule("nccl_torch", "torch", "nccl")
def _nccl_torch(a: Assignment, ctx: Context) -> list[Violation]:
    """An NCCL pin implies a CUDA build: without a CUDA axis, some CUDA variant of the torch
    release must bundle the pinned NCCL (a CPU build bundles none)."""
    if ctx.nccl_pin is None or "cuda" in a:
        return []  # with a CUDA axis, nccl_pin judges the one variant
    from envbuilder.core.target import Pin
    t: TorchRelease = a["torch"]
    pin = Pin.parse(ctx.nccl_pin, "nccl")
    cuda_variants = [v for n, v in t.variants.items() if n != "cpu"]
    if any(v.nccl is not None and pin.matches(v.nccl) for v in cuda_variants):
        return []
    have = ", ".join(f"{v.name}: {v.nccl or 'unknown'}" for v in
                     sorted(cuda_variants, key=lambda v: (len(v.name), v.name)))
    with_pin = [f"{r.version} {n}" for r in ctx.matrix.torch for n, rv in r.variants.items()
                if rv.nccl and pin.matches(rv.nccl)]
    alt = (f"torch {', '.join(dict.fromkeys(with_pin[:4]))} bundles NCCL {ctx.nccl_pin}" if with_pin
           else f"drop the NCCL pin (torch {t.version} brings its own)")
    return [Violation("nccl_torch",
                      f"no CUDA build of torch {t.version} bundles NCCL {ctx.nccl_pin} "
                      f"({have or 'it has no CUDA builds'}); an NCCL pin implies a CUDA build",
                      t.source, alt)]


@rule("nccl_cuda", "cuda", "nccl")
def _nccl_cuda(a: Assignment, ctx: Context) -> list[Violation]:
    """NCCL must be built for the CUDA major of the image."""
    t: Toolkit | None = a["cuda"]
    n = a["nccl"]
    if t is None or n is None or not n.cuda:
        return []
    if t.version.major in n.cuda_majors:
        return []
    return [Violation("nccl_cuda",
                      f"NCCL {n.version} is built for CUDA {', '.join(n.cuda)}, not CUDA {t.version.major}.x",
                      n.source, "use the NCCL that torch bundles for this CUDA")]


# -- what each component's releases declare -------------------------------------------------

def _requires_value(axis: str, a: Assignment) -> Version | None:
    if axis == "python":
        return _python_version(a["python"])
    value = a[axis]  # torch: TorchRelease; cuda: Toolkit | None (CPU); nccl: NcclRelease | None
    return None if value is None else value.version


REQUIRES_AXES = ("torch", "python", "cuda", "nccl")  # what a release's requires: may name


def _requires(comp: str, axis: str) -> CheckFn:
    # One rule per (component, axis), so that `check` judges e.g. --torch with a component's
    # pin without needing --python (a rule applies only once every axis it reads is assigned).
    def check(a: Assignment, ctx: Context) -> list[Violation]:
        c: ComponentRelease | None = a[comp]
        if c is None:
            return []
        spec = c.requires.get(axis)
        value = _requires_value(axis, a) if spec is not None else None
        if spec is None or value is None or _covers(spec, value):
            return []
        ok = [r.line for r in ctx.matrix.component(comp).releases
              if (s := r.requires.get(axis)) is None or s.contains(value, prereleases=True)]
        alt = (f"{comp} {', '.join(dict.fromkeys(ok[:3]))} works with {axis} {value}" if ok
               else f"a {axis} that satisfies {spec}")
        return [Violation(f"{comp}_requires",
                          f"{comp} {c.version} requires {axis} {spec}; this stack has {value}",
                          c.source, alt)]
    check.__doc__ = f"{comp} declares the torch, Python (and CUDA, NCCL) versions it supports."
    return check


def requires_rules(matrix: Matrix) -> list[Rule]:
    """Each component's requires: rules (its releases' torch, Python, CUDA and NCCL ranges) and
    imports: rules (what some releases need at import time, torch and Python)."""
    return [Rule(f"{c}_requires", (c, axis), f"{c} declares the torch, Python (and CUDA, NCCL) "
                 f"versions it supports.", _requires(c, axis))
            for c in matrix.component_names for axis in REQUIRES_AXES] + [
        Rule(f"{c.name}_imports", (c.name, axis), f"{c.name} releases that cannot be imported with "
             f"some {axis} releases (a {axis} API or module they use while importing).", _imports(c.name, axis))
        for c in matrix.components if c.imports
        for axis in IMPORT_AXES if any(axis in n.requires for n in c.imports)]


IMPORT_AXES = ("torch", "python")  # what a component's imports: may name


def _imports(comp: str, axis: str) -> CheckFn:
    def check(a: Assignment, ctx: Context) -> list[Violation]:
        c: ComponentRelease | None = a[comp]
        if c is None:
            return []
        value = _requires_value(axis, a)
        if value is None:
            return []
        out: list[Violation] = []
        for need in ctx.matrix.component(comp).imports:
            spec = need.requires.get(axis)
            if spec is None or not need.applies(c.version):
                continue
            if not _covers(spec, value):
                ok = [str(r.version) for r in ctx.matrix.component(comp).releases
                      if _imports_ok(ctx.matrix, comp, r, axis, value)]
                alt = (f"{comp} {', '.join(ok[:3])} import{'s' if len(ok) == 1 else ''} with {axis} {value}, or "
                       f"a {axis} that satisfies {spec}" if ok else f"a {axis} that satisfies {spec}")
                out.append(Violation(f"{comp}_imports",
                                     f"{comp} {c.version} cannot be imported with {axis} {value} (it needs "
                                     f"{axis} {spec}): {_first_sentence(need.reason)}",
                                     need.source, alt, detail=need.reason))
            elif _at_edge(ctx.matrix, axis, spec, value):
                out.append(Violation(f"{comp}_imports",
                                     f"{comp} {c.version} imports with {axis} {value}, at the edge of what it "
                                     f"needs ({axis} {spec}): {_first_sentence(need.reason)}",
                                     need.source, severity="info"))
        return out
    check.__doc__ = f"{comp} releases that cannot be imported with some {axis} releases."
    return check


def _imports_ok(m: Matrix, comp: str, rel: ComponentRelease, axis: str, value: Version) -> bool:
    return all(_covers(s, value) for n in m.component(comp).imports
               if n.applies(rel.version) and (s := n.requires.get(axis)) is not None)


def _at_edge(m: Matrix, axis: str, spec: Any, value: Version) -> bool:
    """The value is the last one a range admits on either side: the matrix's nearest older or
    newer release line of the axis falls outside it (torch 2.4 against >=2.4, torch 2.3 and
    2.4 being lines of the matrix)."""
    if axis == "torch":
        lines = sorted({Version(t.line) for t in m.torch})
        at = Version(f"{value.major}.{value.minor}")
        probe = {ln: max(t.version for t in m.torch if Version(t.line) == ln) for ln in lines}
    else:
        lines = sorted({Version(p) for p in m.pythons})
        at = value
        probe = {ln: ln for ln in lines}
    if at not in lines:
        return False
    i = lines.index(at)
    near = [lines[j] for j in (i - 1, i + 1) if 0 <= j < len(lines)]
    return any(not _covers(spec, probe[ln]) for ln in near)


def _images_source(m: Matrix, toolkit: Version) -> tuple[str, ...]:
    imgs = m.base_images_for(toolkit)
    return tuple(imgs.source) if imgs is not None else ()


# -- known breakages, as data ---------------------------------------------------------------

def _axis_version(axis: str, value: Any) -> Version | str | None:
    # called for every rule on every candidate: the matrix's Versions are used as they are
    # (parsing them again from text gave the same Version, thousands of times per resolve)
    if value is None:
        return None
    if axis == "python":
        return _python_version(value)
    if axis == "os":
        return str(value.name)
    v = value.version
    return v if isinstance(v, Version) else Version(str(v))


@functools.lru_cache(maxsize=64)
def _python_version(text: str) -> Version:
    return Version(text)


# (id of a breakage's range, version) -> (the range, whether it covers the version): the search
# asks the same question thousands of times per resolve (and render --all resolves every
# target); a range's answer for a version never changes. The range is kept with its answer, so
# its id cannot be reused by another while the entry lives.
_COVERS: dict[tuple[int, Any], tuple[Any, bool]] = {}


def _covers(cond: Any, v: Any) -> bool:
    """``cond.contains(v, prereleases=True)`` for a SpecifierSet of the matrix, memoized."""
    key = (id(cond), v)  # a SpecifierSet's own hash is recomputed on every call
    got = _COVERS.get(key)
    if got is None or got[0] is not cond:
        if len(_COVERS) > 100_000:  # a long-lived process with many matrices: start over
            _COVERS.clear()
        got = _COVERS[key] = (cond, bool(cond.contains(v, prereleases=True)))
    return got[1]


def _incompat_rule(x: Any) -> Rule:
    def hit(axis: str, cond: Any, v: Version | str) -> bool:
        if axis == "os":
            return bool(v == cond)
        return _covers(cond, v)

    made: dict[tuple[Any, ...], Violation] = {}  # the versions it names -> the (frozen) finding

    def check(a: Assignment, ctx: Context) -> list[Violation]:
        vs = []
        for axis, cond in x.when.items():
            v = _axis_version(axis, a[axis])
            if v is None or not hit(axis, cond, v):
                return []
            vs.append(v)
        key = tuple(vs)
        found = made.get(key)
        if found is None:
            desc = ", ".join(f"{ax} {v}" for ax, v in zip(x.when, vs))
            found = made[key] = Violation("known_incompatibility",
                                          f"{desc}: {_first_sentence(x.reason)} [{x.id}]",
                                          x.source, x.fix, severity=x.severity, detail=x.reason)
        return [found]
    return Rule("known_incompatibility", tuple(x.when), f"known breakage {x.id}", check)


def _advisory_rule(adv: Any) -> Rule:
    """A known-bad release: a warning on the stack that holds it (an error, so the search
    moves on to the fixed release, while the component is in ``ctx.avoid``)."""
    from envbuilder.core.advisories import AVOIDED, describe

    axis = "cuda" if adv.component == "driver" else adv.component
    made: dict[tuple[str, bool], Violation] = {}

    def check(a: Assignment, ctx: Context) -> list[Violation]:
        if adv.component == "driver":
            if ctx.driver is None or not adv.covers(ctx.driver):
                return []
            v = ctx.driver
        else:
            value = a[axis]
            ver = None if value is None else getattr(value, "version", None)
            if ver is None:
                return []
            # asked for every candidate of the search: the memoized answer, on the matrix's
            # own Version (str() and parsing it again cost a quarter of render --all's search)
            if not _covers(adv.affected, ver):
                return []
            v = str(ver)
        avoid = adv.component in ctx.avoid and adv.severity in AVOIDED
        found = made.get((v, avoid))
        if found is None:
            fix = (f"use {adv.component} {adv.fixed} or later" if adv.fixed
                   else f"watch {adv.source[0]} for a fix")
            found = made[(v, avoid)] = Violation(
                "advisory", f"{adv.component} {v} is advised against ({adv.severity}): "
                f"{describe(adv)} [{adv.id}: {adv.source[0]}]", adv.source, fix,
                severity="error" if avoid else "warning")
        return [found]
    return Rule("advisory", (axis,), f"advisory {adv.id}", check)


def _first_sentence(text: str) -> str:
    import re

    m = re.search(r"[.;](\s|$)", text)
    return (text[: m.start()] if m else text).strip()


def _candidates(axis: str, pins: Mapping[str, Any], m: Matrix,
                included: frozenset[str]) -> list[Version | str | None]:
    """The values an axis can take under the request's pins (None: a CPU build, or a
    component the request leaves out)."""
    from envbuilder.core.target import Pin
    pin = pins.get(axis)
    if axis in m.component_names and pin is None and axis not in included:
        return [None]
    if axis == "cuda":
        if pin == "cpu":
            return [None]
        return [t.version for t in m.toolkits if pin is None or t.minor == pin] + (
            [None] if pin is None else [])
    if axis == "os":
        return [pin] if pin else list(m.os)
    if axis == "torch":
        known = [t.version for t in m.torch]
    elif axis == "python":
        known = [Version(p) for p in m.pythons]
    elif axis in m.component_names:
        known = [c.version for c in m.component(axis).releases]
    else:  # nccl
        known = [n.version for n in m.nccl]
    if pin is None:
        return list(known)
    p = Pin.parse(pin, axis)
    out: list[Version | str | None] = [v for v in known if p.matches(v)]
    return out or list(_pin_versions(pin))


def _pin_versions(text: str) -> list[Version]:
    """A pin the matrix does not list, as versions: an exact version, or a line's first and
    last patch release (``0.21`` -> 0.21.0 and 0.21.9999), so a range must cover the line."""
    v = Version(text)
    return [v] if len(v.release) > 2 else [v, Version(f"{text}.9999")]


def breakages_covering(axis: str, pin: str, pins: Mapping[str, str], m: Matrix,
                       included: frozenset[str] = frozenset()) -> list[Violation]:
    """Known breakages that refuse a version the matrix does not list.

    A breakage applies when its range on ``axis`` covers the whole pin and, on each other
    axis it names, every value the request's pins allow falls in its range (so no choice of
    the rest avoids it). ``included`` names the components asked for without a pin."""
    out: list[Violation] = []
    for x in m.incompatibilities:
        cond = x.when.get(axis)
        if x.severity != "error" or cond is None or axis == "os" or isinstance(cond, str):
            continue
        if not all(cond.contains(v, prereleases=True) for v in _pin_versions(pin)):
            continue
        covered = True
        for other, oc in x.when.items():
            if other == axis:
                continue
            values = _candidates(other, pins, m, included)
            if not values or any(v is None or (v != oc if isinstance(oc, str)
                                                else not oc.contains(v, prereleases=True))
                                 for v in values):
                covered = False
                break
        if covered:
            desc = ", ".join([f"{axis} {pin}"] + [f"{o} {pins[o]}" for o in x.when
                                                   if o != axis and o in pins])
            out.append(Violation("known_incompatibility",
                                 f"{desc}: {_first_sentence(x.reason)} [{x.id}]",
                                 x.source, x.fix, severity=x.severity, detail=x.reason))
    return out


def all_rules(matrix: Matrix) -> list[Rule]:
    """The built-in rules plus one rule per known breakage of the matrix (made once per
    Matrix: render --all resolves every target against the same one)."""
    if _LAST_RULES and _LAST_RULES[0] is matrix:
        return list(_LAST_RULES[1])
    names = matrix.component_names
    rules = [replace(r, axes=r.axes + names) if r.components else r for r in RULES]
    rules += requires_rules(matrix) + [_incompat_rule(x) for x in matrix.incompatibilities] + [
        _advisory_rule(x) for x in matrix.advisories if x.component in (
            "torch", "nccl", "cuda", *names, "driver")]
    _LAST_RULES[:] = [matrix, rules]
    return list(rules)


_LAST_RULES: list[Any] = []  # [the Matrix, its rules]


def rules_by_name() -> dict[str, Rule]:
    return {r.name: r for r in RULES}
