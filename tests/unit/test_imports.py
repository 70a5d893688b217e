"""knowledge.imports: what importing a package needs, read from its sources (in-memory trees)."""

from __future__ import annotations

from packaging.version import Version

from envbuilder.core.matrix import TorchApi
from envbuilder.knowledge.imports import import_needs, mapping_tree

APIS = (TorchApi("torch.library.custom_op", Version("2.4"), None, ("https://example.org/a",)),
        TorchApi("torch.amp.custom_fwd", Version("2.4"), None, ("https://example.org/b",)),
        TorchApi("torch.optim.optimizer._disable", Version("2.4"), None, ("https://example.org/c",)),
        TorchApi("torch._six", None, Version("2.0"), ("https://example.org/d",)))


def needs(files: dict[str, str]):
    return import_needs(mapping_tree(files), "pkg", APIS)


def test_a_module_level_decorator_in_a_reached_module_sets_the_floor():
    n = needs({"pkg/__init__.py": "from .engine import Engine\n",
               "pkg/engine.py": "import torch\nfrom pkg.ops import op\nclass Engine: pass\n",
               "pkg/ops/__init__.py": "from .kernel import op\n",
               "pkg/ops/kernel.py": "import torch\n@torch.library.custom_op('x::y', mutates_args=())\ndef op(t): ...\n"})
    assert n.torch_spec() == ">=2.4"
    assert n.torch_floor is not None and n.torch_floor.use.module == "pkg.ops.kernel" and n.torch_floor.use.line == 2
    assert n.modules == ["pkg", "pkg.engine", "pkg.ops", "pkg.ops.kernel"]


def test_function_bodies_and_unreached_modules_do_not_count():
    n = needs({"pkg/__init__.py": "import torch\ndef f():\n    return torch.library.custom_op\n"
                                  "g = lambda: torch.amp.custom_fwd\n",
               "pkg/unused.py": "import torch\nx = torch.library.custom_op\n"})
    assert n.torch_spec() is None and n.uses == []


def test_guarded_uses_do_not_count_but_a_fragile_name_does():
    guarded = needs({"pkg/__init__.py": "import torch\nif hasattr(torch.amp, 'custom_fwd'):\n"
                                        "    fwd = torch.amp.custom_fwd\ntry:\n"
                                        "    from torch.optim.optimizer import _disable\nexcept ImportError:\n"
                                        "    def _disable(**kw):\n        return lambda f: f\n@_disable()\ndef g(): ...\n"})
    assert guarded.torch_spec() is None  # the handler binds the name: a fallback
    fragile = needs({"pkg/__init__.py": "try:\n    from torch.optim.optimizer import _disable\n"
                                        "except ImportError as e:\n    print(e)\n@_disable(x=1)\ndef g(): ...\n"})
    assert fragile.torch_spec() == ">=2.4"
    assert "guarded import" in fragile.uses[0].how


def test_a_fallback_after_the_try_covers_a_fragile_name_but_the_other_branch_does_not():
    """DeepSpeed 0.17.5: the import sits in ``if AVAILABLE: try ... except: AVAILABLE = False`` and
    the fallback in that ``if``'s ``else``, which does not run when the import fails: fragile.
    0.17.6 (#7544) moved the fallback into a later ``if not AVAILABLE:``: covered."""
    head = "AVAILABLE = True\nif AVAILABLE:\n    try:\n        from torch.optim.optimizer import _disable\n" \
           "    except ImportError:\n        AVAILABLE = False\n"
    fallback = "    def _disable(**kw):\n        return lambda fn: fn\n"
    use = "@_disable(x=1)\ndef step(): ...\n"
    v0175 = needs({"pkg/__init__.py": head + "else:\n" + fallback + use})
    assert v0175.torch_spec() == ">=2.4" and "guarded import" in v0175.uses[0].how
    v0176 = needs({"pkg/__init__.py": head + "if not AVAILABLE:\n" + fallback + use})
    assert v0176.torch_spec() is None


def test_a_removed_api_sets_the_ceiling_and_type_checking_is_skipped():
    n = needs({"pkg/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from torch.library import custom_op\nfrom pkg.util import inf\n",
               "pkg/util.py": "from torch._six import inf\n"})
    assert n.torch_spec() == "<2.0"
    assert "removed in torch 2.0" in n.why()


def test_relative_imports_and_class_bodies():
    n = needs({"pkg/__init__.py": "from . import sub\n",
               "pkg/sub/__init__.py": "from ..base import B\n",
               "pkg/base.py": "import torch as th\nclass B:\n    fwd = th.amp.custom_fwd\n"})
    assert n.torch_spec() == ">=2.4" and n.torch_floor.use.module == "pkg.base"


def test_the_python_floor_is_the_oldest_grammar_that_parses_every_module():
    n = needs({"pkg/__init__.py": "from .m import f\n",
               "pkg/m.py": "def f(x):\n    match x:\n        case 1:\n            return 1\n"})
    assert n.python_floor is not None and str(n.python_floor[0]) == "3.10" and n.python_floor[1] == "pkg.m"
    assert str(needs({"pkg/__init__.py": "x = 1\n"}).python_floor[0]) == "3.6"


def test_a_missing_package_reads_as_nothing():
    n = needs({"other/__init__.py": "x = 1\n"})
    assert n.modules == [] and n.missing == ["pkg"]
