"""Experiment overlays (``conf/experiment/``): composed in-process, and one tiny sweep through the real CLI."""

import json

import pytest
from conftest import run_cli
from hydra import compose, initialize_config_dir

from coordcheck.app.config import CONF_DIR, compose_config


def test_sp_vs_mup_overlay_only_adds_the_sweep():
    cfg, base = compose_config(["+experiment=sp_vs_mup"]), compose_config([])
    assert cfg == base  # every job value is config.yaml's: the overlay holds only what differs
    assert (cfg.model._target_, cfg.optimizer._target_, cfg.data._target_) == (
        "coordcheck.setup.models.gpt", "coordcheck.setup.optim.adam", "coordcheck.setup.data.tokens")
    assert (cfg.lr, cfg.steps, cfg.seeds, cfg.base_width) == (0.01, 10, 3, 128)  # experiments/sp_vs_mup.py's run
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        params = compose("config", overrides=["+experiment=sp_vs_mup"], return_hydra_config=True).hydra.sweeper.params
    assert dict(params) == {"parametrization": "mup,sp", "width": "128,256,512,1024"}


@pytest.mark.slow
def test_sp_vs_mup_sweep_fails_sp_only(tmp_path):
    sweep = tmp_path / "sweep"
    r = run_cli("+experiment=sp_vs_mup", "width=64,128,256", "steps=2", "seeds=1", "progress=false",
                "report.figures=false", f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert len(list(sweep.rglob("frame.parquet"))) == 6  # the overlay's parametrizations x the command line's widths
    report = json.loads((sweep / "report" / "report.json").read_text())
    assert report["widths"] == [64, 128, 256]
    status = {c["parametrization"]: c["status"] for c in report["configurations"]}
    # after 2 steps on 1 seed, muP passes in 5 of 5 seed sets but with 0.04 to spare (at widths 16-64: 0.00, 3-6
    # one-step transients, and a series 0.07 from failing): it never fails, its nearest series 0.16 from it; SP fails
    # with its interval 0.66 or more past the band (experiments/margins.py)
    assert status["sp"] == "fail" and status["mup"] != "fail" and report["status"] == "fail"
