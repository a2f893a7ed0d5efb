"""Beyond one machine, and nothing lost: launchers, failures, resume, bad input, safety."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import ROOT, run_cli, run_in_process
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordcheck import report
from coordcheck.app.checks import check_choices, check_command_line
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import FRAME_NAME, FrameError, read_frame
from coordcheck.run.sweep import JOB_NAME, aggregate

GPT_TINY = ["width=16,32,64", "seeds=2", "steps=3", "threads=1", "progress=false", "model.n_layer=1",
            "model.context=8", "data.seq_len=8", "data.batch_size=2", "report.figures=false"]
MLP_TINY = ["model=mlp", "seeds=1", "steps=3", "progress=false", "report.figures=false"]


def _frames(sweep):
    return pd.concat([read_frame(f) for f in sorted(sweep.rglob(FRAME_NAME))], ignore_index=True) \
        .sort_values(["width", "seed", "step", "module", "tensor", "stat"]).reset_index(drop=True)


@pytest.mark.slow
def test_basic_joblib_and_submitit_give_identical_frames_and_verdicts(tmp_path):
    verdicts, frames = {}, {}
    for launcher in ("basic", "parallel", "submitit_local"):
        sweep = tmp_path / launcher
        r = run_cli(*GPT_TINY, f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
        assert r.returncode == 0, r.stderr[-2000:]
        frames[launcher] = _frames(sweep)
        report = json.loads((sweep / "report" / "report.json").read_text())
        verdicts[launcher] = (report["status"], report["reason"], json.dumps(report["modules"]))
    assert len(frames["basic"]) > 0
    for launcher in ("parallel", "submitit_local"):
        pd.testing.assert_frame_equal(frames[launcher], frames["basic"])
        assert verdicts[launcher] == verdicts["basic"]


@pytest.mark.slow
def test_a_failing_width_keeps_the_others_and_is_listed(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli(*MLP_TINY, "model._target_=cli_builders.flaky", "width=16,32,64,128", f"hydra.sweep.dir={sweep}",
                "--multirun", cwd=tmp_path)
    assert r.returncode == 1  # a failed job fails the command, after the other widths ran
    assert len(list(sweep.rglob(FRAME_NAME))) == 3
    assert "job model._target_=cli_builders.flaky,model=mlp,seeds=1,steps=3,width=32 failed: RuntimeError: " \
           "simulated: CUDA out of memory at width 32" in r.stdout
    report = json.loads((sweep / "report" / "report.json").read_text())
    assert report["status"] == "inconclusive"  # 3 widths left, but a job failed: never a pass
    assert [p["status"] for p in report["jobs"]["problems"]] == ["failed"]


@pytest.mark.slow
def test_two_widths_left_is_inconclusive(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli(*MLP_TINY, "model._target_=cli_builders.flaky", "width=16,32,64", f"hydra.sweep.dir={sweep}",
                "--multirun", cwd=tmp_path)
    assert r.returncode == 1 and "INCONCLUSIVE" in r.stdout
    report = json.loads((sweep / "report" / "report.json").read_text())
    assert report["status"] == "inconclusive" and report["widths"] == [16, 64]


@pytest.mark.slow
def test_diverging_run_is_a_recorded_failure_not_a_crash(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli(*MLP_TINY, "optimizer=sgd", "lr=1e30", "width=16,32,64", f"hydra.sweep.dir={sweep}", "--multirun",
                cwd=tmp_path)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    report = json.loads((sweep / "report" / "report.json").read_text())
    assert report["status"] == "fail" and report["reason"].startswith("diverged at step")
    assert report["divergence"]


@pytest.fixture(scope="module")
def mlp_sweep(tmp_path_factory):
    """``MLP_TINY width=16,32,64``, run once for the module; tests take a copy (:func:`sweep_copy`)."""
    cwd = tmp_path_factory.mktemp("mlp")
    r = run_cli(*MLP_TINY, "width=16,32,64", f"hydra.sweep.dir={cwd / 'sweep'}", "--multirun", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    return cwd / "sweep"


@pytest.fixture
def sweep_copy(mlp_sweep, tmp_path):
    return shutil.copytree(mlp_sweep, tmp_path / "sweep")


@pytest.mark.slow
def test_resume_skips_finished_jobs_and_reaggregates(tmp_path, sweep_copy):
    sweep = sweep_copy
    args = [*MLP_TINY, "width=16,32,64", f"hydra.sweep.dir={sweep}", "--multirun"]
    first = {f.parent.name: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)}
    assert sorted(first) == [f"model=mlp,seeds=1,steps=3,width={w}" for w in (16, 32, 64)]
    again = run_cli(*args, cwd=tmp_path)
    assert again.returncode == 0 and again.stdout.count("coordcheck: report") == 1
    assert {f.parent.name: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)} == first  # nothing redone
    log = "".join(p.read_text() for p in sweep.rglob("coordcheck.log"))
    assert log.count("already done with the same configuration") == 3
    changed = run_cli(*MLP_TINY[:1], "seeds=1", "steps=4", *MLP_TINY[3:], "width=16,32,64",
                      f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert changed.returncode == 0, changed.stderr[-2000:]
    # a different config writes its own job directories, beside the first config's, which it leaves alone
    frames = {f.parent.name: f for f in sweep.rglob(FRAME_NAME)}
    new = sorted(set(frames) - set(first))
    assert new == [f"model=mlp,seeds=1,steps=4,width={w}" for w in (16, 32, 64)]
    assert {name: frames[name].stat().st_mtime_ns for name in first} == first
    for name in new:
        assert sorted(read_frame(frames[name])["step"].unique()) == [0, 1, 2, 3, 4]
        assert json.loads((frames[name].parent / JOB_NAME).read_text())["status"] == "ok"
        assert "already done" not in (frames[name].parent / "coordcheck.log").read_text()
    assert aggregate(sweep).frame["config_id"].nunique() == 2


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.slow
def test_kill_midway_leaves_no_partial_files_and_resume_finishes(tmp_path):
    sweep = tmp_path / "sweep"
    args = [*MLP_TINY, "model._target_=cli_builders.slow", "width=16,32,64", f"hydra.sweep.dir={sweep}", "--multirun"]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "COORDCHECK_TEST_SLOW": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "coordcheck", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_default_sigint)  # a background CI shell may have SIGINT ignored
    deadline = time.time() + 120
    while time.time() < deadline and len(list(sweep.rglob(FRAME_NAME))) < 2:
        time.sleep(0.2)
    time.sleep(1.0)  # inside width 64's slow build now
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert len(list(sweep.rglob(FRAME_NAME))) == 2
    assert not [p for p in sweep.rglob("*") if p.name.endswith(".tmp")]
    killed = [json.loads(p.read_text()) for p in sweep.rglob("job.json") if "width=64" in str(p)]
    assert killed and killed[0]["status"] == "interrupted"
    partial = aggregate(sweep)
    assert [p.status for p in partial.problems] == ["interrupted"] and partial.widths == [16, 32]
    r = run_cli(*args, cwd=tmp_path)  # same command, no longer slow: only width 64 runs
    assert r.returncode == 0, r.stderr[-2000:]
    assert "coordcheck: report" in r.stdout and aggregate(sweep).widths == [16, 32, 64]
    logs = {p.parent.name: p.read_text() for p in sweep.rglob("coordcheck.log")}
    assert sum("already done" in text for text in logs.values()) == 2


def test_sigterm_during_a_job_is_unwound(tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}", "COORDCHECK_TEST_SLOW": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "coordcheck", *MLP_TINY, "model._target_=cli_builders.slow",
                             "width=64", f"hydra.run.dir={run}"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not (run / "job.json").exists():
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert json.loads((run / "job.json").read_text())["status"] == "interrupted"
    assert not (run / FRAME_NAME).exists() and not list(run.glob("*.tmp"))


BAD_COMMAND_LINE = [  # caught when the command line is composed, before Hydra runs anything (issue 20)
    (["model=foo"], "unknown model 'foo': choose one of custom, gpt, hf, mlp"),
    (["report.tol=abc"], "report.tol: must be a number > 0 (got 'abc')"),
    (["width=0"], "width must be a positive integer, got 0"),
    (["width=abc"], "width must be a positive integer, got 'abc'"),
    (["base_width=0"], "base_width must be a positive integer, got 0"),
    (["model._target_=nowhere.build"], "model._target_=nowhere.build: module 'nowhere' not found"),
    (["model._target_=coordcheck.setup.models.build"], "'coordcheck.setup.models' has no attribute 'build'"),
    (["model._target_=cli_builders.no_width"], "has no `width` parameter"),
    (["steps=0"], "steps must be an integer >= 1, got 0"),
    (["lr=-1"], "lr must be a positive number"),
    (["seeds=0"], "seeds must be >= 1, got 0"),
    (["threads=0"], "threads must be a positive integer or auto, got 0"),
    (["loss=foo"], "loss must be null (cross-entropy) or model (the loss the model returns), got 'foo'"),
    (["model=custom"], "model._target_ has no value: set it on the command line"),
    (["width=256,512,1024"], "width=256,512,1024 is a sweep: add --multirun"),
    (["width=[256,512,1024]"], "width=[256,512,1024] is a list, not one width: a sweep over width is written "
                               "width=256,512,1024 --multirun"),
    (["lr=[0.01,0.1]"], "lr=[0.01,0.1] is a list, not one lr"),
]
BAD_JOB = [  # only the job can tell (it builds the model, feeds it data): recorded in its job.json
    (["width=66"], "width 66 is not divisible by n_head=4"),
    (["model=custom", "model._target_=cli_builders.not_a_module", "data=mlp"], "returned str, not an nn.Module"),
    (["model=mlp", "data.dim=5"], "data does not fit the model"),
    (["model=custom", "model._target_=cli_builders.raises_in_forward", "data=mlp", "parametrization=none"],
     "the model raised an error in (root) (TypeError"),
]
TRAIN_LESS = ["progress=false", "seeds=1", "steps=1"]


@pytest.mark.parametrize("args,message", BAD_COMMAND_LINE, ids=[" ".join(a) for a, _ in BAD_COMMAND_LINE])
def test_bad_command_line_is_one_line_before_any_job(monkeypatch, capsys, tmp_path, args, message):
    argv = [*args, *(a for a in TRAIN_LESS if a.split("=")[0] not in " ".join(args))]
    with pytest.raises(CoordCheckError) as e:  # what app.run_command checks, in its order, before Hydra runs
        check_choices(argv)
        check_command_line(argv)
    assert message in str(e.value) and "\n" not in str(e.value)
    assert run_in_process(monkeypatch, *argv, f"hydra.run.dir={tmp_path / 'run'}") == 2  # the CLI, as a user runs it
    out, err = capsys.readouterr()
    assert not out and err == f"coordcheck: error: {e.value}\n"  # one line, and only it
    assert not (tmp_path / "run").exists()  # no job ran, not even its directory was made


SWEPT_MISTAKES = [  # issue 20: these trained the good widths first, then exited 1
    (["width=0,256"], "width must be a positive integer, got 0"),
    (["lr=0.01,-1"], "lr must be a positive number, got -1"),
    (["steps=0"], "steps must be an integer >= 1, got 0"),
    (["model._target_=nowhere.build"], "model._target_=nowhere.build: module 'nowhere' not found"),
    (["model._target_=coordcheck.setup.models.gpt,nowhere.build"], "model._target_=nowhere.build: module 'nowhere'"),
    (["model=gpt,custom"], "model._target_ has no value"),  # each option of a swept group is composed
    (["width=[256,512]"], "width=[256,512] is a list, not one width: a sweep over width is written width=256,512"),
    (["+experiment=sp_vs_mup", 'hydra.sweeper.params.width="0,128"'], "width must be a positive integer, got 0"),
    (["seeds=1,0"], "seeds must be >= 1, got 0"),
    (["base_width=64,-8"], "base_width must be a positive integer, got -8"),
    # issue 39: a builder keyword that does not exist, named before a sweep folder is made (it failed every job)
    (["model=custom", "model._target_=cli_builders.no_readout", "data=mlp", "+model.widht=3"],
     "model.widht: cli_builders.no_readout takes no keyword 'widht' (did you mean model.width?) (it takes width)"),
    (["model=custom", "model._target_=coordcheck.testing.hand_gpt.build", "+model.n_layers=3"],
     "model.n_layers: coordcheck.testing.hand_gpt.build (or what it hands its keywords to) takes no keyword"),
]


@pytest.mark.parametrize("args,message", SWEPT_MISTAKES, ids=[" ".join(a) for a, _ in SWEPT_MISTAKES])
def test_a_mistake_in_a_sweep_is_one_line_before_any_job(monkeypatch, capsys, tmp_path, args, message):
    sweep = tmp_path / "sweep"
    widths = [] if "width" in " ".join(args) else ["width=16,32"]  # the good widths, which must not train
    code = run_in_process(monkeypatch, "--multirun", *TRAIN_LESS, *widths, *args, f"hydra.sweep.dir={sweep}")
    out, err = capsys.readouterr()
    assert code == 2 and not out, out[-1500:]
    assert err.startswith("coordcheck: error: ") and message in err and len(err.splitlines()) == 1, err
    assert not sweep.exists()  # no job ran: nothing trained, nothing written


def test_multirun_anywhere_on_the_command_line_is_put_after_the_overrides():
    """The README's "add parametrization=sp to the command" appended after --multirun (issue 39): Hydra's argparse
    refuses a flag between overrides, so the command line puts it after them."""
    from coordcheck.app.overrides import multirun_last

    assert multirun_last(["width=16,32", "--multirun", "steps=1"]) == ["width=16,32", "steps=1", "--multirun"]
    assert multirun_last(["-m", "width=16,32"]) == ["width=16,32", "-m"]
    assert multirun_last(["--cfg", "job", "-m", "x=1"]) == ["--cfg", "job", "x=1", "-m"]  # a flag keeps its value
    assert multirun_last(["x=1", "steps=2"]) == ["x=1", "steps=2"]
    check_command_line(multirun_last(["width=16,32", "--multirun", "steps=1"]))


@pytest.mark.slow
def test_an_override_after_multirun_runs(monkeypatch, capsys, tmp_path):
    code = run_in_process(monkeypatch, "model=mlp", "width=16,32,64", "--multirun", "parametrization=sp", "steps=2",
                          "seeds=1", "progress=false", "report.figures=false", f"hydra.sweep.dir={tmp_path}")
    out, err = capsys.readouterr()
    assert code == 0 and "error" not in err, err[-2000:]
    assert (tmp_path / "report" / "report.json").exists() and "parametrization=sp" in out


@pytest.mark.parametrize("args,message", BAD_JOB, ids=[" ".join(a) for a, _ in BAD_JOB])
def test_bad_input_in_a_job_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path, args, message):
    check_choices(args)  # composes: only the job can tell
    check_command_line(args)
    code = run_in_process(monkeypatch, *args, *TRAIN_LESS, f"hydra.run.dir={tmp_path / 'run'}")
    out, err = capsys.readouterr()
    assert code == 2, err[-1500:]
    assert len(err.splitlines()) == 1 and err.startswith("coordcheck: error: ") and message in err, err[-1500:]
    assert "[ERROR]" not in out  # the error is printed once, not logged to the console too ...
    assert "[ERROR] - width=" in (tmp_path / "run" / "coordcheck.log").read_text()  # ... and kept in the job's log
    job = json.loads((tmp_path / "run" / JOB_NAME).read_text())
    assert job["status"] == "failed" and message in job["error"] and "traceback" not in job


@pytest.mark.slow
def test_corrupt_and_foreign_files_in_a_sweep_are_listed(capsys, sweep_copy):
    sweep = sweep_copy
    (sweep / "junk").mkdir()
    (sweep / "junk" / FRAME_NAME).write_bytes(b"\x00not parquet")
    (sweep / "foreign").mkdir()
    pd.DataFrame({"x": [1, 2]}).to_parquet(sweep / "foreign" / FRAME_NAME)
    assert report.main([str(sweep), "--no-figures"]) == 0
    out = capsys.readouterr().out
    assert "job junk corrupt" in out and "job foreign corrupt" in out
    listed = json.loads((sweep / "report" / "report.json").read_text())["jobs"]
    assert {p["job"]: p["status"] for p in listed["problems"]} == {"junk": "corrupt", "foreign": "corrupt"}
    assert len(listed["ok"]) == 3


@pytest.mark.slow
def test_override_with_a_path_stays_inside_the_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli(*MLP_TINY, "width=16,32,64", "+note=../../../escape", f"hydra.sweep.dir={sweep}", "--multirun",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-1000:]
    frames = list(tmp_path.rglob(FRAME_NAME))
    assert len(frames) == 3 and all(f.parent.parent == sweep for f in frames), frames


# -- property-based ----------------------------------------------------------------------
@pytest.mark.slow  # hypothesis: 40 drawn configurations, the valid ones trained
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(widths=st.lists(st.one_of(st.integers(-4, 48), st.floats(-2, 40), st.text(max_size=3)), min_size=0, max_size=4),
       steps=st.one_of(st.integers(-1, 2), st.floats(0, 2)),
       seeds=st.one_of(st.integers(-1, 2), st.lists(st.integers(0, 3), max_size=2)),
       base_width=st.one_of(st.integers(-2, 32), st.none()))
def test_config_surface_either_runs_or_says_what_to_change(widths, steps, seeds, base_width):
    from coordcheck import coord_check
    from coordcheck.setup.models import mlp

    kwargs = dict(steps=steps, seeds=seeds, progress=False, depth=2, in_dim=4, out_dim=3,
                  data=(__import__("torch").randn(4, 4), __import__("torch").randint(0, 3, (4,))))
    if base_width is not None:
        kwargs["base_width"] = base_width
    try:
        result = coord_check(mlp, widths, **kwargs)
    except CoordCheckError as e:
        assert "\n" not in str(e) and str(e)
        return
    assert set(result.frame["width"]) == {int(w) for w in widths}
    if len({int(w) for w in widths}) < 3:  # rule 8: fewer widths than min_widths never pass
        assert not result.passed, result.verdict.reason


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(
    st.binary(max_size=200),
    st.builds(lambda cols: pd.DataFrame({c: [1, 2] for c in cols}),
              st.lists(st.sampled_from(["width", "value", "step", "module", "x", "stat"]), max_size=6, unique=True)),
))
def test_frame_reader_never_crashes_on_foreign_input(tmp_path_factory, payload):
    path = tmp_path_factory.mktemp("f") / FRAME_NAME
    if isinstance(payload, bytes):
        path.write_bytes(payload)
    else:
        payload.to_parquet(path)
    with pytest.raises(FrameError):
        read_frame(path)
    result = aggregate(path.parent)  # a sweep holding only this file: listed as corrupt, no crash
    assert result.frame.empty and result.problems[0].status == "corrupt"
