"""The depth keys on the command line (``coordcheck.app.config``): a bad depth, a builder that takes no depth, depth
scaling with an optimizer it cannot scale and a misspelt key are one line before any job runs; the good ones pass."""

import pytest

from conftest import run_cli
from coordcheck.app.checks import check_command_line
from coordcheck.core.errors import CoordCheckError

SCALES_ADAM = ("depth_scaling={} scales Adam's learning rate and ε with depth; {} has no such rule here: use "
               "optimizer=adam or adamw, or depth_scaling=none with parametrization=none and your own optimizer "
               "factory")
NO_KEYWORD = ("depth: model builder coordcheck.testing.known_models.build takes none of depth, n_layer, n_layers, "
              "num_layers, num_hidden_layers, n_blocks, num_blocks: set depth_key to the keyword that sets its number "
              "of blocks (depth_key=n_layer)")
BAD_DEPTH = "depth must be a positive integer (the number of residual blocks) or null (the model's own)"
HAND = ["model=custom", "model._target_=coordcheck.testing.known_models.build", "data=gaussian"]  # build(width, **kw)


@pytest.mark.parametrize("argv, message", [
    (["depth=0"], f"{BAD_DEPTH}, got 0"),
    (["depth=-1"], f"{BAD_DEPTH}, got -1"),
    (["-m", "depth=2,0"], f"{BAD_DEPTH}, got 0"),
    (["base_depth=x"], "base_depth must be a positive integer (the number of residual blocks), got 'x'"),
    (["depth=[2,4]"], "depth=[2,4] is a list, not one depth: a sweep over depth is written depth=2,4 --multirun"),
    (["depth_scaling=compltep"], "unknown depth_scaling 'compltep' (did you mean completep?): choose one of completep, "
                                 "depth_mup, none (conf/depth_scaling/)"),
    (["dpeth=4"], "dpeth=4: no key 'dpeth' in the config (did you mean depth?)"),
    (["-m", "dpeth=2,4"], "dpeth=2,4: no key 'dpeth' in the config (did you mean depth?)"),
    (["depth=4", "depth_scaling=completep", "optimizer=sgd"], SCALES_ADAM.format("completep", "SGD")),
    (["depth_scaling=depth_mup", "optimizer=muon"], SCALES_ADAM.format("depth_mup", "MuonWithAdamW")),
    (["depth=4", "depth_scaling=depth_mup", "parametrization=sp", "optimizer=sgd"],
     SCALES_ADAM.format("depth_mup", "SGD")),
    (["-m", "depth=2,4", "depth_scaling=completep", "optimizer=adam,sgd"], SCALES_ADAM.format("completep", "SGD")),
    (["-m", "depth=2", "depth_scaling=none,completep", "optimizer=sgd"], SCALES_ADAM.format("completep", "SGD")),
    (["-m", "depth=2", "depth_scaling=completep", "optimizer=mup_groups", "optimizer.kind=adamw,sgd"],
     SCALES_ADAM.format("completep", "SGD")),
    (["depth=4", *HAND], NO_KEYWORD),
    (["-m", "depth=2,4", *HAND], NO_KEYWORD),
])
def test_a_bad_depth_command_is_one_line_before_any_job_runs(argv, message):
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv)
    assert str(e.value) == message


@pytest.mark.parametrize("argv", [
    ["-m", "depth=2,4,8", "width=64", "depth_scaling=completep"],  # the built-in GPT: n_layer
    ["-m", "depth=2,4", "depth_scaling=depth_mup", "optimizer=adamw"],
    ["depth=4", "depth_scaling=completep", "optimizer=sgd", "parametrization=none"],  # the factory's own business
    ["depth=4", "depth_scaling=completep", "optimizer=mup_groups", "optimizer.kind=adam"],
    ["optimizer=sgd"],  # no depth scaling: nothing to scale
    ["depth=4", "model=mlp"],  # the MLP's depth keyword
    ["-m", "depth=2,4", *HAND, "depth_key=depth"],  # depth_key names the keyword its **kwargs takes
    ["depth=4", "model=custom", "model._target_=coordcheck.testing.public_models.gpt_builder", "data=tokens",
     "+model.n_layer=2"],  # a **kwargs builder whose config sets n_layer
    ["-m", "depth=2,4", "model=custom", "model._target_=coordcheck.testing.depth_models.build", "data=tokens",
     "parametrization=none", "optimizer=factory",
     "optimizer._target_=coordcheck.testing.depth_models.make_optimizer"],
    ["-m", "depth=2,3", "model=hf", "model.config=llama"],  # coordcheck.setup.hf.build(depth=...)
])
def test_a_good_depth_command_passes_the_checks(argv):
    check_command_line(argv)


def test_a_builder_without_a_depth_keyword_is_exit_2_and_one_line_no_traceback(tmp_path):
    r = run_cli("depth=2,4", *HAND, f"hydra.sweep.dir={tmp_path / 'sweep'}", "--multirun", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"coordcheck: error: {NO_KEYWORD}"
    assert "Traceback" not in r.stdout + r.stderr
    assert not (tmp_path / "sweep").exists()  # no job ran
