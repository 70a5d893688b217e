"""Horovod: compiled against the image's torch (no build isolation) with Gloo and, on CUDA,
NCCL operations linked against the NCCL torch loads; its own launcher (horovodrun) in the jobs;
verify checks it was built with NCCL and resolves torch's libnccl."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Mapping

from envbuilder.components.base import Component, PipLayer, PlanContext, VerifyCheck, VerifyContext, eq

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

class Horovod(Component):
    name = axis = facts_key = "horovod"
    smoke_check = "horovod_allreduce"

    def builder_apt(self, stack: Stack) -> tuple[str, ...]:
        return ("cmake",)

    def layer(self, ctx: PlanContext) -> PipLayer:
        stack, setup, arch = ctx.stack, ctx.setup, ctx.arch
        compiles = self.facts(stack.matrix).compiles
        assert compiles is not None
        env = dict(compiles.env)
        env.setdefault("HOROVOD_WITH_PYTORCH", "1")
        env.update({"HOROVOD_WITHOUT_TENSORFLOW": "1", "HOROVOD_WITHOUT_MXNET": "1",
                    "HOROVOD_WITH_GLOO": "1", "HOROVOD_WITHOUT_MPI": "1"})
        extra_build: list[str] = []
        pre: list[str] = []
        if not ctx.gpu:
            env.pop("HOROVOD_GPU_OPERATIONS", None)
        else:
            env.update(ctx.compile_env)
            tv = stack.torch_variant
            # link Horovod against the NCCL torch loads: the nvidia-nccl wheel in the venv (for
            # torch builds that link NCCL statically, the wheel of exactly that NCCL version)
            if tv.nccl_package is None and tv.nccl is not None and stack.toolkit is not None:
                extra_build.append(f"nvidia-nccl-cu{stack.toolkit.version.major}=={tv.nccl}")
            # the wheel ships only libnccl.so.2; Horovod's CMake looks for libnccl.so
            pre.append(f"ln -sf libnccl.so.2 {ctx.site}/nvidia/nccl/lib/libnccl.so")
            env.update({"HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_NCCL_HOME": f"{ctx.site}/nvidia/nccl",
                        "HOROVOD_NCCL_LINK": "SHARED"})
            if setup.cuda_home:
                env["HOROVOD_CUDA_HOME"] = setup.cuda_home
            if arch:
                env["HOROVOD_BUILD_CUDA_CC_LIST"] = ",".join(a.split("+")[0].replace(".", "") for a in arch)
        return self.compiled_layer(ctx, (f"horovod=={self.release(stack).version}",), env,
                                   extra_build=tuple(extra_build), pre_install=tuple(pre))

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        h = facts.get("horovod")
        want = ctx.labels.get("horovod")
        if want is None:
            return [] if h is None else [VerifyCheck("horovod", False, None, h.get("version"),
                                                     f"Horovod {h.get('version')} is installed but not labelled")]
        if h is None:
            return [VerifyCheck("horovod", False, want, None, f"the label says Horovod {want}; it is not installed")]
        out = [eq("horovod", "Horovod", want, h.get("version"))]
        if "error" in h:
            out.append(VerifyCheck("horovod_import", False, "import horovod.torch", None, h["error"]))
            return out
        if ctx.gpu:
            out += _nccl_checks(h, ctx)
        return out

    def launcher(self, stack: Stack) -> str | None:
        return "horovodrun"  # jobs/horovodrun-NxM.sh: Horovod's own launcher over Gloo

    def launcher_program(self, program: list[str]) -> list[str]:
        """horovodrun runs a program per rank: the smoke job, or the team's command (torchrun's
        --no_python form back to the plain command, a script or ``-m`` module under python)."""
        if program and program[0] == "--no_python":
            return program[1:]
        return ["python", *program]


def _nccl_checks(h: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
    built = int(h.get("nccl_built") or 0)
    out = [VerifyCheck("horovod_nccl_built", built > 0, "NCCL operations", built,
                       f"hvd.nccl_built() = {built}" if built else
                       "Horovod was built without NCCL operations (hvd.nccl_built() = 0)")]
    resolved = (h.get("ldd") or {}).get("libnccl.so.2")
    torch_nccl = [n["realpath"] for n in ctx.nccl]
    real = os.path.normpath(resolved) if resolved else None
    hv = None
    if built:
        hv = f"{built // 10000}.{(built % 10000) // 100}.{built % 100}" if built >= 10000 else str(built)
    want_nccl = ctx.labels.get("nccl")
    ok = real is not None and real in torch_nccl and hv == want_nccl
    detail = (f"Horovod ({h.get('extension')}) resolves libnccl.so.2 to {resolved}, the file torch loads; "
              f"built against NCCL {hv}" if ok else
              f"Horovod resolves libnccl.so.2 to {resolved} and was built against NCCL {hv}; torch "
              f"loads {', '.join(torch_nccl) or 'no shared NCCL'} and the label says NCCL {want_nccl}")
    out.append(VerifyCheck("horovod_nccl", ok, {"file": torch_nccl, "version": want_nccl},
                           {"file": resolved, "version": hv}, detail))
    return out


COMPONENT = Horovod()  # its order, tag, title and how it compiles: matrices/horovod.yaml
