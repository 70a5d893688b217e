"""The lock file's versioned model (lock.model): read and written through one model, a missing
or unknown format version refused in one line naming the file and the fix (exit 2), the
version never an input (a format-3 lock whose inputs match is current). Offline: the locks
here are written by hand, uv never runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from envbuilder.api import resolve_target
from envbuilder.errors import InputError
from envbuilder.lock import model
from envbuilder.lock.inputs import lock_inputs, record_digest
from envbuilder.lock.requirements import LOCK_NAME, LockFormatError, lock_drift, read_lockfile
from tests.hostile_helpers import assert_clean_failure, cli

TARGET = "cu121-torch2.1-py310"
HASH = "    --hash=sha256:" + "a" * 64
# the entries of a lock of TARGET (torch 2.1.2 cu121, its NCCL wheel, numpy)
BODY = "".join(f"{line} \\\n{HASH}\n" for line in (
    "numpy==1.26.4", "nvidia-nccl-cu12==2.18.1", "torch==2.1.2+cu121"))


@pytest.fixture(scope="module")
def stack():
    return resolve_target(TARGET)


def _v3(stack) -> str:
    """A lock as a format-3 envbuilder wrote it: the version inside the inputs record."""
    inputs = lock_inputs(stack)
    record = {"format": "3", **inputs.record}
    lines = [f"#   {k}: {v}" for k, vs in record.items()
             for v in (vs if isinstance(vs, list) else [vs])]
    return "\n".join([
        "# requirements.lock: every Python package of this environment, pinned with hashes.",
        f"#   which runs: uv pip compile - -o {LOCK_NAME} <<< the requirement lines below",
        model.INPUTS_TITLE, *lines,
        f"{model.INPUTS_DIGEST}{record_digest(record)}",
        f"{model.PACKAGES_DIGEST}{model.packages_digest(BODY)}", "", ""]) + BODY


def test_a_written_lock_reads_back_through_the_model_and_is_current(stack):
    inputs = lock_inputs(stack)
    text = model.dump(stack, "uv pip compile -", inputs, "0.5.0", BODY, epoch=1717200000)
    assert text.splitlines()[1] == f"# lock format: {model.FORMAT}"
    lf = model.read(text, LOCK_NAME, "fix")
    assert lf.format == model.FORMAT and lf.record == inputs.record and lf.body == BODY
    assert lf.record_intact and lf.body_intact and lf.command == "uv pip compile -"
    assert "format" not in inputs.record  # the version is not an input
    assert lock_drift(stack, text, LOCK_NAME, inputs) == []


def test_a_format_3_lock_is_read_and_its_version_is_not_drift(stack):
    lf = read_lockfile(_v3(stack), LOCK_NAME, stack)
    assert lf.format == 3 and "format" not in (lf.record or {})
    assert lf.record_intact and lf.body_intact
    assert lock_drift(stack, _v3(stack), LOCK_NAME, lock_inputs(stack)) == []


@pytest.mark.parametrize("header, needles", [
    ("", ("has no lock format version", "--upgrade")),
    ("# requirements.lock: made by hand\n# lock format: 99\n\n",
     ("lock format '99'", "reads formats 3, 4, 5", "upgrade envbuilder", "--upgrade")),
    ("# lock format: four\n\n", ("lock format 'four'", "--upgrade")),
])
def test_a_missing_or_unknown_format_is_one_line(stack, header, needles):
    with pytest.raises(LockFormatError) as e:
        read_lockfile(header + BODY, "x/requirements.lock", stack)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert str(e.value).startswith("x/requirements.lock ")
    assert all(n in str(e.value) for n in needles), str(e.value)
    assert f"envbuilder lock {TARGET} -o x --upgrade" in str(e.value)


@pytest.mark.parametrize("check", [True, False], ids=["check", "lock"])
@pytest.mark.parametrize("header, needle", [
    ("", "has no lock format version"),
    ("# requirements.lock\n# lock format: 99\n\n", "lock format '99'"),
], ids=["missing", "unknown"])
def test_cli_refuses_a_lock_of_no_or_an_unknown_format(tmp_path, header, needle, check):
    """lock --check and lock (which would otherwise keep or replace it) both refuse it, exit
    2, naming the file and the command that locks again; the file is left as it was."""
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    lock.write_text(header + BODY)
    before = lock.read_bytes()
    p = cli("lock", TARGET, "-o", str(out), *(["--check"] if check else []))
    assert_clean_failure(p, 2, str(lock), needle, f"envbuilder lock {TARGET} -o {out}",
                         "--upgrade")
    assert lock.read_bytes() == before


def test_diff_of_a_lock_of_an_unknown_format_names_it(tmp_path):
    a = tmp_path / "a.lock"
    a.write_text("# lock format: 7\n\n" + BODY)
    p = cli("diff", str(a), str(a))
    assert_clean_failure(p, 2, str(a), "lock format '7'", "upgrade envbuilder")


def test_no_lock_module_imports_a_private_name_of_another():
    """lock/ is split by concern; a module's private names stay its own."""
    for path in sorted(Path(model.__file__).parent.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("envbuilder.lock"):
                private = [a.name for a in node.names if a.name.startswith("_")]
                assert not private, f"{path.name} imports {private} from {node.module}"


# -- format 5: the lock's date and its system pins (lock.system) -----------------------------

DIGEST = "sha256:" + "b" * 64


def _pins(**kw):
    from envbuilder.lock.system import AptPin, SystemPins

    return SystemPins(resolved_at="2026-12-05T08:40:12Z",
                      images={"builder": f"envbuilder-test/debian:12@{DIGEST}",
                              "runtime": f"envbuilder-test/debian:12@{DIGEST}"},
                      image_source={"builder": "engine", "runtime": "engine"},
                      apt={"builder": (AptPin("ca-certificates", "20230311+deb12u1"),
                                       AptPin("python3.11", "3.11.2-6+deb12u6")),
                           "runtime": (AptPin("libpython3.11-stdlib", "3.11.2-6+deb12u6"),)},
                      **kw)


def test_a_format_5_lock_keeps_its_date_and_system_pins_under_their_digest(stack):
    inputs = lock_inputs(stack)
    text = model.dump(stack, "uv pip compile -", inputs, "0.5.0", BODY, epoch=1717200000,
                      system=_pins())
    assert "# source date epoch: 1717200000 (2024-06-01T00:00:00Z)\n" in text
    assert f"#   image runtime: envbuilder-test/debian:12@{DIGEST} (engine)\n" in text
    assert "#   apt builder: python3.11=3.11.2-6+deb12u6\n" in text
    lf = model.read(text, LOCK_NAME, "fix")
    assert lf.source_date_epoch == 1717200000 and lf.system == _pins() and lf.pins_intact
    assert lf.body == BODY and lf.record_intact and lf.body_intact
    assert lock_drift(stack, text, LOCK_NAME, inputs) == []
    # an edited pin is found, as an edited entry is
    edited = text.replace("python3.11=3.11.2-6+deb12u6", "python3.11=3.11.2-6+deb12u7")
    assert not model.read(edited, LOCK_NAME, "fix").pins_intact
    assert any("the date or the system pins in its header were edited" in p
               for p in lock_drift(stack, edited, LOCK_NAME, inputs))


def test_with_pins_replaces_the_date_and_system_pins_and_nothing_else(stack):
    inputs = lock_inputs(stack)
    plain = model.dump(stack, "uv pip compile -", inputs, "0.5.0", BODY, epoch=1717200000)
    pinned = model.with_pins(plain, epoch=1717200000, system=_pins())
    assert pinned == model.dump(stack, "uv pip compile -", inputs, "0.5.0", BODY,
                                epoch=1717200000, system=_pins())
    assert model.with_pins(pinned, epoch=1717200000, system=None) == plain


@pytest.mark.parametrize("line, needle", [
    ("#   apt builder: python3.11=3.11; rm -rf /", "is not a Debian package name"),
    ("#   image builder: debian:12", "is not an image by digest"),
    ("#   image builder: debian:12@sha256:" + "c" * 64 + "$(id)", "is not an image by digest"),
])
def test_a_system_pin_that_could_inject_a_command_is_refused(stack, line, needle):
    inputs = lock_inputs(stack)
    text = model.dump(stack, "uv pip compile -", inputs, "0.5.0", BODY, epoch=1717200000,
                      system=_pins())
    key = line.split(":")[0] + ":"
    bad = "\n".join(line if ln.startswith(key) else ln for ln in text.splitlines()) + "\n"
    with pytest.raises(InputError) as e:
        model.read(bad, LOCK_NAME, "fix")
    assert needle in str(e.value) and e.value.exit_code == 2
