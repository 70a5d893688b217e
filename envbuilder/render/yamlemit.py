"""The one way envbuilder writes YAML: every value and every comment of a generated YAML file
(job files, the Kueue queue, the admission policy, monitoring, the CI workflow, conda files, a
matrix overlay) goes through this module, so no value can end a line, a comment or a document.

YAML parsers (PyYAML; go-yaml under kubectl) end a line, and so a comment, at U+0085 (NEL),
U+2028 and U+2029 as well as at LF and CR, and refuse a file holding a C0 or C1 control
character raw. Three forms cover every place a value goes:

``scalar(value)``
    A double-quoted YAML 1.2 scalar: ``"``, ``\\``, every line break, every C0/C1 control and
    every character a reviewer cannot see (format characters such as the bidi controls, U+FEFF,
    unassigned and private-use code points, noncharacters) escaped (``\\n``, ``\\t``,
    ``\\uXXXX``, ``\\UXXXXXXXX``); every other character, astral ones included (an emoji), is
    written as itself, never as a surrogate pair (``"\\ud83d\\ude00"``, which JSON's encoder
    writes, is two lone surrogates to YAML, and kubectl refuses it). For printable ASCII the
    text is exactly what ``json.dumps`` gives.
``inline(value)``
    The text of a value on one line, for a comment (``# ... {{ command }}``) or a line of a
    script: the same characters escaped, without quotes. It can never end the comment.
``dump(doc)``
    A whole document from data (PyYAML's SafeDumper, block style, keys in order, no anchors):
    strings that need an escape are written by ``scalar``; multi-line text of visible
    characters as a literal block (``|``); anything else as PyYAML chooses.

Templates (``jinja_options()``): the job files' jinja2 environment escapes every ``{{ }}``
through ``inline`` unless the value is already emitted text: ``scalar``'s result (the ``q``
filter), a macro's output, a shell-quoted word (``emitted``). A value a template forgets to
quote still cannot leave its line. ``markupsafe.Markup`` is jinja2's marker of text that is
already in the output's format; here it marks YAML (or shell) text, and nothing is
HTML-escaped: every plain value becomes ``Markup`` through ``inline`` first.

``problem(text)`` names the first raw character of a generated file that this module would
have escaped (tests, and a last check of what a template wrote).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

import yaml

from envbuilder._safety import hidden

__all__ = ["scalar", "inline", "flow", "dump", "emitted", "jinja_options", "problem", "needs_escape"]

# printable ASCII without the two characters a double-quoted scalar escapes: the fast path
_PLAIN_ASCII = re.compile(r'[ !#-\[\]-~]*\Z')
_SHORT = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}
# what must be escaped: a line break, a control, an invisible character (one rule with the
# terminal writer: envbuilder._safety.hidden)
_hidden = hidden


def _escape(ch: str) -> str:
    o = ord(ch)
    if o <= 0xFFFF:
        return f"\\u{o:04x}"
    return f"\\U{o:08x}"


def needs_escape(text: str) -> bool:
    """Whether ``text`` holds a character ``scalar`` and ``inline`` escape (besides ``"`` and
    ``\\``): a line break, a control or an invisible character."""
    if text.isascii():
        return any(not (" " <= c <= "~") for c in text)
    return any(_hidden(c) for c in text)


def scalar(value: Any) -> str:
    """``value`` as a double-quoted YAML scalar (see the module docstring)."""
    text = str(value)
    if _PLAIN_ASCII.match(text):
        return f'"{text}"'
    out = []
    for ch in text:
        short = _SHORT.get(ch)
        if short is not None:
            out.append(short)
        elif _hidden(ch):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def inline(value: Any) -> str:
    """``value``'s text on one line: line breaks, controls and invisible characters escaped as
    ``scalar`` escapes them (``\\n``, ``\\u2028``, ``\\x1b`` as ``\\u001b``); nothing else is
    changed (no quotes added: a comment's text, a word of a message)."""
    text = str(value)
    if text.isascii() and text.isprintable():
        return text
    out = []
    for ch in text:
        if ch in "\n\t\r":
            out.append(_SHORT[ch])
        elif _hidden(ch):
            out.append(_escape(ch))
        else:
            out.append(ch)
    return "".join(out)


def flow(mapping: Mapping[str, Any]) -> str:
    """A one-line flow mapping (``{"key": "v", "n": 3}``): keys and strings by ``scalar``,
    numbers and booleans as YAML writes them."""
    def one(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        return scalar(v)

    return "{" + ", ".join(f"{scalar(k)}: {one(v)}" for k, v in mapping.items()) + "}"


def problem(text: str) -> str | None:
    """The first raw character of a generated YAML ``text`` that no emitted YAML holds (a line
    break other than LF, a control, an invisible character), as ``'U+2028 at line 3'``; None
    when there is none."""
    for n, line in enumerate(text.split("\n"), 1):
        for ch in line:
            if ch != "\t" and (not (" " <= ch <= "~")) and _hidden(ch):
                return f"U+{ord(ch):04X} at line {n}"
    return None


# -- whole documents -----------------------------------------------------------------------

class _Emitter(yaml.emitter.Emitter):
    def write_double_quoted(self, text: str, split: bool = True) -> None:  # noqa: ARG002
        """Every double-quoted scalar is ``scalar``'s text, on one line (never folded)."""
        self.write_indicator(scalar(text), True)


class _Dumper(_Emitter, yaml.serializer.Serializer, yaml.representer.SafeRepresenter,
              yaml.resolver.Resolver):
    """SafeDumper with envbuilder's scalars (see ``dump``)."""

    def __init__(self, stream: Any, **kw: Any) -> None:
        _Emitter.__init__(self, stream, canonical=kw.get("canonical"), indent=kw.get("indent"),
                          width=kw.get("width"), allow_unicode=kw.get("allow_unicode"),
                          line_break=kw.get("line_break"))
        yaml.serializer.Serializer.__init__(self, encoding=kw.get("encoding"),
                                            explicit_start=kw.get("explicit_start"),
                                            explicit_end=kw.get("explicit_end"),
                                            version=kw.get("version"), tags=kw.get("tags"))
        yaml.representer.SafeRepresenter.__init__(
            self, default_style=kw.get("default_style"),
            default_flow_style=kw.get("default_flow_style", False),
            sort_keys=kw.get("sort_keys", True))
        yaml.resolver.Resolver.__init__(self)

    def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002
        return True  # a generated file is read by people and by every parser: no anchors


def _represent_str(dumper: _Dumper, value: str) -> yaml.ScalarNode:
    style = None
    if needs_escape(value.replace("\n", "")):
        style = '"'
    elif "\n" in value:
        style = "|"  # visible multi-line text (a PEM key, a CUE policy) as a literal block
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def dump(doc: Any, *, width: int = 80, sort_keys: bool = False) -> str:
    """``doc`` (mappings, sequences, strings, numbers, booleans, None) as YAML text."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=sort_keys, default_flow_style=False,
                     allow_unicode=True, width=width)


# -- templates -----------------------------------------------------------------------------

def emitted(text: str) -> Any:
    """``text`` marked as already written in the output's format (YAML or shell): a template
    prints it as it is."""
    from markupsafe import Markup

    return Markup(text)


def _finalize(value: Any) -> Any:
    if hasattr(value, "__html__"):  # emitted already (scalar, a macro's output, a shell word)
        return value
    return emitted(inline("" if value is None else value))


def _q(value: Any) -> Any:
    return emitted(scalar(value))


def jinja_options() -> dict[str, Any]:
    """The jinja2 Environment options and filters of templates that write YAML (and the shell
    scripts beside them): ``env = Environment(**opts["environment"]); env.filters.update(
    opts["filters"])``. ``q``: a scalar; ``flow``: a one-line mapping; every other value is
    ``inline``."""
    return {"environment": {"autoescape": True, "finalize": _finalize},
            "filters": {"q": _q, "flow": lambda m: emitted(flow(m))}}
