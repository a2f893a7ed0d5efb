"""The terminal's table of failing modules (coordcheck.report.terminal): at most 100 columns, the causes' modules
first, each row's cause or what it follows from (issue 39)."""

from __future__ import annotations

import pandas as pd

from coordcheck.report.terminal import failing_table


class V:
    def __init__(self, n: int):
        names = [f"model.layers.{i}.mlp.experts.gate_up_proj_with_a_long_name" for i in range(n)]
        self.configs = pd.DataFrame([dict(config_id="c", status="fail")])
        self.modules = pd.DataFrame(dict(
            config_id="c", module=names, layer_index=range(n), status="fail", tensor="delta", step=3,
            slope=[0.5 + 0.01 * i for i in range(n)], ci_low=0.4, ci_high=0.7,
            cause=["" if i != n - 1 else "lm_head" for i in range(n)],
            inherited_from=["lm_head" if i != n - 1 else "" for i in range(n)],
            inherited_via="backward", diagnosis=""))
        self.causes = pd.DataFrame([dict(config_id="c", order=0, modules=[names[-1]])])


def test_the_failing_modules_fit_100_columns_causes_first_and_the_rest_counted():
    lines = failing_table(V(14))
    assert all(len(line) <= 100 for line in lines), max(map(len, lines))
    assert lines[0].startswith("coordcheck: failing modules (14;")
    rows = lines[2:-1]
    assert len(rows) == 10 and "cause: lm_head" in rows[0] and "from lm_head (backward)" in rows[1]
    assert "+0.63" in rows[0] and "[+0.40, +0.70]" in rows[0]
    assert lines[-1].strip().startswith("… and 4 more")


def test_nothing_fails_no_table():
    v = V(3)
    v.modules["status"] = "pass"
    assert failing_table(v) == []
