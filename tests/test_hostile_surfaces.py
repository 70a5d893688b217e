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
import shutil
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from hostile_helpers import ROOT, cli

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


def shape(docs: list[Any]) -> list[tuple]:
    """What a job file is made of: each document's kind and top-level keys."""
    return [(d.get("kind"), tuple(sorted(d))) for d in docs if isinstance(d, dict)]


def yaml_files(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text(encoding="utf-8")
            for p in sorted(folder.rglob("*")) if p.suffix in (".yaml", ".yml") and p.is_file()}


def check_yaml_folder(folder: Path, baseline: dict[str, list[tuple]] | None = None) -> dict:
    """Every YAML file of a render parses, holds no raw line break or control character, and
    (given a baseline) is made of the same documents and keys."""
    from envbuilder.render.yamlemit import problem

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
