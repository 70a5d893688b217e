"""The data (matrices/, templates/, signatures.yaml) is found through importlib.resources in a
built wheel installed into a fresh virtual environment, exactly as in this checkout."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from envbuilder.core import resources

ROOT = Path(__file__).resolve().parents[1]


def test_checkout_reads_the_top_level_folders_through_the_package():
    assert resources.matrices_dir() == ROOT / "matrices"
    assert resources.templates_dir() == ROOT / "templates"
    assert resources.data_path("signatures.yaml") == ROOT / "envbuilder" / "data" / "signatures.yaml"


@pytest.mark.slow
def test_wheel_carries_the_data_and_renders_from_it(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps", "-q",
                    "-w", str(wheels)], check=True, capture_output=True)
    (wheel,) = wheels.glob("torch_envbuilder-*.whl")  # the distribution name
    names = set(zipfile.ZipFile(wheel).namelist())
    for top in ("matrices", "templates"):
        here = {f"envbuilder/data/{top}/{p.relative_to(ROOT / top).as_posix()}"
                for p in (ROOT / top).rglob("*") if p.is_file()}
        assert here <= names, sorted(here - names)[:5]
    assert "envbuilder/data/signatures.yaml" in names
    assert "envbuilder/data/project.schema.json" in names  # editors validate envbuilder.toml
    # the templates compiled by the build hook (hatch_build.py) ship as modules of the package;
    # the checkout holds none
    from envbuilder.render import precompiled

    for set_name in precompiled.SETS:
        assert f"envbuilder/render/_precompiled/{set_name}/manifest.json" in names
        assert any(n.startswith(f"envbuilder/render/_precompiled/{set_name}/tmpl_") for n in names)
    assert not (ROOT / "envbuilder/render/_precompiled").exists()
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True)
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run([str(py), "-c", "import envbuilder.core.resources as r; "
                            "print(r.matrices_dir())"], capture_output=True, text=True,
                           env=env, cwd=tmp_path, check=True).stdout.strip()
    assert where.startswith(str(venv)), where
    # the installed package renders from its compiled templates (nothing is compiled)
    loaded = subprocess.run([str(py), "-c", "from envbuilder.render import templating; "
                             "print(templating._env().get_template('Dockerfile.j2').filename)"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, check=True)
    assert "/envbuilder/render/_precompiled/build/tmpl_" in loaded.stdout, loaded.stdout
    out = tmp_path / "out"
    r = subprocess.run([str(venv / "bin" / "envbuilder"), "render", "cu118", "-o", str(out)],
                       capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from envbuilder.api import render_target

    here = tmp_path / "here"
    render_target("cu118", here)
    for f in ("Dockerfile", "envbuilder.def", "smoke/ddp_smoke.py", "jobs/slurm-pyxis-2x6.sbatch"):
        assert (out / f).read_bytes() == (here / f).read_bytes(), f
