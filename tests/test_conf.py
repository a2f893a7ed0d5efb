"""The conf/ tree: options named for what they are, old names kept as aliases, one definition per knob."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from coordcheck.app.jobs import config_id, job_hash
from coordcheck.app.config import compose_config, options


@pytest.mark.parametrize("alias,name,model", [("gpt", "tokens", "gpt"), ("mlp", "gaussian", "mlp")])
def test_old_data_names_are_aliases(alias, name, model):
    old, new = compose_config([f"model={model}", f"data={alias}"]), compose_config([f"model={model}", f"data={name}"])
    assert OmegaConf.to_container(old.data) == OmegaConf.to_container(new.data)
    assert (config_id(old), job_hash(old)) == (config_id(new), job_hash(new))  # old sweeps still resume
    assert OmegaConf.to_container(compose_config([f"model={model}"]).data) == OmegaConf.to_container(new.data)
    assert new.data._target_ == f"coordcheck.setup.data.{name}"


def test_data_options_are_listed_by_what_they_are():
    assert {"tokens", "gaussian", "text", "gpt", "mlp"} <= set(options("data"))


def test_verdict_page_and_verdict_number_the_rules_alike():
    import re
    from pathlib import Path

    import coordcheck.judge.verdict as verdict

    page = (Path(__file__).resolve().parent.parent / "docs" / "verdict.md").read_text()
    section = page.split("\n## The rules\n")[1].split("\n## ")[0]
    in_readme = [int(n) for n in re.findall(r"^(\d+)\. ", section, flags=re.M)]
    in_code = [int(n) for n in re.findall(r"^(\d+)\. \*\*", verdict.__doc__, flags=re.M)]
    assert in_readme == in_code == list(range(1, len(in_code) + 1)) and len(in_code) >= 9
    for words in ("min_widths", "left no frame"):  # rule 8 says the same in both
        assert words in re.search(r"^8\. .*?(?=^9\. )", section, flags=re.M | re.S).group(0)
        assert words in re.search(r"^8\. .*?(?=^9\. )", verdict.__doc__, flags=re.M | re.S).group(0)
