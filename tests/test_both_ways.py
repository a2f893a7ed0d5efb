"""One answer on every path (issue 42 item 3): every atlas family's planted mutant judged through the sweep and through
a plain training loop with the recorder, one process per width, then the report over the runs — the same status and
the same first cause (coordcheck.testing.both_ways)."""

from __future__ import annotations

import pytest

from coordcheck.testing.atlas import FAMILIES
from coordcheck.testing.both_ways import both_ways

# Per family, one mutant whose plant a judged series shows (a base answers PASS on both paths in the atlas' own
# tests); the depth family sweeps depth at one width, which a recorder of one run per width does not.
CASES = {
    "gpt": "hidden lr unscaled", "mlp": "hidden init constant std", "mlp_sgd": "readout init fan_in^-1/2",
    "hand": "no output multiplier", "nanogpt": "embedding lr scaled", "llama": "hidden init constant std",
    "titan": "attention 1/sqrt(d)", "library": "hidden lr unscaled", "granite": "hidden init constant std",
    "moe": "embedding lr scaled", "nanochat": "hidden lr unscaled", "muon": "embedding lr scaled",
}


def test_every_family_but_depth_is_covered():
    assert set(CASES) == set(FAMILIES) - {"depth"}


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(CASES))
def test_the_sweep_and_the_recorder_give_the_same_status_and_first_cause(family, tmp_path):
    sweep, recorded = both_ways(f"{family}/{CASES[family]}", tmp_path)
    # one seed: some plants' series stay undecided (library, nanochat: "hidden lr unscaled"), their measured fact named
    assert sweep.status in ("fail", "inconclusive") and sweep.kind not in ("", "candidates"), sweep
    assert sweep.same(recorded), (sweep, recorded)
