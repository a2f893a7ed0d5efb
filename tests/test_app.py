"""The Hydra app: real configs composed, and the real CLI in a subprocess."""

import json

import pytest
from conftest import run_cli
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

from coordcheck.app.config import CONF_DIR
from coordcheck.app.jobs import config_id
from coordcheck.core.frame import COLUMNS, read_frame

TINY = ["seeds=2", "steps=2", "progress=false", "model.n_layer=1", "model.context=8", "data.batch_size=2",
        "data.seq_len=8"]


@pytest.mark.parametrize("model", ["gpt", "mlp"])
@pytest.mark.parametrize("parametrization", ["mup", "sp"])
@pytest.mark.parametrize("optimizer", ["adam", "adamw", "sgd"])
def test_every_config_group_composes_and_instantiates(model, parametrization, optimizer):
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose("config", overrides=[f"model={model}", f"parametrization={parametrization}",
                                           f"optimizer={optimizer}"])
    assert cfg.data._target_.endswith({"gpt": "tokens", "mlp": "gaussian"}[model])
    assert cfg.optimizer.mu == (parametrization == "mup")
    build = instantiate(cfg.model)
    assert callable(build) and instantiate(cfg.parametrization).name == parametrization


def test_config_id_ignores_width_only():
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        a = compose("config", overrides=["width=64"])
        b = compose("config", overrides=["width=128"])
        c = compose("config", overrides=["width=64", "lr=0.1"])
    assert config_id(a) == config_id(b) != config_id(c)


@pytest.mark.slow
def test_multirun_writes_one_frame_per_width(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("width=16,32,64", *TINY, f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    frames = sorted(sweep.rglob("frame.parquet"))
    assert len(frames) == 3 and all("width=" in f.parent.name and "progress" not in f.parent.name for f in frames)
    widths = set()
    for f in frames:
        df = read_frame(f)
        assert list(df.columns) == list(COLUMNS)
        assert df["width"].nunique() == 1 and set(df["seed"]) == {0, 1} and set(df["step"]) == {0, 1, 2}
        widths |= set(df["width"])
        job = json.loads((f.parent / "job.json").read_text())
        assert job["status"] == "ok" and job["rows"] == len(df) and job["n_params"] > 0
        assert "n_params" not in df and (f.parent / "coordcheck.log").read_text().count("done:") == 1
    assert widths == {16, 32, 64}
    assert not list(sweep.rglob("*.tmp"))
    # at widths 16-64 after 2 steps this muP GPT passes with 0.00-0.03 to spare over 5 seed sets (lm_head's delta
    # dips at step 1 only: a one-step transient, rule 4): usually, not always (experiments/margins.py). What always
    # holds: it does not fail, and the verdict printed is the one written
    status = json.loads((sweep / "report" / "report.json").read_text())["status"]
    assert status != "fail" and f"coordcheck: {status.upper()}" in r.stdout
    assert f"coordcheck: report {sweep / 'report' / 'report.md'}" in r.stdout
    report = sweep / "report"
    for name in ("coord_check", "slopes", "loss"):
        assert (report / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert (report / f"{name}.pdf").read_bytes()[:4] == b"%PDF"
    md = (report / "report.md").read_text()
    assert md.startswith(f"# muP coordinate check\n\n**Verdict: {status.upper()}**") and "![coord_check (png)]" in md
    assert "python -m coordcheck" in md and "width=16,32,64" in md  # the exact command
    assert json.loads((report / "report.json").read_text())["widths"] == [16, 32, 64]


def test_single_run_user_error_is_one_line_and_exit_2(tmp_path):
    # end to end, in a fresh interpreter as a user runs it: exit 2 and one line, no traceback (the other bad inputs
    # are checked in this process: test_resilience.py)
    r = run_cli("width=66", *TINY, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr == ("coordcheck: error: width 66 is not divisible by n_head=4: use widths that are multiples of 4 "
                        "(or change n_head)\n")
    assert "[ERROR]" not in r.stdout and "[ERROR]" in (tmp_path / "run" / "coordcheck.log").read_text()  # said once
    assert json.loads((tmp_path / "run" / "job.json").read_text())["status"] == "failed"


def test_a_mistake_in_a_sweep_is_exit_2_and_one_line_before_any_job(tmp_path):
    # end to end, in a fresh interpreter (issue 20: width=0,16,32 trained 16 and 32, then exited 1); the other
    # mistakes are checked in this process: test_resilience.py
    r = run_cli("--multirun", "width=16,0,32", *TINY, f"hydra.sweep.dir={tmp_path / 'sweep'}", cwd=tmp_path)
    assert r.returncode == 2 and not r.stdout, r.stdout[-1000:]
    assert r.stderr == "coordcheck: error: width must be a positive integer, got 0: use width >= 1\n"
    assert not (tmp_path / "sweep").exists()


@pytest.mark.slow
def test_multirun_keeps_good_widths_when_one_fails(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("width=16,30,32", *TINY, f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 1
    assert len(list(sweep.rglob("frame.parquet"))) == 2
    assert "not divisible by n_head=4" in r.stdout + r.stderr


@pytest.mark.slow
def test_mlp_sweep_passes_end_to_end(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("model=mlp", "width=64,128,256", "seeds=2", "steps=4", "progress=false", "report.figures=false",
                f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "coordcheck: PASS" in r.stdout
    gate = run_cli(str(sweep), "--strict", "--no-figures", cwd=tmp_path, module="coordcheck.report")
    assert gate.returncode == 0 and "PASS" in gate.stdout
    models = json.loads((sweep / "report" / "report.json").read_text())["models"]
    assert [m["width"] for m in models] == [64, 128, 256] and len({m["fingerprint"] for m in models}) == 3  # rule 9


@pytest.mark.slow
def test_a_builder_that_ignores_width_fails_end_to_end(tmp_path):
    """Issue 20: a builder that swallows ``width`` in ``**kw`` passed, exit 0, with the same model at every width."""
    sweep = tmp_path / "sweep"
    reason = ("the builder ignores `width`: every width (16, 32, 64) built the same 1930-parameter model — make "
              "build(width=...) set the layer sizes")
    r = run_cli("model=custom", "model._target_=cli_builders.build_no_width", "data=gaussian", "data.dim=16",
                "width=16,32,64", "seeds=1", "steps=3", "progress=false", "report.figures=false", "report.strict=true",
                f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]
    assert f"coordcheck: FAIL — {reason}" in r.stdout.splitlines()
    jobs = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/job.json"))]
    assert [j["n_params"] for j in jobs] == [1930] * 3 and len({json.dumps(j["shapes"]) for j in jobs}) == 1
    gate = run_cli(str(sweep), "--strict", "--no-figures", cwd=tmp_path, module="coordcheck.report")  # by hand, later
    assert gate.returncode == 1 and f"coordcheck: FAIL — {reason}" in gate.stdout
