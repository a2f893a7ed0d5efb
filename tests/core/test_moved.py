"""The flat modules' old import paths still work for one release, each with a DeprecationWarning naming the new one."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from coordcheck.core.moved import MOVED


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_old_path_names_a_module_that_imports(old):
    for home in MOVED[old]:
        importlib.import_module(home)


def test_an_old_path_warns_once_and_hands_on_the_names_from_every_part():
    code = ("import warnings; warnings.simplefilter('always')\n"
            "from coordcheck.verdict import judge, Rules, find_instability\n"
            "import coordcheck.judge.verdict, coordcheck.judge.rules, coordcheck.judge.stability\n"
            "assert judge is coordcheck.judge.verdict.judge and Rules is coordcheck.judge.rules.Rules\n"
            "assert find_instability is coordcheck.judge.stability.find_instability\n"
            "from coordcheck.verdict import Verdict\n")  # the second import of the same path: no second warning
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    warned = [line for line in out.stderr.splitlines() if "DeprecationWarning" in line]
    assert len(warned) == 1, out.stderr
    assert "coordcheck.verdict is now coordcheck.judge.verdict and coordcheck.judge.rules" in warned[0]
    assert warned[0].startswith("<string>:2:"), "the warning points at the user's import line"


def test_hydra_targets_with_old_paths_still_instantiate():
    from hydra.utils import instantiate

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        build = instantiate({"_target_": "coordcheck.models.gpt", "_partial_": True})
    from coordcheck.setup.models import gpt

    assert build.func is gpt
    assert any(issubclass(w.category, DeprecationWarning) and "coordcheck.setup.models" in str(w.message)
               for w in seen) or "coordcheck.models" in sys.modules  # warned here, or by an earlier test's import


def test_a_name_that_is_nowhere_is_an_attribute_error_naming_the_new_homes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the warning itself: the test above
        module = importlib.import_module("coordcheck.frame")
    with pytest.raises(AttributeError, match=r"coordcheck.frame.*now coordcheck.core.frame.*no_such_name"):
        module.no_such_name  # noqa: B018
