"""Issue 47: the surfaces added since issue 34 (job keys and ``--command``, ``--take-jobs``,
``doctor --record``, ``explain --learn`` and its team cases, the explain fast path, ``verify
--key``, ``build --runtime apptainer``, advisories in overlays, signals), each behind the
project's own mechanism. One section per mechanism (docs/hostile-input.md, section I); each
reproducer fails on the code before the issue's work (f06a763) for the reason its section names.

- I1. one YAML emitter (render.yamlemit) for every generated value and comment
- I2. one capped reader (core.readfile) for every file read
- I3. one child-process runner (envbuilder._child): output capped, a deadline, signals
- I4. one output guard (_fs): --take-jobs and learned cases, checks first, changes after
- I5. one terminal writer (ui.plain.say): every string from data escaped, one line a message
- I6. verify --key counts a signature only from a signature
- I7. name filters anchored with \\Z; init's exit code; the smaller ones
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from hostile_helpers import ROOT, assert_clean_failure, cli

SCHEMA = ROOT / "envbuilder" / "data" / "project.schema.json"


def _kubectl() -> str | None:
    return shutil.which("kubectl")


def go_yaml(text: str, tmp: Path) -> list[dict] | None:
    """The documents go-yaml (kubectl's parser, through ``kubectl kustomize``, offline) reads in
    ``text``; None without kubectl."""
    exe = _kubectl()
    if exe is None:
        return None
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "f.yaml").write_text(text, encoding="utf-8")
    (tmp / "kustomization.yaml").write_text("resources:\n- f.yaml\n")
    p = subprocess.run([exe, "kustomize", str(tmp)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return [d for d in yaml.safe_load_all(p.stdout) if d]


def problem(text: str) -> str | None:
    """The first raw character of a YAML text that ends a line or a comment for a YAML parser
    (CR, U+0085, U+2028, U+2029), or that parsers refuse or a reviewer cannot see (C0 but tab
    and LF, DEL, C1, bidi controls, U+FEFF); None when there is none. (Written here, not taken
    from the emitter it checks.)"""
    bad = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                     "\u2066-\u2069\ufeff]")
    m = bad.search(text)
    if m is None:
        return None
    return f"U+{ord(m.group(0)):04X} at line {text.count(chr(10), 0, m.start()) + 1}"


def shape(docs: list[Any]) -> list[tuple]:
    """What a job file is made of: each document's kind and top-level keys."""
    return [(d.get("kind"), tuple(sorted(d))) for d in docs if isinstance(d, dict)]


def yaml_files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.suffix in (".yaml", ".yml") and p.is_file()}


def check_yaml_folder(folder: Path, baseline: dict[str, list[tuple]] | None = None) -> dict:
    """Every YAML file of a render parses, holds no raw line break or control character, and
    (given a baseline) is made of the same documents and keys."""
    shapes = {}
    for rel, text in yaml_files(folder).items():
        assert problem(text) is None, (rel, problem(text))
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        shapes[rel] = shape(docs)
        if baseline is not None and rel in baseline:
            assert shapes[rel] == baseline[rel], rel
    return shapes


def check_scripts(folder: Path) -> None:
    """Every shell script of a render parses (``bash -n``)."""
    scripts = [str(p) for p in sorted(folder.rglob("*")) if p.suffix in (".sh", ".sbatch")]
    p = subprocess.run(["bash", "-c", 'for f; do bash -n "$f" || exit 1; done', "_", *scripts],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


# ==============================================================================================
# I1. One YAML emitter: no value ends a comment, adds a key or a document, or breaks a parser
# ==============================================================================================

INJECTIONS = {
    # the reproducers: a whole Pod document, a top-level key
    "pod-u2028": "x\u2028{apiVersion: v1, kind: Pod, metadata: {name: p}}\u2028---\u2028#",
    "key-u2028": "torchrun train.py\u2028evil: pwned #",
    "pod-u2029": "x\u2029{apiVersion: v1, kind: Pod, metadata: {name: p}}\u2029---\u2029#",
    "key-u0085": "torchrun train.py\u0085evil: pwned #",
}


@pytest.fixture(scope="module")
def plain_render(tmp_path_factory) -> dict[str, list[tuple]]:
    out = tmp_path_factory.mktemp("plain") / "b"
    p = cli("render", "cpu", "-o", str(out), "--command", "torchrun train.py")
    assert p.returncode == 0, p.stderr
    return check_yaml_folder(out)


@pytest.mark.parametrize("name", list(INJECTIONS))
def test_a_command_adds_no_document_and_no_key(tmp_path, plain_render, name):
    command = INJECTIONS[name]
    out = tmp_path / "b"
    p = cli("render", "cpu", "-o", str(out), "--command", command)
    assert p.returncode == 0, p.stderr
    check_yaml_folder(out, plain_render)
    text = (out / "jobs/train-jobset-2x6.yaml").read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    args = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-3:] == ["--no_python", *command.split(" ")][-3:] or command.split()[-1] in args[-1]
    docs = go_yaml(text, tmp_path / "k")
    if docs is not None:  # kubectl's own parser sees one JobSet and no Pod
        assert [d["kind"] for d in docs] == ["JobSet"]


def test_a_c1_control_in_the_command_leaves_every_file_readable(tmp_path, plain_render):
    out = tmp_path / "b"
    p = cli("render", "cpu", "-o", str(out), "--command", "torchrun train.py --x \x9b31m")
    assert p.returncode == 0, p.stderr
    check_yaml_folder(out, plain_render)


def _project(folder: Path, jobs: dict[str, Any], **top: Any) -> Path:
    import tomli_w

    folder.mkdir(parents=True, exist_ok=True)
    doc = {"targets": [{"name": "t", "target": "cpu"}], **top, "jobs": jobs}
    (folder / "envbuilder.toml").write_text(tomli_w.dumps(doc), encoding="utf-8")
    return folder


def _env_of(doc: dict) -> dict[str, str]:
    spec = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    return {e["name"]: e["value"] for e in spec["containers"][0].get("env", [])}


def test_an_emoji_in_the_command_and_in_an_env_value_is_written_as_itself(tmp_path):
    proj = _project(tmp_path / "p", {"command": "torchrun train.py --tag 😀",
                                     "env": {"TEAM_TAG": "ok 😀 ok"}})
    p = cli("render", cwd=proj)
    assert p.returncode == 0, p.stderr
    text = (proj / "build/t/jobs/train-jobset-2x6.yaml").read_text(encoding="utf-8")
    assert "\\ud83d" not in text and "😀" in text  # no surrogate pair
    doc = yaml.safe_load(text)
    assert _env_of(doc)["TEAM_TAG"] == "ok 😀 ok"
    args = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "😀"
    docs = go_yaml(text, tmp_path / "k")
    if docs is not None:
        assert _env_of(docs[0])["TEAM_TAG"] == "ok 😀 ok"


def test_an_env_value_with_a_line_separator_stays_one_value(tmp_path, plain_render):
    # a guard, not a reproducer: f06a763 already wrote env values as JSON strings, whose
    # ASCII escapes (\u2028, \u0085) YAML reads back whole; it broke only on astral
    # characters (the emoji test above)
    proj = _project(tmp_path / "p", {"env": {"A": "x\u2028evil: pwned #", "B": "y\u0085z"}})
    p = cli("render", cwd=proj)
    assert p.returncode == 0, p.stderr
    check_yaml_folder(proj / "build/t", {f"jobs/{k}": v for k, v in plain_render.items()
                                         if k.startswith("jobs/") and "train-" not in k})
    doc = yaml.safe_load((proj / "build/t/jobs/jobset-2x6.yaml").read_text(encoding="utf-8"))
    assert _env_of(doc) == {"A": "x\u2028evil: pwned #", "B": "y\u0085z"}


# -- the hostile set through every string field that reaches a generated file -----------------
# The fields are found in the project schema (every string, every list of strings, every key and
# value of a table, at the top level, in a target and in [jobs]): a field added later is fed the
# set without editing this test; the dataclasses of [jobs] and the option table are checked to
# be in the schema, so a field cannot reach a file unseen.

HOSTILE = ["a\u2028evil: pwned #", "a\u2029b: c", "a\u0085b", "a\nb: c", "\x9b31m", "\x1b[31m",
           "\u202eevil", "x😀", "{x: y}", "- z", "x" * 100_000]


def _resolve(node: dict, schema: dict) -> dict:
    ref = node.get("$ref")
    return schema["$defs"][ref.rsplit("/", 1)[1]] if ref else node


def schema_fields(node: dict, schema: dict, path: tuple = ()) -> Iterator[tuple[tuple, str]]:
    """(path, how) of every string the schema lets a project file set: ``[]`` a list item,
    ``{}`` a table's value, ``{key}`` a table's key."""
    node = _resolve(node, schema)
    for alt in node.get("oneOf", []) + node.get("anyOf", []):
        yield from schema_fields(alt, schema, path)
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "enum" in node:
        return
    if "string" in kinds:
        yield path, "string"
    if "array" in kinds:
        yield from schema_fields(node.get("items", {}), schema, path + ("[]",))
    if "object" in kinds or "properties" in node:
        for k, v in node.get("properties", {}).items():
            yield from schema_fields(v, schema, path + (k,))
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            yield path + ("{key}",), "key"
            yield from schema_fields(extra, schema, path + ("{}",))


def _all_fields() -> list[tuple]:
    schema = json.loads(SCHEMA.read_text())
    return sorted({p for p, _ in schema_fields(schema, schema)})


def _place(path: tuple, value: str) -> dict:
    """A project document with ``value`` at ``path`` (lists and tables made on the way; a
    target's list item is the project's one target; a toleration gets what makes it whole)."""
    doc: dict[str, Any] = {"targets": [{"name": "t", "target": "cpu"}]}

    def put(container: Any, rest: tuple) -> Any:
        head, tail = rest[0], rest[1:]
        if head == "[]":
            item = container[0] if container else ({} if tail else value)
            if tail:
                item = put(item, tail)
            return [item]
        if head == "{key}":
            return {value: "1"}
        if head == "{}":
            return {"K": put({}, tail) if tail else value}
        container = dict(container or {})
        container[head] = put(container.get(head), tail) if tail else value
        return container

    out = put(doc, path)
    if "tolerations" in path:  # a toleration with a key needs an operator to be whole
        for t in out["jobs"]["tolerations"] if path[0] == "jobs" else out["targets"][0]["jobs"]["tolerations"]:
            t.setdefault("operator", "Equal" if "value" in t else "Exists")
            if "value" in t:
                t.setdefault("key", "k")
    return out


def test_the_fields_fed_cover_the_jobs_dataclasses_and_the_option_table():
    from dataclasses import fields

    from envbuilder.core import options
    from envbuilder.core.jobs import JobsConfig, SlurmConfig, _TOLERATION_KEYS

    found = {".".join(p) for p in _all_fields()}
    for f in fields(JobsConfig):
        if f.name in ("host_network", "kubernetes"):  # a boolean, an enum: no string to feed
            continue
        if f.name == "slurm":
            for s in fields(SlurmConfig):
                assert f"jobs.slurm.{s.name}" in found, s.name
            continue
        assert any(x.startswith(f"jobs.{f.name}") for x in found), f.name
    for k in _TOLERATION_KEYS:
        if k != "toleration_seconds":  # an integer
            assert f"jobs.tolerations.[].{k}" in found, k
    for opt in options.OPTIONS:  # every option a project file sets as text
        if opt.key and opt.value in ("str", "path", "list", "csv", "requirements") \
                and "enum" not in opt.schema:
            key = opt.key.split(".")[-1]
            assert any(key in p.split(".") for p in found), opt.key


def _render_in_process(folder: Path) -> Exception | None:
    from envbuilder import api
    from envbuilder.core.project import load_project
    from envbuilder.errors import EnvbuilderError

    try:
        proj = load_project(folder / "envbuilder.toml")
        api.render(api.target_specs(None, project=proj, command="render"))
    except EnvbuilderError as e:
        return e
    return None


@pytest.mark.parametrize("path", _all_fields(), ids=lambda p: ".".join(p))
def test_every_string_field_takes_the_hostile_set(tmp_path, path, plain_render, capsys):
    import tomli_w

    from envbuilder.errors import InputError
    from envbuilder.ui.plain import report_error

    for i, value in enumerate(HOSTILE):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "envbuilder.toml").write_text(tomli_w.dumps(_place(path, value)), encoding="utf-8")
        err = _render_in_process(folder)
        if err is not None:  # refused: bad input, one line as the CLI prints it
            assert isinstance(err, InputError), (path, value[:40], err)
            assert report_error(err, False) == 2
            shown = capsys.readouterr().err
            assert shown.count("\n") == 1 and "\x1b" not in shown and len(shown) < 2500, shown[:300]
            continue
        out = folder / "build" / "t"
        check_yaml_folder(out, plain_render)
        check_scripts(out)


# ==============================================================================================
# I2. One capped reader: every file read is capped, regular, never waited on
# ==============================================================================================

def _address_space_limit(gib: float):
    def limit() -> None:
        import resource

        n = int(gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (n, n))
    return limit


def _run_limited(args: list[str], cwd: Path | None = None, timeout: float = 120,
                 **extra: str) -> subprocess.CompletedProcess:
    from hostile_helpers import CLI, env

    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          env=env(**extra), preexec_fn=_address_space_limit(1.5),
                          stdin=subprocess.DEVNULL)


def test_a_3_gib_edited_job_file_costs_no_read(tmp_path):
    out = tmp_path / "b"
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    with open(out / "jobs/jobset-2x6.yaml", "r+b") as f:  # sparse: 3 GiB of size, no disk
        f.truncate(3 << 30)
    p = _run_limited(["render", "cpu", "-o", str(out)])
    assert_clean_failure(p, 2, "jobset-2x6.yaml", "changed since envbuilder wrote it")


def _learned_project(tmp_path: Path) -> Path:
    proj = tmp_path / "p"
    proj.mkdir()
    (proj / "envbuilder.toml").write_text('[[targets]]\nname = "t"\ntarget = "cpu"\n')
    return proj


def _log(tmp_path: Path) -> Path:
    log = tmp_path / "job.log"
    log.write_text("[rank0]: RuntimeError: NCCL error: unhandled system error\n")
    return log


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "3gib"])
def test_a_team_case_that_is_not_a_small_file_is_refused_unread(tmp_path, kind):
    proj = _learned_project(tmp_path)
    cases = proj / ".envbuilder" / "explain-cases"
    cases.mkdir(parents=True)
    bad = cases / "x.json"
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dev-zero":
        bad.symlink_to("/dev/zero")
    else:
        with open(bad, "wb") as f:
            f.truncate(3 << 30)
    p = _run_limited(["explain", str(_log(tmp_path))], cwd=proj, timeout=60,
                     ENVBUILDER_NO_FAST_PATH="1")
    assert_clean_failure(p, 2, "x.json")
    p = _run_limited(["explain", str(_log(tmp_path))], cwd=proj, timeout=60)  # the fast path
    assert_clean_failure(p, 2, "x.json")


def _in_python(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    import sys

    from hostile_helpers import env

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env(), preexec_fn=_address_space_limit(1.5))


@pytest.mark.parametrize("record", ["3gib", "[1, 2]"])
def test_a_sif_record_that_is_not_ours_is_one_clean_refusal(tmp_path, record):
    sif = tmp_path / "x.sif"
    sif.write_bytes(b"SIF")
    side = tmp_path / "x.sif.envbuilder.json"
    if record == "3gib":
        with open(side, "wb") as f:
            f.truncate(3 << 30)
    else:
        side.write_text(record)
    p = _in_python("from pathlib import Path\nfrom envbuilder.errors import InputError\n"
                   "from envbuilder.run.apptainer import _written_by_us\n"
                   f"try:\n    _written_by_us(Path({str(sif)!r}))\n"
                   "except InputError as e:\n    print('refused:', e)\n")
    assert p.returncode == 0 and p.stdout.startswith("refused:"), p.stdout + p.stderr[-2000:]
    assert "envbuilder did not write it" in p.stdout


def test_a_3_gib_key_is_refused_unread(tmp_path):
    key = tmp_path / "cosign.pub"
    with open(key, "wb") as f:
        f.truncate(3 << 30)
    p = _run_limited(["verify", "127.0.0.1:1/ml/x@sha256:" + "0" * 64, "--key", str(key)])
    assert_clean_failure(p, 2, "cosign.pub", "larger than")


# ==============================================================================================
# I3. One child runner: output capped with its tail, a deadline, signals forwarded
# ==============================================================================================

def _program(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / name
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(0o755)
    return folder


def test_an_nvidia_smi_that_prints_without_end_costs_a_capped_buffer(tmp_path):
    # no GPU here: a program in nvidia-smi's place that prints without end (yes(1)). Before the
    # child runner, doctor kept all of it until its 10 s time-out (14 GB resident, measured
    # unlimited on f06a763); under this 1.5 GiB limit it ended in "out of memory" (exit 1, an
    # error document instead of the report)
    bin_dir = _program(tmp_path / "bin", "nvidia-smi", "exec yes 'GPU 0: NVIDIA H100 (UUID: GPU-x)'")
    p = _run_limited(["doctor", "--json"], timeout=120,
                     PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert p.returncode in (0, 1), p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert "out of memory" not in p.stdout + p.stderr, p.stdout[-2000:]
    report = json.loads(p.stdout)  # the host's report, not an error document
    (driver,) = [c for c in report["checks"] if c["name"] == "driver"]
    assert "`nvidia-smi -q -x` timed out" in driver["detail"], driver


def test_a_child_that_prints_without_end_keeps_its_tail_within_the_cap():
    from envbuilder import _child

    r = _child.run(["sh", "-c", "yes line | head -c 50000000; echo LAST"], timeout=60, cap=1 << 20)
    assert r.ok and r.dropped > 40_000_000 and len(r.stdout) <= 1 << 20
    assert r.stdout.endswith("LAST\n") and r.over_cap() is not None


def test_a_child_past_its_deadline_is_stopped_with_its_group():
    import time

    from envbuilder import _child

    t0 = time.monotonic()
    r = _child.run(["sh", "-c", "sleep 300 & sleep 300"], timeout=1)
    assert r.timed_out and r.returncode == _child.TIMED_OUT and time.monotonic() - t0 < 30
    d = _child.Deadline(0.5, "two commands")
    r1 = _child.run(["sleep", "5"], timeout=60, deadline=d)
    assert r1.timed_out and d.passed()


@pytest.mark.parametrize("sig, code", [("INT", 130), ("TERM", 143)])
def test_an_interruption_during_the_apptainer_step_is_130_or_143(tmp_path, sig, code):
    import signal
    import time

    from hostile_helpers import start

    # no Apptainer here to interrupt: a program in its place that waits (its group must end
    # with envbuilder's)
    marker = tmp_path / "child-started"
    bin_dir = _program(tmp_path / "bin", "apptainer", f"echo $$ > {marker}; exec sleep 300")
    p = start("build", "cpu", "--runtime", "apptainer", "--apptainer", str(bin_dir / "apptainer"),
              "--sif", str(tmp_path / "x.sif"), "--no-smoke", "--no-verify", cwd=tmp_path)
    deadline = time.time() + 240
    while not marker.exists() and p.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    if not marker.exists():
        err = p.communicate(timeout=60)[1]
        pytest.skip(f"the build did not reach the apptainer step here: {err[-500:]}")
    p.send_signal(getattr(signal, f"SIG{sig}"))
    err = p.communicate(timeout=120)[1]
    assert p.returncode == code, err[-2000:]
    assert "Traceback" not in err
    child = int(marker.read_text())
    gone_by = time.time() + 15  # the group's SIGTERM lands at once; a loaded machine reaps late
    while time.time() < gone_by:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)


def test_an_apptainer_that_prints_without_end_costs_a_capped_log(tmp_path):
    # no Apptainer here: a program in its place that prints 2 GiB (long lines, so that the
    # test spends its time in the runner, not in line splitting) and fails with a last line.
    # Before the child runner the build kept every line: under this 1.5 GiB limit its reader
    # thread died with a MemoryError traceback and the build then waited on a child blocked on
    # a full pipe (BUILD_TIMEOUT_S, 4 hours; measured on f06a763)
    import sys

    prog = tmp_path / "bin" / "apptainer"
    prog.parent.mkdir()
    prog.write_text(f"#!{sys.executable}\nimport sys\nline = b'x' * 65535 + b'\\n'\n"
                    "for _ in range(32768):\n    sys.stdout.buffer.write(line)\n"
                    "sys.stdout.buffer.write(b'FATAL: the last line\\n')\nsys.exit(1)\n")
    prog.chmod(0o755)
    p = _run_limited(["build", "cpu", "--runtime", "apptainer", "--apptainer", str(prog),
                      "--sif", str(tmp_path / "x.sif"), "--no-smoke", "--no-verify"],
                     cwd=tmp_path, timeout=240)
    assert p.returncode == 1, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr, p.stderr[-2000:]
    (error,) = [ln for ln in p.stderr.splitlines() if ln.startswith("envbuilder: error:")]
    assert "apptainer build failed" in error and error.endswith("FATAL: the last line"), error
    assert len(p.stderr) < 100_000  # the log's tail, clipped, not the 2 GiB
    assert not (tmp_path / "x.sif").exists()


# ==============================================================================================
# I4. One output guard: --take-jobs and learned cases, checks first, changes after
# ==============================================================================================

def test_take_jobs_through_a_jobs_link_changes_nothing_outside(tmp_path):
    out = tmp_path / "b"
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    other = tmp_path / "elsewhere"
    os.rename(out / "jobs", other)
    (out / "jobs").symlink_to(other)
    victim = other / "jobset-2x6.yaml"
    victim.write_text(victim.read_text() + "# the user's own line\n")
    before = {p.name: p.read_bytes() for p in other.iterdir()}
    p = cli("render", "cpu", "-o", str(out), "--take-jobs")
    assert_clean_failure(p, 2, "jobs")
    assert {p.name: p.read_bytes() for p in other.iterdir()} == before  # no .edited, nothing moved


def test_a_refused_take_jobs_render_leaves_the_old_state(tmp_path):
    out = tmp_path / "b"
    assert cli("render", "cpu", "-o", str(out)).returncode == 0
    f = out / "jobs/jobset-2x6.yaml"
    f.write_text(f.read_text() + "# the user's own line\n")
    edited = f.read_bytes()
    (out / "Dockerfile").write_text("FROM scratch\n")  # a file of the user's in the way: refused
    p = cli("render", "cpu", "-o", str(out), "--take-jobs")
    assert_clean_failure(p, 2, "Dockerfile")
    assert f.read_bytes() == edited and not (out / "jobs/jobset-2x6.yaml.edited").exists()


def test_explain_learn_writes_through_no_link_out_of_the_project(tmp_path):
    proj = _learned_project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (proj / ".envbuilder").symlink_to(outside)
    p = cli("explain", "--learn", str(_log(tmp_path)), "--category", "network_interface", "--fix", "x",
            cwd=proj)
    assert_clean_failure(p, 2, ".envbuilder")
    assert list(outside.rglob("*")) == []


# ==============================================================================================
# I5. One terminal writer: strings from data shown escaped, one line a message
# ==============================================================================================

def _overlay(tmp_path: Path) -> Path:
    ov = tmp_path / "ov"
    ov.mkdir()
    (ov / "incompatibilities.yaml").write_text(yaml.safe_dump({"schema_version": 1, "advisories": [{
        "id": "t-adv", "component": "torch", "affected": ">=2.0", "severity": "high",
        "symptom": "hangs\nenvbuilder: error: a fake line",
        "source": "https://example.com/\x1b[31mred"}]}))
    return ov


def test_an_advisory_cannot_print_a_line_of_its_own(tmp_path):
    p = cli("check", "--cuda", "12.4", "--torch", "2.6", "--matrix-overlay", str(_overlay(tmp_path)))
    assert not any(ln.startswith("envbuilder: error: a fake line") for ln in p.stderr.splitlines())
    assert "\x1b" not in p.stderr and "\x1b" not in p.stdout
    assert "hangs\\nenvbuilder: error: a fake line" in p.stderr


def test_an_escape_in_an_advisory_source_never_reaches_stdout_raw(tmp_path):
    p = cli("resolve", "cpu", "--matrix-overlay", str(_overlay(tmp_path)))
    assert p.returncode == 0, p.stderr
    assert "\x1b" not in p.stdout and "\\x1b[31mred" in p.stdout


def test_the_cli_writes_to_the_terminal_only_through_the_one_writer():
    # ui/ and cli.py print through ui.plain.say (and echo_json for the JSON document)
    for path in [ROOT / "envbuilder/cli.py", *sorted((ROOT / "envbuilder/ui").glob("*.py"))]:
        text = path.read_text()
        for m in re.finditer(r"sys\.std(out|err)\.write(lines)?\(|(?<![.\w])print\(", text):
            line = text[:m.start()].count("\n") + 1
            snippet = text[m.start():m.start() + 80]
            ok = path.name == "plain.py" and ("json.dumps" in snippet or "stream.write" in snippet)
            assert ok, f"{path.name}:{line}: {snippet}"


# ==============================================================================================
# I6. verify --key: a signature counts only as a signature
# ==============================================================================================

DIGEST = "sha256:" + "a" * 64


@pytest.mark.parametrize("printed, counts", [
    # what cosign 3 prints for an image's signature bundle (https://sigstore.dev/cosign/sign/v1)
    ({"critical": {"identity": {"docker-reference": "r/x"}, "image": {"docker-manifest-digest": DIGEST},
                   "type": "https://sigstore.dev/cosign/sign/v1"}, "optional": {}}, True),
    # cosign 2's simple-signing payload
    ({"critical": {"identity": {"docker-reference": "r/x"}, "image": {"docker-manifest-digest": DIGEST},
                   "type": "cosign container image signature"}, "optional": None}, True),
    # an attestation bundle of the same key for the digest, which cosign 3 also accepts
    ({"critical": {"identity": {"docker-reference": "r/x"}, "image": {"docker-manifest-digest": DIGEST},
                   "type": "https://envbuilder.dev/attestations/smoke/v1"}, "optional": {}}, False),
    # a signature of another image
    ({"critical": {"image": {"docker-manifest-digest": "sha256:" + "b" * 64},
                   "type": "https://sigstore.dev/cosign/sign/v1"}}, False),
    ({"critical": [1, 2]}, False), ([1, 2], False),
])
def test_only_a_signature_counts_as_the_signature(printed, counts):
    from envbuilder.run.sign import _signature_problem, is_signature

    assert is_signature(printed, DIGEST) is counts
    problem = _signature_problem([printed], DIGEST)
    assert (problem is None) is counts
    if not counts:
        assert problem.startswith("signature: ")


COSIGN_OUTPUT = ROOT / "tests" / "fixtures" / "cosign"  # real cosign 3.1.1 stdout (SOURCE.md)


@pytest.mark.parametrize("name, counts", [
    ("verify-signed-and-attested", True), ("verify-attested-never-signed", False),
    ("verify-signature-corrupt", False), ("verify-signature-of-another-image", False)])
def test_cosign_3s_recorded_verify_output_counts_only_its_signature(name, counts):
    """What cosign 3.1.1 printed (and exited 0 for) in each case, through the parser and the
    check verify --key uses."""
    from envbuilder.run.sign import _json_lines, _signature_problem

    sigs = _json_lines((COSIGN_OUTPUT / f"{name}.json").read_text(), "verify")
    assert sigs, name
    digest = sigs[0]["critical"]["image"]["docker-manifest-digest"]
    problem = _signature_problem(sigs, digest)
    assert (problem is None) is counts, problem
    if not counts:  # an attestation of the same key for the digest is all cosign accepted
        assert problem.startswith(f"signature: no signature of this key names {digest}")
        assert "https://envbuilder.dev/attestations/smoke/v1" in problem


# ==============================================================================================
# I7. Name filters anchored at the true end; init's exit code; explain --top
# ==============================================================================================

def test_doctor_record_keeps_no_variable_named_with_a_newline(tmp_path):
    import sys

    from hostile_helpers import env

    e = env()
    e["PATH\n"] = "secret-value"
    e["NCCL_DEBUG"] = "INFO"
    p = subprocess.run([sys.executable, "-m", "envbuilder", "doctor", "--record", str(tmp_path / "r"),
                        "--json"], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode in (0, 1), p.stderr[-2000:]
    recorded = json.loads((tmp_path / "r" / "env.json").read_text())
    assert "PATH\n" not in recorded and "secret-value" not in json.dumps(recorded)
    assert recorded.get("NCCL_DEBUG") == "INFO"


def test_patterns_are_anchored_at_the_true_end():
    # Python's `$` also matches before a final newline: every pattern of the package that
    # anchors at the end says \Z (a line-by-line parser's too, so none is copied wrong)
    for path in sorted((ROOT / "envbuilder").rglob("*.py")):
        if "_precompiled" in path.parts or "payload" in path.parts:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r'\$"\)', line) and "re.M" not in line and "pushgateway" not in line \
                    and "endswith" not in line:
                raise AssertionError(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")


def test_init_with_a_torch_the_matrix_lacks_is_2_as_resolve_says(tmp_path):
    p = cli("init", "--driver", "535.104.05", "--gpus-per-node", "8", "--nodes", "2",
            "--torch", "9.9", cwd=tmp_path)
    assert_clean_failure(p, 2, "torch 9.9 is not in the matrix")
    assert not (tmp_path / "envbuilder.toml").exists()


@pytest.mark.parametrize("fast", ["", "1"])
def test_explain_top_of_thousands_of_digits_is_one_line(tmp_path, fast):
    log = tmp_path / "x.log"
    log.write_text("hello\n")
    extra = {"ENVBUILDER_NO_FAST_PATH": "1"} if fast else {}
    p = cli("explain", "--top", "9" * 4400, str(log), **extra)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr[-500:]
