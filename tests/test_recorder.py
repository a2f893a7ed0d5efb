"""The recorder for any training loop (issue 38): ``coordcheck.record(model, width=..., out=...)`` in a loop of the
user's own gives coord_check's frame where the loops coincide, writes a job directory atomically (a run that stops
early keeps what it recorded, marked), detaches its hooks after its last step; ``python -m coordcheck.report`` judges
runs written by separate processes as one sweep and refuses, one line each, runs that cannot be compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import coordcheck
from coordcheck.core.errors import CoordCheckError
from coordcheck.report.command import main as report_main

ROOT = Path(__file__).resolve().parents[1]
BASE = 64
STEPS = 4
KEYS = ["width", "step", "module", "tensor", "stat"]


class MLP(nn.Module):
    """muP by hand, as people write it: hidden init ∝ fan_in^-1/2, a zero readout behind base_width/width."""

    def __init__(self, width: int, base_width: int = BASE, d_in: int = 32, d_out: int = 10):
        super().__init__()
        self.inp, self.hidden, self.head = nn.Linear(d_in, width), nn.Linear(width, width), nn.Linear(width, d_out)
        self.init_weights()
        self.mult = base_width / width

    def init_weights(self) -> None:
        """muP's init; a model built on the meta device calls it once its parameters exist (torchtitan's way)."""
        nn.init.normal_(self.hidden.weight, std=self.hidden.in_features ** -0.5)
        nn.init.zeros_(self.head.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.hidden(F.relu(self.inp(x))))) * self.mult


def groups(model: MLP, lr: float, width: int, base_width: int = BASE, unscaled: bool = False) -> list[dict]:
    """muP's AdamW groups: the hidden matrix at lr * base_width / width (``unscaled``: at lr, the planted fault)."""
    hidden = [model.hidden.weight]
    rest = [p for p in model.parameters() if p is not model.hidden.weight]
    return [{"params": rest, "lr": lr}, {"params": hidden, "lr": lr if unscaled else lr * base_width / width}]


class WarmupAdamW(torch.optim.AdamW):
    """AdamW that steps its own linear warmup after each update: coord_check's loop runs the schedule too."""

    def __init__(self, params, warmup: int):
        super().__init__(params, weight_decay=0.01)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self, lambda s: min(1.0, (s + 1) / warmup))

    def step(self, closure=None):
        loss = super().step(closure)
        self.schedule.step()
        return loss


def probe_batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)


def hand_loop(width: int, out: Path, *, accumulate: int = 1, clip: float | None = None, warmup: int = 1,
              steps: int = STEPS, unscaled: bool = False, **record_kw) -> None:
    """The user's loop: accumulation over ``accumulate`` micro-batches, clipping, a warmup schedule, AdamW."""
    torch.manual_seed(0)
    model = MLP(width)
    opt = torch.optim.AdamW(groups(model, 1e-2, width, unscaled=unscaled), weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup))
    x, y = probe_batch()
    with coordcheck.record(model, width=width, out=out, optimizer=opt, batch=(x, y), steps=steps,
                           **record_kw) as rec:
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            for xs, ys in zip(x.chunk(accumulate), y.chunk(accumulate)):
                (F.cross_entropy(model(xs), ys) / accumulate).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            schedule.step()
            rec.step()


def coord_check_frame(widths, *, clip: float | None = None, warmup: int = 1):
    def factory(model, lr, width, base_width):
        return WarmupAdamW(groups(model, lr, width, base_width), warmup)

    return coordcheck.coord_check(MLP, widths, parametrization="none", optimizer=factory, lr=1e-2, steps=STEPS,
                                  seeds=[0], data=probe_batch(), base_width=BASE, grad_clip=clip,
                                  tensors=("out", "delta", "in", "own", "eps"), progress=False)


def runs_frame(paths) -> pd.DataFrame:
    return pd.concat([pd.read_parquet(Path(p) / "frame.parquet") for p in paths], ignore_index=True)


def test_a_hand_written_loop_gives_coord_checks_frame_and_verdict(tmp_path):
    """Accumulation 2, a warmup schedule, clipping and AdamW, against coord_check's loop doing the same."""
    widths = [64, 128, 256]
    expected = coord_check_frame(widths, clip=1.0, warmup=3)
    for w in widths:
        hand_loop(w, tmp_path / f"w{w}", accumulate=2, clip=1.0, warmup=3)
    got = runs_frame(tmp_path / f"w{w}" for w in widths)
    assert set(got["tensor"]) == {"out", "delta", "in", "own", "eps", "loss", "weight", "update", "gain"}
    both = expected.frame.merge(got, on=KEYS, suffixes=("_cc", "_rec"), validate="one_to_one")
    assert len(both) == len(expected.frame) == len(got)
    scale = both.groupby(["width", "step", "module", "tensor"])["value_cc"].transform(lambda v: v.abs().max())
    gap = (both["value_rec"] - both["value_cc"]).abs() - (1e-6 * both["value_cc"].abs() + 1e-9 + 1e-6 * scale)
    assert (gap <= 0).all(), both.loc[gap.nlargest(5).index, [*KEYS, "value_cc", "value_rec"]]
    assert report_main([*(str(tmp_path / f"w{w}") for w in widths), "--no-figures"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["status"] == expected.verdict.status == "pass"
    assert sorted(report["widths"]) == widths


def test_the_job_directory_and_its_facts(tmp_path):
    hand_loop(64, tmp_path / "w64", parametrization="mup", model="mlp", lr=1e-2, team="a note of mine")
    job = json.loads((tmp_path / "w64" / "job.json").read_text())
    assert job["status"] == "ok" and job["width"] == 64 and job["steps"] == list(range(STEPS + 1))
    assert job["identity"] == {"model": "mlp", "parametrization": "mup", "optimizer": "AdamW", "lr": 0.01}
    hand_loop(64, tmp_path / "plain")  # no facts: the learning rate is not the run's to guess (nanochat's all scale)
    assert json.loads((tmp_path / "plain" / "job.json").read_text())["identity"] == {
        "model": "MLP", "parametrization": "none", "optimizer": "AdamW", "lr": 0.0}
    assert job["facts"]["team"] == "a note of mine" and len(job["probe"]["hash"]) == 16
    assert job["audit"]["params"] and job["shapes"] and job["modules"]
    frame = pd.read_parquet(tmp_path / "w64" / "frame.parquet")
    assert sorted(frame["step"].unique()) == list(range(STEPS + 1)) and (frame["model"] == "mlp").all()


def test_hooks_are_gone_after_the_last_step_and_the_rng_is_the_users(tmp_path):
    torch.manual_seed(0)
    model = MLP(64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = probe_batch()
    with coordcheck.record(model, width=64, out=tmp_path / "w", optimizer=opt, batch=(x, y), steps=2) as rec:
        assert any(m._forward_hooks for m in model.modules())
        torch.manual_seed(5)
        before = torch.rand(1)
        torch.manual_seed(5)
        for i in range(5):
            F.cross_entropy(model(x), y).backward()
            opt.step()
            rec.step()
            if i == 1:
                assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
        assert rec.updates == 5
    assert torch.rand(1) == before  # the probe forwards drew nothing from the user's RNG
    assert sorted(pd.read_parquet(tmp_path / "w" / "frame.parquet")["step"].unique()) == [0, 1, 2]


def test_a_run_that_stops_early_keeps_what_it_recorded_marked(tmp_path):
    with pytest.raises(RuntimeError, match="node lost"):
        torch.manual_seed(0)
        model = MLP(64)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        with coordcheck.record(model, width=64, out=tmp_path / "w64", optimizer=opt, batch=probe_batch()) as rec:
            for i in range(3):
                opt.step()
                rec.step()
            raise RuntimeError("node lost")
    job = json.loads((tmp_path / "w64" / "job.json").read_text())
    assert job["status"] == "stopped" and "stopped after step 3 of 10" in job["error"] and "node lost" in job["error"]
    assert sorted(pd.read_parquet(tmp_path / "w64" / "frame.parquet")["step"].unique()) == [0, 1, 2, 3]
    assert not list((tmp_path / "w64").glob("*.tmp*"))  # nothing half-written


def test_a_model_that_fails_its_first_probe_keeps_no_hook_and_is_marked_stopped(tmp_path):
    model = MLP(64)
    with pytest.raises(CoordCheckError, match="data does not fit the model"):
        with coordcheck.record(model, width=64, out=tmp_path / "w", batch=(torch.randn(4, 7), torch.zeros(4).long())):
            pass
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    job = json.loads((tmp_path / "w" / "job.json").read_text())
    assert job["status"] == "stopped" and "data does not fit" in job["error"]


def test_dropout_draws_the_same_masks_at_every_probe(tmp_path):
    """With a learning rate of 0 nothing changes: delta is exactly 0 however much RNG the loop draws between."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Dropout(0.5), nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    with coordcheck.record(model, width=64, out=tmp_path / "w", optimizer=opt, batch=probe_batch(), steps=3) as rec:
        for _ in range(3):
            torch.rand(100)  # the user's loop draws from the RNG
            opt.step()
            rec.step()
    frame = pd.read_parquet(tmp_path / "w" / "frame.parquet")
    delta = frame[(frame["tensor"] == "delta") & (frame["stat"] == "absmax")]
    assert len(delta) and (delta["value"] == 0).all()


@pytest.mark.parametrize("kw, words", [
    ({"width": 0}, "width must be a positive int"),
    ({"steps": 0}, "steps must be at least 1"),
    ({"tensors": ["out", "grad"]}, "tensors must hold out"),
    ({"optimizer": "adam"}, "optimizer must be the torch Optimizer"),
    ({"batch": "tokens"}, "batch:"),
])
def test_bad_input_is_one_line(tmp_path, kw, words):
    args = {"width": 64, "out": tmp_path / "w", **kw}
    with pytest.raises(CoordCheckError, match=words):
        with coordcheck.record(MLP(64), **args):
            pass


def _process(width: int, out: Path, unscaled: bool = False) -> subprocess.Popen:
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'tests')!r}); from test_recorder import hand_loop; "
            f"from pathlib import Path; hand_loop({width}, Path({str(out)!r}), steps=3, unscaled={unscaled})")
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.mark.slow
# unscaled: three steps of one seed leave the hidden layer's change undecided (+0.46 [-0.46, +1.37] at step 2); its
# update, measured (∝ width^+0.01 where muP's is width^-1), is named as what the undecided series would follow from
@pytest.mark.parametrize("unscaled, status", [(False, "pass"), (True, "inconclusive")])
def test_three_widths_from_three_processes_judged_as_one_sweep(tmp_path, capsys, unscaled, status):
    procs = [_process(w, tmp_path / "runs" / f"w{w}", unscaled) for w in (64, 128, 256)]
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()[-2000:]
    assert report_main([str(tmp_path / "runs" / "w*"), *(["--no-figures"] if unscaled else [])]) == 0
    report = json.loads((tmp_path / "runs" / "report" / "report.json").read_text())
    assert report["status"] == status, report["reason"]
    if unscaled:  # the planted unscaled learning-rate group, named from its measured update
        first = report["causes"][0]
        assert first["modules"] == ["hidden"] and "learning rate" in first["line"], first
    assert (tmp_path / "runs" / "report" / "report.html").exists()


def test_runs_that_cannot_be_compared_are_refused_one_line_each(tmp_path, capsys):
    hand_loop(64, tmp_path / "a")
    hand_loop(128, tmp_path / "b", steps=2)  # other steps
    torch.manual_seed(0)
    model = MLP(256)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = probe_batch()
    with coordcheck.record(model, width=256, out=tmp_path / "c", optimizer=opt, batch=(x + 1, y), steps=STEPS) as r:
        for _ in range(STEPS):
            opt.step()
            r.step()
    hand_loop(64, tmp_path / "d")  # a width again
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "job.json").write_text(json.dumps({"status": "running", "width": 512}))
    assert report_main([str(tmp_path / n) for n in "abcde"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "coordcheck.report: error: these runs cannot be judged as one sweep:"
    said = "\n".join(err[1:])
    assert f"{tmp_path / 'e'}: nothing recorded (status running" in said
    assert f"{tmp_path / 'd'}: width 64 again ({tmp_path / 'a'} has it)" in said
    assert f"{tmp_path / 'b'}: recorded steps [0, 1, 2] where {tmp_path / 'a'} has [0, 1, 2, 3, 4]" in said
    assert f"{tmp_path / 'c'}: recorded on probe batch" in said
    assert len(err) == 5


def test_runs_recorded_without_in_and_own_are_judged_alike_and_old_runs_without_facts_say_so(tmp_path):
    for w in (64, 128, 256):
        hand_loop(w, tmp_path / f"w{w}", tensors=("out", "delta"))
    assert report_main([str(tmp_path), "--no-figures"]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["status"] == "pass" and not any("the causes need" in n for n in report["notes"])
    for w in (64, 128, 256):  # a run written before the facts were measured: its frame without them
        f = tmp_path / f"w{w}" / "frame.parquet"
        df = pd.read_parquet(f)
        df[~df["tensor"].isin(["weight", "update", "gain"])].to_parquet(f, index=False)
    assert report_main([str(tmp_path), "--no-figures"]) == 0
    notes = json.loads((tmp_path / "report" / "report.json").read_text())["notes"]
    assert any("the causes need the facts measured from the weights" in n for n in notes)


@pytest.mark.slow
def test_two_processes_under_torchrun_with_fsdp2_give_the_one_process_frame(tmp_path):
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
                        str(ROOT / "tests" / "parallel" / "record_job.py"),
                        *(f"{tmp_path / 'fsdp' / f'w{w}'}:{w}" for w in (64, 128)), f"{tmp_path / 'meta'}:64:meta"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-3000:]
    for w in (64, 128):
        hand_loop(w, tmp_path / "one" / f"w{w}")
    job = json.loads((tmp_path / "fsdp" / "w64" / "job.json").read_text())
    assert job["status"] == "ok" and job["parallel"] == {"name": "record", "processes": 2}
    both = runs_frame([tmp_path / "one" / "w64", tmp_path / "one" / "w128"]).merge(
        runs_frame([tmp_path / "fsdp" / "w64", tmp_path / "fsdp" / "w128"]), on=KEYS, suffixes=("_one", "_two"),
        validate="one_to_one")
    # and the weights' facts (weight, update, gain: coordcheck.record.weights), sharded or not
    assert len(both) and set(both["tensor"]) == {"out", "delta", "in", "own", "eps", "loss", "weight", "update", "gain"}
    # built on the meta device, sharded, then init_weights(): recorded as any other run
    frame = pd.read_parquet(tmp_path / "meta" / "frame.parquet")
    assert json.loads((tmp_path / "meta" / "job.json").read_text())["status"] == "ok"
    assert sorted(frame["step"].unique()) == list(range(STEPS + 1)) and np.isfinite(frame["value"]).all()
    # the zero readout's output at step 0 is its bias, the same on every process: record.moments.pool_ranks counts
    # such a series once (a tensor replicated on each process), so its unbiased std divides by 80 - 1, not 160 - 1
    same = ((both["step"] == 0) & both["module"].isin(["head", "(root)"]) & (both["stat"] == "std")
            & (both["tensor"] == "out"))
    assert same.sum() == 4
    np.testing.assert_allclose(both.loc[same, "value_two"] / both.loc[same, "value_one"],
                               np.sqrt((80 / 79) / (160 / 159)), rtol=1e-6)
    np.testing.assert_allclose(both.loc[~same, "value_two"], both.loc[~same, "value_one"], rtol=1e-4, atol=1e-5)


def test_a_loop_under_autocast_records_the_fp32_probe(tmp_path):
    """The user's forward in bf16 autocast; the probe forward (outside it, after the update) is fp32 as a sweep's."""
    torch.manual_seed(0)
    model = MLP(64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = probe_batch()
    with coordcheck.record(model, width=64, out=tmp_path / "w", optimizer=opt, batch=(x, y), steps=3,
                           precision="bf16") as rec:
        for _ in range(3):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.step()
    frame = pd.read_parquet(tmp_path / "w" / "frame.parquet")
    assert sorted(frame["step"].unique()) == [0, 1, 2, 3] and np.isfinite(frame["value"]).all()
    assert json.loads((tmp_path / "w" / "job.json").read_text())["precision"] == "bf16"  # as the run says


def test_steps_recorded_on_the_training_batches_say_so(tmp_path):
    """rec.step(batch): the step's probe forward on the batch just trained on; the run and the report say so."""
    for w in (64, 128, 256):
        torch.manual_seed(0)
        model = MLP(w)
        opt = torch.optim.AdamW(groups(model, 1e-2, w))
        g = torch.Generator().manual_seed(3)
        with coordcheck.record(model, width=w, out=tmp_path / f"w{w}", optimizer=opt, batch=probe_batch(),
                               steps=3) as rec:
            for _ in range(3):
                x, y = torch.randn(16, 32, generator=g), torch.randint(0, 10, (16,), generator=g)
                F.cross_entropy(model(x), y).backward()
                opt.step()
                opt.zero_grad()
                rec.step(batch=(x, y))
    job = json.loads((tmp_path / "w64" / "job.json").read_text())
    assert job["data_policy"] == "training"
    assert (pd.read_parquet(tmp_path / "w64" / "frame.parquet")["data_policy"] == "training").all()
    assert report_main([str(tmp_path), "--no-figures"]) == 0
    notes = json.loads((tmp_path / "report" / "report.json").read_text())["notes"]
    assert any(n.startswith("recorded on the training batches") for n in notes)


def test_a_training_batch_of_another_shape_is_one_line_and_the_run_stopped(tmp_path):
    model = MLP(64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    with pytest.raises(CoordCheckError, match=r"rec.step\(batch=...\): inputs of shape \(4, 32\), the probe"):
        with coordcheck.record(model, width=64, out=tmp_path / "w", optimizer=opt, batch=probe_batch()) as rec:
            opt.step()
            rec.step(batch=(torch.randn(4, 32), torch.zeros(4).long()))
    assert json.loads((tmp_path / "w" / "job.json").read_text())["status"] == "stopped"
