"""The wheel a user installs carries the Hydra configs and runs outside this checkout."""

import subprocess
import sys

import pytest

from conftest import ROOT


@pytest.mark.slow
def test_wheel_runs_a_sweep_without_the_checkout(tmp_path):
    pytest.importorskip("setuptools")
    wheels, target = tmp_path / "wheels", tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(wheels), str(ROOT)], capture_output=True, text=True)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(wheels.glob("coordcheck-*.whl"))
    inst = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                           str(wheel)], capture_output=True, text=True)
    assert inst.returncode == 0, inst.stderr[-2000:]
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    where = subprocess.run([sys.executable, "-c", "import coordcheck.app.config as a; print(a.__file__, a.CONF_DIR)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    assert where.stdout.split() == [str(target / "coordcheck" / "app" / "config.py"), "pkg://coordcheck.conf"], \
        where.stderr
    r = subprocess.run([sys.executable, "-m", "coordcheck", "model=mlp", "width=16,32,64", "seeds=1", "steps=1",
                        "progress=false", "report.figures=false", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                        "--multirun"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "sweep" / "report" / "report.json").is_file()
    bad = subprocess.run([sys.executable, "-m", "coordcheck", "model=foo"], cwd=tmp_path, env=env,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "choose one of custom, gpt, hf, mlp" in bad.stderr
