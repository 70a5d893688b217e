"""envbuilder/lock/layers.py: one lock placed in the plan's layers."""

from envbuilder.lock.entries import read_lock
from envbuilder.lock.layers import layer_pins, split_by_layer, stack_layer_names
from envbuilder.render.plan import PipLayer

H = "    --hash=sha256:" + "a" * 64


def _lock(*entries):
    out = ["# target: cu121", "# python: 3.11", ""]
    for name, version, via in entries:
        out.append(f"{name}=={version} \\")
        out.append(H)
        out += [f"    # via {v}" for v in via]
    return "\n".join(out) + "\n"


class Plan:
    def __init__(self, *layers):
        self.layers = layers


TEXT = _lock(("torch", "2.5.1", ()), ("nvidia-nccl-cu12", "2.21.5", ("torch",)),
             ("filelock", "3.0", ("torch",)), ("triton", "3.1.0", ("torch",)),
             ("deepspeed", "0.16.9", ()), ("ninja", "1.11", ("deepspeed",)), ("rich", "13.0", ()))


def test_the_stack_layer_holds_torch_and_its_big_wheels():
    assert stack_layer_names(read_lock(TEXT)) == {"torch", "nvidia-nccl-cu12", "triton"}


def test_compiled_layers_get_their_build_closure_and_the_rest_goes_last():
    plan = Plan(PipLayer("torch", ("torch==2.5.1",), None),
                PipLayer("deepspeed", ("deepspeed==0.16.9",), None, no_build_isolation=True,
                         build_deps=("ninja",)),
                PipLayer("team", ("rich==13.0",), None))
    parts = split_by_layer(TEXT, plan)
    assert list(parts) == ["torch", "deepspeed.build", "deepspeed", "team"]
    names = {k: [p.name for p in read_lock(v)] for k, v in parts.items()}
    assert sorted(names["torch"]) == ["nvidia-nccl-cu12", "torch", "triton"]
    assert set(names["deepspeed.build"]) == {"filelock", "ninja"}  # torch's small deps + its build
    assert names["deepspeed"] == ["deepspeed"] and names["team"] == ["rich"]
    assert all("# via" not in v for v in parts.values()) and all(H.strip() in v for v in parts.values())
    files = {f"requirements/{k}.txt": v for k, v in parts.items()}
    pins = layer_pins(plan, files)
    assert pins["deepspeed"] == ["ninja==1.11", "filelock==3.0", "deepspeed==0.16.9"] or \
        set(pins["deepspeed"]) == {"ninja==1.11", "filelock==3.0", "deepspeed==0.16.9"}
