"""``coordcheck.testing.pytest_plugin``: the ``coordcheck`` fixture, ``--coordcheck-report DIR``, a cheap import.

The plugin is tested as a user's session loads it, with pytest's ``pytester`` (inner sessions in this process; one
with xdist workers). Before coordcheck is (re)installed the ``pytest11`` entry point is not there, so the inner
sessions load the module with ``-p``; once it is installed they get it automatically (and ``-p`` with the module's
name would register it twice, which pytest refuses), see :data:`PLUGIN`. A fake installed distribution that
declares only the entry point simulates the installed case end to end in a subprocess; the wheel's
``entry_points.txt`` is read from a real build.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from importlib.metadata import entry_points

import pytest

from conftest import ROOT
from coordcheck.testing.pytest_plugin import MAX_NAME, node_dir_name

pytest_plugins = ["pytester"]

INSTALLED = bool(entry_points(group="pytest11", name="coordcheck"))  # the package was installed after the plugin
PLUGIN = () if INSTALLED else ("-p", "coordcheck.testing.pytest_plugin")
ENTRY_POINT = "[pytest11]\ncoordcheck = coordcheck.testing.pytest_plugin\n"

USER_TESTS = '''
import pytest
import torch
from coordcheck.setup.models import mlp

torch.set_num_threads(1)


def test_mup(coordcheck):
    result = coordcheck(mlp)
    assert result.passed
    assert (coordcheck.reports[0] / "report.md").is_file()


def test_sp(coordcheck):
    coordcheck(mlp, parametrization="sp")


def test_twice(coordcheck):
    coordcheck(mlp, seeds=1)
    coordcheck(mlp, seeds=1)
    assert [p.name for p in coordcheck.reports] == ["mlp", "mlp-2"]


def test_own_report_dir_refused(coordcheck):
    with pytest.raises(TypeError, match="chooses the report directory"):
        coordcheck(mlp, report_dir="elsewhere")
'''


@pytest.fixture(scope="module", autouse=True)
def _warm(tmp_path_factory):
    """Import here what the inner sessions' runs import lazily (torch's compiler stack, mup, pyarrow): pytester
    drops the modules a test imported when it ends, and torch refuses to register its operators twice."""
    from coordcheck.setup.models import mlp
    from coordcheck.testing import assert_mup

    assert_mup(mlp, seeds=1, report_dir=tmp_path_factory.mktemp("warm"))
    with pytest.raises(AssertionError):
        assert_mup(mlp, seeds=1, parametrization="sp", report_dir=tmp_path_factory.mktemp("warm"))


def test_importing_the_plugin_imports_neither_torch_nor_pandas():
    code = ("import sys, coordcheck.testing.pytest_plugin; "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy', 'coordcheck.app.api') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0 and r.stdout.strip() == "[]", (r.stdout, r.stderr)


def test_node_dir_name():
    assert node_dir_name("tests/test_mup.py::test_gpt[sp-256]") == "tests_test_mup.py_test_gpt_sp-256"
    assert node_dir_name("t.py::test[a/b c]") == "t.py_test_a_b_c"
    long_a, long_b = "t.py::test[" + "x" * 300 + "a]", "t.py::test[" + "x" * 300 + "b]"
    assert len(node_dir_name(long_a)) == MAX_NAME and node_dir_name(long_a) != node_dir_name(long_b)


def test_fixture_asserts_and_reports_under_tmp_path(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider")
    r.assert_outcomes(passed=3, failed=1)
    out = r.stdout.str()
    assert "cause: " in out and "hidden matrices" in out
    report = next(line for line in r.stdout.lines if "report: " in line).split("report: ")[1]
    assert report.endswith(os.path.join("test_sp0", "coordcheck", "mlp", "report.md")), report
    assert "raise AssertionError(failure_message" not in out  # the gate's own frames are hidden (__tracebackhide__)
    assert "coordcheck: reports in" not in out


@pytest.mark.slow
def test_report_option_keeps_one_directory_per_test(pytester):
    pytester.makepyfile(test_user=USER_TESTS)
    stale = pytester.path / "keep" / "test_user.py_test_sp" / "stale.txt"
    stale.parent.mkdir(parents=True)
    stale.write_text("from an earlier session")
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "--coordcheck-report", "keep")
    r.assert_outcomes(passed=3, failed=1)
    keep = pytester.path / "keep"
    # one per test that wrote a report (test_own_report_dir_refused wrote none)
    assert sorted(p.name for p in keep.iterdir()) == ["test_user.py_test_mup", "test_user.py_test_sp",
                                                      "test_user.py_test_twice"]
    assert (keep / "test_user.py_test_mup" / "mlp" / "report.md").is_file()
    assert (keep / "test_user.py_test_sp" / "mlp" / "report.json").is_file() and not stale.exists()
    assert sorted(p.name for p in (keep / "test_user.py_test_twice").iterdir()) == ["mlp", "mlp-2"]
    assert f"report: {keep / 'test_user.py_test_sp' / 'mlp' / 'report.md'}" in r.stdout.str()
    r.stdout.fnmatch_lines([f"coordcheck: reports in {keep}"])


def test_report_option_in_help(pytester):
    r = pytester.runpytest(*PLUGIN, "--help")
    r.stdout.fnmatch_lines(["*--coordcheck-report=DIR*"])


@pytest.mark.slow
def test_report_option_with_xdist_workers(pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_user=USER_TESTS.split("def test_twice")[0])  # test_mup and test_sp
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "-n", "2", "--coordcheck-report", "keep")
    r.assert_outcomes(passed=1, failed=1)
    assert (pytester.path / "keep" / "test_user.py_test_sp" / "mlp" / "report.md").is_file()
    assert (pytester.path / "keep" / "test_user.py_test_mup" / "mlp" / "report.md").is_file()


@pytest.mark.slow
def test_installed_entry_point_loads_the_plugin_by_itself(tmp_path):
    """A distribution on the path that declares only the entry point, as ``pip install coordcheck`` would: the
    fixture is there without ``-p``, and this suite's own conftest still finds torch not yet imported."""
    dist = tmp_path / "site" / "coordcheck_entry_point-0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coordcheck-entry-point\nVersion: 0\n")
    (dist / "entry_points.txt").write_text(ENTRY_POINT)
    (tmp_path / "tests").mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "tests" / "conftest.py")
    (tmp_path / "tests" / "test_user.py").write_text(textwrap.dedent('''
        import sys

        def test_fixture_without_p(coordcheck, pytestconfig):
            assert pytestconfig.pluginmanager.has_plugin("coordcheck")
            assert coordcheck.report_dir.name == "coordcheck"
        '''))
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-W", "error",
                        "tests"], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                       env={**os.environ, "PYTHONPATH": f"{ROOT}:{tmp_path / 'site'}",
                            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": ""})
    assert r.returncode == 0 and "1 passed" in r.stdout, r.stdout[-3000:] + r.stderr[-2000:]
    assert "torch was imported before tests/conftest.py" not in r.stdout + r.stderr


@pytest.mark.slow
def test_wheel_declares_the_pytest11_entry_point(tmp_path):
    pytest.importorskip("setuptools")
    src = tmp_path / "src"  # a copy: two wheel builds in one checkout at once (xdist) would share build/ and egg-info
    for name in ("coordcheck", "conf"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "-w", str(tmp_path / "wheels"), str(src)], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    with zipfile.ZipFile(next((tmp_path / "wheels").glob("coordcheck-*.whl"))) as whl:
        names = whl.namelist()
        eps = configparser.ConfigParser()
        eps.read_string(whl.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode())
    assert dict(eps["pytest11"]) == {"coordcheck": "coordcheck.testing.pytest_plugin"}
    assert "coordcheck/testing/pytest_plugin.py" in names and "coordcheck/testing/gate.py" in names


MY_PKG = '''
from coordcheck.testing.public_models import GPT, configure_optimizers, gpt_builder


def build(width: int, base_width: int, **kw) -> GPT:
    return gpt_builder(width, base_width=base_width, **kw)


def make_optimizer(model: GPT, lr: float):
    return configure_optimizers(model, lr)
'''


def docs_example() -> str:
    """The ``tests/test_mup.py`` shown in docs/pytest.md: the python fence that starts with that comment."""
    text = (ROOT / "docs" / "pytest.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    return next(b for b in blocks if b.startswith("# tests/test_mup.py"))


@pytest.fixture
def own_my_pkg(monkeypatch):
    """The ``my_pkg`` the test writes, not one an earlier test imported into this process (tests/test_docs.py runs
    the docs' commands in process against its stand-in ``my_pkg``): pytester's in-process run keeps sys.modules."""
    for name in [n for n in sys.modules if n == "my_pkg" or n.startswith("my_pkg.")]:
        monkeypatch.delitem(sys.modules, name)


@pytest.mark.slow
@pytest.mark.usefixtures("own_my_pkg")
def test_the_docs_example_test_file_passes(pytester):
    """docs/pytest.md's model-repository test file, run as written against a nanoGPT-mup ``my_pkg``: the muP model
    passes, the control (no output multiplier) is caught."""
    pytester.mkpydir("my_pkg")
    (pytester.path / "my_pkg" / "mup_gpt.py").write_text(MY_PKG)
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_mup.py").write_text("import torch\ntorch.set_num_threads(1)\n" + docs_example())
    pytester.syspathinsert()
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "tests/test_mup.py")
    r.assert_outcomes(passed=2)


def readme_snippet() -> str:
    """The README's pytest snippet: the python fence that calls ``coordcheck(my_pkg.models.build, ...)``."""
    text = (ROOT / "README.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```python\n")[1:]]
    return next(b for b in blocks if "coordcheck(my_pkg.models.build" in b)


@pytest.mark.slow
@pytest.mark.parametrize("model,outcome", [("TokenLM", "passed"), ("PlainMLP", "failed")])
@pytest.mark.usefixtures("own_my_pkg")
def test_the_readme_snippet_runs_as_written(pytester, model, outcome):
    """The README's snippet, unchanged, on a token model made muP with mup (it passes) and on a plain MLP (it fails
    with the cause): no data given, the default parametrization, a verdict either way, never an error."""
    pytester.mkpydir("my_pkg")
    shutil.copy(ROOT / "tests" / "user_models.py", pytester.path / "my_pkg" / "zoo.py")
    (pytester.path / "my_pkg" / "models.py").write_text(f"from my_pkg.zoo import {model} as build  # noqa: F401\n")
    (pytester.path / "test_readme.py").write_text("import torch\nimport my_pkg.models\ntorch.set_num_threads(1)\n\n"
                                                  + readme_snippet())
    pytester.syspathinsert()
    r = pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider", "test_readme.py")
    r.assert_outcomes(**{outcome: 1})
    if outcome == "failed":
        r.stdout.fnmatch_lines(["*AssertionError*", "*cause: head (Linear): maps the width to a fixed size*"])
