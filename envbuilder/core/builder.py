"""What the builder stage needs to compile a stack's compiled parts, and whether it can.

One function, ``builder_for``, answers for the resolver's rules (which refuse a stack whose
builder cannot exist, with the reason) and for the plan (which installs what it names): which
image the builder starts from, which nvcc it has (an nvidia/cuda devel image's, the OS
archive's, or NVIDIA's CUDA 13 wheels'), and which host GCC fits that nvcc.

Facts come from ``toolchains.yaml``: the base flavours, nvcc's host-GCC limits, the toolkits a
plain OS can install, and the compilers each OS packages; what compiles, from each component's
``compiles:`` (core.compiles) and the ops a request pre-builds. No component is named here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from packaging.version import Version

from envbuilder.core.matrix import BuilderToolkit, Component, Matrix, OsInfo, Toolkit, ToolchainNeed, minor


@dataclass(frozen=True)
class Builder:
    """The builder stage of a stack that compiles something."""

    image_kind: str  # "devel": an nvidia/cuda devel image; "os": the OS image, toolkit installed
    nvcc: Version | None  # None: nothing needs nvcc (CPU ops only, or a CPU target)
    toolkit: BuilderToolkit | None  # what installs nvcc in an "os" builder (None: the devel image has it)
    cuda_home: str | None
    gcc: int | None  # the host GCC major nvcc is given (None: no nvcc)
    gcc_packages: tuple[str, ...]  # apt packages for that GCC ("gcc", "g++" for the default)
    gcc_is_default: bool
    source: tuple[str, ...]
    warnings: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (message, fix, source)
    # facts that decided the builder at an edge (a component's toolchain need made it leave
    # the OS's default GCC): (message, source)
    evidence: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"image": self.image_kind,
                "nvcc": None if self.nvcc is None else str(self.nvcc),
                "toolkit": None if self.toolkit is None else {
                    "install": self.toolkit.install, "packages": list(self.toolkit.packages),
                    "apt_components": list(self.toolkit.apt_components)},
                "cuda_home": self.cuda_home, "gcc": self.gcc,
                "source": list(self.source)}


class NoBuilder(Exception):
    """No builder can compile this stack; the message says why, ``fix`` what would work."""

    def __init__(self, message: str, fix: str, source: tuple[str, ...]) -> None:
        super().__init__(message)
        self.fix = fix
        self.source = source


Ops = Mapping[str, tuple[str, ...]]  # a component's pre-built ops, by name (target.ops_of)


def compiling(a: Mapping[str, Any], m: Matrix, ops: Ops) -> list[Component]:
    """The components of an assignment that compile (core.compiles), in plan order."""
    return [m.component(n) for n in m.plan_order
            if a.get(n) is not None and m.component(n).compiled(ops.get(n, ()))]


def compiled(a: Mapping[str, Any], m: Matrix, ops: Ops, extensions: bool = False) -> tuple[bool, bool]:
    """(something compiles, something needs nvcc) for an assignment and the requested ops;
    ``extensions``: a team's own packages compile against torch (a CUDA torch makes them CUDA
    extensions)."""
    gpu = a.get("cuda") is not None
    if extensions:
        return True, gpu
    parts = compiling(a, m, ops)
    # a CUDA torch makes a component that compiles with nvcc a CUDA extension (CPU ops too:
    # they link cudart and cuBLAS)
    return bool(parts), gpu and any(c.compiles is not None and c.compiles.nvcc for c in parts)


def devel_image_exists(m: Matrix, t: Toolkit, os_name: str) -> bool:
    imgs = m.base_images_for(t.version, os_name)
    return imgs is not None and "devel" in imgs.flavours and not imgs.removed


def builder_for(a: Mapping[str, Any], m: Matrix, ops: Ops,
                extensions: tuple[str, ...] = ()) -> Builder | None:
    """The builder for an assignment (cuda, os, flavour and the components), None when nothing
    compiles; raises NoBuilder when no builder can compile it. ``extensions`` names a team's
    packages that compile against torch (render.compiled)."""
    compiles, nvcc_needed = compiled(a, m, ops, bool(extensions))
    if not compiles:
        return None
    o: OsInfo = a["os"]
    tc = m.toolchains
    needs = toolchain_needs(a, m, ops)
    if not nvcc_needed:  # CPU-only compiles: the OS's default g++ (or the GCC a component needs)
        hc = tc.host_compilers.get(o.name)
        if not needs or hc is None:
            if needs:
                raise NoBuilder(f"the matrix does not know which GCC {o.name} packages, and "
                                f"{_needs_text(a, needs)}", "add a host_compilers entry to toolchains.yaml",
                                tuple(s for _, n in needs for s in n.source))
            return Builder("os", None, None, None, hc.default if hc else None, ("g++",), True,
                           hc.source if hc else ())
        g, pkgs, default, gsrc, ev = _needed_gcc(a, o, hc, sorted(hc.packages, reverse=True), needs, None)
        return Builder("os", None, None, None, g, ("g++",) if default else pkgs, default, gsrc, (), ev)
    t: Toolkit = a["cuda"]
    flavour = a.get("flavour") or "os"
    warnings: list[tuple[str, str, tuple[str, ...]]] = []
    if devel_image_exists(m, t, o.name):
        imgs = m.base_images_for(t.version, o.name)
        kind, nvcc, tk, home = "devel", t.version, None, "/usr/local/cuda"
        source: tuple[str, ...] = imgs.source if imgs else ()
    elif flavour != "os":
        raise NoBuilder(f"{m.base_repository} has no CUDA {t.version} devel image for {o.name} to "
                        f"compile {_what(a, m, ops, extensions)}", "use --flavour os, or another OS",
                        _images_source(m, t))
    else:
        same_major = [k for k in tc.toolkits_for_os(o.name) if k.cuda.major == t.version.major]
        if not same_major:
            have = ", ".join(f"{k.minor} ({k.install}{'' if k.os == '*' else ' on ' + k.os})"
                             for k in tc.toolkits_for_os(o.name)) or "none"
            raise NoBuilder(
                f"no CUDA {t.version.major}.x compiler can be installed on {o.name} to compile "
                f"{_what(a, m, ops, extensions)} for torch's CUDA {t.minor} (nvcc must have torch's CUDA major: "
                f"torch.utils.cpp_extension refuses another); toolkits for {o.name}: {have}",
                f"use an OS with nvidia/cuda devel images (ubuntu22.04, ubuntu24.04), or a CUDA "
                f"{'/'.join(k.minor for k in tc.toolkits_for_os(o.name))} target",
                tuple(s for k in tc.toolkits_for_os(o.name) for s in k.source) or t.source)
        same_major = _exact_minor(a, m, ops, t, o, same_major)
        # the same minor if the OS has it, else the nearest at or above, else the newest below
        same_major.sort(key=lambda k: (k.cuda.minor != t.version.minor, k.cuda.minor < t.version.minor,
                                       abs(k.cuda.minor - t.version.minor)))
        tk = same_major[0]
        kind, nvcc, home, source = "os", tk.cuda, tk.cuda_home, tk.source
        if minor(tk.cuda) != t.minor:
            warnings.append((
                f"the builder's nvcc is CUDA {minor(tk.cuda)} ({tk.install} on {o.name}), torch's is "
                f"{t.minor}: same major, so torch.utils.cpp_extension only warns (minor-version "
                f"compatibility); kernels built by nvcc {minor(tk.cuda)} need a driver for CUDA "
                f"{minor(tk.cuda)} to JIT their PTX",
                f"use a CUDA {minor(tk.cuda)} target, or an OS with nvidia/cuda devel images",
                tk.source + ("https://github.com/pytorch/pytorch/blob/main/torch/utils/cpp_extension.py",)))
    gcc, pkgs, default, gsrc, ev = _host_gcc(m, o, nvcc, tk, needs, a)
    return Builder(kind, nvcc, tk, home, gcc, pkgs, default, source + gsrc, tuple(warnings), ev)


def toolchain_needs(a: Mapping[str, Any], m: Matrix, ops: Ops) -> list[tuple[Component, ToolchainNeed]]:
    """The toolchain needs (a host GCC range) of the compiling components' releases."""
    return [(c, n) for c in compiling(a, m, ops) for n in c.toolchain if n.applies(a[c.name].version)]


def _needs_text(a: Mapping[str, Any], needs: list[tuple[Component, ToolchainNeed]]) -> str:
    return "; ".join(f"{c.title} {a[c.name].version} builds only with GCC {n.gcc} ({n.reason.split('. ')[0]})"
                     for c, n in needs)


def _needed_gcc(a: Mapping[str, Any], o: OsInfo, hc: Any, fits: list[int],
                needs: list[tuple[Component, ToolchainNeed]], cap: str | None,
                ) -> tuple[int, tuple[str, ...], bool, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """Of the GCC majors ``fits`` (newest first: what nvcc accepts, or every one the OS packages),
    the one every component's toolchain need admits: the OS's default when it does, else the
    newest; NoBuilder naming the needs when none does."""
    src = tuple(s for _, n in needs for s in n.source)
    ok = [g for g in fits if all(n.gcc.contains(str(g)) for _, n in needs)]
    if not ok:
        packaged = ", ".join(map(str, sorted(hc.packages)))
        raise NoBuilder(f"{_needs_text(a, needs)}; {o.name} packages GCC {packaged}"
                        + (f" and {cap}" if cap else ""),
                        f"use an OS that packages a GCC in {', '.join(str(n.gcc) for _, n in needs)}, "
                        f"or another release", src + hc.source)
    g = hc.default if hc.default in ok else ok[0]
    ev: tuple[tuple[str, tuple[str, ...]], ...] = ()
    if g != hc.default:
        ev = ((f"{_needs_text(a, needs)}: the builder uses GCC {g}, not {o.name}'s default GCC {hc.default}",
               src),)
    return g, hc.packages[g], g == hc.default, hc.source + src, ev


def _exact_minor(a: Mapping[str, Any], m: Matrix, ops: Ops, t: Toolkit, o: OsInfo,
                 same_major: list[BuilderToolkit]) -> list[BuilderToolkit]:
    """The toolkits of torch's CUDA major an OS builder may use: all of them, unless a component
    that compiles accepts another minor than torch's only in some CUDA majors (its
    ``cuda_minor_mismatch``) and torch's is not one: then the exact minor, or NoBuilder."""
    for c in compiling(a, m, ops):
        majors = c.minor_mismatch_majors
        if majors is None or t.version.major in majors:
            continue
        exact = [k for k in same_major if k.cuda.minor == t.version.minor]
        if not exact:
            have = ", ".join(sorted({minor(k.cuda) for k in same_major}))
            what = "its ops" if c.has_ops else "its extension"
            also = f", or leave --{c.ops_option.replace('_', '-')} out (JIT at run time)" if c.has_ops else ""
            raise NoBuilder(
                f"{c.title} {a[c.name].version} compiles {what} only with nvcc of torch's exact CUDA "
                f"{t.minor}: its {'op builder' if c.has_ops else 'build'} tolerates a CUDA minor mismatch only for CUDA "
                f"{'/'.join(map(str, majors))}.x, and {o.name} can install nvcc {have} only",
                f"use a CUDA {have} target (torch of that CUDA){', ' if also else ' or '}an OS with CUDA "
                f"{t.minor} devel images{also}",
                c.minor_mismatch_source + tuple(s for k in same_major for s in k.source))
        same_major = exact
    return same_major


def _images_source(m: Matrix, t: Toolkit) -> tuple[str, ...]:
    imgs = m.base_images_for(t.version)
    return imgs.source if imgs is not None else t.source


def compiled_parts(a: Mapping[str, Any], m: Matrix, ops: Ops) -> list[str]:
    """What of the matrix's components compiles in an assignment, in words (``<Title> 1.2.3``,
    or ``<Title> ops a,b`` for pre-built ops): the builder's refusals and a build's missing
    builder say it."""
    return [f"{c.title} ops {','.join(ops.get(c.name, ()))}" if c.has_ops and c.compiles is not None
            and c.compiles.when == "ops" else f"{c.title} {a[c.name].version}"
            for c in compiling(a, m, ops)]


def _what(a: Mapping[str, Any], m: Matrix, ops: Ops, extensions: tuple[str, ...] = ()) -> str:
    parts = [f"the team's compiled packages ({', '.join(extensions)})"] if extensions else []
    return " and ".join(parts + compiled_parts(a, m, ops)) or "extensions"


def _host_gcc(m: Matrix, o: OsInfo, nvcc: Version, tk: BuilderToolkit | None,
              needs: list[tuple[Component, ToolchainNeed]] | None = None, a: Mapping[str, Any] | None = None,
              ) -> tuple[int, tuple[str, ...], bool, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    tc = m.toolchains
    rng = tc.gcc_range(nvcc)
    hc = tc.host_compilers.get(o.name)
    if rng is None or hc is None:
        missing = "nvcc_host_gcc" if rng is None else "host_compilers"
        raise NoBuilder(f"the matrix does not know which GCC {'nvcc ' + minor(nvcc) + ' accepts' if rng is None else o.name + ' packages'}",
                        f"add a {missing} entry to toolchains.yaml", ())
    cap = rng.gcc_max if tk is None or tk.gcc_max is None else min(rng.gcc_max, tk.gcc_max)
    fits = sorted((g for g in hc.packages if g <= cap and (rng.gcc_min is None or g >= rng.gcc_min)),
                  reverse=True)
    if not fits:
        raise NoBuilder(
            f"nvcc {minor(nvcc)} accepts GCC {rng.gcc_min or ''}..{cap}, and {o.name} packages only GCC "
            f"{', '.join(map(str, sorted(hc.packages)))}",
            "use another OS or CUDA version", rng.source + hc.source)
    if needs and a is not None:
        g, pkgs, default, src, ev = _needed_gcc(a, o, hc, fits, needs,
                                                f"nvcc {minor(nvcc)} accepts GCC {rng.gcc_min or ''}..{cap}")
        return g, pkgs, default, rng.source + src, ev
    g = fits[0]
    return g, hc.packages[g], g == hc.default, rng.source + hc.source, ()
