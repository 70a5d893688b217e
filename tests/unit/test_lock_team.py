"""envbuilder/lock/team.py: a team's requirement lines read as pip reads them."""

import pytest

from envbuilder.errors import InputError
from envbuilder.lock.team import parse_requirement_lines, pip_args_options, pip_line_problem


def test_pip_cuts_a_line_at_its_first_option():
    assert pip_args_options("torch==2.5 --hash=sha256:x") == ("torch==2.5", "--hash=sha256:x")
    assert pip_args_options("rich==13.0") == ("rich==13.0", "")


@pytest.mark.parametrize("line,why", [
    ("rich==${VERSION}", "environment variable"),
    ('rich==13.0 ; python_version > "3" #x', "comment"),
    ('x ; sys_platform == "linux --index-url"', "option"),
])
def test_lines_pip_would_read_otherwise_are_named(line, why):
    assert why in (pip_line_problem(line) or "")


def test_plain_lines_parse_and_the_rest_is_refused_naming_the_line():
    reqs = parse_requirement_lines(["# a comment", "", "rich==13.0", "einops>=0.8  # why"], "req.txt")
    assert [str(r) for r in reqs] == ["rich==13.0", "einops>=0.8"]
    for bad, match in (("--index-url https://x", "options such as"), ("x==1 \\", "continuations"),
                       ("pkg @ https://x/p.whl", "direct URL"), ("not a req!", "not a valid requirement"),
                       ("a\x07b", "control characters")):
        with pytest.raises(InputError, match=match) as ei:
            parse_requirement_lines(["ok==1", bad], "req.txt")
        assert "req.txt:2" in str(ei.value)
