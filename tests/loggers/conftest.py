"""Keeps wandb offline and inside the test's temporary directory; stops its service after the tests."""

from __future__ import annotations

import sys

import pytest

WANDB_DIRS = ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR")


def wandb_env(mp: pytest.MonkeyPatch, tmp) -> None:
    """No network, no file outside ``tmp``, no console output from wandb; the config's default mode decides."""
    for name in WANDB_DIRS:
        mp.setenv(name, str(tmp / "wandb-home" / name.lower()))
    mp.delenv("WANDB_MODE", raising=False)  # the default (offline) must come from conf/logger/wandb.yaml
    mp.delenv("WANDB_API_KEY", raising=False)
    mp.setenv("WANDB_SILENT", "true")
    mp.setenv("WANDB_DISABLE_GIT", "true")
    mp.delenv("MLFLOW_TRACKING_URI", raising=False)


@pytest.fixture(scope="module", autouse=True)
def _stop_wandb():
    yield
    if "wandb" in sys.modules:
        sys.modules["wandb"].teardown()
