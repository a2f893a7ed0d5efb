"""Depth plumbing (``coordcheck.setup.depth`` through the engine and the command line): CompleteP's Table 1 factors of
``scale_optimizer`` on the built-in GPT under muP, the identity at ``depth == base_depth``, and a depth sweep's job
directories, frames, resume, failures and launchers as a width sweep has them."""

import json
import shutil

import pandas as pd
import pytest

from conftest import run_cli
from coordcheck import coord_check
from coordcheck.setup import models
from coordcheck.setup.depth import DEPTH_SCALINGS, Depth, not_adam, scale_optimizer
from coordcheck.core.errors import CoordCheckError
from coordcheck.core.frame import FRAME_NAME, read_frame
from coordcheck.setup.optim import adam, with_mu
from coordcheck.setup.parametrization import Mup
from coordcheck.run.sweep import JOB_NAME
from coordcheck.run.train import build_on

pytestmark = pytest.mark.usefixtures("one_thread")

OUTSIDE = ("wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight")  # embeddings, final norm, readout
INSIDE = ("blocks.0.attn.c_k.weight", "blocks.0.mlp.c_fc.weight", "blocks.1.attn.c_proj.weight",  # hidden matrices
          "blocks.0.ln_1.weight", "blocks.1.ln_2.bias")  # in-block norms


def lr_eps(scaling: str, depth: int) -> dict[str, tuple[float, float]]:
    """name -> (lr, eps) of the built-in GPT at width 64 (base 32) under muP + MuAdam, depth scaled by ``scaling``."""
    mup, d = Mup(), Depth(depth, 2, DEPTH_SCALINGS[scaling])
    mup.prepare(d.builder(models.gpt), 32)
    model, opt = build_on("cpu", models.gpt, 64, 0, mup, 32, with_mu(adam, True), 1e-2, depth=d)
    group = {id(p): (g["lr"], g["eps"]) for g in opt.param_groups for p in g["params"]}
    assert len(group) == len(list(model.parameters()))
    return {n: group[id(p)] for n, p in model.named_parameters()}


@pytest.mark.parametrize("scaling, alpha", [("depth_mup", 0.5), ("completep", 1.0)])
def test_scale_optimizer_gives_block_parameters_table_1s_depth_factors_under_mup(scaling, alpha):
    base, deep = lr_eps(scaling, 2), lr_eps(scaling, 8)  # m_L = 4
    assert base == lr_eps("none", 2)  # at base_depth: no factor
    for name in INSIDE:
        assert deep[name][0] == pytest.approx(base[name][0] * 4 ** (alpha - 1), rel=1e-12), name
        assert deep[name][1] == pytest.approx(base[name][1] * 4 ** -alpha, rel=1e-12), name
    for name in OUTSIDE:
        assert deep[name] == base[name], name  # out of the blocks: untouched
    # muP's width factor is kept under the depth factor: MuAdam's hidden lr is lr * base_width / width
    assert deep["blocks.0.attn.c_k.weight"] == pytest.approx((1e-2 * 0.5 * 4 ** (alpha - 1), 1e-8 * 4 ** -alpha))
    assert deep["blocks.0.ln_1.weight"] == pytest.approx((1e-2 * 4 ** (alpha - 1), 1e-8 * 4 ** -alpha))
    assert deep["wte.weight"] == (1e-2, 1e-8)
    assert set(deep) - set(base) == {n.replace("blocks.1.", f"blocks.{i}.") for i in range(2, 8)
                                     for n in base if n.startswith("blocks.1.")}


def test_scale_optimizer_refuses_sgd_in_the_command_lines_words():
    import torch

    model = models.gpt(32, n_layer=4)
    with pytest.raises(CoordCheckError) as e:
        scale_optimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, DEPTH_SCALINGS["completep"], 4, 2)
    assert str(e.value) == str(not_adam(DEPTH_SCALINGS["completep"], "SGD"))


TINY_API = dict(width=32, steps=3, seeds=[0, 1], progress=False, context=8, data="tokens")


def _values(frame: pd.DataFrame) -> pd.DataFrame:
    keys = ["width", "seed", "step", "module", "tensor", "stat"]
    return frame[[*keys, "value"]].sort_values(keys).reset_index(drop=True)


def test_the_gpt_at_base_depth_under_depth_scaling_is_the_unscaled_one_bit_for_bit():
    from coordcheck.setup.data import tokens

    batch = tokens(seq_len=8, batch_size=2)
    run = {**TINY_API, "data": batch}
    unscaled = coord_check(models.gpt, depths=[2], depth_scaling="none", **run).frame
    assert (unscaled["depth"] == 2).all()
    for scaling in ("depth_mup", "completep"):
        scaled = coord_check(models.gpt, depths=[2], depth_scaling=scaling, **run).frame
        pd.testing.assert_frame_equal(_values(scaled), _values(unscaled), check_exact=True)
    own = coord_check(models.gpt, [32], **{k: v for k, v in run.items() if k != "width"}).frame  # no depth at all
    pd.testing.assert_frame_equal(_values(own), _values(unscaled), check_exact=True)
    assert (own["depth"] == 0).all()
    deeper = coord_check(models.gpt, depths=[4], depth_scaling="completep", **run).frame
    assert not _values(deeper).equals(_values(unscaled))  # the comparison can fail


# -- the command line ------------------------------------------------------------------------------------------------

GPT_DEPTHS = ["depth=2,4", "width=32", "seeds=1", "steps=2", "threads=1", "progress=false", "model.context=8",
              "data.seq_len=8", "data.batch_size=2", "report.figures=false", "depth_scaling=completep"]


def _frames(sweep):
    return pd.concat([read_frame(f) for f in sorted(sweep.rglob(FRAME_NAME))], ignore_index=True) \
        .sort_values(["depth", "seed", "step", "module", "tensor", "stat"]).reset_index(drop=True)


@pytest.fixture(scope="module")
def depth_sweep(tmp_path_factory):
    """``GPT_DEPTHS`` run once with the basic launcher; tests take a copy."""
    cwd = tmp_path_factory.mktemp("depth")
    r = run_cli(*GPT_DEPTHS, f"hydra.sweep.dir={cwd / 'sweep'}", "--multirun", cwd=cwd)
    assert r.returncode == 0, r.stderr[-2000:]
    return cwd / "sweep"


@pytest.mark.slow
def test_a_depth_sweep_names_its_jobs_by_depth_and_its_frames_share_a_family(depth_sweep):
    frames = {f.parent.name: read_frame(f) for f in depth_sweep.rglob(FRAME_NAME)}
    assert len(frames) == 2
    for name, frame in frames.items():
        (depth,) = frame["depth"].unique()
        assert f"depth={depth}" in name.split(","), name
        facts = json.loads((depth_sweep / name / JOB_NAME).read_text())
        assert facts["status"] == "ok" and facts["depth"] == depth
        assert (facts["base_depth"], facts["depth_scaling"], facts["depth_alpha"]) == (2, "completep", 1.0)
        assert {m for m in frame["module"] if m.startswith("blocks.") and m.count(".") == 1} == \
            {f"blocks.{i}" for i in range(depth)}  # the model has that many blocks
    both = _frames(depth_sweep)
    assert sorted(both["depth"].unique()) == [2, 4]
    assert both["family_id"].nunique() == 1 and both["config_id"].nunique() == 2


@pytest.mark.slow
def test_a_depth_sweep_resumes_without_redoing_finished_jobs(depth_sweep, tmp_path):
    sweep = shutil.copytree(depth_sweep, tmp_path / "sweep")
    first = {f.parent.name: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)}
    again = run_cli(*GPT_DEPTHS, f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert {f.parent.name: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)} == first
    log = "".join(p.read_text() for p in sweep.rglob("coordcheck.log"))
    assert log.count("already done with the same configuration") == 2
    wider = run_cli(*[a.replace("depth=2,4", "depth=2,4,8") for a in GPT_DEPTHS], f"hydra.sweep.dir={sweep}",
                    "--multirun", cwd=tmp_path)  # one more depth: only it runs
    assert wider.returncode == 0, wider.stderr[-2000:]
    frames = {f.parent.name: f.stat().st_mtime_ns for f in sweep.rglob(FRAME_NAME)}
    assert len(frames) == 3 and {k: frames[k] for k in first} == first


@pytest.mark.slow
def test_a_failing_depth_is_recorded_and_the_other_depths_frames_survive(tmp_path):
    sweep = tmp_path / "sweep"
    args = [a.replace("depth=2,4", "depth=2,4,8").replace("depth_scaling=completep", "depth_scaling=none")
            for a in GPT_DEPTHS]
    r = run_cli(*args, "model._target_=cli_builders.deep_flaky", f"hydra.sweep.dir={sweep}", "--multirun",
                cwd=tmp_path)
    assert r.returncode == 1, r.stderr[-2000:]  # a failed job fails the command, after the other depths ran
    assert "simulated: CUDA out of memory at depth 4" in r.stdout
    assert sorted(read_frame(f)["depth"].iloc[0] for f in sweep.rglob(FRAME_NAME)) == [2, 8]
    jobs = {p.parent.name: json.loads(p.read_text()) for p in sweep.rglob(JOB_NAME)}
    failed = [name for name, job in jobs.items() if job["status"] != "ok"]
    assert len(failed) == 1 and "depth=4" in failed[0].split(",")
    assert "simulated: CUDA out of memory at depth 4" in jobs[failed[0]]["error"]


@pytest.mark.slow
def test_joblib_runs_a_depth_sweep_with_the_basic_launchers_frames(depth_sweep, tmp_path):
    sweep = tmp_path / "joblib"
    r = run_cli(*GPT_DEPTHS, "hydra/launcher=joblib", f"hydra.sweep.dir={sweep}", "--multirun", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    pd.testing.assert_frame_equal(_frames(sweep), _frames(depth_sweep))
    assert json.loads((sweep / "report" / "report.json").read_text())["status"] == \
        json.loads((depth_sweep / "report" / "report.json").read_text())["status"]
