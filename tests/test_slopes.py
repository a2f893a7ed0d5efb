import numpy as np
import pandas as pd
import pytest
from synthetic import make_frame

from coordcheck.judge.slopes import fit_slopes, t_quantile


def test_recovers_exact_power_laws():
    df = make_frame({("a", "hidden", "out"): 0.0, ("b", "hidden", "out"): 0.5, ("c", "output", "out"): -1.0})
    s = fit_slopes(df)
    got = s[(s.stat == "std") & (s.tensor == "out")].groupby("module")["slope"].agg(["min", "max"])
    assert np.allclose(got.loc["a"], 0.0, atol=1e-12)
    assert np.allclose(got.loc["b"], 0.5) and np.allclose(got.loc["c"], -1.0)
    assert (s["n_widths"] == 4).all() and (s.loc[s.tensor == "out", "n_points"] == 8).all()
    assert (s["stderr"].fillna(0) < 1e-9).all()


def test_matches_polyfit_per_group_with_noise():
    df = make_frame({("a", "hidden", "out"): 0.1, ("b", "hidden", "delta"): -0.3}, noise=0.2, seeds=(0, 1, 2))
    s = fit_slopes(df).set_index(["module", "tensor", "stat", "step"]).sort_index()
    acts = df[df.tensor != "loss"]
    expected = acts.groupby(["module", "tensor", "stat", "step"]).apply(
        lambda g: np.polyfit(np.log2(g["width"]), np.log2(g["value"]), 1)[0], include_groups=False
    ).rename("slope").sort_index()
    pd.testing.assert_series_equal(s["slope"], expected, check_names=False, rtol=1e-9)
    # the 95% interval is slope +- t(n-2) * stderr, and covers the true slope here
    row = s.loc[("a", "out", "std", 2)]
    assert row["ci_low"] < 0.1 < row["ci_high"]
    assert row["ci_high"] - row["slope"] == pytest.approx(t_quantile(np.array([10]))[0] * row["stderr"])


def test_zero_nan_and_two_widths_one_seed():
    df = make_frame({("z", "output", "out"): "zero", ("n", "hidden", "out"): "nan", ("h", "hidden", "out"): 0.0},
                    widths=(64, 128), seeds=(0,))
    s = fit_slopes(df).set_index(["module", "stat", "step"])
    assert s.loc[("z", "std", 0), "all_zero"] and np.isnan(s.loc[("z", "std", 0), "slope"])
    assert s.loc[("n", "std", 4), "nonfinite"] and np.isnan(s.loc[("n", "std", 4), "slope"])
    h = s.loc[("h", "std", 0)]
    assert h["slope"] == pytest.approx(0.0) and h["n_widths"] == 2 and np.isnan(h["ci_low"])  # df = 0


def test_partial_zeros_are_flagged_not_fitted():
    df = make_frame({("p", "hidden", "out"): 0.0})
    df.loc[(df.module == "p") & (df.width == 64), "value"] = 0.0
    s = fit_slopes(df)
    assert (s["any_zero"] & ~s["all_zero"]).all() and s["slope"].isna().all()


def test_t_quantile_table():
    assert t_quantile(np.array([1, 2, 30, 1000, 0])) == pytest.approx([12.706, 4.303, 2.042, 1.9624, np.nan],
                                                                      nan_ok=True, rel=1e-3)
