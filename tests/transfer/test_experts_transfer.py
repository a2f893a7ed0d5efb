"""Learning-rate transfer across the number of experts (issue 29, item 4): the fit over the count on synthetic curves
whose optimum shift is known, the CLI with an experts axis (a tiny grid, in a subprocess) and the overlay that
measures it."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from coordcheck.transfer.fit import DOES_NOT, TRANSFERS, axes_of, fit_optima, fit_shifts, judge_transfer
from coordcheck.transfer.frame import conform
from coordcheck.transfer.report import build_transfer_report

pytestmark = pytest.mark.usefixtures("one_thread")

LOG2_LRS = np.arange(-12, -3)
COUNTS = (4, 8, 16)


def experts_frame(shift: float, *, seeds=(0, 1, 2), noise: float = 0.005, centre: float = -8.0) -> pd.DataFrame:
    """Held-out losses on parabolas in log2(lr) whose vertex moves ``shift`` octaves per doubling of the count; one
    config_id per count, one family_id for them all, width 64."""
    rng = np.random.default_rng(0)
    rows = []
    for n in COUNTS:
        opt = centre + shift * math.log2(n / COUNTS[0])
        for seed in seeds:
            for x in LOG2_LRS:
                rows.append({"config_id": f"fam-e{n}", "family_id": "fam", "experts": n, "depth": 0, "model": "moe",
                             "parametrization": "mup", "optimizer": "adam", "data": "text", "width": 64,
                             "lr": 2.0 ** x, "seed": seed, "step": 150, "split": "heldout",
                             "loss": 2.5 + 0.08 * (x - opt) ** 2 + rng.normal(0, noise), "status": "ok"})
    return conform(pd.DataFrame(rows))


def judged(frame: pd.DataFrame):
    optima = fit_optima(frame, axis="experts")
    return optima, judge_transfer(optima, fit_shifts(optima, axis="experts"), axis="experts")


def test_an_optimum_that_stays_put_across_the_count_transfers_and_one_that_moves_does_not():
    frame = experts_frame(0.0)
    assert axes_of(frame) == ["experts"]
    optima, verdict = judged(frame)
    assert list(optima["experts"]) == list(COUNTS) and set(optima["config_id"]) == {f"fam-e{n}" for n in COUNTS}
    assert verdict.status == TRANSFERS and verdict.label == "transfers across the number of experts"
    assert "per expert count doubling" in verdict.reason
    _, moved = judged(experts_frame(-1.0))
    assert moved.status == DOES_NOT and "as the number of experts grows" in moved.reason
    report = build_transfer_report(frame)
    assert report.axes == ["experts"] and report.status == TRANSFERS
    md = report.markdown()
    assert md.startswith("# Does the learning rate transfer across the number of experts?") and "| 64 | 16 |" in md
    assert report.payload()["experts"]["experts"] == list(COUNTS)


def test_cli_experts_sweep_writes_the_experts_column_and_a_report_across_the_count(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("--multirun", "model=moe", "width=16", "experts=2,4", "lr=0.004,0.016", "steps=2", "seeds=1",
                "eval_batches=1", "parametrization=mup", "progress=false", "threads=1", f"hydra.sweep.dir={sweep}",
                cwd=tmp_path, module="coordcheck.transfer")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "across the number of experts" in r.stdout
    frame = pd.concat(pd.read_parquet(p) for p in sweep.glob("*/transfer.parquet"))
    assert sorted(frame["experts"].unique()) == [2, 4] and frame["family_id"].nunique() == 1
    assert frame.groupby("experts")["config_id"].nunique().eq(1).all() and frame["config_id"].nunique() == 2
    payload = json.loads((sweep / "report" / "transfer.json").read_text())
    assert payload["axes"] == ["experts"] and payload["experts"]["experts"] == [2, 4]
    assert (sweep / "report" / "transfer_experts.png").exists()


def test_the_experts_transfer_overlay_composes_the_grid_that_was_measured():
    from hydra import compose, initialize_config_dir

    from coordcheck.app import jobs as app
    from coordcheck.transfer.app import grid_size

    with initialize_config_dir(app.CONF_DIR, version_base="1.3"):
        cfg = compose("transfer", overrides=["+experiment=experts_transfer"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert str(params.experts) == "4,8,16" and str(params.width) == "64" and params.parametrization == "mup"
    assert grid_size(cfg) == 3 * len(str(params.lr).split(",")) and cfg.steps == 150
    assert cfg.model._target_ == "coordcheck.setup.moe.moe"
