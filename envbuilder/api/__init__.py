"""The library's front door: the functions the CLI (and any program) calls.

Each takes plain arguments, returns plain typed data, and raises an EnvbuilderError with an
exit code; none prints. Heavy modules (docker, rich, jsonschema) are imported only inside the
functions that need them. One module per verb; ``from envbuilder import api; api.render(...)``
reaches every one of them from here. Nothing is imported until a name is used (PEP 562),
so ``envbuilder explain`` does not pay for the matrix, the resolver or the engine:

* ``specs``: specs, the matrix, what a target resolves to, ``check``
* ``folders``: ``render`` and ``bake`` (build folders)
* ``locking``: ``lock``, ``wheelhouse``
* ``builds``: ``build``, its options and summary
* ``targets``: ``targets`` (and its GitHub matrix), ``ci``
* ``smoketest``: ``smoke``
* ``explaining``: ``explain`` (light: the diagnosis library only)
* ``diagnosis``: ``doctor``, ``verify``, ``matrix verify``/``show``
* ``daily``: ``diff``, ``inspect``, ``init``, completion
* ``results``: the typed results (frozen dataclasses; ``to_dict()`` is the ``--json`` document)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# where each public name lives: imported on first use (module __getattr__, PEP 562)
_WHERE: dict[str, str] = {
    # envbuilder.core.matrix
    "Matrix": "envbuilder.core.matrix",
    # envbuilder.core.options
    "COMMAND_LINE_ONLY": "envbuilder.core.options",
    "OPTIONS": "envbuilder.core.options",
    # envbuilder.core.project
    "Project": "envbuilder.core.project",
    "find_project": "envbuilder.core.project",
    # envbuilder.core.resolve
    "Stack": "envbuilder.core.resolve",
    # envbuilder.core.spec
    "Outcome": "envbuilder.core.spec",
    "TargetSpec": "envbuilder.core.spec",
    # envbuilder.core.target
    "Pins": "envbuilder.core.target",
    "request": "envbuilder.core.target",
    # envbuilder.api.results
    "BakeReport": "envbuilder.api.results",
    "BuildSummary": "envbuilder.api.results",
    "CheckResult": "envbuilder.api.results",
    "DiffResult": "envbuilder.api.results",
    "FolderFiles": "envbuilder.api.results",
    "GithubMatrix": "envbuilder.api.results",
    "ImageSource": "envbuilder.api.results",
    "InitResult": "envbuilder.api.results",
    "InspectLines": "envbuilder.api.results",
    "Inspection": "envbuilder.api.results",
    "LearnedCase": "envbuilder.api.results",
    "LockResult": "envbuilder.api.results",
    "RenderReport": "envbuilder.api.results",
    "SmokeRun": "envbuilder.api.results",
    "TargetRow": "envbuilder.api.results",
    "TargetsTable": "envbuilder.api.results",
    # envbuilder.api.specs
    "builtin_target_names": "envbuilder.api.specs",
    "builtin_targets": "envbuilder.api.specs",
    "check_combination": "envbuilder.api.specs",
    "load": "envbuilder.api.specs",
    "make_spec": "envbuilder.api.specs",
    "naming_warnings": "envbuilder.api.specs",
    "out_dir": "envbuilder.api.specs",
    "resolve_each": "envbuilder.api.specs",
    "resolve_spec": "envbuilder.api.specs",
    "resolve_target": "envbuilder.api.specs",
    "spec_matrix": "envbuilder.api.specs",
    "target_specs": "envbuilder.api.specs",
    # envbuilder.api.folders
    "bake": "envbuilder.api.folders",
    "bake_all": "envbuilder.api.folders",
    "render": "envbuilder.api.folders",
    "render_all": "envbuilder.api.folders",
    "render_target": "envbuilder.api.folders",
    "spec_files": "envbuilder.api.folders",
    # envbuilder.api.locking
    "lock": "envbuilder.api.locking",
    "lock_target": "envbuilder.api.locking",
    "wheelhouse": "envbuilder.api.locking",
    # envbuilder.api.builds
    "build": "envbuilder.api.builds",
    "build_options": "envbuilder.api.builds",
    "build_summary": "envbuilder.api.builds",
    "build_target": "envbuilder.api.builds",
    "metrics_target": "envbuilder.api.builds",
    "preflight": "envbuilder.api.builds",
    "sign_options": "envbuilder.api.builds",
    "write_report": "envbuilder.api.builds",
    # envbuilder.api.targets
    "github_matrix": "envbuilder.api.targets",
    "list_targets": "envbuilder.api.targets",
    "write_ci": "envbuilder.api.targets",
    # envbuilder.api.smoketest
    "smoke": "envbuilder.api.smoketest",
    # envbuilder.api.diagnosis
    "apptainer_available": "envbuilder.api.diagnosis",
    "check_signed": "envbuilder.api.diagnosis",
    "doctor": "envbuilder.api.diagnosis",
    "image_labels": "envbuilder.api.diagnosis",
    "is_sif": "envbuilder.api.diagnosis",
    "safe_text": "envbuilder.api.diagnosis",
    "show_axis": "envbuilder.api.diagnosis",
    "smoke_proof": "envbuilder.api.diagnosis",
    "verify_image": "envbuilder.api.diagnosis",
    "verify_matrix": "envbuilder.api.diagnosis",
    "verify_sif": "envbuilder.api.diagnosis",
    "write_verify_overlay": "envbuilder.api.diagnosis",
    "refresh_matrix": "envbuilder.api.diagnosis",
    "write_refresh_overlay": "envbuilder.api.diagnosis",
    # envbuilder.api.explaining
    "explain": "envbuilder.api.explaining",
    "explain_learn": "envbuilder.api.explaining",
    "explain_report": "envbuilder.api.explaining",
    # envbuilder.api.daily
    "complete": "envbuilder.api.daily",
    "diff": "envbuilder.api.daily",
    "diff_lines": "envbuilder.api.daily",
    "image_source": "envbuilder.api.daily",
    "init_project": "envbuilder.api.daily",
    "inspect_image": "envbuilder.api.daily",
    "inspect_lines": "envbuilder.api.daily",
    # envbuilder.run.build
    "BuildFailed": "envbuilder.run.build",
    "BuildOptions": "envbuilder.run.build",
}

if TYPE_CHECKING:  # the same names, for type checkers (tests/test_api_lazy.py keeps both equal)
    from envbuilder.core.matrix import (Matrix)
    from envbuilder.core.options import (COMMAND_LINE_ONLY, OPTIONS)
    from envbuilder.core.project import (Project, find_project)
    from envbuilder.core.resolve import (Stack)
    from envbuilder.core.spec import (Outcome, TargetSpec)
    from envbuilder.core.target import (Pins, request)
    from envbuilder.api.results import (BakeReport, BuildSummary, CheckResult, DiffResult,
        FolderFiles, GithubMatrix, ImageSource, InitResult, InspectLines, Inspection, LearnedCase,
        LockResult, RenderReport, SmokeRun, TargetRow, TargetsTable)
    from envbuilder.api.specs import (builtin_target_names, builtin_targets, check_combination,
        load, make_spec, naming_warnings, out_dir, resolve_each, resolve_spec, resolve_target, spec_matrix,
        target_specs)
    from envbuilder.api.folders import (bake, bake_all, render, render_all, render_target,
        spec_files)
    from envbuilder.api.locking import (lock, lock_target, wheelhouse)
    from envbuilder.api.builds import (build, build_options, build_summary, build_target,
        metrics_target, preflight, sign_options, write_report)
    from envbuilder.api.targets import (github_matrix, list_targets, write_ci)
    from envbuilder.api.smoketest import (smoke)
    from envbuilder.api.diagnosis import (apptainer_available, check_signed, doctor, image_labels,
        is_sif, refresh_matrix, safe_text, show_axis, smoke_proof, verify_image, verify_matrix,
        verify_sif, write_refresh_overlay, write_verify_overlay)
    from envbuilder.api.explaining import (explain, explain_learn, explain_report)
    from envbuilder.api.daily import (complete, diff, diff_lines, image_source, init_project,
        inspect_image, inspect_lines)
    from envbuilder.run.build import (BuildFailed, BuildOptions)

__all__ = ["BakeReport", "BuildFailed", "BuildOptions", "BuildSummary", "COMMAND_LINE_ONLY",
           "CheckResult", "DiffResult", "FolderFiles", "GithubMatrix", "ImageSource", "InitResult",
           "InspectLines", "Inspection", "LearnedCase", "LockResult", "Matrix", "OPTIONS",
           "Outcome", "Pins", "Project", "RenderReport", "SmokeRun", "Stack",
           "TargetRow", "TargetSpec", "TargetsTable", "apptainer_available", "bake", "bake_all",
           "build", "build_options", "build_summary", "build_target", "builtin_target_names",
           "builtin_targets", "check_combination", "check_signed", "complete", "diff",
           "diff_lines", "doctor", "explain", "explain_learn", "explain_report", "find_project",
           "github_matrix", "image_labels", "image_source", "init_project", "inspect_image",
           "inspect_lines", "is_sif", "list_targets", "load", "lock", "lock_target", "make_spec",
           "metrics_target", "naming_warnings", "out_dir", "preflight", "refresh_matrix", "render", "render_all",
           "render_target", "request", "resolve_each", "resolve_spec", "resolve_target", "safe_text", "show_axis",
           "sign_options", "smoke", "smoke_proof", "spec_files", "spec_matrix", "target_specs",
           "verify_image", "verify_matrix", "verify_sif", "wheelhouse", "write_ci", "write_refresh_overlay", "write_report",
           "write_verify_overlay"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
