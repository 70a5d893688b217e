"""The built-in matrix loads, every fact in it is sourced, and broken matrices are refused
with the file and the key named (exit code 2)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core_helpers import LIVE, MATRICES, builtin, copy_matrix, edit
from envbuilder.core import schema
from envbuilder.errors import EXIT_USAGE, InputError, MatrixError
from envbuilder.core.matrix import load_matrix
from envbuilder.core.target import parse_target


# -- the built-in matrix ----------------------------------------------------------------------

def test_builtin_matrix_loads():
    m = builtin()
    assert m.path == MATRICES
    assert m.digest.startswith("sha256:") and len(m.digest) == len("sha256:") + 64
    assert m.toolkits and m.torch and m.nccl and m.os and m.base_images and m.targets
    assert m.component("deepspeed").releases and m.component("horovod").releases and m.incompatibilities
    # newest first, as the resolver assumes
    assert [t.version for t in m.toolkits] == sorted((t.version for t in m.toolkits), reverse=True)
    assert [t.version for t in m.torch] == sorted((t.version for t in m.torch), reverse=True)
    assert [n.version for n in m.nccl] == sorted((n.version for n in m.nccl), reverse=True)
    # every OS's default Python is installable on it
    for o in m.os.values():
        assert o.python_default in o.python


def test_every_schema_file_is_present():
    present = {p.name for p in MATRICES.glob("*.yaml")}
    assert set(schema.FILES) <= present


def test_builtin_targets_parse():
    m = builtin()
    for t in m.targets:
        req = parse_target(t.name, m)
        assert req.target == t.name


def _is_url(s) -> bool:
    return isinstance(s, str) and (s.startswith("https://") or s.startswith("http://")) \
        and len(s) > len("https://x") and not any(c.isspace() for c in s)


def _check_source(value, where: str) -> list[str]:
    values = value if isinstance(value, list) else [value]
    if not values:
        return [f"{where}: empty source list"]
    return [f"{where}: {v!r} is not an http(s) URL" for v in values if not _is_url(v)]


def _walk(node, where: str, problems: list[str]) -> None:
    if isinstance(node, dict):
        if "source" in node:
            problems += _check_source(node["source"], f"{where}/source")
        for k, v in node.items():
            if k != "source":
                _walk(v, f"{where}/{k}", problems)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _walk(v, f"{where}/{i}", problems)


FACT_FILES = sorted(set(schema.FILES) - {"targets.yaml"})  # targets are names, not facts


@pytest.mark.parametrize("name", FACT_FILES)
def test_every_entry_has_an_http_source(name):
    """Walk the raw YAML: each entry of each top-level list (a toolkit, an image set, a release,
    an OS, a breakage) has a non-empty source:, and every source: anywhere is http(s) URLs."""
    data = yaml.safe_load((LIVE / name).read_text(encoding="utf-8"))  # the live matrix
    problems: list[str] = []
    entries = 0
    for key, value in data.items():
        if key == "source" or not isinstance(value, list):
            continue
        for i, entry in enumerate(value):
            assert isinstance(entry, dict), f"{name} {key}/{i} is not a mapping"
            entries += 1
            if not entry.get("source"):
                problems.append(f"{name} {key}/{i}: no source")
    _walk(data, name, problems)
    assert entries > 0, f"{name} has no entries"
    assert not problems, "\n".join(problems)


def test_targets_file_entries_have_names():
    data = yaml.safe_load((LIVE / "targets.yaml").read_text(encoding="utf-8"))
    names = [t["name"] for t in data["targets"]]
    assert names and len(names) == len(set(names))


# -- schema violations ------------------------------------------------------------------------

# (id, file, old text, new text, substrings the message must contain besides the file)
BROKEN = [
    ("unknown-key", "cuda.yaml", '  driver_min: "450.51.05"\n',
     '  driver_min: "450.51.05"\n  colour: red\n', ["toolkits/0", "colour"]),
    ("unknown-top-level-key", "torch.yaml", "schema_version: 1\n",
     "schema_version: 1\nindexes: []\n", ["indexes"]),
    ("unknown-variant-key", "torch.yaml", "      nccl_package: nvidia-nccl-cu12\n",
     "      nccl_package: nvidia-nccl-cu12\n      ncl: '2.18.1'\n", ["variants", "ncl"]),
    ("missing-source", "incompatibilities.yaml",
     "    source: https://github.com/deepspeedai/DeepSpeed/issues/4984\n", "",
     ["incompatibilities", "source"]),
    ("source-not-a-url", "incompatibilities.yaml",
     "    source: https://github.com/deepspeedai/DeepSpeed/issues/4984\n",
     "    source: github.com/deepspeedai/DeepSpeed/issues/4984\n", ["source"]),
    ("empty-source-list", "incompatibilities.yaml",
     "    source: https://github.com/deepspeedai/DeepSpeed/issues/4984\n",
     "    source: []\n", ["source"]),
    ("version-float", "torch.yaml", 'line: "2.1"', "line: 2.1", ["line", "string"]),
    ("toolkit-version-float", "cuda.yaml", 'version: "11.8.0"', "version: 11.8",
     ["version", "string"]),
    ("driver-int", "cuda.yaml", 'driver_min: "520.61.05"', "driver_min: 520",
     ["driver_min", "string"]),
    ("python-list-float", "torch.yaml", 'python: ["3.8", "3.9", "3.10", "3.11"]',
     'python: [3.8, 3.9, "3.10", "3.11"]', ["python", "string"]),
    ("bad-specifier", "deepspeed.yaml", 'torch: ">=1.8"', 'torch: "=>1.8"',
     ["requires/torch", "=>1.8"]),
    ("specifier-with-shell", "deepspeed.yaml", 'torch: ">=1.8"', 'torch: ">=1.8;rm -rf /"',
     ["requires/torch"]),
    ("bad-incompatibility-specifier", "incompatibilities.yaml", 'horovod: "<=0.28.1"',
     'horovod: "=<0.28.1"', ["when/horovod"]),
    ("unknown-incompatibility-axis", "incompatibilities.yaml", 'horovod: "<=0.28.1"',
     'horovodd: "<=0.28.1"', ["when", "horovodd"]),
    ("duplicate-toolkit", "cuda.yaml", 'version: "11.0.3"', 'version: "11.0.2"',
     ["toolkits", "11.0.2", "twice"]),
    ("duplicate-nccl", "nccl.yaml", "- version: 2.8.4", "- version: 2.10.3",
     ["releases", "2.10.3", "twice"]),
    ("duplicate-torch-version", "torch.yaml", 'versions: ["2.2.0", "2.2.1", "2.2.2"]',
     'versions: ["2.2.0", "2.2.1", "2.2.1"]', ["releases", "2.2.1", "twice"]),
    ("duplicate-target", "targets.yaml", "  - name: cu121\n",
     "  - name: cu121\n  - name: cu121\n", ["targets", "cu121", "twice"]),
    ("duplicate-incompatibility", "incompatibilities.yaml",
     "id: horovod-lt-0.24-torch-1.11-thc", "id: horovod-0.28-torch-2.1-cxx17",
     ["incompatibilities", "horovod-0.28-torch-2.1-cxx17", "twice"]),
    ("duplicate-mapping-key", "cuda.yaml", '  driver_min: "450.51.05"\n',
     '  driver_min: "450.51.05"\n  driver_min: "999.1"\n', ["duplicate key", "driver_min"]),
    ("torch-version-outside-line", "torch.yaml", 'versions: ["2.2.0", "2.2.1", "2.2.2"]',
     'versions: ["2.2.0", "2.2.1", "2.3.1"]', ["versions", "2.3.1"]),
    ("python-default-not-installable", "os.yaml", 'python_default: "3.11"',
     'python_default: "3.12"', ["python_default", "3.12"]),
    ("bad-schema-version", "nccl.yaml", "schema_version: 1", "schema_version: 2",
     ["schema_version"]),
]


@pytest.mark.parametrize("case", BROKEN, ids=[c[0] for c in BROKEN])
def test_schema_violation_names_file_and_key(tmp_path, case):
    _, name, old, new, needles = case
    folder = copy_matrix(tmp_path / "m")
    path = edit(folder, name, old, new)
    with pytest.raises(MatrixError) as ei:
        load_matrix(folder)
    msg = str(ei.value)
    assert str(path) in msg
    for n in needles:
        assert n in msg, f"{n!r} not in {msg!r}"
    assert "\n" not in msg
    assert ei.value.exit_code == EXIT_USAGE == 2
    assert isinstance(ei.value, InputError)


def test_missing_file_names_the_path(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    (folder / "os.yaml").unlink()
    with pytest.raises(MatrixError) as ei:
        load_matrix(folder)
    assert str(folder / "os.yaml") in str(ei.value)
    assert "missing" in str(ei.value)
    assert ei.value.exit_code == 2


def test_missing_folder_names_the_path(tmp_path):
    with pytest.raises(MatrixError) as ei:
        load_matrix(tmp_path / "nope")
    assert str(tmp_path / "nope") in str(ei.value)
    assert ei.value.exit_code == 2


def test_a_file_is_not_a_folder(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(MatrixError) as ei:
        load_matrix(f)
    assert str(f) in str(ei.value)


@pytest.mark.parametrize("text", ["os: [\n  - name: x\n", "a: b: c\n", "key: 'unterminated\n"])
def test_invalid_yaml_names_the_path_and_line(tmp_path, text):
    folder = copy_matrix(tmp_path / "m")
    (folder / "os.yaml").write_text(text)
    with pytest.raises(MatrixError) as ei:
        load_matrix(folder)
    msg = str(ei.value)
    assert str(folder / "os.yaml") in msg and "YAML" in msg and "line" in msg
    assert ei.value.exit_code == 2


@pytest.mark.parametrize("content", [b"", b"- just\n- a list\n", b"\xff\xfe\x00"])
def test_empty_or_wrong_shape_or_undecodable_file(tmp_path, content):
    folder = copy_matrix(tmp_path / "m")
    (folder / "nccl.yaml").write_bytes(content)
    with pytest.raises(MatrixError) as ei:
        load_matrix(folder)
    assert str(folder / "nccl.yaml") in str(ei.value)
    assert ei.value.exit_code == 2


# -- the digest -------------------------------------------------------------------------------

def test_digest_depends_on_content_not_location(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    assert load_matrix(folder).digest == builtin().digest


def test_digest_changes_when_a_file_changes(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    before = load_matrix(folder).digest
    p = folder / "horovod.yaml"
    original = p.read_text()
    p.write_text(original + "# a comment is a change too\n")
    after_comment = load_matrix(folder).digest
    assert after_comment != before
    edit(folder, "cuda.yaml", 'driver_min: "520.61.05"', 'driver_min: "520.61.06"')
    after_fact = load_matrix(folder).digest
    assert after_fact not in (before, after_comment)
    p.write_text(original)
    edit(folder, "cuda.yaml", 'driver_min: "520.61.06"', 'driver_min: "520.61.05"')
    assert load_matrix(folder).digest == before


def test_extra_files_do_not_change_the_digest(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    (folder / "NOTES.md").write_text("not part of the matrix\n")
    assert load_matrix(folder).digest == builtin().digest


def test_a_team_matrix_is_used_instead_of_the_builtin(tmp_path):
    folder = copy_matrix(tmp_path / "m")
    edit(folder, "targets.yaml", "  - name: cu130\n", "  - name: cu130\n  - name: team-a\n"
         "    target: cu121-torch2.1-py310\n")
    m = load_matrix(folder)
    assert m.path == Path(folder)
    assert m.alias("team-a").target == "cu121-torch2.1-py310"
    assert builtin().alias("team-a") is None
