"""coordcheck.app.overrides: a typo on the command line is one line with the closest valid name, in every form and for
every command, before any job runs (issue 19, item 6)."""

import importlib.metadata

import pytest
from conftest import run_cli, run_in_process

from coordcheck.app.checks import check_command_line
from coordcheck.transfer.knobs import TRANSFER_REPORT
from coordcheck.core.errors import CoordCheckError
from coordcheck.app.overrides import closest, is_near

WIDTH = "no key 'widht' in the config (did you mean width?)"
TYPOS = [  # python -m coordcheck ARGV -> its one line (its start, where it ends in ...: lists of options that grow)
    (["model=mlp", "widht=64"], f"widht=64: {WIDTH}"),
    (["--multirun", "model=mlp", "widht=64,128"], f"widht=64,128: {WIDTH}"),  # was Hydra's six lines, exit 1
    (["model=mlp", "widht=64,128", "--multirun"], f"widht=64,128: {WIDTH}"),
    (["-m", "widht=range(64,256,64)"], f"widht=range(64,256,64): {WIDTH}"),
    (["--multi", "widht=64,128"], f"widht=64,128: {WIDTH}"),  # argparse's abbreviation of --multirun
    (["widht=64", "hydra.mode=MULTIRUN"], f"widht=64: {WIDTH}"),
    (["+widht=64"], "+widht=64 adds 'widht', a key the config does not have (did you mean width?)"),
    (["++widht=64"], "++widht=64 adds 'widht', a key the config does not have (did you mean width?)"),
    (["~widht"], "~widht: no key 'widht' in the config to delete (did you mean width?)"),
    (["+width=64"], "+width=64: width is already in the config: write width=64 (++width= sets it whether or not it "
                    "is there)"),
    (["seed=1"], "seed=1: no key 'seed' in the config (did you mean seeds?)"),
    (["modle=mlp"], "modle=mlp: no key 'modle' in the config (did you mean model?)"),
    (["model=mpl"], "unknown model 'mpl' (did you mean mlp?): choose one of custom, gpt, ..."),
    (["-m", "model=gpt,mpl"], "unknown model 'mpl' (did you mean mlp?): choose one of custom, gpt, ..."),
    (["-m", "model=choice(gpt,mpl)"], "unknown model 'mpl' (did you mean mlp?): choose one of custom, gpt, ..."),
    (["-m", "model=glob(mpl*)"], "model=glob(mpl*) matches no model option: choose among custom, gpt, ..."),
    (["optimizer=adamm"], "unknown optimizer 'adamm' (did you mean adam?): choose one of adam, adamw, ..."),
    (["+experiment=sp_vs_mpu"], "unknown experiment 'sp_vs_mpu' (did you mean sp_vs_mup?): choose one of ..."),
    (["hydra/launcher=joblb"], "unknown hydra/launcher 'joblb' (did you mean joblib?): choose one of basic, joblib, "
                               "parallel, slurm, submitit_local, submitit_slurm"),
    (["hydra/lancher=joblib"], "hydra/lancher=joblib: no config group 'hydra/lancher' (did you mean hydra/launcher?)"),
    (["model.n_laye=3"], "model.n_laye=3: no key 'model.n_laye' in the config (did you mean model.n_layer?)"),
    (["-m", "model.n_laye=1,2"], "model.n_laye=1,2: no key 'model.n_laye' in the config (did you mean model.n_layer?)"),
    (["+model.n_laye=3"], "+model.n_laye=3 adds 'model.n_laye', a key the config does not have (did you mean "
                          "model.n_layer?)"),
    (["model=mlp", "data.dimm=5"], "data.dimm=5: no key 'data.dimm' in the config (did you mean data.dim?)"),
    (["hydra.sweep.dri=/tmp/x"], "hydra.sweep.dri=/tmp/x: no key 'hydra.sweep.dri' in the config (did you mean "
                                 "hydra.sweep.dir?)"),
    (["report.tl=0.3"], "report.tl: unknown knob (did you mean report.tol?): choose one of stat, tol, shrink_tol, "
                        "rise, rise_floor, min_widths, min_depths, depth_loss_tol, min_window, persist, gross, "
                        "figures, size, steps, strict, layout"),
    (["--mutlirun", "width=64,128"], "unknown flag --mutlirun (did you mean --multirun?)"),
    (["width=64,128", "-multirun"], "unknown flag -multirun (did you mean --multirun?)"),
    (["-cjob", "widht=64"], f"widht=64: {WIDTH}"),  # argparse's -c job: the overrides after it are still read
    (["--cfg=job", "widht=64"], f"widht=64: {WIDTH}"),
    # each option of a swept group is checked: the one that lacks the key is named
    (["-m", "model=mlp,gpt", "model.depth=3"], "model.depth=3: no key 'model.depth' in the config with model=gpt: "
                                              "model has _target_, _partial_, vocab_size, context, n_layer, n_head, "
                                              "mlp_ratio, attn_mult, output_mult (+model.depth=3 adds it)"),
    (["nokey=1"], "nokey=1: no key 'nokey' in the config: the config has model, data, ..."),
]


@pytest.mark.parametrize("argv, message", TYPOS, ids=[" ".join(a) for a, _ in TYPOS])
def test_a_typo_is_one_line_with_the_closest_valid_name(argv, message):
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv)
    if message.endswith("..."):
        assert str(e.value).startswith(message[:-3]) and "\n" not in str(e.value)
    else:
        assert str(e.value) == message


OTHER_COMMANDS = [  # the same checks, against each command's own config
    ("transfer", ["--multirun", "model=mlp", "widht=64,128"], f"widht=64,128: {WIDTH}"),
    ("transfer", ["eval_batch=3"], "eval_batch=3: no key 'eval_batch' in the config (did you mean eval_batches?)"),
    ("transfer", ["report.levl=0.9"], "report.levl: unknown knob (did you mean report.level?): choose one of "),
    ("transfer", ["parametrization=mupp"], "unknown parametrization 'mupp' (did you mean mup?): "),
    ("gradflow", ["--multirun", "model=mlp", "widht=64,128"], f"widht=64,128: {WIDTH}"),
    ("gradflow", ["seeds=3"], "seeds=3: no key 'seeds' in the config (did you mean seed?)"),
    ("gradflow", ["model=gpt", "model.n_haed=2"], "model.n_haed=2: no key 'model.n_haed' in the config (did you mean "
                                                  "model.n_head?)"),
    ("gradflow", ["learnin=false"], "learnin=false: no key 'learnin' in the config (did you mean learning?)"),
]


@pytest.mark.parametrize("config_name, argv, message", OTHER_COMMANDS,
                         ids=[f"{c} {' '.join(a)}" for c, a, _ in OTHER_COMMANDS])
def test_the_transfer_and_gradflow_commands_name_the_closest_key_too(config_name, argv, message):
    from coordcheck.gradflow.app import check_overrides
    from coordcheck.transfer.__main__ import _check

    check, knobs = {"transfer": (_check, TRANSFER_REPORT), "gradflow": (check_overrides, None)}[config_name]
    with pytest.raises(CoordCheckError) as e:
        check_command_line(argv, config_name=config_name, check=check, knobs=knobs)
    assert str(e.value).startswith(message)


VALID = [  # overrides Hydra accepts stay accepted
    ["--multirun", "hydra/launcher=joblib", "width=16,32"],
    ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
    ["hydra.job.chdir=false", "hydra.verbose=true", "hydra.run.dir=/tmp/somewhere"],
    ["-m", "width=range(16,48,16)", "lr=interval(0.001,0.1)"],
    ["-m", "model=choice(gpt,mlp)", "model.output_mult=2"],  # a key both options have
    ["-m", "model=glob(*)", "model._target_=coordcheck.setup.models.gpt"],
    ["--multi", "width=16,32"],
    ["--", "width=16"],
    ["-cjob", "model=custom"],  # it prints the config: a ??? is what it shows
    ["++width=64", "+note=baseline", "~forward_targets"],  # a new key no key is near is the user's own
    ["model=custom", "model._target_=coordcheck.setup.models.gpt", "data=tokens", "+model.n_layer=1"],
    ["+experiment=sp_vs_mup", "--multirun"],
    ["--multirun", "width=16,32", "hydra.mode=MULTIRUN", "hydra.sweep.subdir=w${width}"],
    ["model.n_layer=1", "model.n_head=2", "data.seq_len=8", "report.tol=0.2"],
]


@pytest.mark.parametrize("argv", VALID, ids=[" ".join(a) for a in VALID])
def test_overrides_hydra_accepts_pass(argv):
    assert check_command_line(argv) is None


def test_a_new_key_the_builder_names_is_not_a_typo(monkeypatch, tmp_path):
    (tmp_path / "heads_builder.py").write_text(
        "from coordcheck.setup.models import gpt\n\n\n"
        "def build(width, n_heads=2, **kwargs):\n"
        "    return gpt(width, n_head=n_heads, **kwargs)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    argv = ["model.n_head=2", "+model.n_heads=2"]  # n_heads is one letter from n_head, but the builder takes it
    with pytest.raises(CoordCheckError, match="did you mean model.n_head"):
        check_command_line(argv)
    check_command_line(["model._target_=heads_builder.build", *argv])


def test_closest_and_near():
    assert closest("widht", ["width", "base_width", "steps"]) == "width"
    assert closest("WIDHT", ["width"]) == "width" and closest("zzz", ["width"]) is None
    assert closest("adamm", ["adam", "adamw", "sgd"]) == "adam"
    for word, other in [("widht", "width"), ("seed", "seeds"), ("n_laye", "n_layer"), ("tl", "tol"),
                        ("num_hidden_layer", "num_hidden_layers"), ("num_hiden_layer", "num_hidden_layers")]:
        assert is_near(word, other), (word, other)
    for word, other in [("width", "width"), ("n_embd", "n_head"), ("drop", "depth"), ("stats", "steps"),
                        ("intermediate_size", "intermediate_ratio"), ("rope_theta", "rope_scaling")]:
        assert not is_near(word, other), (word, other)


# -- the commands, as a user runs them --------------------------------------------------------------------------------
CLIS = [("coordcheck", "coordcheck"), ("coordcheck.transfer", "coordcheck"), ("coordcheck.gradflow",
                                                                              "coordcheck.gradflow")]


@pytest.mark.parametrize("module, prog", CLIS, ids=[m for m, _ in CLIS])
def test_a_typo_in_a_sweep_exits_2_with_one_line_in_every_command(monkeypatch, capsys, tmp_path, module, prog):
    sweep = tmp_path / "sweep"
    dirs = [f"hydra.sweep.dir={sweep}", f"hydra.run.dir={sweep}"]
    for argv in (["--multirun", *dirs, "model=mlp", "widht=64,128"], [*dirs, "model=mlp", "widht=64,128", "-m"],
                 [*dirs, "model=mlp", "widht=64"]):
        code = run_in_process(monkeypatch, *argv, module=module)
        out, err = capsys.readouterr()
        line = next(a for a in argv if a.startswith("widht"))
        assert (code, out, err) == (2, "", f"{prog}: error: {line}: {WIDTH}\n")
        assert not sweep.exists()  # no job ran, no directory was made


def test_the_gradflow_script_is_the_command_checked_here():
    from coordcheck.gradflow.__main__ import cli

    scripts = {ep.name: ep for ep in importlib.metadata.entry_points(group="console_scripts")}
    assert scripts["coordcheck-gradflow"].load() is cli


@pytest.mark.slow  # a fresh interpreter each: 3-10 s on 2 shared cores
@pytest.mark.parametrize("module, prog", CLIS, ids=[m for m, _ in CLIS])
def test_a_typo_end_to_end_is_exit_2_one_line_and_no_output(tmp_path, module, prog):
    r = run_cli("--multirun", "model=mlp", "widht=64,128", cwd=tmp_path, module=module)
    assert (r.returncode, r.stdout) == (2, "")
    assert r.stderr == f"{prog}: error: widht=64,128: {WIDTH}\n"  # no traceback, no HYDRA_FULL_ERROR hint
    assert not list(tmp_path.iterdir())  # no outputs/ sweep directory, no log
