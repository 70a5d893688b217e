"""run.build's steps without an engine: the engine's edges are monkeypatched, so what is tested
is the bookkeeping written once in ``_run_steps`` (skipped or run, times, report entries,
progress, a failure wrapped naming its step), the options checked once (the CA read once) and
the preflight's resolved stack carried into the build."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from envbuilder.errors import InputError, OperationError
from envbuilder.run import build as b
from envbuilder.run.smoke import SmokeResult

CPU = "cpu"
FIXTURES = Path(__file__).parent / "fixtures"
PEM = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


class FakeEngine:
    """The engine calls run.build makes, recorded; ``pushed_ok`` False: the registry never
    confirms a digest; ``interrupt_push``: Ctrl-C during the push."""

    def __init__(self, monkeypatch, *, pushed_ok: bool = True, interrupt_push: bool = False):
        self.calls: list[tuple] = []
        e = b.engine
        monkeypatch.setattr(e, "connect", lambda: "client")
        # the legacy builder's edge is the fake one; never the memoized answer of a real engine
        # an earlier test in this process probed (run.buildkit.support is keyed by DOCKER_HOST)
        monkeypatch.setattr(b, "choose_builder", lambda c, wanted: (False, "the test's fake engine"))
        monkeypatch.setattr(e, "image_available", lambda c, image: True)
        monkeypatch.setattr(e, "image_digest_ref", lambda c, ref: ref + "@sha256:" + "0" * 64)
        monkeypatch.setattr(e, "build", self.build)
        monkeypatch.setattr(e, "tag", lambda c, image_id, repo, tag: self._log("tag", repo, tag) or f"{repo}:{tag}")
        monkeypatch.setattr(e, "image_labels", lambda c, image_id: {"k": "v"})
        monkeypatch.setattr(e, "image_size", lambda c, image_id: 123)

        def push(c, repo, tag):
            self._log("push", repo, tag)
            if interrupt_push:
                raise KeyboardInterrupt
            return "sha256:" + "1" * 64

        monkeypatch.setattr(e, "push", push)
        monkeypatch.setattr(e, "verify_pushed", lambda c, repo, digest: pushed_ok)

    def _log(self, *call) -> None:
        self.calls.append(call)

    def build(self, client, context: Path, **kw):
        self._log("build", (context / "Dockerfile").is_file(), kw["tag"])
        kw["on_step"](1, 1, "FROM base")
        return SimpleNamespace(image_id="sha256:img", steps=3, cached_steps=1, stage_images=["0123456789ab"])


def _verified(monkeypatch, ok: bool = True) -> None:
    from envbuilder.run import verify

    report = SimpleNamespace(ok=ok, to_dict=lambda: {"ok": ok}, summary=lambda: "torch is 0.0")
    monkeypatch.setattr(verify, "verify_image_labels", lambda *a, **kw: report)


def _smoked(monkeypatch, ok: bool = True) -> None:
    def run(client, image, **kw):
        return SmokeResult(ok=ok, world_size=2, nproc_per_node=2, nnodes=1, backend="gloo",
                           checks={"allreduce": "pass" if ok else "fail"},
                           failed=[] if ok else ["allreduce"], bandwidth=[], summary=None, ranks=[],
                           log="", exit_code=0 if ok else 1, seconds=0.5, where=image,
                           details={} if ok else {"allreduce": "rank 1 got 3.0"})

    monkeypatch.setattr(b, "run_smoke_container", run)


def _build(opts: b.BuildOptions, events: list | None = None) -> b.BuildReport:
    from envbuilder.api import make_spec

    return b.build_target(make_spec(CPU), opts,
                          on_event=(lambda k, d: events.append((k, d))) if events is not None else None)


def test_every_step_runs_with_its_bookkeeping(monkeypatch, tmp_path):
    eng = FakeEngine(monkeypatch)
    _verified(monkeypatch)
    _smoked(monkeypatch)
    events: list = []
    r = _build(b.BuildOptions(push="127.0.0.1:5000/ml", context=tmp_path / "ctx"), events)
    assert r.ok and r.steps == {"render": "ok", "build": "ok", "verify": "ok", "smoke": "ok", "push": "ok"}
    assert set(r.seconds) == set(r.steps)  # each step that ran, timed once
    steps = [d for k, d in events if k == "step"]
    for s in r.steps:
        assert steps.index((s, "running")) < steps.index((s, "ok"))
    assert ("build-step", (1, 1, "FROM base")) in events
    assert eng.calls[0] == ("build", True, f"envbuilder:{r.tag}")  # the rendered folder was built
    assert [c[2] for c in eng.calls if c[0] == "push"] == [r.tag, CPU]  # the alias after the smoke passed
    assert r.pushed and r.pushed[0]["ref"].startswith("127.0.0.1:5000/ml@sha256:")
    assert (tmp_path / "ctx" / "Dockerfile").is_file()  # --context: the folder is kept


def test_steps_turned_off_are_skipped_and_not_timed(monkeypatch):
    FakeEngine(monkeypatch)
    r = _build(b.BuildOptions(verify=False, smoke=False))
    assert r.steps == {"render": "ok", "build": "ok", "verify": "skipped", "smoke": "skipped", "push": "skipped"}
    assert set(r.seconds) == {"render", "build"}
    assert r.context is not None and not Path(r.context).exists()  # a temporary folder, removed


def test_a_failed_step_names_itself_and_stops_the_build(monkeypatch):
    eng = FakeEngine(monkeypatch)
    _verified(monkeypatch)
    _smoked(monkeypatch, ok=False)
    with pytest.raises(b.BuildFailed) as ei:
        _build(b.BuildOptions(push="127.0.0.1:5000/ml"))
    e = ei.value
    assert e.step == "smoke" and e.exit_code == 1 and "smoke failed" in str(e) and "rank 1 got 3.0" in str(e)
    r = e.report
    assert r.failed_step == "smoke" and r.steps["smoke"] == "failed" and r.steps["push"] == "not run"
    assert "smoke" in r.seconds and not any(c[0] == "push" for c in eng.calls)
    assert e.to_dict()["report"]["failed_step"] == "smoke"


def test_an_error_without_a_step_is_named_by_the_step_it_failed_in(monkeypatch):
    FakeEngine(monkeypatch)
    _verified(monkeypatch)

    def unreachable(*a, **kw):
        raise OperationError("the engine went away")

    monkeypatch.setattr(b, "run_smoke_container", unreachable)
    with pytest.raises(b.BuildFailed) as ei:
        _build(b.BuildOptions())
    assert ei.value.step == "smoke" and str(ei.value).startswith(f"{CPU}: smoke failed: the engine went away")


@pytest.mark.parametrize("fault", ["unconfirmed", "interrupted"])
def test_a_push_that_did_not_complete_records_nothing(monkeypatch, fault):
    FakeEngine(monkeypatch, pushed_ok=fault != "unconfirmed", interrupt_push=fault == "interrupted")
    with pytest.raises(b.BuildFailed) as ei:
        _build(b.BuildOptions(push="127.0.0.1:5000/ml", verify=False, smoke=False))
    r = ei.value.report
    assert r.failed_step == "push" and r.pushed == []
    assert r.steps["push"] == ("failed" if fault == "unconfirmed" else "interrupted")


def test_options_are_checked_once_and_the_ca_read_once(monkeypatch, tmp_path):
    from envbuilder import api
    from envbuilder.core import readfile

    ca = tmp_path / "ca.pem"
    ca.write_bytes(PEM)
    reads: list[str] = []
    real = readfile.read_bytes_capped

    def counted(path, what, **kw):
        reads.append(what)
        return real(path, what, **kw)

    monkeypatch.setattr(readfile, "read_bytes_capped", counted)
    FakeEngine(monkeypatch)
    opts = api.build_options(verify=False, smoke=False, ca_cert=tmp_path / "ca.pem", context=tmp_path / "ctx")
    [r] = api.build(api.preflight([api.make_spec(CPU)]), opts)
    assert r.ok and reads.count("--ca-cert") == 1  # made, preflight, build: read once
    assert (tmp_path / "ctx" / "ca-certificates" / "envbuilder-extra-ca.crt").read_bytes() == PEM
    with pytest.raises(InputError, match="holds no PEM certificate"):
        b.BuildOptions(ca_cert=tmp_path / "ctx" / "Dockerfile")


def test_the_preflight_stack_is_the_one_built(monkeypatch):
    from envbuilder import api

    FakeEngine(monkeypatch)
    [job] = api.preflight([api.make_spec(CPU)])
    calls: list[str] = []
    from envbuilder.core import resolve

    monkeypatch.setattr(resolve, "resolve_target", lambda *a, **kw: calls.append("resolve"))
    monkeypatch.setattr(resolve, "resolve", lambda *a, **kw: calls.append("resolve"), raising=False)
    [r] = api.build([job], b.BuildOptions(verify=False, smoke=False))
    assert r.ok and r.tag == job.stack.tag and calls == []  # nothing resolved again


def test_a_target_refused_before_its_build_reports_its_own_failure(monkeypatch):
    from envbuilder import api

    FakeEngine(monkeypatch)
    reports = api.build([api.make_spec("cu130-hvd0.28-debian12"), api.make_spec(CPU)],
                        b.BuildOptions(verify=False, smoke=False))
    assert [r.exit_code for r in reports] == [3, 0]
    assert reports[0].failed_step == "render" and reports[0].steps["render"] == "failed"
    assert reports[0].cause is not None and reports[0].cause.alternatives  # declared on the refusal


def test_engine_build_names_the_stages_it_left():
    """A real legacy-builder stream (tests/fixtures/engine/SOURCE.md): each earlier stage's last
    image, in order; a stage of no step after its FROM left none of its own (its image is the
    base, never to be removed), and the final image is not a stage."""
    from envbuilder.run import engine

    chunks = json.loads((FIXTURES / "engine" / "legacy-multistage-stream.json").read_text())
    client = SimpleNamespace(api=SimpleNamespace(build=lambda **kw: iter(chunks)))
    r = engine.build(client, Path("."), tag="t")
    assert r.image_id.startswith("sha256:f13b5bcf6ed6")
    assert r.stage_images == ["84e4164290df", "86abe45f590d"]  # builder, layer; not "empty"'s base
    assert "af33de544966" not in r.stage_images and not r.image_id.startswith(tuple(r.stage_images))


def test_engine_build_reads_the_stream():
    """run.engine.build over a scripted stream: steps, cached steps, the image, the log tail;
    an error chunk is one OperationError naming the build."""
    from envbuilder.run import engine

    def client(chunks):
        return SimpleNamespace(api=SimpleNamespace(build=lambda **kw: iter(chunks)))

    lines, steps = [], []
    ok = [{"stream": "Step 1/2 : FROM base\n"}, {"stream": " ---> Using cache\n"}, {"stream": None},
          {"stream": "Step 2/2 : RUN true\n\n"}, {"aux": {"ID": "sha256:abc"}}]
    r = engine.build(client(ok), Path("."), tag="t", on_line=lines.append,
                     on_step=lambda i, n, text: steps.append((i, n, text)))
    assert (r.image_id, r.steps, r.cached_steps) == ("sha256:abc", 2, 1)
    assert steps == [(1, 2, "FROM base"), (2, 2, "RUN true")] and len(lines) == 3 == len(r.log_tail)
    old = [{"stream": "Successfully built 0123abcd\n"}]
    assert engine.build(client(old), Path("."), tag="t").image_id == "0123abcd"
    with pytest.raises(OperationError) as ei:
        engine.build(client([{"stream": "Step 1/1 : RUN false\n"}, {"error": "returned a non-zero code: 1"}]),
                     Path("."), tag="t")
    assert ei.value.step == "build" and "returned a non-zero code" in ei.value.details[-1]


# -- a project's names (issue 46, point 3; the engine-backed twin: tests/test_build.py) ----------

def _project_build(monkeypatch, tmp_path, holder, text='registry = "127.0.0.1:5000/ml"\nrepository = "ux5"\n',
                   **opts):
    from envbuilder.api import make_spec
    from envbuilder.core.project import load_project

    eng = FakeEngine(monkeypatch)
    monkeypatch.setattr(b.engine, "tag_holder", lambda c, ref: holder)
    root = tmp_path / "ux5"
    root.mkdir()
    (root / "envbuilder.toml").write_text(text + '[[targets]]\nname = "train"\ntarget = "cpu"\n')
    spec = make_spec("train", project=load_project(root / "envbuilder.toml"))
    _verified(monkeypatch)
    _smoked(monkeypatch)
    r = b.build_target(spec, b.BuildOptions(**opts))
    return r, eng.calls


@pytest.mark.parametrize("holder, kept", [
    (None, False),  # nobody holds the generic tag: the project's image takes it
    (("sha256:other", {"io.envbuilder.project": "127.0.0.1:5000/ml/ux5"}), False),  # this project's
    (("sha256:ci", {"io.envbuilder.version": "0.1"}), True),  # a CI's plain build: left alone
    (("sha256:p2", {"io.envbuilder.project": "ux6"}), True),  # another project's: left alone
])
def test_a_project_build_takes_the_generic_tag_only_from_its_own(monkeypatch, tmp_path, holder, kept):
    r, calls = _project_build(monkeypatch, tmp_path, holder, push=b.PUSH_OWN, tags=("dev",))
    stack_tag = r.tag
    built = next(c for c in calls if c[0] == "build")
    assert built[2] == f"127.0.0.1:5000/ml/ux5:train-{stack_tag}"  # built under the project's name
    generic = ("tag", "envbuilder", stack_tag)
    assert (generic in calls) is not kept
    assert r.kept_tags == ([{"tag": f"envbuilder:{stack_tag}", "image_id": holder[0],
                             "project": holder[1].get("io.envbuilder.project"),
                             "why": r.kept_tags[0]["why"]}] if kept else [])
    assert ("tag", "127.0.0.1:5000/ml/ux5", "dev") in calls  # a bare --tag: the project's repository
    # pushed: the project's version tag, --tag's and the target's alias, never the generic stack tag
    pushes = [c[2] for c in calls if c[0] == "push" and c[1] == "127.0.0.1:5000/ml/ux5"]
    assert pushes == [f"train-{stack_tag}", "dev", "train"] == [c[2] for c in calls if c[0] == "push"]
    assert [p["repository"] for p in r.pushed] == ["127.0.0.1:5000/ml/ux5"] * 3


def test_publish_without_a_registry_is_refused_before_any_work(monkeypatch, tmp_path):
    from envbuilder.api import build_options, make_spec

    eng = FakeEngine(monkeypatch)
    with pytest.raises(InputError, match="--publish pushes to REGISTRY/REPOSITORY, and no registry"):
        b.build_target(make_spec(CPU), build_options(publish=True))
    assert eng.calls == []
    with pytest.raises(InputError, match="drop --push REPO, or --publish"):
        build_options(publish=True, push="127.0.0.1:5000/ml")
