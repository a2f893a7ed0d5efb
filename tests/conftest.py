"""Shared fixtures: seeded RNGs, closed figures, and tiny helpers for real runs."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


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


def run_cli(*args: str, cwd: Path, module: str = "coordcheck", timeout: int = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m <module> args`` in a subprocess, as a user would."""
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout,
        env={**__import__("os").environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "HYDRA_FULL_ERROR": "0", **(env or {})},
    )
