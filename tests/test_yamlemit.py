"""The one YAML emitter (envbuilder.render.yamlemit), on its own: every hostile string
round-trips through ``scalar`` and ``dump`` with PyYAML and with go-yaml (kubectl's own
parser, through ``kubectl kustomize``, offline), and ``inline`` never ends a comment."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import yaml

from envbuilder.render import yamlemit

# line breaks YAML parsers honour, C0/C1 controls, bidi, astral, YAML syntax, a long value
HOSTILE = ["x\u2028{apiVersion: v1, kind: Pod, metadata: {name: p}}\u2028---\u2028#",
           "torchrun train.py\u2028evil: pwned #", "a\u2029b", "a\u0085b", "a\nb", "a\rb",
           "\x9b31m", "\x1b[31mred", "\x07\x00", "\u202eevil\u202c", "\u2066x\u2069", "😀 ok",
           "\U000e0041", "\ufeffbom", "\ufffe", "{a: b}", "- item", "key: value #c", "'\"",
           "*alias &anchor !!python/object:os.system", "---", "...", "yes", "null", "0x1F",
           "  leading", "trailing  ", "\\u2028", "x" * 100_000]


@pytest.mark.parametrize("text", HOSTILE, ids=range(len(HOSTILE)))
def test_scalar_and_dump_round_trip_through_pyyaml(text):
    assert yaml.safe_load("k: " + yamlemit.scalar(text)) == {"k": text}
    doc = {"a": text, text[:200]: [text], "n": {"m": text}}
    out = yamlemit.dump(doc)
    assert list(yaml.safe_load_all(out)) == [doc]
    assert yamlemit.problem(out) is None, out[:200]


@pytest.mark.parametrize("text", HOSTILE[:16], ids=range(16))
def test_inline_never_ends_a_comment(text):
    out = f"# {yamlemit.inline(text)}\nk: 1\n"
    assert list(yaml.safe_load_all(out)) == [{"k": 1}]
    assert yamlemit.problem(out) is None


def test_astral_characters_are_written_as_themselves():
    # json's encoder writes a surrogate pair, which YAML reads as two lone surrogates
    assert json.dumps("😀") == '"\\ud83d\\ude00"'
    assert yamlemit.scalar("😀") == '"😀"'
    assert yaml.safe_load(yamlemit.scalar("😀")) == "😀"
    assert yamlemit.dump({"e": "😀"}) == "e: 😀\n"


def test_printable_ascii_is_what_json_writes():
    for s in ("plain", 'quote " and \\ backslash', "a/b:c#d{e}", ""):
        assert yamlemit.scalar(s) == json.dumps(s)


def test_every_escape_is_visible_and_one_line():
    s = yamlemit.scalar("a\u2028b\u0085c\u202ed\x9be\tf\ng")
    assert s == '"a\\u2028b\\u0085c\\u202ed\\u009be\\tf\\ng"'
    assert yamlemit.inline("a\u2028b\nc") == "a\\u2028b\\nc"
    assert "\n" not in yamlemit.inline("x\ny\rz\u2029")


def test_multi_line_visible_text_is_a_literal_block():
    pem = "-----BEGIN PUBLIC KEY-----\nabc=\n-----END PUBLIC KEY-----\n"
    out = yamlemit.dump({"data": pem})
    assert out.startswith("data: |\n") and yaml.safe_load(out) == {"data": pem}
    # with an invisible character it is quoted instead: nothing hides in a block
    hidden = "line\u2028one\nline two\n"
    out = yamlemit.dump({"data": hidden})
    assert "|" not in out and yaml.safe_load(out) == {"data": hidden}


def test_no_anchors_in_generated_yaml():
    shared = {"x": 1}
    out = yamlemit.dump({"a": shared, "b": shared})
    assert "&" not in out and "*" not in out


def test_problem_names_the_raw_character():
    assert yamlemit.problem("a: 1\n# x\u2028y\n") == "U+2028 at line 2"
    assert yamlemit.problem("a: \x9b\n") == "U+009B at line 1"
    assert yamlemit.problem("a: 😀\tb\n") is None


def test_templates_escape_every_value_they_print():
    import jinja2

    opts = yamlemit.jinja_options()
    env = jinja2.Environment(**opts["environment"])
    env.filters.update(opts["filters"])
    tpl = env.from_string("# {{ v }}\nk: {{ v | q }}\nm: {{ m | flow }}\n{% macro b() %}x: 1\ny: 2{% endmacro %}z:\n  {{ b() | indent(2) }}\n")
    v = "a\u2028evil: pwned <&> \"'"
    out = tpl.render(v=v, m={"k": v, "n": 3})
    assert list(yaml.safe_load_all(out)) == [{"k": v, "m": {"k": v, "n": 3}, "z": {"x": 1, "y": 2}}]
    assert "&lt;" not in out and "evil: pwned <&>" in out  # nothing HTML-escaped


def _kubectl() -> str:
    exe = shutil.which("kubectl")
    if exe is None:
        pytest.skip("kubectl is not on PATH (Debian: kubernetes-client)")
    return exe


def go_yaml_documents(kubectl: str, text: str, tmp_path) -> list[dict]:
    """The documents go-yaml (kubectl's parser, through kustomize, offline) reads in ``text``."""
    folder = tmp_path / "k"
    folder.mkdir(exist_ok=True)
    (folder / "f.yaml").write_text(text, encoding="utf-8")
    (folder / "kustomization.yaml").write_text("resources:\n- f.yaml\n")
    p = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    return [d for d in yaml.safe_load_all(p.stdout) if d]


@pytest.mark.parametrize("text", HOSTILE[:14], ids=range(14))
def test_go_yaml_reads_the_same_values_and_documents(text, tmp_path):
    kubectl = _kubectl()
    # kustomize writes what it read back as YAML and reads it again, and its writer puts C1
    # controls raw (then refuses its own output): those go in the comment only
    c1 = any(0x80 <= ord(c) <= 0x9F for c in text)
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"},
           "data": {"v": "plain" if c1 else text}}
    out = f"# {yamlemit.inline(text)}\n" + yamlemit.dump(doc)
    assert go_yaml_documents(kubectl, out, tmp_path) == [doc]
