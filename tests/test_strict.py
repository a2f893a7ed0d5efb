"""CI gating from the sweep itself: ``report.strict`` exit codes, report knobs checked when the
config is composed, and an exception at the end of a sweep recorded and never an exit 0."""

import json
import shutil
import sys
from dataclasses import fields
from typing import get_args

import pytest
from conftest import run_cli
from hydra import compose, initialize_config_dir
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from coordcheck import app, config, report
from coordcheck.__main__ import cli
from coordcheck.errors import CoordCheckError
from coordcheck.frame import FRAME_NAME
from coordcheck.verdict import Rules

PASSING = ["model=mlp", "width=32,64,128", "steps=3", "seeds=1", "progress=false", "report.figures=false"]


def run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    """``python -m coordcheck ARGS`` in this process; its exit status."""
    monkeypatch.setattr(sys, "argv", ["coordcheck", *args])
    with pytest.raises(SystemExit) as done:
        cli()
    return done.value.code


def status(sweep) -> str:
    return json.loads((sweep / "report" / "report.json").read_text())["status"]


@pytest.fixture(scope="module")
def passing_sweep(tmp_path_factory):
    sweep = tmp_path_factory.mktemp("passing") / "sweep"
    with pytest.MonkeyPatch.context() as mp:
        assert run(mp, *PASSING, f"hydra.sweep.dir={sweep}", "--multirun") == 0
    assert status(sweep) == "pass"
    return sweep


@pytest.fixture
def sweep(passing_sweep, tmp_path):
    """A copy of the passing sweep: the same command again skips every job and re-makes only the report."""
    return shutil.copytree(passing_sweep, tmp_path / "sweep")


# -- report.strict -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("knobs,verdict,code", [([], "pass", 0), (["report.min_widths=4"], "inconclusive", 2)])
def test_strict_exit_status_is_the_verdict(monkeypatch, sweep, knobs, verdict, code):
    frames = {f: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)}
    assert run(monkeypatch, *PASSING, *knobs, f"hydra.sweep.dir={sweep}", "--multirun") == 0  # not strict: 0, as before
    assert run(monkeypatch, *PASSING, *knobs, "report.strict=true", f"hydra.sweep.dir={sweep}", "--multirun") == code
    assert status(sweep) == verdict
    # report knobs neither name job directories nor change a job: every job was resumed, none re-run
    assert {f: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)} == frames
    assert not [d for d in sweep.iterdir() if "report." in d.name]


def test_strict_sweep_exits_1_on_fail(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("model=mlp", "parametrization=sp", "width=16,32,64", "steps=3", "seeds=1", "progress=false",
                "report.figures=false", "report.strict=true", f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "coordcheck: FAIL" in r.stdout and "coordcheck: report.strict=true: FAIL exits 1" in r.stderr
    assert "Traceback" not in r.stderr and status(sweep) == "fail"


@pytest.mark.parametrize("outcome,code", [
    (app.Outcome(status="fail"), 0),
    (app.Outcome(status="fail", strict=True), 1),
    (app.Outcome(status="inconclusive", strict=True), 2),
    (app.Outcome(status="pass", strict=True), 0),
    (app.Outcome(status="pass", failed=["width=32 failed: OOM"]), 1),  # failed jobs exit 1, strict or not
    (app.Outcome(status="inconclusive", strict=True, failed=["width=32 failed: OOM"]), 1),
    (app.Outcome(error="RuntimeError: boom"), 1),
    (app.Outcome(error="report.tol: must be a number > 0 (got -1.0)", user_error=True), 2),
])
def test_exit_status(outcome, code):
    assert outcome.exit_code == code


# -- report knobs: a schema generated from Rules, checked when the config is composed ----------------------------------
def test_report_knobs_are_the_fields_of_rules_then_the_reports_own(capsys):
    assert list(config.KNOBS) == [f.name for f in fields(Rules)] + ["figures", "size", "steps", "strict", "layout"]
    with initialize_config_dir(config_dir=app.CONF_DIR, version_base="1.3"):
        cfg = compose("config")
    assert OmegaConf.get_type(cfg.report) is config.ReportOptions
    assert config.report_options(cfg.report) == config.report_options(), "conf/config.yaml's report values drifted from Rules"
    assert config.rules_of(config.report_options()) == Rules()
    from coordcheck import plot

    assert [m.value for m in config.Size] == list(get_args(plot.Size))
    assert [m.value for m in config.Layout] == list(get_args(plot.Layout))
    with pytest.raises(SystemExit):
        report.main(["--help"])
    usage = capsys.readouterr().out
    assert all(f"--{f.name.replace('_', '-')} " in usage for f in fields(Rules)) and "--layout {grid,guide}" in usage


BAD_TYPES = [
    ("report.tol=abc", "report.tol: must be a number > 0 (got 'abc')"),
    ("report.stat=foo", "report.stat: must be one of std, l1, rms, mean, absmax (got 'foo')"),
    ("report.size=huge", "report.size: must be one of paper, slides (got 'huge')"),
    ("report.strict=maybe", "report.strict: must be true or false (got 'maybe')"),
    ("report.layout=foo", "report.layout: must be one of grid, guide (got 'foo')"),
    ("report.min_widths=2.5", "report.min_widths: must be an integer >= 2 (got '2.5')"),
    ("report.steps=abc", "report.steps: must be null or a list of steps >= 0, e.g. [0,3,10] (got 'abc')"),
    ("report.tolerance=0.1", "report.tolerance: unknown knob: choose one of stat, tol, shrink_tol, "),
]
BAD_VALUES = [  # Hydra composes these; the checks that follow composition reject them
    ("+report.tolerance=0.1", "report.tolerance: unknown knob: choose one of stat, tol, shrink_tol, "),
    ("report.tol=0", "report.tol: must be a number > 0 (got 0.0)"),
    ("report.tol=nan", "report.tol: must be a number > 0 (got nan)"),
    ("report.shrink_tol=-0.1", "report.shrink_tol: must be a number > 0 (got -0.1)"),
    ("report.min_widths=1", "report.min_widths: must be an integer >= 2 (got 1)"),
    ("report.min_window=0", "report.min_window: must be an integer >= 1 (got 0)"),
    ("report.steps=[0,-1]", "report.steps: must be null or a list of steps >= 0, e.g. [0,3,10] (got [0, -1])"),
    ("report.tol=0.1,0.2", "report.tol: one value per sweep, its report is made once at the end (got '0.1,0.2')"),
    ("report.steps=0,3", "report.steps: one value per sweep, its report is made once at the end (got '0,3'): "
                         "write a list as [0,3,10]"),
]


@pytest.mark.parametrize("override,message", BAD_TYPES, ids=[o for o, _ in BAD_TYPES])
def test_report_knob_of_the_wrong_type_fails_composition(override, message):
    with initialize_config_dir(config_dir=app.CONF_DIR, version_base="1.3"):
        with pytest.raises(ConfigCompositionException):
            compose("config", overrides=[override])
    with pytest.raises(CoordCheckError) as e:
        config.check_command_line(["width=16,32,64", override, "--multirun"])
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("override,message", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_report_knob_out_of_range_is_one_line(override, message):
    with pytest.raises(CoordCheckError) as e:
        config.check_command_line(["width=16,32,64", override, "--multirun"])
    assert str(e.value).startswith(message)


def test_good_report_knobs_pass_the_check():
    config.check_command_line(["--multirun", "width=16,32", "report.stat=l1", "report.steps=[0,3]", "report.strict=true",
                            "report.layout=guide", "report.min_widths=4", "report.size=slides"])


def test_bad_knob_is_one_line_and_exit_2_before_any_job(tmp_path):
    r = run_cli("width=16,32,64", "report.tol=abc", f"hydra.sweep.dir={tmp_path / 'sweep'}", "--multirun", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == "coordcheck: error: report.tol: must be a number > 0 (got 'abc')\n" and not r.stdout
    assert not (tmp_path / "sweep").exists()


def test_report_cli_flags_are_checked_the_same_way(sweep, capsys):
    assert report.main([str(sweep), "--min-window", "0", "--no-figures"]) == 2
    assert capsys.readouterr().err == "coordcheck.report: error: --min-window: must be an integer >= 1 (got 0)\n"
    assert report.main([str(sweep), "--min-widths", "4", "--no-figures", "--strict"]) == 2  # inconclusive


# -- the end of the sweep: never a warning with exit 0 -----------------------------------------------------------------
def test_exception_at_the_end_of_a_sweep_is_recorded_and_fails_the_command(monkeypatch, capsys, sweep):
    real = report.report_sweep

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire\nsecond line")

    monkeypatch.setattr(report, "report_sweep", broken)
    assert run(monkeypatch, *PASSING, f"hydra.sweep.dir={sweep}", "--multirun") == 1
    err = capsys.readouterr().err
    assert "coordcheck: no report: RuntimeError: disk on fire\n" in err and "second line" not in err
    assert "Traceback" not in err and "UserWarning" not in err
    record = (sweep / "report" / "error.txt").read_text()
    assert record.startswith("RuntimeError: disk on fire\n") and "Traceback" in record
    assert not (sweep / "report" / "report.json").exists()  # the earlier PASS must not stand for this run
    monkeypatch.setattr(report, "report_sweep", real)
    assert run(monkeypatch, *PASSING, "report.strict=true", f"hydra.sweep.dir={sweep}", "--multirun") == 0
    assert status(sweep) == "pass" and not (sweep / "report" / "error.txt").exists()


def test_a_bad_knob_that_reaches_the_callback_is_a_user_error(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(app, "OUTCOME", app.Outcome())
    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "report": {"tol": -1.0}})
    with pytest.raises(SystemExit) as e:  # before the first job (a -cd command line is not checked up front)
        app.SweepCallback().on_multirun_start(config=cfg)
    assert e.value.code == 2
    app.SweepCallback().on_multirun_end(config=cfg)
    assert app.OUTCOME.exit_code == 2
    assert (tmp_path / "report" / "error.txt").read_text() == "report.tol: must be a number > 0 (got -1.0)\n"
    message = "report.tol: must be a number > 0 (got -1.0)"
    assert capsys.readouterr().err.splitlines() == [f"coordcheck: error: {message}", f"coordcheck: no report: {message}"]


# -- layout ----------------------------------------------------------------------------------------------------------
def test_layout_reaches_the_coord_check_figure(monkeypatch, sweep):
    import matplotlib.pyplot as plt

    from coordcheck import plot

    seen = []

    def fake(name):
        def draw(*args, **kwargs):
            seen.append((name, kwargs.get("layout", "default")))
            return plt.figure()
        return draw

    for name in ("plot_coords", "plot_slopes", "plot_loss"):
        monkeypatch.setattr(plot, name, fake(name))
    assert run(monkeypatch, *PASSING, "report.figures=true", "report.layout=guide", f"hydra.sweep.dir={sweep}",
               "--multirun") == 0
    assert report.main([str(sweep), "--layout", "guide"]) == 0
    assert report.main([str(sweep)]) == 0
    assert [layout for name, layout in seen if name == "plot_coords"] == ["guide", "guide", "grid"]
