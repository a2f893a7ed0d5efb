"""What a cause pass must record: the steps at which a failing sweep recorded no own update.

Stage: judge. Input: a :class:`coordcheck.judge.verdict.Verdict`. Output: per configuration, the last step a cause
pass must record the ``in``, ``own`` and ``eps`` tensors to (:data:`CAUSE_PASS_TENSORS`), or nothing when no pass is
needed:
the verdict does not fail, or the frame holds ``own`` already (``tensors=[out,delta,in,own]``), or what fails is the
model's structure (its cause is named without measuring), or nothing fails inside the stability window. The pass
itself (training again with those tensors, as far as that step) is the driver's: :mod:`coordcheck.app.cause_pass`
for a sweep, :func:`coordcheck.coord_check` in Python. Never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from coordcheck.judge.verdict import Verdict

__all__ = ["CAUSE_PASS_TENSORS", "MARGIN", "cause_pass_steps", "cause_rows"]

# what the causes need that the default tensors (out, delta) do not record: each parameter owner's input and own update,
# and Adam's ε against √v̂ (coordcheck.record.eps; no rows under an optimizer without Adam's state): a symptom whose
# learning rate is right may be ε's (coordcheck.judge.reconcile)
CAUSE_PASS_TENSORS = ("in", "own", "eps")
# Steps a cause pass records past the first failing step. A fault shows in its own update from its onset: an init at
# step 0, a learning rate from the first update (Adam's first step is ~lr·sign(g) at every width), a missing output
# multiplier at step 0; what fails only later is downstream (it inherits) or drift. Two more steps give the own
# series room to be significant; the pass then costs (first failing step + 3) / (steps + 1) of a sweep, not all of it.
MARGIN = 2


def cause_pass_steps(verdict: Verdict) -> dict[str, int]:
    """``config_id`` -> the last step a cause pass must record (the first failing step inside the stability window
    plus :data:`MARGIN`, at most the last failing one, at least 1), for each configuration that fails without its
    cause measured; ``{}`` when no pass is needed."""
    s = verdict.series
    if verdict.status != "fail" or s.empty or bool((s["tensor"] == "own").any()):
        return {}
    fails = s[(s["status"] == "fail") & s["in_window"].astype(bool)]
    causes = verdict.causes
    if len(causes):
        structure = set(causes.loc[causes["kind"] == "structure", "config_id"])
        fails = fails[~fails["config_id"].isin(structure)]
    return {str(cid): max(1, min(int(g["step"].max()), int(g["step"].min()) + MARGIN))
            for cid, g in fails.groupby("config_id")}


def cause_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of a cause pass's frame that the first pass lacks (its loss and the like are already there)."""
    return frame[frame["tensor"].isin(CAUSE_PASS_TENSORS)].reset_index(drop=True)
