"""Learning-rate transfer across depth (issue 18, item 5): the fit over depth on synthetic curves whose optimum shift
is known, the CLI with a depth axis (a tiny grid, in a subprocess) and the Python API's ``depths=``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli

from coordcheck.core.errors import CoordCheckError
from coordcheck.transfer.fit import (
    DOES_NOT,
    INCONCLUSIVE,
    TRANSFERS,
    axes_of,
    fit_optima,
    fit_shifts,
    judge_transfer,
    wider_not_worse,
)
from coordcheck.transfer.frame import conform
from coordcheck.transfer.report import build_transfer_report

pytestmark = pytest.mark.usefixtures("one_thread")

LOG2_LRS = np.arange(-12, -3)  # one per octave, 2^-12 .. 2^-4
DEPTHS = (2, 4, 8, 16)


def depth_frame(shift: float, *, loss_rise: float = 0.0, width: int = 64, depths=DEPTHS, seeds=(0, 1, 2),
                noise: float = 0.005, centre: float = -8.0, family: str = "fam", rng=None) -> pd.DataFrame:
    """Held-out losses on parabolas in log2(lr) whose vertex moves ``shift`` octaves per depth doubling and whose
    minimum moves ``loss_rise`` per depth doubling; one config_id per depth, one family_id for them all."""
    rng = rng or np.random.default_rng(0)
    rows = []
    for d in depths:
        doublings = math.log2(d / depths[0])
        opt = centre + shift * doublings
        for seed in seeds:
            for x in LOG2_LRS:
                loss = 2.5 + loss_rise * doublings + 0.08 * (x - opt) ** 2 + rng.normal(0, noise)
                rows.append({"config_id": f"{family}-d{d}", "family_id": family, "depth": d, "model": "gpt",
                             "parametrization": "mup", "optimizer": "adam", "data": "text", "width": width,
                             "lr": 2.0 ** x, "seed": seed, "step": 150, "split": "heldout", "loss": loss,
                             "status": "ok"})
    return pd.DataFrame(rows)


def judged(frame: pd.DataFrame):
    optima = fit_optima(frame, axis="depth")
    return optima, judge_transfer(optima, fit_shifts(optima, axis="depth"), axis="depth")


def test_an_optimum_that_stays_put_across_depth_transfers():
    optima, verdict = judged(depth_frame(0.0))
    assert list(optima["depth"]) == list(DEPTHS) and set(optima["config_id"]) == {f"fam-d{d}" for d in DEPTHS}
    assert np.allclose(optima["optimum"], -8.0, atol=0.1)
    s = verdict.shifts.iloc[0]
    assert abs(s["shift"]) < 0.05 and s["n_depths"] == 4 and s["width"] == 64
    assert verdict.status == TRANSFERS and verdict.label == "transfers across depth"
    assert "per depth doubling" in verdict.reason and "across depth" in verdict.title


def test_an_optimum_that_moves_down_with_depth_does_not_transfer_and_names_the_branch_multiplier():
    optima, verdict = judged(depth_frame(-1.0))
    assert verdict.shifts.iloc[0]["shift"] == pytest.approx(-1.0, abs=0.1)
    assert verdict.status == DOES_NOT and verdict.label == "does not transfer across depth"
    assert "as depth grows" in verdict.reason and "branch multiplier" in verdict.reason


def test_an_optimum_that_moves_up_with_depth_does_not_transfer():
    _, verdict = judged(depth_frame(+1.0, centre=-10.0))
    assert verdict.status == DOES_NOT and "larger learning rates as depth grows" in verdict.reason


def test_a_noisy_shift_that_straddles_the_tolerance_is_inconclusive():
    _, verdict = judged(depth_frame(-0.5, noise=0.03, seeds=(0, 1), rng=np.random.default_rng(3)))
    s = verdict.shifts.iloc[0]
    assert s["ci_low"] < -0.5 < s["ci_high"]  # the known answer, -0.5, is the tolerance itself
    assert verdict.status == INCONCLUSIVE and "straddles" in verdict.reason


def test_an_optimum_on_the_grid_edge_at_one_depth_is_inconclusive_and_names_that_depth():
    _, verdict = judged(depth_frame(-1.5, centre=-7.0))  # depth 16's optimum falls below 2^-12
    assert verdict.status == INCONCLUSIVE and "depth 16's best learning rate" in verdict.reason


def test_deeper_is_worse_does_not_transfer_even_when_the_optimum_stays_put():
    optima, verdict = judged(depth_frame(0.0, loss_rise=0.05))
    s = verdict.shifts.iloc[0]
    assert s["loss_slope"] == pytest.approx(0.05, abs=0.01) and s["loss_slope_low"] > 0
    assert verdict.status == DOES_NOT and verdict.reason.count("deeper is worse") == 1
    _, better = judged(depth_frame(0.0, loss_rise=-0.05))  # deeper and better: CompleteP's signature
    assert better.status == TRANSFERS and better.shifts.iloc[0]["loss_slope_high"] < 0


def test_deeper_not_worse_table_reads_every_depth_at_the_shallowest_optimum():
    frame = depth_frame(-1.0)
    optima = fit_optima(frame, axis="depth")
    deeper = wider_not_worse(frame, optima, axis="depth")
    assert list(deeper["depth"]) == list(DEPTHS) and set(deeper["reference_depth"]) == {2}
    assert deeper["loss"].is_monotonic_increasing  # its optimum moved away from depth 2's


def test_the_depth_axis_groups_by_family_and_width_and_old_frames_have_no_depth_axis():
    grid = pd.concat([depth_frame(0.0, width=64), depth_frame(-1.0, width=128)], ignore_index=True)
    grid["config_id"] = grid["config_id"] + "-w" + grid["width"].astype(str)
    _, verdict = judged(grid)
    by_width = dict(zip(verdict.shifts["width"], verdict.shifts["status"]))
    assert by_width == {64: TRANSFERS, 128: DOES_NOT} and verdict.status == DOES_NOT
    old = depth_frame(0.0, depths=(2,)).drop(columns=["family_id", "depth"])
    assert axes_of(old) == ["width"] and axes_of(depth_frame(0.0)) == ["depth"]
    filled = conform(old)
    assert (filled["depth"] == 0).all() and (filled["family_id"] == filled["config_id"]).all()
    with pytest.raises(CoordCheckError, match="axis must be one of width, depth"):
        fit_optima(old, axis="height")


def test_report_of_a_depth_sweep_says_depth():
    report = build_transfer_report(depth_frame(-1.0))
    assert report.axes == ["depth"] and report.status == DOES_NOT
    md = report.markdown()
    assert md.startswith("# Does the learning rate transfer across depth?")
    assert "DOES NOT TRANSFER ACROSS DEPTH" in md and "per depth doubling" in md and "Deeper is not worse" in md
    payload = report.payload()
    assert payload["axes"] == ["depth"] and payload["status"] == DOES_NOT
    assert payload["depth"]["label"] == "does not transfer across depth" and payload["depth"]["depths"] == [2, 4, 8, 16]
    assert "across depth" in report.summary(Path("transfer.md"))[0]


TINY = ["width=16", "depth=2,4", "lr=0.00390625,0.015625", "parametrization=mup", "depth_scaling=completep",
        "steps=3", "eval_batches=1", "base_width=16", "progress=false", "threads=1"]


@pytest.mark.slow
def test_cli_depth_sweep_writes_depth_columns_and_a_report_that_says_depth(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("--multirun", *TINY, f"hydra.sweep.dir={sweep}", cwd=tmp_path, module="coordcheck.transfer")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "across depth" in r.stdout
    frames = {p.parent.name: pd.read_parquet(p) for p in sweep.glob("*/transfer.parquet")}
    assert len(frames) == 4
    frame = pd.concat(frames.values())
    assert sorted(frame["depth"].unique()) == [2, 4] and frame["family_id"].nunique() == 1
    ids = frame.groupby("depth")["config_id"].unique()
    assert all(len(v) == 1 for v in ids) and ids[2][0] != ids[4][0]  # one config_id per depth, for each lr
    meta = json.loads(next(iter(sweep.glob("*depth=4*/job.json"))).read_text())
    assert meta["depth"] == 4 and meta["depth_scaling"] == "completep" and meta["depth_alpha"] == 1.0
    payload = json.loads((sweep / "report" / "transfer.json").read_text())
    assert payload["axes"] == ["depth"] and payload["depth"]["depths"] == [2, 4]
    md = (sweep / "report" / "transfer.md").read_text()
    assert "across depth" in md and "| 16 | 4 |" in md  # width 16, depth 4: a row per depth
    assert (sweep / "report" / "transfer_depth.png").exists()


@pytest.mark.slow
def test_api_depths_gives_a_depth_frame_and_a_verdict_across_depth():
    import coordcheck
    from coordcheck.setup.models import gpt

    r = coordcheck.transfer(gpt, width=16, depths=[2, 4], lrs=[0.004, 0.016], steps=2, eval_batches=1,
                            depth_scaling="completep", progress=False)
    assert sorted(r.frame["depth"].unique()) == [2, 4] and r.frame["family_id"].nunique() == 1
    assert r.frame.groupby("depth")["config_id"].nunique().eq(1).all() and r.frame["config_id"].nunique() == 2
    assert r.verdict.axis == "depth" and list(r.optima["depth"]) == [2, 4]
    assert "across depth" in r.report()
    assert {f["depth_scaling"] for f in r.facts} == {"completep"}
    with pytest.raises(CoordCheckError, match="depths must be a non-empty list"):
        coordcheck.transfer(gpt, width=16, depths=4, lrs=[0.01])
    with pytest.raises(CoordCheckError, match="unknown depth_scaling"):
        coordcheck.transfer(gpt, width=16, depths=[2], lrs=[0.01], depth_scaling="sqrt")


def test_the_depth_transfer_overlay_composes_the_grid_that_was_measured_to_decide():
    from hydra import compose, initialize_config_dir

    from coordcheck.app import jobs as app
    from coordcheck.transfer.app import grid_size

    with initialize_config_dir(app.CONF_DIR, version_base="1.3"):
        cfg = compose("transfer", overrides=["+experiment=depth_transfer"], return_hydra_config=True)
    params = cfg.hydra.sweeper.params
    assert str(params.depth) == "2,4,8,16" and str(params.width) == "64" and params.parametrization == "mup"
    assert grid_size(cfg) == 4 * len(str(params.lr).split(","))
    assert cfg.depth_scaling.alpha == 1.0 and cfg.base_depth == 2
