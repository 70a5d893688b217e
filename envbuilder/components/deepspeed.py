"""DeepSpeed: its ops pre-built at install time (--ds-ops; FusedAdam and CPU Adam by default on
CUDA) against the image's torch, or left to JIT (--ds-ops none, which needs an nvcc at run
time); verify checks each pre-built op is installed and loads, at the labelled -march."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from envbuilder.components.base import (PSABI_LEVELS, Component, PipLayer, PlanContext, VerifyCheck,
                                        VerifyContext, eq, public)

if TYPE_CHECKING:
    from envbuilder.core.resolve import Stack

# The ops DeepSpeed builds at start-up (deepspeed.init_distributed()), by accelerator, with the
# module that loads each pre-built: on its CPU accelerator the shared-memory collective op
# (comm/torch.py TorchBackend -> build_shm_op -> op_builder/cpu/comm.py ShareMemCommBuilder,
# absolute_name deepspeed.ops.comm.deepspeed_shm_comm_op); its CUDA accelerator has no such
# builder (create_op_builder returns None). Read in the v0.16.9, v0.18.0 and v0.19.5 tags.
# https://github.com/deepspeedai/DeepSpeed/blob/v0.16.9/deepspeed/comm/torch.py
# https://github.com/deepspeedai/DeepSpeed/blob/v0.16.9/op_builder/cpu/comm.py
STARTUP_OPS: dict[str, dict[str, str]] = {
    "cpu": {"deepspeed_shm_comm": "deepspeed.ops.comm.deepspeed_shm_comm_op"}, "cuda": {}}
CPU_ACCELERATOR_OPS = ("deepspeed_shm_comm",)  # only DeepSpeed's CPU accelerator builds these


class DeepSpeed(Component):
    name = axis = facts_key = "deepspeed"
    smoke_check = "deepspeed_zero"

    def refuse(self, stack: Stack, base_image: str | None) -> None:
        if stack.ops_left_to_jit(self.name):
            _refuse_jit_without_nvcc(stack, base_image)
        cpu_only = [o for o in self.ops(stack) if o in CPU_ACCELERATOR_OPS]
        if cpu_only and stack.toolkit is not None:
            from envbuilder.errors import IncompatibleError

            raise IncompatibleError(
                f"--ds-ops {','.join(cpu_only)}: an op of DeepSpeed's CPU accelerator, which a "
                f"CUDA target's DeepSpeed does not use (its CUDA accelerator builds no such op); "
                f"drop it, or build a cpu target for it")

    def compiles_cpu(self, ctx: PlanContext) -> bool:
        ops = self.facts(ctx.stack.matrix).ops
        return any(not ops[o].cuda for o in self.ops(ctx.stack))

    def layer(self, ctx: PlanContext) -> PipLayer:
        stack, setup, gpu = ctx.stack, ctx.setup, ctx.gpu
        ops = self.ops(stack)
        env = {"DS_BUILD_OPS": "0"}
        if ops:
            # DeepSpeed picks its accelerator at build time from the GPUs it sees: the builder
            # has none, so the CUDA op builders are chosen explicitly (else CPU ops are built)
            env["DS_ACCELERATOR"] = "cuda" if gpu else "cpu"
            env.update({self.facts(stack.matrix).ops[o].env: "1" for o in ops})
            env.update(ctx.compile_env)
            if gpu:
                env["TORCH_CUDA_ARCH_LIST"] = ";".join(ctx.arch)
            env.update(setup.isa_env)
        # with DS_ACCELERATOR=cuda DeepSpeed's setup.py adds nvidia-ml-py to its requirements
        # (its sdist metadata does not list it): named here so offline wheelhouses carry it
        extra = ("nvidia-ml-py",) if ops and gpu else ()
        return self.compiled_layer(ctx, (f"deepspeed=={self.release(stack).version}",), env,
                                   compiles=bool(ops), extra_build=extra)

    def payload_args(self, ctx: VerifyContext) -> list[str]:
        """Each pre-built op the labels name and each op DeepSpeed builds at start-up on the
        image's accelerator, with the module that loads it (--ds-op op=module)."""
        ops = (ctx.labels.get("deepspeed-ops") or "").split(",")
        modules = {op: mod for op, mod in _op_modules(ctx).items() if op in ops}
        if ctx.labels.get("deepspeed") is not None:
            modules.update({op: mod for op, mod in STARTUP_OPS["cuda" if ctx.gpu else "cpu"].items()
                            if op not in modules})
        return [a for op, mod in modules.items() for a in ("--ds-op", f"{op}={mod}")]

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        d = facts.get("deepspeed")
        lab = ctx.labels
        want = lab.get("deepspeed")
        if want is None:
            return []
        if d is None or "error" in (d or {}):
            return [VerifyCheck("deepspeed", False, want, None,
                                f"the label says DeepSpeed {want}; import failed: {(d or {}).get('error', 'not installed')}")]
        out = [eq("deepspeed", "DeepSpeed", want, public(d.get("version")))]
        installed = d.get("installed_ops") or {}
        for op in [o for o in (lab.get("deepspeed-ops") or "").split(",") if o]:
            rec = (d.get("ops") or {}).get(op) or {}
            inst = bool(installed.get(op))
            ok = inst and bool(rec.get("loaded"))
            detail = (f"{op} is pre-built and {rec.get('file')} loads" if ok else
                      f"{op}: installed_ops says {inst}; loading {_op_modules(ctx).get(op, '?')} "
                      f"{'worked' if rec.get('loaded') else 'failed: ' + str(rec.get('error', 'not tried'))}")
            out.append(VerifyCheck(f"ds_op_{op}", ok, "installed and loads",
                                   {"installed": inst, "loaded": rec.get("loaded")}, detail))
        labelled = [o for o in (lab.get("deepspeed-ops") or "").split(",") if o]
        startup = [o for o in STARTUP_OPS["cuda" if ctx.gpu else "cpu"] if o not in labelled]
        return out + [_startup_check(op, d, installed) for op in startup] + _isa_checks(d, lab.get("cpu-isa"))


def _startup_check(op: str, d: Mapping[str, Any], installed: Mapping[str, Any]) -> VerifyCheck:
    """An op DeepSpeed builds at deepspeed.init_distributed() on the image's accelerator: it
    loads pre-built, or the image keeps a compiler for DeepSpeed to build it at start-up."""
    rec = (d.get("ops") or {}).get(op) or {}
    cxx = (d.get("compilers") or {}).get("c++")
    if installed.get(op) and rec.get("loaded"):
        ok, detail = True, f"{op} (built by deepspeed.init_distributed()) is pre-built and {rec.get('file')} loads"
    elif cxx:
        ok, detail = True, (f"{op} is not pre-built; deepspeed.init_distributed() builds it at start-up "
                            f"with the image's compiler ({cxx})")
    else:
        ok, detail = False, (f"{op} can neither load (installed_ops says {bool(installed.get(op))}"
                             + (f"; {rec.get('error')}" if rec.get("error") else "")
                             + ") nor build (no c++ in the image): deepspeed.init_distributed() fails "
                             f"with \"Error building extension '{op}'\"; rebuild with --ds-ops {op} "
                             f"(pre-built by default on cpu targets)")
    return VerifyCheck(f"ds_startup_{op}", ok, "pre-built, or a compiler for the JIT",
                       {"installed": bool(installed.get(op)), "loaded": rec.get("loaded"), "c++": cxx}, detail)


def _isa_checks(d: Mapping[str, Any], isa: str | None) -> list[VerifyCheck]:
    marches = sorted({m for rec in (d.get("ops") or {}).values() for m in rec.get("march") or ()})
    if not (isa and marches):
        return []
    # GCC records the -march of every object (DW_AT_producer), the default x86-64 too for
    # objects compiled without one; -march=native is recorded as the build host's CPU name
    # (znver3, skylake-avx512, ...). Allowed: the psABI levels up to the labelled one.
    allowed = PSABI_LEVELS[:PSABI_LEVELS.index(isa) + 1] if isa in PSABI_LEVELS else (isa,)
    bad = [m for m in marches if m not in allowed]
    return [VerifyCheck("cpu_isa", not bad, isa, marches,
                        f"compiled CPU code targets -march={isa} at most "
                        f"({', '.join('-march=' + m for m in marches)})" if not bad else
                        f"the label says -march={isa}; op libraries were compiled with "
                        f"{', '.join('-march=' + m for m in bad)} (a build host's CPU: "
                        f"-march=native), which other nodes may not run")]


def _refuse_jit_without_nvcc(stack: Stack, base_image: str | None) -> None:
    """--ds-ops none on CUDA leaves DeepSpeed's ops to JIT at the first optimizer step: the
    runtime must carry an nvcc of torch's CUDA (an nvidia/cuda devel image given with
    --base-image); envbuilder's runtime flavours carry none, so anything else is refused."""
    from envbuilder.errors import IncompatibleError

    tk = stack.toolkit
    assert tk is not None
    want = f"{tk.version.major}.{tk.version.minor}"
    ref = base_image or stack.runtime_image
    tag = ref.rsplit(":", 1)[-1] if ":" in ref.rsplit("/", 1)[-1] else ""
    if "devel" in tag.split("-") and tag.startswith(want):
        return
    raise IncompatibleError(
        f"--ds-ops none leaves DeepSpeed's ops (FusedAdam...) to be compiled at the first "
        f"optimizer step, and the runtime {ref} has no nvcc for CUDA {want}: drop --ds-ops none "
        f"(fused_adam,cpu_adam are pre-built by default) or give --base-image "
        f"nvidia/cuda:{want}.x-devel-<os>")


def _op_modules(ctx: VerifyContext) -> dict[str, str]:
    """Each op's module, from the matrix the image was made from (matrices/deepspeed.yaml ops)."""
    if ctx.matrix is None or "deepspeed" not in ctx.matrix.component_names:
        return {}
    return ctx.matrix.component("deepspeed").op_modules()


COMPONENT = DeepSpeed()  # its order, tag, title, ops and how it compiles: matrices/deepspeed.yaml
