"""A team's own requirement lines (``--requirements FILE``, a project's list): read as pip
reads a requirements file, and checked against the stack (exit 3 when one contradicts it)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from packaging.utils import canonicalize_name

from envbuilder.components import registry
from envbuilder.core.resolve import Stack
from envbuilder.errors import IncompatibleError, InputError
from envbuilder.lock.checks import nccl_fact
from envbuilder.lock.entries import NCCL_WHEEL_RE, comment_safe, cut

if TYPE_CHECKING:
    # imported where a requirement is parsed: render without a lock never parses one
    from packaging.requirements import Requirement


def user_requirements(path: str | Path, text: str | None = None) -> list[Requirement]:
    from envbuilder._fs import read_text_capped

    p = Path(path)
    if text is None:
        text = read_text_capped(p, "--requirements", limit=1 << 20)
    return parse_requirement_lines(text.splitlines(), comment_safe(str(p)))


# pip's requirements-file grammar (pip/_internal/req/req_file.py, pip 23-25): a comment starts
# at a '#' at the start of the line or after whitespace; ${UPPER_CASE} names are replaced by
# environment variables; the line is cut at its first space-separated word starting with '-',
# and what follows is parsed as options (--hash, --config-settings, --global-option)
# https://pip.pypa.io/en/stable/reference/requirements-file-format/
PIP_COMMENT_RE = re.compile(r"(^|\s+)#.*\Z")


PIP_ENV_VAR_RE = re.compile(r"\$\{[A-Z0-9_]+\}")


def pip_args_options(line: str) -> tuple[str, str]:
    """(requirement, options) of a requirements-file line as pip breaks it
    (``break_args_options``): the options begin at the first word starting with '-'."""
    tokens = line.split(" ")
    args: list[str] = []
    for i, token in enumerate(tokens):
        if token.startswith("-"):
            return " ".join(args), " ".join(tokens[i:])
        args.append(token)
    return " ".join(args), ""


def pip_line_problem(line: str) -> str | None:
    """Why ``pip install -r`` would read ``line`` (comment-free) otherwise than as one plain
    requirement, or None."""
    var = PIP_ENV_VAR_RE.search(line)
    if var is not None:
        return f"pip replaces {var.group(0)} with an environment variable: write the value itself"
    if PIP_COMMENT_RE.search(line):
        return "pip reads a '#' after whitespace as the start of a comment"
    _, options = pip_args_options(line)
    if options:
        return (f"pip reads {cut(options.split(' ')[0], 40)!r} as an option, not part of the "
                f"requirement (it cuts a line at its first word starting with '-')")
    return None


def parse_requirement_lines(lines: Sequence[str], source: str) -> list[Requirement]:
    """Plain ``name[extras] op version`` lines (a requirements file's, or a project file's
    ``requirements`` list); comments and blank lines skipped. ``source`` names them in errors.
    Each line is read as pip's requirements-file reader reads it (``pip_line_problem``): one
    pip would read otherwise (an option inside a marker string, an environment variable) is
    refused naming the line and the reason, and so is the line as envbuilder writes it."""
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[Requirement] = []
    for n, raw in enumerate(lines, 1):
        where = f"{source}:{n}"
        if any(ord(c) < 32 and c != "\t" for c in raw):
            raise InputError(f"{where}: control characters are not allowed in --requirements")
        line = PIP_COMMENT_RE.sub("", raw).strip()
        if not line:
            continue
        if line.startswith("-"):
            raise InputError(f"{where}: options such as {cut(line.split()[0], 40)!r} are not allowed in "
                             f"--requirements (give plain 'name==version' lines; indexes go in "
                             f"--pip-index-url/--extra-index-url)")
        if line.endswith("\\"):
            raise InputError(f"{where}: line continuations are not allowed in --requirements")
        try:
            req = Requirement(line)
        except InvalidRequirement as e:
            why = str(e).splitlines()[0] if str(e) else "cannot parse"
            raise InputError(f"{where}: not a valid requirement {cut(line)!r}: {why}") from None
        if req.url:
            raise InputError(f"{where}: direct URL requirements ({req.name} @ ...) cannot be "
                             f"hash-locked from an index; give name==version")
        for text in (line, str(req)):  # as given, and as the team layer's file will hold it
            problem = pip_line_problem(text)
            if problem is not None:
                raise InputError(f"{where}: {cut(line)!r} is not one requirement for pip: "
                                 f"{problem}")
        out.append(req)
    return out


def team_requirements(stack: Stack, *, requirements_file: str | Path | None = None,
                      lines: Sequence[str] = (), source: str = "requirements") -> tuple[str, ...]:
    """A team's own requirements (``--requirements FILE`` and/or a project's list), checked
    against the stack (exit 3 when one contradicts it): the ``team`` layer's lines."""
    reqs: list[Requirement] = []
    if requirements_file is not None:
        reqs += user_requirements(requirements_file)
        check_user_requirements(stack, reqs, requirements_file)
    if lines:
        more = parse_requirement_lines(list(lines), comment_safe(source))
        check_user_requirements(stack, more, source)
        reqs += more
    return tuple(dict.fromkeys(str(r) for r in reqs))


def _stack_versions(stack: Stack) -> dict[str, tuple[str, str]]:
    """Package -> (version, what says so) for the packages the stack pins."""
    out: dict[str, tuple[str, str]] = {}
    for c in registry.active(stack):  # torch's, then each component's (envbuilder.components)
        out.update(c.lock_pins(stack))
    nccl, pkg = nccl_fact(stack)
    if nccl and pkg:
        out[canonicalize_name(pkg)] = (nccl, f"NCCL {nccl} bundled by torch {stack.torch.version} "
                                             f"{stack.variant}")
    return out


def check_user_requirements(stack: Stack, reqs: list[Requirement], path) -> None:
    pinned = _stack_versions(stack)
    _, nccl_pkg = nccl_fact(stack)
    nccl_major = NCCL_WHEEL_RE.match(canonicalize_name(nccl_pkg)) if nccl_pkg else None
    for req in reqs:
        name = canonicalize_name(req.name)
        if name in pinned:
            version, what = pinned[name]
            candidates = [version]
            if name == "torch":
                candidates.append(f"{version}+{stack.variant}")
            if req.specifier and not any(req.specifier.contains(c, prereleases=True)
                                         for c in candidates):
                raise IncompatibleError(
                    f"--requirements {path} asks for {req} but the stack {stack.tag} has "
                    f"{what}: drop or change that line, or pick another target",
                    details=[f"requirements: {req}", f"stack: {what}",
                             f"source: {', '.join(_sources(stack, name)[:2])}"])
        m = NCCL_WHEEL_RE.match(name)
        if m and nccl_major and m.group(1) != nccl_major.group(1):
            raise IncompatibleError(
                f"--requirements {path} asks for {req} but torch {stack.torch.version} "
                f"{stack.variant} bundles {nccl_pkg}: two NCCL wheels of different CUDA majors "
                f"cannot share one environment")


def _sources(stack: Stack, name: str) -> list[str]:
    for c in registry.active(stack):
        if name in c.lock_pins(stack) and c.source(stack):
            return list(c.source(stack))
    return list(stack.torch.source)
