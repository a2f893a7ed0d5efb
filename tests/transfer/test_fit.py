"""The μTransfer analysis on synthetic loss curves whose answer is known (no torch, no training)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from coordcheck.core.errors import CoordCheckError
from coordcheck.run.sweep import JobProblem
from coordcheck.transfer.fit import (
    DOES_NOT,
    INCONCLUSIVE,
    TRANSFERS,
    TransferRules,
    fit_optima,
    fit_shifts,
    judge_transfer,
    parabola_vertex,
    wider_not_worse,
)
from coordcheck.transfer.report import EXIT, build_transfer_report

LOG2_LRS = np.arange(-12, -3)  # one per octave, 2^-12 .. 2^-4
WIDTHS = (128, 256, 512)


def curve_frame(shift: float, *, par: str = "mup", centre: float = -8.0, widths=WIDTHS, log2_lrs=LOG2_LRS,
                seeds=(0,), noise: float = 0.01, curvature: float = 0.08, diverge_above: float = math.inf,
                rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Held-out losses on a parabola in log2(lr) whose vertex moves ``shift`` octaves per width doubling."""
    rng = rng or np.random.default_rng(0)
    rows = []
    for w in widths:
        opt = centre + shift * math.log2(w / widths[0])
        for seed in seeds:
            for x in log2_lrs:
                diverged = x > diverge_above
                loss = math.nan if diverged else 2.5 + curvature * (x - opt) ** 2 + rng.normal(0, noise)
                rows.append({"config_id": f"cfg-{par}", "model": "gpt", "parametrization": par, "optimizer": "adam",
                             "data": "text", "width": w, "lr": 2.0 ** x, "seed": seed, "step": 150,
                             "split": "heldout", "loss": loss, "status": "diverged" if diverged else "ok"})
    return pd.DataFrame(rows)


def judged(frame: pd.DataFrame, rules: TransferRules | None = None):
    optima = fit_optima(frame, rules)
    return optima, judge_transfer(optima, fit_shifts(optima, rules), rules)


def test_parabola_vertex_is_exact():
    x = np.array([-9.0, -8.0, -7.0])
    y = 2.0 + 0.3 * (x + 7.6) ** 2
    xv, yv = parabola_vertex(x, y)
    assert xv == pytest.approx(-7.6) and yv == pytest.approx(2.0)
    assert math.isnan(parabola_vertex(x, -y)[0])  # opens downward: no minimum


def test_flat_optimum_transfers():
    optima, v = judged(curve_frame(0.0))
    assert v.status == TRANSFERS and v.transfers
    assert optima["optimum"].to_numpy() == pytest.approx(-8.0, abs=0.2)
    s = v.shifts.iloc[0]
    assert -0.5 < s.ci_low <= s["shift"] <= s.ci_high < 0.5
    assert (optima["se_source"] == "fit").all()


@pytest.mark.parametrize("shift, words", [(-1.0, "not scaled with width"), (1.0, "scaled with width twice")])
def test_moving_optimum_does_not_transfer_and_names_the_cause(shift, words):
    _, v = judged(curve_frame(shift))
    assert v.status == DOES_NOT
    assert v.shifts.iloc[0]["shift"] == pytest.approx(shift, abs=0.15)
    assert words in v.reason


def test_sp_beside_mup_is_the_control():
    frame = pd.concat([curve_frame(0.0), curve_frame(-1.0, par="sp", centre=-7.5)])
    _, v = judged(frame)
    assert v.status == TRANSFERS  # the sweep is judged on muP; the control does not transfer, as it should
    assert list(v.shifts["parametrization"]) == ["mup", "sp"]
    assert v.shifts.set_index("parametrization").loc["sp", "status"] == DOES_NOT
    assert v.shifts.set_index("parametrization").loc["sp", "control"]
    assert "TRANSFERS" in v.title and "sp: does not transfer" in v.title


def test_sp_alone_is_judged():
    _, v = judged(curve_frame(-1.0, par="sp"))
    assert v.status == DOES_NOT and not v.shifts.iloc[0]["control"]


@pytest.mark.parametrize("centre, edge, words", [(-3.0, "high", "extend the grid to larger"),
                                                 (-13.0, "low", "extend the grid to smaller")])
def test_optimum_on_the_grid_edge_is_inconclusive_and_says_which_way(centre, edge, words):
    optima, v = judged(curve_frame(0.0, centre=centre))
    assert v.status == INCONCLUSIVE
    assert set(optima["edge"]) == {edge}
    assert words in v.reason


def test_best_lr_next_to_a_diverged_one_is_the_edge_of_stability():
    optima, v = judged(curve_frame(0.0, centre=-6.0, diverge_above=-6.5))
    assert v.status == INCONCLUSIVE and "edge of stability" in v.reason
    assert set(optima["edge"]) == {"unstable"}
    assert (optima["max_stable"] == -7).all()


def test_too_few_finite_points_is_inconclusive():
    optima, v = judged(curve_frame(0.0, centre=-11.0, diverge_above=-10.5))
    assert v.status == INCONCLUSIVE and "finite points" in v.reason
    assert set(optima["edge"]) == {"few"}


def test_interval_straddling_the_tolerance_is_inconclusive():
    # a shift of 0.5 with noise: the interval crosses +0.5 -> neither transfers nor does not
    _, v = judged(curve_frame(0.5, noise=0.02, rng=np.random.default_rng(3)))
    s = v.shifts.iloc[0]
    assert s.ci_low < 0.5 < s.ci_high
    assert v.status == INCONCLUSIVE and "add seeds or steps" in v.reason


def test_one_width_is_inconclusive():
    _, v = judged(curve_frame(0.0, widths=(128,)))
    assert v.status == INCONCLUSIVE and "at least 2 widths" in v.reason


def test_seeds_give_the_interval():
    frame = curve_frame(0.0, seeds=(0, 1, 2), noise=0.02)
    optima, v = judged(frame)
    assert (optima["se_source"] == "seeds").all() and (optima["n_seed_optima"] == 3).all()
    assert v.status == TRANSFERS


def test_a_seed_that_diverged_removes_that_lr():
    frame = curve_frame(0.0, seeds=(0, 1))
    hit = (frame.seed == 1) & (frame.lr == 2.0 ** -8) & (frame.width == 256)
    frame.loc[hit, ["loss", "status"]] = [math.nan, "diverged"]
    optima, _ = judged(frame)
    assert optima.set_index("width").loc[256, "edge"] == "unstable"


def test_wider_not_worse_reads_the_loss_at_the_narrow_optimum():
    frame = curve_frame(0.0)
    optima, _ = judged(frame)
    wider = wider_not_worse(frame, optima)
    assert list(wider["width"]) == list(WIDTHS)
    assert wider["reference_width"].eq(128).all()
    assert wider["loss"].to_numpy() == pytest.approx(2.5, abs=0.05)


def test_failed_job_turns_transfers_into_inconclusive():
    report = build_transfer_report(curve_frame(0.0), problems=[JobProblem("lr=0.01,width=512", "failed", "boom")])
    assert report.status == INCONCLUSIVE and "left no frame" in report.verdict.reason
    assert EXIT[report.status] == 2


def test_report_payload_and_markdown(tmp_path):
    import json

    from coordcheck.transfer.report import write_transfer_report

    frame = pd.concat([curve_frame(0.0), curve_frame(-1.0, par="sp", centre=-7.0, diverge_above=-5.5)])
    report = build_transfer_report(frame)
    path = write_transfer_report(report, tmp_path, figures=True)
    payload = json.loads((tmp_path / "transfer.json").read_text())
    assert payload["schema"] == "coordcheck.transfer/1" and payload["status"] == TRANSFERS
    assert [p["parametrization"] for p in payload["parametrizations"]] == ["mup", "sp"]
    assert payload["widths"] == list(WIDTHS) and len(payload["lrs"]) == len(LOG2_LRS)
    assert {d["lr"] for d in payload["diverged"]} == {2.0 ** -5, 2.0 ** -4}
    text = path.read_text()
    assert text.startswith("# Does the learning rate transfer") and "**Verdict: TRANSFERS**" in text
    for name in ("transfer", "optimum"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0 and (tmp_path / f"{name}.pdf").stat().st_size > 0
    assert not list(tmp_path.glob("*.tmp"))


@pytest.mark.parametrize("kwargs", [{"tol": 0}, {"min_points": 2}, {"min_widths": 1}, {"level": 1.0}])
def test_rules_reject_bad_numbers(kwargs):
    with pytest.raises(CoordCheckError):
        TransferRules(**kwargs)


def test_a_curve_whose_fit_has_no_vertex_among_its_points_is_flat():
    frame = curve_frame(0.0, noise=0.0)
    around = dict(zip(range(-10, -5), [2.793, 2.8, 2.79, 2.8, 2.793]))  # lowest at -8, but concave around it
    for x, loss in around.items():
        frame.loc[frame.lr == 2.0 ** x, "loss"] = loss
    optima, v = judged(frame)
    assert set(optima["edge"]) == {"flat"} and optima["optimum"].isna().all()
    assert v.status == INCONCLUSIVE and "do not fit a parabola" in v.reason


def test_writing_a_report_twice_keeps_each_directory_honest(tmp_path):
    import json

    from coordcheck.transfer.report import write_transfer_report

    report = build_transfer_report(curve_frame(0.0))
    write_transfer_report(report, tmp_path / "a", figures=True)
    write_transfer_report(report, tmp_path / "b", figures=False)
    assert json.loads((tmp_path / "b" / "transfer.json").read_text())["figures"] == {}
    assert "transfer.png" not in (tmp_path / "b" / "transfer.md").read_text()


def test_a_job_that_left_no_frame_turns_transfers_into_inconclusive():
    optima, verdict = judged(curve_frame(0.0, noise=0.01))
    assert verdict.status == TRANSFERS
    missing = [JobProblem("lr=0.0625,width=512", "failed", "CUDA out of memory")]
    rules = TransferRules()
    again = judge_transfer(optima, fit_shifts(optima, rules), rules, problems=missing)
    assert again.status == "inconclusive" and "1 job(s) left no frame (lr=0.0625,width=512" in again.reason
    bad_optima, bad = judged(curve_frame(-1.0, noise=0.01))
    assert bad.status == "does not transfer"
    assert judge_transfer(bad_optima, fit_shifts(bad_optima, rules), rules, problems=missing).status == bad.status


def test_widths_that_built_the_same_model_do_not_transfer_whatever_the_optima():
    same = [{"config_id": "cfg-mup", "width": w, "lr": 2.0 ** x, "shapes": {"fc.weight": [32, 16]}}
            for w in WIDTHS for x in (-9, -8)]  # one fact per (width, lr) job, as job.json holds them
    frame = curve_frame(0.0)  # the optimum stays put, as it does when nothing changes with width
    assert build_transfer_report(frame).status == TRANSFERS
    report = build_transfer_report(frame, facts=same)
    assert report.status == DOES_NOT and EXIT[report.status] == 1
    assert report.verdict.reason == ("mup: the builder ignores `width`: every width (128, 256, 512) built the same "
                                     "512-parameter model — make build(width=...) set the layer sizes")
    grows = [{**f, "shapes": {"fc.weight": [f["width"], 16]}} for f in same]
    assert build_transfer_report(frame, facts=grows).status == TRANSFERS
