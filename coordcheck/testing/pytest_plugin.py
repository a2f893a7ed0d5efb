"""The pytest plugin: a ``coordcheck`` fixture and ``--coordcheck-report DIR``.

Stage: the test runner's side of :func:`coordcheck.testing.assert_mup`. Registered as the ``pytest11`` entry
point ``coordcheck`` (installed with the package; ``-p coordcheck.testing.pytest_plugin`` loads it by hand), so it
is loaded in every pytest session of anyone who installs coordcheck: importing it imports neither torch nor
pandas (the gate is imported when the fixture is first called).

Input: a test that asks for ``coordcheck`` and calls ``coordcheck(build, widths=..., **coord_check_kwargs)``.
Output: the :class:`coordcheck.CoordCheckResult` when the model is muP, else the gate's ``AssertionError``; each
call's report in ``<base>/<builder name>/`` (``-2``, ``-3`` ... when a test checks the same builder again), where
``<base>`` is the test's ``tmp_path / "coordcheck"``, or with ``--coordcheck-report DIR``
``DIR/<the test's node id, sanitised>/`` (emptied when the test starts), kept after the session.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

__all__ = ["CoordCheckFixture", "node_dir_name", "REPORT_OPTION"]

REPORT_OPTION = "--coordcheck-report"
MAX_NAME = 120  # a node id longer than this is cut and given a hash, so that the directory name stays legal
_UNSAFE = re.compile(r"[^A-Za-z0-9._=-]+")


def node_dir_name(nodeid: str) -> str:
    """A test's node id as one directory name: ``tests/test_mup.py::test_gpt[sp]`` -> ``tests_test_mup.py_test_gpt_sp``
    (runs of other characters than letters, digits and ``._=-`` become one ``_``); over :data:`MAX_NAME` characters,
    cut and suffixed with a hash of the whole id, so that two long ids stay apart."""
    name = _UNSAFE.sub("_", nodeid).strip("_.") or "test"
    if len(name) > MAX_NAME:
        name = f"{name[:MAX_NAME - 13]}-{hashlib.sha1(nodeid.encode()).hexdigest()[:12]}"
    return name


class CoordCheckFixture:
    """The ``coordcheck`` fixture: ``coordcheck(build, widths=..., **kwargs)`` is
    :func:`coordcheck.testing.assert_mup` with its report under :attr:`report_dir`; returns the result."""

    def __init__(self, report_dir: Path):
        self.report_dir = report_dir
        self.reports: list[Path] = []  # each call's report directory, in call order

    def __call__(self, build: Callable, *args: Any, **kwargs: Any):
        __tracebackhide__ = True
        from coordcheck.testing.gate import assert_mup  # torch: only when a test asks for a coordinate check

        if "report_dir" in kwargs:
            raise TypeError("the coordcheck fixture chooses the report directory (tmp_path, or --coordcheck-report "
                            "DIR): call coordcheck.testing.assert_mup to pick one yourself")
        out = self._next_dir(getattr(build, "__name__", None) or type(build).__name__)
        self.reports.append(out)
        return assert_mup(build, *args, report_dir=out, **kwargs)

    def _next_dir(self, name: str) -> Path:
        base = node_dir_name(name)
        out, n = self.report_dir / base, 1
        while out in self.reports or out.exists():
            n += 1
            out = self.report_dir / f"{base}-{n}"
        return out


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("coordcheck").addoption(
        REPORT_OPTION, metavar="DIR", default=None,
        help="keep the coordcheck fixture's reports in DIR, one subdirectory per test (its node id, sanitised)",
    )


def _keep_dir(config: pytest.Config) -> Path | None:
    value = config.getoption(REPORT_OPTION)
    return None if value is None else (Path(config.invocation_params.dir) / value).resolve()


@pytest.fixture
def coordcheck(request: pytest.FixtureRequest, tmp_path: Path) -> CoordCheckFixture:
    """``coordcheck(build, widths=..., **coord_check_kwargs)``: assert that ``build`` is muP
    (:func:`coordcheck.testing.assert_mup`), report under ``tmp_path`` or ``--coordcheck-report DIR``."""
    keep = _keep_dir(request.config)
    if keep is None:
        return CoordCheckFixture(tmp_path / "coordcheck")
    mine = keep / node_dir_name(request.node.nodeid)
    shutil.rmtree(mine, ignore_errors=True)  # a report left by an earlier session would describe another run
    return CoordCheckFixture(mine)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    keep = _keep_dir(config)
    if keep is not None and keep.is_dir():
        terminalreporter.write_line(f"coordcheck: reports in {keep}")
