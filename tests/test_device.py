"""Device and precision (``coordcheck.setup.device``): the logic on the CPU, bf16 and fp16 runs, and the
verdict under bf16 autocast (muP GPT passes, SP fails). GPU-only checks live in test_gpu.py."""

from __future__ import annotations

import pytest
import torch
from conftest import run_in_process

from coordcheck import coord_check
from coordcheck.app import jobs as app
from coordcheck.app import checks, config
from coordcheck.setup.data import tokens
from coordcheck.setup.device import autocast, check_compile, check_precision, environment, resolve_device
from coordcheck.core.errors import CoordCheckError
from coordcheck.setup.models import gpt

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback on a machine without CUDA")
GPT_DATA = tokens(batch_size=2, seq_len=16)


@no_cuda
def test_auto_falls_back_to_the_cpu_and_cuda_is_one_line():
    assert resolve_device("auto") == torch.device("cpu") and resolve_device(None) == torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    for name in ("cuda", "cuda:1"):
        with pytest.raises(CoordCheckError, match="no CUDA device here: use device=cpu"):
            resolve_device(name)


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "tpu:0"])
def test_bad_device_names(bad):
    with pytest.raises(CoordCheckError, match="device must be auto, cpu, cuda or cuda:N"):
        resolve_device(bad)


def test_precision_and_compile_checks():
    assert [check_precision(p) for p in ("fp32", "bf16", "fp16", None)] == ["fp32", "bf16", "fp16", "fp32"]
    with pytest.raises(CoordCheckError, match="precision must be one of fp32, bf16, fp16"):
        check_precision("fp8")
    check_compile(False)
    with pytest.raises(CoordCheckError, match="compile=true is not supported"):
        check_compile(True)


def test_autocast_runs_the_forward_in_bf16_on_the_cpu():
    layer = torch.nn.Linear(8, 8)
    with autocast(torch.device("cpu"), "bf16"):
        assert layer(torch.randn(2, 8)).dtype == torch.bfloat16
    with autocast(torch.device("cpu"), "fp32"):
        assert layer(torch.randn(2, 8)).dtype == torch.float32
    env = environment(torch.device("cpu"), "bf16")
    assert env["device"] == "cpu" and env["precision"] == "bf16" and env["cuda"] is None and env["torch"]


@no_cuda
def test_cli_device_cuda_without_cuda_is_exit_2_one_line(monkeypatch, capsys, tmp_path):
    assert run_in_process(monkeypatch, "device=cuda", "steps=1", "seeds=1", f"hydra.run.dir={tmp_path / 'run'}") == 2
    assert capsys.readouterr().err == ("coordcheck: error: device=cuda, but torch sees no CUDA device here: use "
                                       "device=cpu (or auto)\n")
    assert not (tmp_path / "run").exists()  # refused when composed: no job ran


@pytest.mark.parametrize("override, words", [("precision=fp8", "precision must be one of"),
                                             ("compile=true", "compile=true is not supported"),
                                             ("device=gpu", "device must be")])
def test_cli_checks_device_precision_and_compile_when_composed(override, words):
    with pytest.raises(CoordCheckError, match=words):
        checks.check_command_line([override])


def test_defaults_keep_config_ids_and_device_does_not_split_a_configuration():
    base = config.compose_config([])
    assert app.config_id(base) == app.config_id(config.compose_config(["device=cpu"]))
    assert app.config_id(base) != app.config_id(config.compose_config(["precision=bf16"]))
    assert "device" not in config.resolved_config(base, ()) and "precision" not in config.resolved_config(base, ())


def test_fp16_runs_with_a_gradient_scaler_and_records_the_environment():
    r = coord_check(gpt, [32, 64], data=GPT_DATA, steps=2, seeds=1, precision="fp16", device="cpu", progress=False)
    loss = r.frame[r.frame.tensor == "loss"]
    assert loss.value.notna().all() and len(loss) == 2 * 3
    assert {f["precision"] for f in r.facts} == {"fp16"} and {f["device"] for f in r.facts} == {"cpu"}
    assert r._report.environment == [{**environment(torch.device("cpu"), "fp16")}]


@pytest.mark.slow
def test_bf16_verdict_mup_passes_sp_fails():
    run = dict(data=GPT_DATA, steps=4, seeds=2, progress=False, precision="bf16", device="cpu")
    # muP with 3 seeds, as in test_known_answers: with 2 its noisiest residual-branch output comes within 0.01 of the
    # band in 1 of 5 seed sets (experiments/margins.py)
    mup = coord_check(gpt, [64, 128, 256], **{**run, "seeds": 3})
    assert mup.passed, mup.verdict.reason
    sp = coord_check(gpt, [64, 128, 256], parametrization="sp", **run)
    assert sp.verdict.status == "fail", sp.verdict.reason
    bad = sp.verdict.series.query("in_window and status == 'fail'")
    assert {"hidden", "output"} <= set(bad["role"])


def test_a_sweep_over_device_is_refused_and_remote_launchers_check_the_form_only():
    with pytest.raises(CoordCheckError, match="device: one value per sweep"):
        checks.check_command_line(["device=cpu,cuda", "--multirun"])
    checks.check_command_line(["hydra/launcher=parallel", "device=cuda:1"])  # the job checks it where it runs
    with pytest.raises(CoordCheckError, match="device must be"):
        checks.check_command_line(["hydra/launcher=parallel", "device=gpu"])


def test_fp16_updates_the_scaler_skips_are_recorded():
    from coordcheck.run.train import cross_entropy

    def huge(out, y):  # scaled by the GradScaler's 2^16, its gradients overflow float32: every update is skipped
        return cross_entropy(out, y) * 1e36

    r = coord_check(gpt, [32, 64], data=GPT_DATA, steps=3, seeds=1, precision="fp16", device="cpu", loss=huge,
                    progress=False)
    assert [f["fp16_skipped_updates"] for f in r.facts] == [[{"seed": 0, "after_steps": [0, 1, 2]}]] * 2
