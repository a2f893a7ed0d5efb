"""The configuration layer (``coordcheck.app.config``): knob schemas generated from rules dataclasses, their checks and
flags, the command-line checks made before Hydra runs anything, and the small helpers every command shares."""

import argparse
import inspect
from dataclasses import dataclass, fields
from typing import get_args

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from coordcheck import report
from coordcheck.app import jobs as app
from coordcheck.app import checks, config
from coordcheck.app.config import compose_config, instantiate_node, resolved_config, safe_dirname
from coordcheck.core.errors import positive_number
from coordcheck.app.checks import check_choices, check_command_line
from coordcheck.report import knobs as report_knobs
from coordcheck.report.knobs import REPORT, Knobs
from coordcheck.transfer import knobs as transfer_knobs
from coordcheck.transfer.knobs import TRANSFER_REPORT, transfer_options
from coordcheck.core.errors import CoordCheckError, knob
from coordcheck.transfer.fit import TransferRules
from coordcheck.judge.verdict import Rules


@dataclass(frozen=True)
class ToyRules:
    """A verdict's rules as a new experiment would write them: each field (default, range, help) becomes a knob."""

    tol: float = knob(0.5, (">", 0), help="how far it may move")
    n: int = knob(3, (">=", 2), help="how many")
    name: str = knob("a", help="a name")


TOY = Knobs(name="toy_report", schema_name="ToyReportOptions", rules=ToyRules,
            own=(("strict", bool, False, "exit non-zero"),
                 ("size", report_knobs.Size, report_knobs.Size.paper, "figure size")),
            choices={"size": report_knobs.Size})


# -- Knobs: one schema per experiment, generated from its rules ------------------------------------------------------
def test_the_schema_is_the_rules_fields_then_the_own_knobs_with_their_defaults():
    assert [(f.name, f.type) for f in fields(TOY.schema)] == [
        ("tol", float), ("n", int), ("name", str), ("strict", bool), ("size", report_knobs.Size)]
    assert TOY.schema.__name__ == "ToyReportOptions" and TOY.schema.__module__ == "coordcheck.report.knobs"
    assert TOY.values() == {"tol": 0.5, "n": 3, "name": "a", "strict": False, "size": "paper"}
    assert TOY.values({"tol": 0.1, "size": "slides"}) == {**TOY.values(), "tol": 0.1, "size": "slides"}
    assert TOY.rules_of(TOY.values({"n": 5})) == ToyRules(n=5)
    assert ConfigStore.instance().load("schema/toy_report.yaml").node.n == 3  # typed when a config is composed


def test_the_transfer_report_knobs_are_the_fields_of_transfer_rules():
    assert list(TRANSFER_REPORT.kinds) == [f.name for f in fields(TransferRules)] + ["figures", "size", "strict"]
    cfg = compose_config([], "transfer")
    assert OmegaConf.get_type(cfg.report) is transfer_knobs.TransferOptions
    assert transfer_options(cfg.report) == transfer_options(), "conf/transfer.yaml's report values drifted"
    assert TRANSFER_REPORT.rules_of(transfer_options()) == TransferRules()


@pytest.mark.parametrize("node, message", [
    ({"tol": 0}, "report.tol: must be a number > 0 (got 0.0)"),
    ({"n": 1}, "report.n: must be an integer >= 2 (got 1)"),
    ({"n": "x"}, "report.n: must be an integer >= 2 (got 'x')"),
    ({"tols": 1}, "report.tols: unknown knob (did you mean report.tol?): choose one of tol, n, name, strict, size"),
    ({"size": "huge"}, "report.size: must be one of paper, column, slides (got 'huge')"),
    ({"strict": "maybe"}, "report.strict: must be true or false (got 'maybe')"),
    (3, "report: must hold the knobs tol, n, name, strict, size (got 3)"),
])
def test_a_bad_knob_is_one_line_naming_it(node, message):
    with pytest.raises(CoordCheckError) as e:
        TOY.values(node)
    assert str(e.value) == message


def test_a_bad_knob_is_named_as_the_user_wrote_it():
    with pytest.raises(CoordCheckError) as e:
        TOY.values({"n": 1}, flag=lambda k: "--" + k)
    assert str(e.value) == "--n: must be an integer >= 2 (got 1)"
    with pytest.raises(CoordCheckError) as e:
        report_knobs.report_options({"min_window": 0}, flag=lambda k: "--" + k.replace("_", "-"))
    assert str(e.value) == "--min-window: must be an integer >= 1 (got 0)"
    with pytest.raises(CoordCheckError, match=r"report.level: must be a number > 0 and < 1 \(got 1.0\)"):
        transfer_options({"level": 1.0})


def test_report_knobs_are_checked():
    assert transfer_options({"tol": 1})["tol"] == 1.0
    for bad, words in [({"tol": -1}, "report.tol: must be a number > 0"), ({"tols": 1}, "unknown knob"),
                       ({"strict": "maybe"}, "true or false"), ({"size": "poster"}, "one of paper, column, slides")]:
        with pytest.raises(CoordCheckError, match=words):
            transfer_options(bad)


def test_add_flags_makes_one_flag_per_knob_typed_by_the_schema():
    parser = argparse.ArgumentParser()
    TOY.add_flags(parser)
    assert vars(parser.parse_args([])) == TOY.values()
    args = parser.parse_args(["--tol", "0.3", "--n", "4", "--name", "b", "--strict", "--size", "slides"])
    assert vars(args) == {"tol": 0.3, "n": 4, "name": "b", "strict": True, "size": "slides"}
    assert parser.parse_args(["--no-strict"]).strict is False
    usage = parser.format_help()
    assert "how far it may move (default 0.5)" in usage and "--size {paper,column,slides}" in usage
    with pytest.raises(SystemExit):
        parser.parse_args(["--size", "huge"])  # choices from the schema's enum
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "2.5"])  # an int knob takes an int


def test_add_flags_only_some_knobs_and_steps_as_a_list(capsys):
    parser = argparse.ArgumentParser()
    REPORT.add_flags(parser, only=("tol", "steps"))
    assert [a.dest for a in parser._actions] == ["help", "tol", "steps"]
    assert vars(parser.parse_args(["--steps", "0,3,10"])) == {"tol": 0.2, "steps": [0, 3, 10]}
    with pytest.raises(SystemExit):
        parser.parse_args(["--steps", "0,x"])
    assert "--steps takes comma-separated integers, got '0,x'" in capsys.readouterr().err


def test_report_knobs_are_the_fields_of_rules_then_the_reports_own(capsys):
    assert list(report_knobs.KNOBS) == [f.name for f in fields(Rules)] + ["figures", "size", "steps", "strict",
                                                                          "layout"]
    with initialize_config_dir(config_dir=app.CONF_DIR, version_base="1.3"):
        cfg = compose("config")
    assert OmegaConf.get_type(cfg.report) is report_knobs.ReportOptions
    assert report_knobs.report_options(cfg.report) == report_knobs.report_options(), \
        "conf/config.yaml's report drifted from Rules"
    assert report_knobs.rules_of(report_knobs.report_options()) == Rules()
    from coordcheck import plot

    assert [m.value for m in report_knobs.Size] == list(get_args(plot.Size))
    assert [m.value for m in report_knobs.Layout] == list(get_args(plot.Layout))
    # one default for the sweep's knob, the report's functions, the Python API and plot_coords: the paper figure
    assert report_knobs.report_options()["layout"] == report_knobs.DEFAULT_LAYOUT == "guide"
    assert inspect.signature(plot.plot_coords).parameters["layout"].default == report_knobs.DEFAULT_LAYOUT
    with pytest.raises(SystemExit):
        report.main(["--help"])
    usage = capsys.readouterr().out
    assert all(f"--{f.name.replace('_', '-')} " in usage for f in fields(Rules)) and "--layout {guide,grid}" in usage


BAD_TYPES = [
    ("report.tol=abc", "report.tol: must be a number > 0 (got 'abc')"),
    ("report.stat=foo", "report.stat: must be one of std, l1, rms, mean, absmax (got 'foo')"),
    ("report.size=huge", "report.size: must be one of paper, column, slides (got 'huge')"),
    ("report.strict=maybe", "report.strict: must be true or false (got 'maybe')"),
    ("report.layout=foo", "report.layout: must be one of guide, grid (got 'foo')"),
    ("report.min_widths=2.5", "report.min_widths: must be an integer >= 2 (got '2.5')"),
    ("report.steps=abc", "report.steps: must be null or a list of steps >= 0, e.g. [0,3,10] (got 'abc')"),
    ("report.tolerance=0.1", "report.tolerance: unknown knob: choose one of stat, tol, shrink_tol, "),
]
BAD_VALUES = [  # Hydra composes these; the checks that follow composition reject them
    ("+report.tolerance=0.1", "report.tolerance: unknown knob: choose one of stat, tol, shrink_tol, "),
    ("report.tol=0", "report.tol: must be a number > 0 (got 0.0)"),
    ("report.tol=nan", "report.tol: must be a number > 0 (got nan)"),
    ("report.shrink_tol=-0.1", "report.shrink_tol: must be a number > 0 (got -0.1)"),
    ("report.min_widths=1", "report.min_widths: must be an integer >= 2 (got 1)"),
    ("report.min_window=0", "report.min_window: must be an integer >= 1 (got 0)"),
    ("report.steps=[0,-1]", "report.steps: must be null or a list of steps >= 0, e.g. [0,3,10] (got [0, -1])"),
    ("report.tol=0.1,0.2", "report.tol: one value per sweep, its report is made once at the end (got '0.1,0.2')"),
    ("report.steps=0,3", ("report.steps: one value per sweep, its report is made once at the end (got '0,3'): "
                          "write a list as [0,3,10]")),
]


@pytest.mark.parametrize("override,message", BAD_TYPES, ids=[o for o, _ in BAD_TYPES])
def test_report_knob_of_the_wrong_type_fails_composition(override, message):
    with initialize_config_dir(config_dir=app.CONF_DIR, version_base="1.3"), pytest.raises(ConfigCompositionException):
        compose("config", overrides=[override])
    with pytest.raises(CoordCheckError) as e:
        checks.check_command_line(["width=16,32,64", override, "--multirun"])
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("override,message", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_report_knob_out_of_range_is_one_line(override, message):
    with pytest.raises(CoordCheckError) as e:
        checks.check_command_line(["width=16,32,64", override, "--multirun"])
    assert str(e.value).startswith(message)


def test_good_report_knobs_pass_the_check_and_reach_the_options():
    knobs = ["report.stat=l1", "report.steps=[0,3]", "report.strict=true", "report.layout=guide", "report.min_widths=4",
             "report.size=slides"]
    checks.check_command_line(["--multirun", "width=16,32", *knobs])
    opts = report_knobs.report_options(config.compose_config(knobs).report)
    assert opts == {**report_knobs.report_options(), "stat": "l1", "steps": [0, 3], "strict": True, "layout": "guide",
                    "min_widths": 4, "size": "slides"}


# -- small helpers -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, number", [(1, 1.0), ("0.5", 0.5), (2.5, 2.5), (1e-30, 1e-30)])
def test_positive_number_takes_finite_numbers_above_zero(value, number):
    assert positive_number(value, "lr") == number


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), True, "abc", None, [1]])
def test_positive_number_names_its_key(value):
    with pytest.raises(CoordCheckError) as e:
        positive_number(value, "lr")
    assert str(e.value) == f"lr must be a positive number, got {value!r}"


def test_long_job_directory_names_stay_distinct():
    long = "model._target_=" + "my_pkg.models." * 15 + "build,optimizer._target_=" + "my_pkg.optim." * 10 + "make"
    names = {safe_dirname(f"{long},width={w}") for w in (128, 256, 512)}
    assert len(names) == 3 and all(len(n) <= 200 for n in names)
    assert all(n.startswith(long[:100]) for n in names)  # still readable: cut, then a hash of the whole name


def test_job_directory_names_cannot_escape():
    assert safe_dirname("data.path=../../etc,width=64") == "data.path=__/__/etc,width=64".replace("/", "_")
    for name in ["../..", "/abs/path", "a/../../b", "..", ""]:
        d = safe_dirname(name)
        assert "/" not in d and ".." not in d and d not in ("", ".")
    assert safe_dirname("width=64,lr=0.01") == "width=64,lr=0.01"  # an ordinary name is kept as it is
    assert safe_dirname("a b/c") == "a_b_c" and safe_dirname("") == "job"


def test_resolved_config_is_plain_values_without_the_keys_asked_and_default_run_keys():
    cfg = compose_config(["model=mlp", "precision=bf16"])
    plain = resolved_config(cfg, ("width", "report"))
    assert "width" not in plain and "report" not in plain and plain["lr"] == cfg.lr
    assert plain["precision"] == "bf16"  # a run key away from its default stays: it changes the frame
    assert "device" not in plain and "compile" not in plain  # at their defaults: left out, old ids stay
    assert plain["data"]["_target_"] == "coordcheck.setup.data.gaussian"  # data: ${model} resolved
    assert "${" not in repr(plain)


def test_instantiate_node_errors_name_the_group():
    with pytest.raises(CoordCheckError) as e:
        instantiate_node(OmegaConf.create({"_target_": "nowhere.build"}), "model")
    assert str(e.value) == ("model._target_=nowhere.build: module 'nowhere' not found: check the spelling, or install "
                            "the package (or put its directory on PYTHONPATH)")  # the cause, never empty
    with pytest.raises(CoordCheckError) as e:
        instantiate_node(OmegaConf.create({"_target_": "coordcheck.setup.data.gaussian", "dim": "???"}), "data")
    assert str(e.value) == "data: Missing mandatory value: dim (set it on the command line)"
    batch = instantiate_node(OmegaConf.create({"_target_": "coordcheck.setup.data.gaussian", "dim": 3}), "data")
    assert batch.inputs.shape[1] == 3


# -- the command line, checked before Hydra runs anything -------------------------------------------------------------
def test_check_choices_names_each_unknown_option_of_a_group():
    with pytest.raises(CoordCheckError) as e:
        check_choices(["model=gpt,foo", "--multirun"])
    assert str(e.value) == "unknown model 'foo': choose one of custom, gpt, hf, mlp, moe (conf/model/)"
    with pytest.raises(CoordCheckError,
                       match="unknown data 'foo': choose one of custom, gaussian, gpt, hf, mlp, moe, text, tokens"):
        check_choices(["data=foo"])
    check_choices(["data=foo"], groups=("model",))  # only the groups named are checked
    check_choices(["model=mlp", "model.depth=3", "width=8"])


@pytest.mark.parametrize("argv, message", [
    (["width=["], "cannot parse 'width=[': "),
    (["nokey=1"], "nokey=1: no key 'nokey' in the config: the config has model, data, "),
])
def test_an_override_hydra_cannot_compose_is_one_line(argv, message):
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert "Config search path" not in str(e.value)


def test_other_hydra_flags_leave_the_command_line_to_hydra():
    for argv in (["--help", "report.tol=abc"], ["-cd", "elsewhere", "report.tol=abc"]):
        assert check_command_line(argv) is None  # Hydra types the knobs against the same schema
    with pytest.raises(CoordCheckError, match="report.tol"):
        check_command_line(["--cfg", "job", "report.tol=abc"])  # --cfg keeps the usual config: checked
    check_command_line(["--cfg", "job", "model=custom"])  # ... but it runs nothing: showing a ??? is what it is for


def test_check_values_reads_sweeps_as_hydra_parses_them():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from coordcheck.app.checks import check_values

    seen = []
    checks = {"lr": lambda v: seen.append(positive_number(v, "lr")), "width": lambda v: seen.append(v)}
    parse = OverridesParser.create().parse_overrides
    check_values(compose_config([]), parse(["lr='0.01',1e-3", "width=range(16,48,16)"]), checks)
    assert seen == [0.01, 0.001, 16, 32]
    seen.clear()
    check_values(compose_config([]), parse(["lr=interval(0.001,0.1)"]), checks)  # Hydra's to expand: the default
    assert seen == [0.01, 256]
    with pytest.raises(CoordCheckError, match="lr must be a positive number, got -1"):
        check_values(compose_config([]), parse(["lr=0.01,-1"]), checks)


def test_composed_configs_pickle_with_their_report_schema():
    import pickle

    for name, schema in (("config", report_knobs.ReportOptions), ("transfer", transfer_knobs.TransferOptions)):
        cfg = pickle.loads(pickle.dumps(compose_config([], name)))
        assert OmegaConf.get_type(cfg.report) is schema


def test_knob_ranges_and_help_come_from_the_rules_fields():
    from dataclasses import fields

    for knobs, rules in ((report_knobs.REPORT, Rules), (TRANSFER_REPORT, TransferRules)):
        for f in fields(rules):
            assert knobs.bounds[f.name] == f.metadata["bounds"] and knobs.help[f.name] == f.metadata["help"]
    assert TRANSFER_REPORT.expected("level") == "a number > 0 and < 1"


# -- every value each key takes, and every target, before any job runs (issue 20) --------------------------------------
@pytest.mark.parametrize("path, message", [
    ("nowhere.build", "model._target_=nowhere.build: module 'nowhere' not found: check the spelling, or install the "
                      "package (or put its directory on PYTHONPATH)"),
    ("coordcheck.setup.models.build", "model._target_=coordcheck.setup.models.build: 'coordcheck.setup.models' has no "
                                      "attribute 'build': check the name"),
    ("coordcheck.nowhere.build", "model._target_=coordcheck.nowhere.build: 'coordcheck' has no attribute 'nowhere': "
                                 "check the name"),
    ("coordcheck.setup.models.gpt.width", "model._target_=coordcheck.setup.models.gpt.width: "
                                          "'coordcheck.setup.models.gpt' has no attribute 'width': check the name"),
    ("bad_module.build", "model._target_=bad_module.build: importing 'bad_module' failed (ZeroDivisionError: division "
                         "by zero): fix that module"),
    ("needs_dep.build", "model._target_=needs_dep.build: importing 'needs_dep' failed: No module named "
                        "'not_installed_anywhere': install it"),
    ("my pkg.build", "model._target_='my pkg.build' is not a dotted path: write it as package.module.function"),
])
def test_locate_says_why_a_target_cannot_be_imported(monkeypatch, tmp_path, path, message):
    (tmp_path / "bad_module.py").write_text("x = 1 / 0\n")
    (tmp_path / "needs_dep.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(CoordCheckError) as e:
        config.locate(path, "model._target_")
    assert str(e.value) == message


def test_locate_finds_what_hydra_instantiates():
    from coordcheck.setup import models

    assert config.locate("coordcheck.setup.models.gpt", "model._target_") is models.gpt
    assert config.locate("coordcheck.setup.models.GPT.forward", "model._target_") is models.GPT.forward
    assert config.locate("math.pi", "x") == 3.141592653589793


@pytest.mark.parametrize("argv, message", [
    (["width=256,512,1024"], "width=256,512,1024 is a sweep: add --multirun (or give width one value)"),
    (["lr=0.01,0.1"], "lr=0.01,0.1 is a sweep: add --multirun (or give lr one value)"),
    (["model=gpt,mlp"], "model=gpt,mlp is a sweep: add --multirun (or give model one value)"),
    (["width=[256,512,1024]"], "width=[256,512,1024] is a list, not one width: a sweep over width is written "
                               "width=256,512,1024 --multirun"),
    (["--multirun", "lr=[0.01,0.1]"], "lr=[0.01,0.1] is a list, not one lr: a sweep over lr is written lr=0.01,0.1 "
                                      "--multirun"),
    (["steps=[1,2]"], "steps=[1,2] is a list, not one steps: a sweep over steps is written steps=1,2 --multirun"),
])
def test_a_sweep_needs_multirun_and_a_list_is_not_a_sweep(argv, message):
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv)
    assert str(e.value) == message


def test_a_sweep_runs_with_multirun_however_it_is_asked_for():
    for argv in (["width=16,32", "--multirun"], ["-m", "width=16,32"], ["width=16,32", "hydra.mode=MULTIRUN"]):
        check_command_line(argv)
    check_command_line(["seeds=[0,5]"])  # seeds takes a list: it is not a sweep


@pytest.mark.parametrize("config_name, argv, message", [  # the other commands share the checks
    ("transfer", ["width=128,256"], "width=128,256 is a sweep: add --multirun"),
    ("transfer", ["--multirun", "width=[128,256]"], "width=[128,256] is a list, not one width"),
    ("transfer", ["--multirun", "model._target_=nowhere.build"], "module 'nowhere' not found"),
    ("transfer", ["--multirun", "base_width=0"], "base_width must be a positive integer, got 0"),
    ("transfer", ["--multirun", "hydra.sweeper.params.lr='0.01,-1'"], "lr must be a positive number, got -1"),
    ("gradflow", ["width=256,512"], "width=256,512 is a sweep: add --multirun"),
    ("gradflow", ["width=[256,512]"], "width=[256,512] is a list, not one width"),
    ("gradflow", ["--multirun", "steps=2,0"], "steps must be an integer >= 1, got 0"),
    ("gradflow", ["optimizer._target_=coordcheck.setup.optim.lion"],
     "'coordcheck.setup.optim' has no attribute 'lion'"),
])
def test_the_transfer_and_gradflow_command_lines_share_the_checks(config_name, argv, message):
    from coordcheck.gradflow.app import check_overrides
    from coordcheck.transfer.__main__ import _check

    check = {"transfer": _check, "gradflow": check_overrides}[config_name]
    knobs = {"transfer": TRANSFER_REPORT, "gradflow": None}[config_name]
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv, config_name=config_name, check=check, knobs=knobs)
    assert message in str(e.value)


def test_check_values_takes_the_last_override_of_a_key_as_hydra_does():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from coordcheck.app.checks import check_values

    parse, seen = OverridesParser.create().parse_overrides, []
    check_values(compose_config(["width=64"]), parse(["width=0,16", "width=64"]), {"width": seen.append})
    assert seen == [64]  # the sweep was replaced: width 0 is not in the grid
    with pytest.raises(CoordCheckError, match="width must be a positive integer, got 0"):
        check_values(compose_config([]), parse(["width=64", "width=0,16"]), {"width": checks.JOB_CHECKS["width"]})


def test_a_remote_launcher_imports_its_targets_where_the_jobs_run():
    argv = ["--multirun", "width=16,32", "model._target_=only_on_the_cluster.build"]
    with pytest.raises(CoordCheckError, match="module 'only_on_the_cluster' not found"):
        check_command_line(argv)
    check_command_line([*argv, "hydra/launcher=joblib"])  # as check_run leaves a remote device to the job


@pytest.mark.parametrize("name", ["config", "transfer", "gradflow"])
def test_every_key_a_command_takes_is_described_in_its_help(name):
    """--help describes each key of a command from the comment beside it in conf/ (issue 39): a key added without
    one would be listed in no help."""
    from omegaconf import OmegaConf

    from coordcheck.app.config import conf_text, key_comments

    text = conf_text(f"{name}.yaml")
    described = key_comments(text)
    top = [k for k in OmegaConf.create(text) if k not in ("defaults", "hydra")]
    undescribed = [k for k in top if k not in described and not any(d.startswith(f"{k}.") for d in described)]
    assert not undescribed, f"conf/{name}.yaml: describe {undescribed} in a comment beside the key"
