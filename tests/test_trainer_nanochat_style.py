"""Issue 38, a run of your own in a trainer you did not write: nanochat's model and optimizer in a loop shaped like its
base_train.py (``tests/trainer_nanochat_style.py``: accumulation, lr schedule, Muon momentum warmup, clipping), each
width a separate ``coordcheck.record`` run, the folder judged by the report command as one sweep.

As written, nanochat's logits grow with width at initialisation (no 1/width multiplier, lm_head's std constant) and
its AdamW lrs of lm_head, wte and the value embeddings shrink like width^-1/2: FAIL, the causes naming the readout,
the embedding and the value embeddings' init (std n_embd^-1/2, where an embedding's stays constant), each backed by
the audit's and the slopes' facts. With every muP knob of the model file: PASS."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from coordcheck.report.command import main as report_main
from trainer_nanochat_style import train

WIDTHS = (64, 128, 256)
STEPS = 10  # the trainer's default: at 6 the muP default is inconclusive (transformer.h.0 at width 64)


def judge(tmp_path: Path, fault: str | None) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Train each width into runs/w{width}, report the folder: report.json, audit.csv, slopes.csv."""
    runs = tmp_path / "runs"
    for width in WIDTHS:
        train(width, runs / f"w{width}", steps=STEPS, fault=fault)
    assert report_main([str(runs), "--no-figures"]) == 0
    report = runs / "report"
    return (json.loads((report / "report.json").read_text()), pd.read_csv(report / "audit.csv"),
            pd.read_csv(report / "slopes.csv"))


def slope(slopes: pd.DataFrame, module: str, tensor: str, step: int) -> float:
    row = slopes[(slopes["module"] == module) & (slopes["tensor"] == tensor) & (slopes["stat"] == "rms")
                 & (slopes["step"] == step)]
    assert len(row), (module, tensor, step)
    return float(row["slope"].iloc[0])


@pytest.mark.slow
def test_nanochat_as_written_fails_naming_the_readout_and_the_embedding(tmp_path):
    report, audit, slopes = judge(tmp_path, fault=None)
    assert report["status"] == "fail", report["reason"]
    assert report["widths"] == list(WIDTHS)
    causes = {c["kind"]: c for c in report["causes"]}
    named = {m for c in report["causes"] for m in c["modules"]}
    assert {"lm_head", "transformer.wte", "value_embeds.1"} <= named, [c["line"] for c in report["causes"]]
    audit = audit.set_index("parameter")

    # the readout: its weight's std constant and no multiplier, measured (muP's effective readout weight goes as
    # 1/width); what follows from it, the logits growing like width^+1/2 at initialisation, is the module table's
    logits = causes["output_multiplier"]
    assert logits["modules"] == ["lm_head"] and logits["step"] == 0 and logits["measure"] == "init"
    assert logits["expected"] == "width^-1.00" and abs(logits["exponent"]) < 0.1
    assert slope(slopes, "(logits)", "out", 0) == pytest.approx(0.5, abs=0.1)
    assert audit.loc["lm_head.weight", "init_status"] == "fail"  # its effective init (the multiplier is shown)
    # lm_head's AdamW lr ∝ width^-1/2 (nanochat's (d / 768)^-0.5), measured in its update: muP keeps it behind the
    # 1/width multiplier; said in the readout's line
    assert audit.loc["lm_head.weight", ["lr_status"]].tolist() == ["fail"]
    assert audit.loc["lm_head.weight", "lr_exponent"] == pytest.approx(-0.5, abs=0.1)

    # the value embeddings: uniform with std n_embd^-1/2 (nanochat's init), where an embedding's fan-in does not grow
    ve = causes["init"]
    assert ve["modules"] == ["value_embeds.1"] and ve["expected"] == "width^+0.00"
    assert ve["exponent"] == pytest.approx(-0.5, abs=0.05)

    # the embedding: its lr scaled by (d / 768)^-0.5, so its own update and its change shrink like width^-1/2
    wte = next(c for c in report["causes"] if "transformer.wte" in c["modules"])
    assert wte["kind"] == "lr" and "learning rate" in wte["line"] and wte["measure"] == "lr"
    assert audit.loc["transformer.wte.weight", "lr_status"] == "fail"
    assert audit.loc["transformer.wte.weight", "lr_exponent"] == pytest.approx(-0.5, abs=0.05)
    assert slope(slopes, "transformer.wte", "own", 1) == pytest.approx(-0.5, abs=0.05)
    assert slope(slopes, "transformer.wte", "delta", STEPS) < -0.3


@pytest.mark.slow
def test_every_mup_knob_of_the_model_passes_in_the_same_trainer(tmp_path):
    report, _, _ = judge(tmp_path, fault="mup")
    assert report["status"] == "pass", report["reason"]
    assert report["widths"] == list(WIDTHS)
