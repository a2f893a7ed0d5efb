"""Shared fixtures: seeded RNGs, closed figures, and tiny helpers for real runs."""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import subprocess
import sys
from pathlib import Path

# Before torch loads: OpenMP workers that spin while they wait make a shared 2-core machine slower. Two copies of a
# tiny GPT coordinate check at once: 7.6 s spinning, 4.3 s passive; one alone: the same (4.2 and 4.3 s), and the same
# frames (python experiments/bench_wait_policy.py). Subprocesses of the tests inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if "torch" in sys.modules:  # pragma: no cover - a plugin imported torch first: the setting came too late
    logging.getLogger(__name__).warning("torch was imported before tests/conftest.py: OMP_WAIT_POLICY not applied")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


DURATIONS = Path(__file__).with_name("durations.json")  # seconds per test file, measured: --store-durations


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--store-durations", action="store_true",
                     help=f"write each test file's measured seconds (setup, call, teardown) to {DURATIONS.name}: "
                          "the order the suite's files start in")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (their seconds measured in ``tests/durations.json``; a file not measured yet counts as
    long): with ``--dist loadfile --no-loadscope-reorder`` a worker takes the next file in this order when it is
    almost done, so the last files to start are the short ones and neither worker runs alone for minutes at the end
    (xdist's own order, by number of tests, left the 5-minute transfer known answers for last)."""
    known = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
    longest = max(known.values(), default=0.0)
    items.sort(key=lambda item: -known.get(_file(item.nodeid), longest))  # stable: within a file, as collected


def _file(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):  # the controller only
        config.pluginmanager.register(_StoreDurations(), "store-durations")


class _StoreDurations:
    """Sums each test file's reported durations (the workers' reports reach the controller) and writes them."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file(report.nodeid)] = self.seconds.get(_file(report.nodeid), 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        ordered = dict(sorted(((f, round(t, 1)) for f, t in self.seconds.items()), key=lambda kv: -kv[1]))
        DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n")


@pytest.fixture(scope="module")
def one_thread():
    """torch on one thread for a module's trainings, the thread count restored after: the thread count is part of a
    run (its last bits), and the known answers were measured at one thread. Use it as
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _seed_and_close():
    random.seed(0)
    np.random.seed(0)
    try:
        import torch

        torch.manual_seed(0)
    except ImportError:  # pragma: no cover
        pass
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


def run_cli(*args: str, cwd: Path, module: str = "coordcheck", timeout: int = 300,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m <module> args`` in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HYDRA_FULL_ERROR": "0", **(env or {})},
    )


def run_in_process(monkeypatch: pytest.MonkeyPatch, *args: str, module: str = "coordcheck") -> int:
    """``python -m <module> args`` in this process, through the same ``cli()``: its exit status, without the
    seconds a fresh interpreter takes to start. Read what it printed with ``capsys``."""
    cli = importlib.import_module(f"{module}.__main__").cli
    monkeypatch.setattr(sys, "argv", [module, *args])
    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")  # as run_cli: Hydra prints an error, it does not raise it
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    # transformers (and the kernels it calls) log through their own handlers, made once per process on the
    # sys.stderr of the test that first imported them (a capture closed since): this test's stderr, or a warning of
    # theirs is a "--- Logging error ---"
    # (a capture's stream can read as open while its buffer is closed: every such handler not on this test's
    # stdout / stderr is pointed at this test's stderr, as a fresh process would have made it)
    for logger in [root, *logging.Logger.manager.loggerDict.values()]:
        for h in getattr(logger, "handlers", []):
            if type(h) is logging.StreamHandler and h.stream not in (sys.stdout, sys.stderr):
                h.stream = sys.stderr  # not setStream: it flushes the old stream, closed
    try:
        with pytest.raises(SystemExit) as done:
            cli()
    finally:  # Hydra configures logging for its job (a console and a file handler): undo it for the next test
        for h in root.handlers:
            if h not in handlers:
                h.close()
        root.handlers[:] = handlers
        root.setLevel(level)
    return done.value.code
