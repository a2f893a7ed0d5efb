"""Shared fixtures: seeded RNGs, closed figures, and tiny helpers for real runs."""

from __future__ import annotations

import importlib
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest file (the μTransfer known answers' shared training, about 260 s) first: with ``--dist loadfile``
    one worker then runs it while the other runs the rest, instead of it running alone at the end."""
    items.sort(key=lambda item: item.path.parts[-2:] != ("transfer", "test_known_answers.py"))  # stable: else as is


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
