"""``coordcheck.testing.assert_mup``: silent on muP, an ``AssertionError`` naming the cause and the report otherwise.

With its defaults (widths 128-512, 5 steps, 3 seeds, the default tensors and the cause pass) the gate must decide
right on the built-in models and the known answers: muP-correct passes, SP fails, planted faults fail naming the
planted module.
The MLP and the hand-written muP MLP train in under a second; the GPTs (4-5 s each on a quiet core) are ``slow``.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest
import torch

from coordcheck.setup.models import gpt, mlp
from coordcheck.testing import assert_mup
from coordcheck.testing import known_models as km
from coordcheck.testing import planted as pl
from coordcheck.testing.gate import GATE_WIDTHS, failure_message

pytestmark = pytest.mark.usefixtures("one_thread")  # torch on one thread (conftest)

HAND = dict(parametrization="none", optimizer=km.make_optimizer, data="gaussian", base_width=64)


def raised(build, **kwargs) -> str:
    with pytest.raises(AssertionError) as e:
        assert_mup(build, **kwargs)
    return str(e.value)


def test_mup_mlp_passes_silently_and_leaves_its_report(tmp_path, capsys):
    result = assert_mup(mlp, report_dir=tmp_path / "r")
    assert result.passed and sorted(result.frame["width"].unique()) == list(GATE_WIDTHS)
    assert {"report.md", "report.json", "verdict.csv"} <= {p.name for p in (tmp_path / "r").iterdir()}
    assert not list((tmp_path / "r").glob("*.png"))  # figures only when asked for
    assert capsys.readouterr().err == ""  # no progress bar


def test_sp_mlp_fails_with_its_causes_and_the_report_path(tmp_path):
    msg = raised(mlp, parametrization="sp", report_dir=tmp_path)
    lines = msg.splitlines()
    assert lines[0] == "coordinate check (parametrization=sp) — FAIL"
    causes = [line for line in lines if line.startswith("cause: ")]
    assert causes and any("hidden matrices" in c and "base_width / width" in c for c in causes), msg
    assert lines[-1] == f"report: {tmp_path / 'report.md'}" and (tmp_path / "report.md").is_file()
    assert "FAIL" in (tmp_path / "report.md").read_text()


class ScaledInForward(km.HandMuP):
    """The hand-written muP MLP with its first features multiplied by sqrt(width / base_width) in the model's own
    forward: no parameter's init or update is off, so no knob can be named."""

    def forward(self, x):
        x = torch.relu(self.input(x)) * (self.width / self.base_width) ** 0.5
        for lin in self.hidden:
            x = torch.relu(lin(x))
        return self.readout(x)


def test_without_a_cause_the_message_lists_the_failing_series(tmp_path):
    msg = raised(ScaledInForward, **HAND, report_dir=tmp_path)
    lines = msg.splitlines()
    assert lines[0].startswith("coordinate check (parametrization=none) — FAIL: ") and "hidden.0" in lines[0], msg
    assert "no measured fact explains it" in lines[0] and re.search(r"its input ∝ width\^\+0\.[45]", lines[0]), msg
    assert "give " not in msg and "multiply " not in msg and "cause " not in msg, msg  # no knob guessed
    assert not any(line.startswith("cause: ") for line in lines)
    failing = [line for line in lines if line.startswith("fail: ")]
    assert failing and failing[0].startswith("fail: hidden.0 "), msg
    assert lines[-1] == f"report: {tmp_path / 'report.md'}"


def test_inconclusive_is_a_failure_unless_allowed(tmp_path):
    msg = raised(mlp, widths=[64, 128], report_dir=tmp_path / "a")
    assert "INCONCLUSIVE: only 2 width(s): at least 3 are needed" in msg.splitlines()[0]
    assert "allow_inconclusive=True" in msg
    result = assert_mup(mlp, widths=[64, 128], allow_inconclusive=True, report_dir=tmp_path / "b")
    assert result.verdict.status == "inconclusive"
    assert raised(mlp, widths=[64, 128, 256], parametrization="sp", allow_inconclusive=True,
                  report_dir=tmp_path / "c").startswith("coordinate check (parametrization=sp) — FAIL")


def test_report_goes_to_a_fresh_temp_dir_by_default(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    msg = raised(mlp, parametrization="sp")
    report = Path(msg.splitlines()[-1].removeprefix("report: "))
    assert report.is_file() and report.parent.parent == tmp_path and report.parent.name.startswith("coordcheck-")


def test_keywords_reach_coord_check():
    result = assert_mup(mlp, widths=[64, 128, 256], steps=2, seeds=[5], tensors=("out", "delta"), lr=3e-3,
                        depth=2, report_dir=None)
    f = result.frame
    assert f["step"].max() == 2 and set(f["seed"]) == {5}
    assert set(f["tensor"]) <= {"out", "delta", "loss", "weight", "update", "gain"}
    assert set(f["lr"]) == {3e-3} and not f["module"].str.startswith("blocks.1").any()


def test_hand_written_mup_passes_and_its_planted_bugs_fail_naming_the_knob():
    assert assert_mup(km.build, **HAND).passed
    msg = raised(km.build_unscaled_hidden_lr, **HAND)
    assert "cause: both hidden matrices" in msg and "multiply their learning rate by base_width / width" in msg, msg
    msg = raised(km.build_no_multiplier, **HAND)
    assert "cause: readout" in msg and "multiply its output by base_width / width" in msg, msg


def test_failure_message_of_a_verdict_without_report():
    result = assert_mup(mlp, widths=[64, 128], allow_inconclusive=True)
    assert failure_message(result.verdict).splitlines()[-1].startswith("inconclusive counts as a failure")


@pytest.mark.slow
@pytest.mark.parametrize("parametrization", ["mup", "sp"])
def test_builtin_gpt(parametrization):
    if parametrization == "mup":
        assert assert_mup(gpt).passed
    else:
        msg = raised(gpt, parametrization="sp")
        assert msg.startswith("coordinate check (parametrization=sp) — FAIL\ncause: "), msg


@pytest.mark.slow
@pytest.mark.parametrize("fault, named", [
    ("hidden_lr_one_matrix", "cause: transformer.h.1.mlp.c_proj.weight: update ∝ width^"),
    ("attention_sqrt_d", "cause: both attention logits (transformer.h.0.attn.(sdpa), transformer.h.1.attn.(sdpa)): "
                         "logits ∝ width^"),
])
def test_planted_gpt(fault, named):
    # the correct model passing and the missing output multiplier: the docs' tests/test_mup.py example
    # (tests/test_pytest_plugin.py runs it)
    msg = raised(pl.planted_builder, **pl.RUN, data="tokens", **pl.FAULTS[fault])
    assert msg.splitlines()[1].startswith(named), msg


def test_a_mistake_in_the_call_is_an_error_not_a_failed_check():
    from coordcheck import CoordCheckError

    with pytest.raises(CoordCheckError, match="unknown optimizer 'adamm'"):
        assert_mup(km.build, parametrization="none", optimizer="adamm")
