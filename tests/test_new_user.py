"""A new user's rough edges (issue 27, item 8), each through the CLI as they hit it: layouts of
equal counts are even, a usage error is printed once, did-you-mean for project keys and project
target names, `targets` exits 3 on a refused project target, one type per key."""

from __future__ import annotations


from hostile_helpers import assert_clean_failure, cli

from envbuilder.core import layouts

THREE = """\
[[targets]]
name = "train-ds"
target = "cu121"
deepspeed = "0.16"

[[targets]]
name = "eval"
target = "cpu"

[[targets]]
name = "serve"
target = "cu124"
"""


def _project(tmp_path, text: str = THREE):
    (tmp_path / "envbuilder.toml").write_text(text)
    return tmp_path


# -- layouts: 8,8,8,8 is four nodes of eight ranks ------------------------------------------------

def test_equal_counts_are_an_even_layout():
    assert layouts.Layout.parse("8,8,8,8").pair == (4, 8)
    assert not layouts.Layout.parse("7,5").is_even and layouts.Layout.parse("2x8").pair == (2, 8)
    assert layouts.parse_layouts(["8,8,8,8"]) == ((4, 8),)
    from envbuilder.api.smoketest import _smoke_layout

    assert _smoke_layout("8,8,8,8", None, None, False) == (8, 4, None)
    assert _smoke_layout("7,5", None, None, False) == (12, 2, [7, 5])


def test_render_takes_equal_counts_as_even(tmp_path):
    p = cli("render", "cu121", "-o", str(tmp_path / "o"), "-q", "--layout", "8,8,8,8")
    assert p.returncode == 0, p.stderr
    assert "uneven" not in p.stderr
    assert (tmp_path / "o" / "jobs").is_dir()


# -- a usage error once, not once per target ----------------------------------------------------

def test_lock_check_upgrade_is_one_usage_error(tmp_path):
    p = cli("lock", "--check", "--upgrade", cwd=_project(tmp_path))
    assert_clean_failure(p, 2, "--check", "--upgrade")
    assert p.stderr.count("give one of them") == 1 and "lock failed" not in p.stderr


# -- project target names: did-you-mean; resolve acts on the project; targets exits 3 --------------

def test_a_mistyped_project_target_name_gets_a_did_you_mean(tmp_path):
    p = cli("resolve", "trian-ds", cwd=_project(tmp_path))
    assert_clean_failure(p, 2, "'trian-ds' is not a target of", "did you mean train-ds?")
    # a target string is still a target string inside a project
    assert cli("resolve", "cu121", "--json", cwd=tmp_path).returncode == 0


REFUSED = THREE + '\n[[targets]]\nname = "old-hvd"\ntarget = "cu124-hvd0.28"\n'


def test_targets_exits_3_when_a_project_target_is_refused(tmp_path):
    import json

    p = cli("targets", cwd=_project(tmp_path, REFUSED))
    assert p.returncode == 3, p.stderr
    assert "old-hvd" in p.stdout and "refused" in p.stdout
    p = cli("targets", "--json", cwd=tmp_path)
    assert p.returncode == 3
    rows = {r["name"]: r["ok"] for r in json.loads(p.stdout)["targets"]}
    assert rows == {"train-ds": True, "eval": True, "serve": True, "old-hvd": False}
    assert cli("targets", cwd=_project(tmp_path, THREE)).returncode == 0


def test_resolve_without_a_target_acts_on_the_project(tmp_path):
    import json

    p = cli("resolve", "--json", cwd=_project(tmp_path))
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [r["name"] for r in d["resolved"]] == ["train-ds", "eval", "serve"] and d["ok"]
    assert d["resolved"][0]["deepspeed"].startswith("0.16")
    p = cli("resolve", cwd=tmp_path)
    assert p.returncode == 0 and "train-ds:" in p.stdout and "serve:" in p.stdout
    p = cli("resolve", cwd=_project(tmp_path, REFUSED))  # the others, then exit 3 naming it
    assert p.returncode == 3 and "serve:" in p.stdout and "old-hvd: resolve failed" in p.stderr
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "envbuilder.toml").write_text("")  # a project without targets: needs a TARGET
    assert_clean_failure(cli("resolve", cwd=outside), 2, "lists no [[targets]]")


# -- docs: every repo path and relative link exists; the figures are the data's ---------------------

def _docs():
    from hostile_helpers import ROOT

    return ROOT, [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_every_repo_path_and_relative_link_in_the_docs_exists():
    import re

    root, docs = _docs()
    tops = ("envbuilder/", "tests/", "matrices/", "docs/", "scripts/", "benchmarks/", "templates/")
    missing = []
    for doc in docs:
        text = doc.read_text()
        for m in re.findall(r"`([^`\s]+)`", text):  # a repository path named in code
            p = m.rstrip(".,:;")
            if p.startswith(tops) and not any(c in p for c in "<>*{}[]$|") and not (root / p).exists():
                missing.append(f"{doc.relative_to(root)}: `{m}`")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):  # a relative link
            if not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(root)}: ({target})")
        for name in re.findall(r"(?<![/\w.-])([A-Z]+\.md)\b", text):  # a bare FILE.md names a file beside it
            if not ((doc.parent / name).exists() or (root / name).exists()):
                missing.append(f"{doc.relative_to(root)}: {name}")
    assert not missing, missing


def test_user_guide_figures_are_the_data():
    import re

    import yaml

    root, _ = _docs()
    guide = (root / "docs" / "user-guide.md").read_text()
    cats = list(yaml.safe_load((root / "envbuilder" / "data" / "signatures.yaml").read_text())["categories"])
    m = re.search(r"ranks causes in (\d+) categories \(([^)]*)\)", guide)
    assert m and int(m.group(1)) == len(cats)
    assert re.findall(r"`(\w+)`", m.group(2)) == cats
    cases = yaml.safe_load((root / "tests" / "explain_corpus" / "cases.yaml").read_text())["cases"]
    m = re.search(r"holds (\d+) real logs", guide)
    assert m and int(m.group(1)) == len(cases)


def test_resolve_outside_a_project_needs_a_target(tmp_path):
    assert_clean_failure(cli("resolve", cwd=tmp_path), 2, "resolve needs a TARGET (e.g. cu121) or a project",
                         "envbuilder resolve --help")
