"""What a package needs while it is imported, read from its sources (no code of it runs).

``import_needs(tree, package, apis)`` walks the module-level import graph of ``package`` from
its ``__init__.py`` (the modules ``import package`` executes: every module-level ``import`` and
``from ... import`` of the package, relative or absolute, including those under ``if`` and
``try``), and in each module it reaches collects the torch APIs evaluated while importing:

* ``from torch.a import b`` and ``import torch.a`` at module level;
* attribute chains rooted at ``torch`` (or a module-level alias of it) evaluated at module
  level: decorators of module-level functions and classes, class bodies, assignments, calls,
  default arguments, base classes (never function bodies: they run later).

A use inside a ``try`` whose handler catches the failure, or under an ``if``, is guarded and
does not count, with one exception read from real breakages: a name a guarded import binds,
which the handler does not bind, no later statement binds again, and which module-level code
then uses unguarded (DeepSpeed 0.17.5's ``_disable_dynamo_if_unsupported``,
deepspeedai/DeepSpeed#7514; 0.17.6 defines a fallback after the ``try``, #7544), counts.

The uses are read against torch.yaml's ``apis:`` (the release that added or removed each API):
the result is the torch range the package imports with, each bound with the module, line and
API that decided it. The Python floor is the oldest CPython whose grammar parses every module
reached (``ast.parse(feature_version=...)``: a ``match`` statement needs 3.10, a parenthesised
context manager 3.9).
"""

from __future__ import annotations

import ast
import io
import tarfile
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from packaging.version import Version

from envbuilder.core.matrix import TorchApi

MAX_MODULES = 2000  # a package's import closure (DeepSpeed's is a few hundred modules)
MAX_SOURCE_BYTES = 4 << 20  # one module
PYTHON_MINORS = tuple(range(6, 16))  # the grammars tried for the Python floor: 3.6 .. 3.15


class SourceTree:
    """A release's sources: ``text(path)`` is a file's text, None when it has none."""

    def text(self, path: str) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def url(self, path: str) -> str:
        """Where ``path`` was read (a fact's source)."""
        return path


class FetchedTree(SourceTree):
    """Files fetched one by one under a base URL (a release tag on GitHub); ``fetch(url)`` returns
    the body or None for a file the tag does not have."""

    def __init__(self, base: str, fetch: Callable[[str], bytes | None]) -> None:
        self.base = base.rstrip("/") + "/"
        self.fetch = fetch
        self._seen: dict[str, str | None] = {}

    def url(self, path: str) -> str:
        return self.base + path

    def text(self, path: str) -> str | None:
        if path not in self._seen:
            body = self.fetch(self.url(path))
            self._seen[path] = None if body is None else body[:MAX_SOURCE_BYTES].decode("utf-8", "replace")
        return self._seen[path]


class SdistTree(SourceTree):
    """The files of a source distribution (``.tar.gz``), read in memory; paths are relative to its
    top folder (``deepspeed-0.18.9/``)."""

    def __init__(self, data: bytes, url: str) -> None:
        self._url = url
        self.files: dict[str, bytes] = {}
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            for member in tar.getmembers():
                if not member.isfile() or not member.name.endswith(".py") or member.size > MAX_SOURCE_BYTES:
                    continue
                parts = member.name.split("/", 1)
                f = tar.extractfile(member)
                if len(parts) == 2 and f is not None:
                    self.files[parts[1]] = f.read()

    def url(self, path: str) -> str:
        return f"{self._url}#{path}"

    def text(self, path: str) -> str | None:
        body = self.files.get(path)
        return None if body is None else body.decode("utf-8", "replace")


@dataclass(frozen=True)
class Use:
    """A torch API a module uses while importing, where."""

    api: str  # torch.library.custom_op
    module: str  # deepspeed.compile.custom_ops.all_to_all
    line: int
    how: str  # "decorator", "import", "call", "guarded import used unguarded", ...


@dataclass(frozen=True)
class Bound:
    """One end of the import-time torch range and the use that set it."""

    version: Version
    api: TorchApi
    use: Use
    url: str

    def describe(self) -> str:
        verb = "added in" if self.api.added is not None and self.version == self.api.added else "removed in"
        return (f"{self.use.module} (line {self.use.line}) uses {self.use.api} at import time "
                f"({self.use.how}); {self.api.api} was {verb} torch {self.version}")


@dataclass
class ImportNeeds:
    """What importing a package needs: a torch range (floor inclusive, ceiling exclusive), the
    oldest Python whose grammar parses it, and what it read."""

    package: str
    modules: list[str] = field(default_factory=list)  # reached, in the order read
    missing: list[str] = field(default_factory=list)  # imported but not found in the tree
    uses: list[Use] = field(default_factory=list)
    torch_floor: Bound | None = None
    torch_ceiling: Bound | None = None
    bounds: list[Bound] = field(default_factory=list)  # every use that names an API of the table
    python_floor: tuple[Version, str] | None = None  # (3.10, the module that needs it)

    def why(self) -> str:
        """Every use that sets one of the bounds, in words."""
        ends = [b for b in self.bounds if (self.torch_floor and b.version == self.torch_floor.version
                                           and b.api.added == b.version)
                or (self.torch_ceiling and b.version == self.torch_ceiling.version and b.api.removed == b.version)]
        seen: dict[tuple[str, str], Bound] = {}
        for b in ends:
            seen.setdefault((b.use.module, b.api.api), b)
        return "; ".join(b.describe() for b in seen.values())

    def torch_spec(self) -> str | None:
        parts = ([f">={self.torch_floor.version}"] if self.torch_floor else []) + (
            [f"<{self.torch_ceiling.version}"] if self.torch_ceiling else [])
        return ",".join(parts) or None


def module_path(module: str) -> tuple[str, str]:
    """The two files a module may be: ``a/b.py`` and ``a/b/__init__.py``."""
    base = module.replace(".", "/")
    return f"{base}.py", f"{base}/__init__.py"


def import_needs(tree: SourceTree, package: str, apis: Sequence[TorchApi]) -> ImportNeeds:
    """The import-time needs of ``package`` in ``tree`` (see the module's docstring)."""
    out = ImportNeeds(package)
    todo = [package]
    seen: set[str] = set()
    py_floor: tuple[Version, str] | None = None
    while todo and len(seen) < MAX_MODULES:
        mod = todo.pop(0)
        if mod in seen:
            continue
        seen.add(mod)
        path, is_pkg, src = _read(tree, mod)
        if src is None:
            if mod != package and "." in mod and _read(tree, mod.rsplit(".", 1)[0])[2] is not None:
                continue  # `from pkg import name`: a name, not a submodule
            out.missing.append(mod)
            continue
        try:
            node = ast.parse(src)
        except SyntaxError:
            out.missing.append(mod)
            continue
        out.modules.append(mod)
        floor = _python_floor(src)
        if floor is not None and (py_floor is None or floor > py_floor[0]):
            py_floor = (floor, mod)
        scan = _Module(mod, package, is_pkg)
        scan.visit_body(node.body, guarded=False)
        out.uses += [Use(api, mod, line, how) for api, line, how in scan.hard_uses()]
        todo += [m for m in scan.imports if m not in seen]
        for m in list(scan.imports):  # a package's __init__ runs before its submodule
            parts = m.split(".")
            todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) not in seen]
    out.python_floor = py_floor
    _bounds(out, tree, apis)
    return out


def _read(tree: SourceTree, module: str) -> tuple[str, bool, str | None]:
    plain, pkg = module_path(module)
    src = tree.text(plain)
    if src is not None:
        return plain, False, src
    return pkg, True, tree.text(pkg)


def _bounds(out: ImportNeeds, tree: SourceTree, apis: Sequence[TorchApi]) -> None:
    for use in out.uses:
        for api in apis:
            if use.api != api.api and not use.api.startswith(api.api + "."):
                continue
            path = _read(tree, use.module)[0]
            if api.added is not None:
                b = Bound(api.added, api, use, tree.url(path))
                out.bounds.append(b)
                if out.torch_floor is None or api.added > out.torch_floor.version:
                    out.torch_floor = b
            if api.removed is not None:
                b = Bound(api.removed, api, use, tree.url(path))
                out.bounds.append(b)
                if out.torch_ceiling is None or api.removed < out.torch_ceiling.version:
                    out.torch_ceiling = b




def _python_floor(src: str) -> Version | None:
    """The oldest CPython 3.x whose grammar parses ``src`` (None: none of those tried)."""
    for m in PYTHON_MINORS:
        try:
            ast.parse(src, feature_version=(3, m))
            return Version(f"3.{m}")
        except SyntaxError:
            continue
    return None


_GUARD_HANDLERS = {"ImportError", "ModuleNotFoundError", "Exception", "AttributeError", "BaseException"}


class _Module:
    """One module's module-level statements: the package modules it imports and the torch APIs it
    evaluates, each guarded or not."""

    def __init__(self, name: str, package: str, is_pkg: bool) -> None:
        self.name, self.package, self.is_pkg = name, package, is_pkg
        self.imports: list[str] = []
        self.aliases: dict[str, str] = {}  # local name -> torch dotted path
        self.uses: list[tuple[str, int, str, bool]] = []  # (api, line, how, guarded)
        # names a guarded import binds that its handler does not: name -> (api, line)
        self.fragile: dict[str, tuple[str, int]] = {}
        self.fragile_used: list[tuple[str, int, str]] = []

    def hard_uses(self) -> list[tuple[str, int, str]]:
        return [(a, ln, how) for a, ln, how, g in self.uses if not g] + self.fragile_used

    # -- statements ---------------------------------------------------------------------
    def visit_body(self, body: Iterable[ast.stmt], guarded: bool) -> None:
        for st in body:
            self.visit_stmt(st, guarded)

    def visit_stmt(self, st: ast.stmt, guarded: bool) -> None:
        before = set(self.fragile)
        self._stmt(st, guarded)
        # a later statement that binds a fragile name again (``if not AVAILABLE: def name(...)``,
        # DeepSpeed 0.17.6's fix, #7544) is its fallback; the other branch of the ``if`` whose
        # ``try`` made it fragile is not (it runs only when that ``try`` does not: 0.17.5)
        for n in _bound_names([st]) & before:
            self.fragile.pop(n, None)

    def _stmt(self, st: ast.stmt, guarded: bool) -> None:
        if isinstance(st, ast.Import):
            self._import(st, guarded)
        elif isinstance(st, ast.ImportFrom):
            self._import_from(st, guarded)
        elif isinstance(st, ast.Try):
            self._try(st, guarded)
        elif isinstance(st, ast.If):
            if _is_type_checking(st.test):
                return
            self._expr(st.test, guarded, "condition")
            self.visit_body(st.body, True)
            made = dict(self.fragile)
            self.visit_body(st.orelse, True)
            self.fragile.update(made)  # the other branch does not run where the ``if`` branch's ``try`` failed
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for d in st.decorator_list:
                self._expr(d, guarded, "decorator")
            self._defaults(st.args, guarded)
        elif isinstance(st, ast.ClassDef):
            for d in st.decorator_list:
                self._expr(d, guarded, "decorator")
            for b in st.bases:
                self._expr(b, guarded, "base class")
            self.visit_body(st.body, guarded)  # a class body runs at import
        elif isinstance(st, (ast.With, ast.For, ast.While)):
            self.visit_body(st.body, True)
        else:
            self._expr(st, guarded, "module level")

    def _import(self, st: ast.Import, guarded: bool) -> None:
        for a in st.names:
            if a.name == self.package or a.name.startswith(self.package + "."):
                self.imports.append(a.name)
            elif a.name == "torch" or a.name.startswith("torch."):
                self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else "torch"
                if a.name != "torch":
                    self.uses.append((a.name, st.lineno, "import", guarded))

    def _import_from(self, st: ast.ImportFrom, guarded: bool) -> None:
        base = self._absolute(st)
        if base is None:
            return
        if base == self.package or base.startswith(self.package + "."):
            self.imports.append(base)
            self.imports += [f"{base}.{a.name}" for a in st.names if a.name != "*"]
            return
        if base == "torch" or base.startswith("torch."):
            for a in st.names:
                api = f"{base}.{a.name}"
                self.aliases[a.asname or a.name] = api
                self.uses.append((api, st.lineno, "import", guarded))

    def _absolute(self, st: ast.ImportFrom) -> str | None:
        if not st.level:
            return st.module
        parts = self.name.split(".")
        keep = len(parts) - st.level + (1 if self.is_pkg else 0)
        if keep <= 0:
            return None
        base = ".".join(parts[:keep])
        return f"{base}.{st.module}" if st.module else base

    def _try(self, st: ast.Try, guarded: bool) -> None:
        catches = any(h.type is None or _names(h.type) & _GUARD_HANDLERS for h in st.handlers)
        before = len(self.uses)
        self.visit_body(st.body, guarded or catches)
        if catches:
            bound_in_handlers = {n for h in st.handlers for n in _bound_names(h.body)}
            for api, line, how, _g in self.uses[before:]:
                if how == "import":
                    local = next((k for k, v in self.aliases.items() if v == api), None)
                    if local is not None and local not in bound_in_handlers:
                        self.fragile[local] = (api, line)
        for h in st.handlers:
            self.visit_body(h.body, True)
        self.visit_body(st.orelse, guarded or catches)
        self.visit_body(st.finalbody, guarded)

    def _defaults(self, args: ast.arguments, guarded: bool) -> None:
        for d in [*args.defaults, *args.kw_defaults]:
            if d is not None:
                self._expr(d, guarded, "default argument")

    # -- expressions --------------------------------------------------------------------
    def _expr(self, node: ast.AST, guarded: bool, how: str) -> None:
        for sub in _walk(node):
            if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, ast.Load):
                chain = _chain(sub)
                if chain and chain[0] in self.aliases:
                    api = ".".join([self.aliases[chain[0]], *chain[1:]])
                    self.uses.append((api, sub.lineno, how, guarded))
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and not guarded:
                hit = self.fragile.get(sub.id)
                if hit is not None:
                    self.fragile_used.append((hit[0], sub.lineno, f"{how}: a name its guarded import (line "
                                                                  f"{hit[1]}) binds and its handler does not"))


def _walk(node: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk`` that does not enter what runs later: a lambda's or a nested def's body."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        if isinstance(n, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)) and n is not node:
            continue
        todo.extend(ast.iter_child_nodes(n))


def _chain(node: ast.Attribute) -> list[str]:
    """``torch.library.custom_op`` -> ["torch", "library", "custom_op"] (the outermost chain only
    is wanted: inner Attribute nodes are visited too and give its prefixes, which the API table
    matches by prefix anyway)."""
    parts: list[str] = []
    cur: ast.AST = node
    while isinstance(cur, ast.Attribute):
        parts.append(cur.attr)
        cur = cur.value
    if not isinstance(cur, ast.Name):
        return []
    return [cur.id, *reversed(parts)]


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}


def _bound_names(body: Sequence[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for st in body:
        for n in ast.walk(st):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                out.add(n.id)
            elif isinstance(n, ast.alias):
                out.add(n.asname or n.name.split(".")[0])
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return any(isinstance(n, ast.Name) and n.id == "TYPE_CHECKING" or
               isinstance(n, ast.Attribute) and n.attr == "TYPE_CHECKING" for n in ast.walk(test))


def mapping_tree(files: Mapping[str, str]) -> SourceTree:
    """A tree of in-memory files (tests, and a folder read by the caller)."""

    class _Tree(SourceTree):
        def text(self, path: str) -> str | None:
            return files.get(path)

    return _Tree()
