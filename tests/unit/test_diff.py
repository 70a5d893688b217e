"""envbuilder/knowledge/diff.py: the facts two sides are compared by, from a stack, its
labels and a lock record, with each component's facts read from the matrix's files."""

from core_helpers import builtin
from envbuilder.core.resolve import resolve_target
from envbuilder.knowledge import diff
from envbuilder.labels import write


def test_the_facts_name_each_component_and_its_ops():
    keys = [k for k, _ in diff.FACTS]
    assert keys.index("nccl") < keys.index("deepspeed") < keys.index("deepspeed_ops") < keys.index("python")
    assert "horovod" in keys and diff.FACT_STAGE["deepspeed_ops"] == "layer-deepspeed"
    assert diff.CHAIN[:2] == ("builder", "layer-torch") and diff.CHAIN[-1] == "layer-team"


def test_a_stack_and_its_labels_give_the_same_facts():
    st = resolve_target("cu121-ds", builtin())
    from_stack = diff.facts_from_stack(st.to_dict())
    from_labels = diff.facts_from_labels(write(st))
    for k in ("cuda", "torch", "torch_variant", "nccl", "deepspeed", "deepspeed_ops", "python", "os"):
        assert from_stack[k] == from_labels[k], k
    assert from_stack["horovod"] is None and from_stack["deepspeed_ops"] == ",".join(st.ops["deepspeed"])
