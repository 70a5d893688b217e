"""A component is one object (envbuilder/components): this test adds one from the test folder
alone (no module of envbuilder changes) and renders, verifies and locks with it. Also: the
typed instructions render each format from one object, and the registry lists the built-in
components in plan order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import pytest

from core_helpers import builtin
from envbuilder.api import resolve_target
from envbuilder.components import registry
from envbuilder.components.base import Component, PipLayer, PlanContext, VerifyCheck, VerifyContext, eq
from envbuilder.components.instructions import Cmd, Copy, Env, Run, Stage, cmds, docker_only
from envbuilder.errors import IncompatibleError
from envbuilder.lock.requirements import cross_check, input_requirements, read_lock
from envbuilder.lock.write import lock_stack
from envbuilder.render.plan import make_plan
from envbuilder.render.templating import render_files
from envbuilder.run.verify import compare

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "verify"
LABEL = "io.envbuilder.toy"


class Toy(Component):
    """A toy compiled component: a layer of its own built against torch, an OS package in the
    runtime stage, a label, a verify check and a lock pin."""

    name = "toy"
    facts_key = "toy"
    version = "1.2.3"

    def active(self, stack: Any) -> bool:
        return True

    def layer(self, ctx: PlanContext) -> PipLayer:
        return PipLayer(self.name, (f"toy-pkg=={self.version}",), None, build_env={"TOY_WITH_TORCH": "1"},
                        no_build_isolation=True, build_deps=("setuptools", "toy-build-helper"))

    def runtime_apt(self, stack: Any) -> tuple[str, ...]:
        return ("libtoy1",)

    def build_stage(self, stack: Any, site_packages: str) -> Stage:
        return Stage("toy-tools", "toy: its tools, against torch", "toy (its tools)",
                     Run(cmds("make -C /tmp/toy install PREFIX=/opt/toy")))

    def runtime_copies(self, stack: Any) -> tuple[Copy, ...]:
        return (Copy("/opt/toy", "/opt/toy", from_stage="toy-tools"),)

    def runtime_steps(self, stack: Any) -> Run:
        return Run(cmds("ldconfig"))

    def labels(self, ctx: PlanContext) -> dict[str, str]:
        return {LABEL: self.version}

    def verify_checks(self, facts: Mapping[str, Any], ctx: VerifyContext) -> list[VerifyCheck]:
        want = ctx.labels.get("toy")
        if want is None:
            return []
        return [eq("toy", "toy", want, (facts.get("toy") or {}).get("version"))]

    def lock_pins(self, stack: Any) -> dict[str, tuple[str, str]]:
        return {"toy-pkg": (self.version, f"toy {self.version}")}

    def source(self, stack: Any) -> tuple[str, ...]:
        return ("tests/test_components.py",)


@pytest.fixture
def toy():
    c = registry.register(Toy(), before="team-compiled")
    yield c
    registry.unregister("toy")


def test_builtin_components_in_plan_order():
    names = [c.name for c in registry.components()]
    assert names == ["torch", "horovod", "deepspeed", "fabric", "team-compiled", "team"]
    registry.register(Toy(), before="team")
    try:
        assert [c.name for c in registry.components()][-2:] == ["toy", "team"]
        with pytest.raises(ValueError):  # a name is registered once
            registry.register(Toy())
    finally:
        registry.unregister("toy")
    assert "toy" not in [c.name for c in registry.components()]


def test_a_toy_component_renders_in_both_formats(toy):
    stack = resolve_target("cu118", matrix=builtin())
    plan = make_plan(stack)
    assert [la.name for la in plan.layers] == ["torch", "toy"]
    files = render_files(plan)
    docker, app = str(files["Dockerfile"]), str(files["envbuilder.def"])
    assert "FROM layer-torch AS layer-toy" in docker
    assert "COPY --from=layer-toy /opt/layers/toy/ /opt/venv/" in docker
    assert files["requirements/toy.txt"] == "toy-pkg==1.2.3\n"
    assert files["requirements/toy.build.txt"] == "setuptools\ntoy-build-helper\n"
    for text in (docker, app):
        assert "env TOY_WITH_TORCH=1 pip install" in text and "--no-build-isolation" in text
        assert "libtoy1" in text  # the runtime stage's apt step, in both views
    assert f'{LABEL}="1.2.3"' in docker and f"    {LABEL} 1.2.3\n" in app
    assert "/opt/envbuilder-build/toy.txt" in app  # Apptainer's staging folder, set by the instruction
    # its own stage after torch's layer, copied from in the runtime stage
    assert "# --- toy: its tools, against torch ---\nFROM layer-torch AS toy-tools\n" in docker
    assert "RUN make -C /tmp/toy install PREFIX=/opt/toy\n" in docker
    assert "COPY --from=toy-tools /opt/toy /opt/toy\nRUN ldconfig\n" in docker
    assert ('    echo "envbuilder: stage builder, toy (its tools)"\n'
            "    make -C /tmp/toy install PREFIX=/opt/toy\n") in app
    assert "%files from builder\n    /opt/venv /opt/venv\n    /opt/toy /opt/toy\n" in app
    assert "    ldconfig\n" in app.split("Stage: runtime")[1]
    stack_json = json.loads(str(files["stack.json"]))
    assert [la["name"] for la in stack_json["layers"]] == ["torch", "toy"]


def test_a_toy_component_is_verified(toy):
    d = json.loads((FIXTURES / "cu124-torch2.6-debian12.json").read_text())
    facts, labels = d["facts"], dict(d["labels"], **{LABEL: "1.2.3"})
    good = {c.name: c for c in compare(dict(facts, toy={"version": "1.2.3"}), labels)}
    assert good["toy"].ok and all(c.ok for c in good.values())
    bad = {c.name: c for c in compare(dict(facts, toy={"version": "9.9"}), labels)}
    assert not bad["toy"].ok and "1.2.3" in bad["toy"].detail and "9.9" in bad["toy"].detail


def test_a_toy_component_is_locked(toy, tmp_path):
    stack = resolve_target("cpu", matrix=builtin())
    lines = input_requirements(stack)
    assert "toy-pkg==1.2.3" in lines and "toy-build-helper" in lines  # one resolution, every layer
    # the lock refuses requirements against the component's pin (before uv runs), naming it
    req = tmp_path / "extra.txt"
    req.write_text("toy-pkg==2.0\n")
    with pytest.raises(IncompatibleError) as e:
        lock_stack(stack, tmp_path / "out", requirements_file=req)
    assert e.value.exit_code == 3 and "toy 1.2.3" in str(e.value)
    # and a lock without its pin contradicts the stack
    torch = f"torch=={stack.torch.version}+{stack.variant}"
    with pytest.raises(IncompatibleError) as e:
        cross_check(stack, read_lock(f"{torch}\n"), "requirements.lock")
    assert "toy-pkg 1.2.3" in str(e.value)
    cross_check(stack, read_lock(f"{torch}\ntoy-pkg==1.2.3\n"), "requirements.lock")


# -- typed instructions ------------------------------------------------------------------------

def test_instructions_render_each_format_from_one_object():
    run = Run(cmds("apt-get update", "pip install -r /tmp/envbuilder/x.txt") + docker_only("rm -rf /tmp/envbuilder"))
    assert run.render("docker") == ("RUN apt-get update \\\n && pip install -r /tmp/envbuilder/x.txt"
                                    " \\\n && rm -rf /tmp/envbuilder")
    assert run.render("apptainer") == ("    apt-get update\n"
                                       "    pip install -r /opt/envbuilder-build/x.txt\n")
    env = Env({"PATH": "/opt/venv/bin:$PATH"}, {"NCCL_DEBUG": "WARN"})
    assert env.render("docker") == "ENV PATH=/opt/venv/bin:$PATH \\\n    NCCL_DEBUG=WARN"
    assert env.render("apptainer") == ('    export PATH=/opt/venv/bin:$PATH\n'
                                       '    export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"\n')
    cp = Copy("/opt/x", "/opt/x", from_stage="build-x")
    assert cp.render("docker") == "COPY --from=build-x /opt/x /opt/x"
    assert cp.render("apptainer") == "    /opt/x /opt/x\n"
    assert not Run() and Run((Cmd("true"),)) + Run() == Run((Cmd("true"),))
    with pytest.raises(ValueError):
        run.render("singularity")  # type: ignore[arg-type]


def test_payload_arguments_come_from_the_components():
    from envbuilder.run.verify import payload_args

    labels = {"io.envbuilder.torch": "2.6.0", "io.envbuilder.deepspeed-ops": "fused_adam",
              "io.envbuilder.compiled": "flash-attn,Bad Name"}
    m = builtin()  # the op's module comes from the matrix (matrices/deepspeed.yaml ops)
    assert payload_args(labels, m) == ["--ds-op", "fused_adam=deepspeed.ops.adam.fused_adam_op",
                                       "--compiled", "flash-attn"]
    assert payload_args({"io.envbuilder.torch": "2.6.0"}, m) == []


def test_each_components_smoke_check_is_one_the_payload_runs():
    from envbuilder.run.payload.ddp_smoke import CHECKS

    named = {c.name: c.smoke_check for c in registry.components() if c.smoke_check}
    assert named == {"horovod": "horovod_allreduce", "deepspeed": "deepspeed_zero"}
    assert set(named.values()) <= set(CHECKS)


def test_the_registry_loads_once_for_threads_that_ask_together(monkeypatch):
    """build --all --jobs N renders in threads: none may see the registry half-loaded (it did:
    the first thread marked it loaded before filling it, and another planned with no torch)."""
    import threading
    import time

    from envbuilder.components import registry

    monkeypatch.setattr(registry, "_REGISTRY", [])
    monkeypatch.setattr(registry, "_LOADED", False)
    real = registry._load

    def slow_load() -> None:  # widen the window the race needs
        time.sleep(0.2)
        real()

    monkeypatch.setattr(registry, "_load", slow_load)
    seen: list[tuple[str, ...]] = []
    threads = [threading.Thread(target=lambda: seen.append(tuple(c.name for c in registry.components())))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 4 and len(set(seen)) == 1 and "torch" in seen[0], seen
