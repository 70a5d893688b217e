"""envbuilder/api/smoketest.py: the way the smoke job runs is chosen from a registry."""

import pytest

from envbuilder.api.smoketest import RUNNERS, SmokeAsk, runner_for
from envbuilder.errors import InputError


def ask(**kw):
    base = dict(image=None, host=False, records=None, nnodes=1, counts=None, backend="auto",
                timeout=60, shm_size="2g", gpus=None)
    return SmokeAsk(**{**base, **kw})


def test_the_first_runner_that_applies_runs_it(tmp_path):
    sif = tmp_path / "train.sif"
    sif.write_bytes(b"")
    assert [r.name for r in RUNNERS] == ["records", "sif", "nodes", "host", "container"]
    assert runner_for(ask(records="log.txt")).name == "records"
    assert runner_for(ask(image=str(sif))).name == "sif"
    assert runner_for(ask(image=str(sif), nnodes=2)).name == "sif"
    assert runner_for(ask(image=str(tmp_path / "absent.sif"))).name == "container"  # a ref
    assert runner_for(ask(image="img", nnodes=2)).name == "nodes"
    assert runner_for(ask(host=True)).name == "host"
    assert runner_for(ask(image="img")).name == "container"


def test_nodes_need_an_image():
    with pytest.raises(InputError, match="--nnodes > 1"):
        runner_for(ask(host=True, nnodes=2)).make(ask(host=True, nnodes=2))


def test_records_are_judged_without_an_engine(tmp_path):
    log = tmp_path / "smoke.log"
    log.write_text("")
    run_one, client = runner_for(ask(records=str(log))).make(ask(records=str(log)))
    assert client is None and callable(run_one)
