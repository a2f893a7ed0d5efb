"""``model=hf`` (coordcheck.setup.hf): transformers models from a config class, the width's fields, the resolvers,
labels,
offline builds, the attention logits the probes see, and the one line without transformers."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from conftest import ROOT

pytest.importorskip("transformers")

import torch  # noqa: E402

from coordcheck.app.config import compose_config  # noqa: E402
from coordcheck.setup.data import tokens  # noqa: E402
from coordcheck.core.errors import CoordCheckError  # noqa: E402
from coordcheck.setup.hf import INSTALL, OFFLINE, build, hf_config  # noqa: E402
from coordcheck.run.train import cross_entropy, forward_loss, train_with_probes  # noqa: E402

TINY = dict(vocab_size=256, num_hidden_layers=1, max_position_embeddings=64, use_cache=False)


@pytest.mark.parametrize("config, inner", [("granite", "intermediate_size"), ("llama", "intermediate_size"),
                                           ("gpt2", "n_inner"), ("transformers.LlamaConfig", "intermediate_size")])
def test_width_sets_hidden_size_and_what_follows_it(config, inner):
    c = hf_config(256, config, n_head=4, mlp_ratio=3, config_kwargs={"num_hidden_layers": 2})
    assert (c.hidden_size, c.num_attention_heads, getattr(c, inner), c.num_hidden_layers) == (256, 4, 768, 2)
    if hasattr(c, "head_dim"):
        assert c.head_dim == 64 and c.num_key_value_heads == 4


def test_grows_heads_keeps_the_head_dimension():
    c = hf_config(512, "llama", grows="heads", head_dim=32)
    assert (c.num_attention_heads, c.head_dim, c.num_key_value_heads) == (16, 32, 16)
    assert hf_config(512, "llama", config_kwargs={"num_key_value_heads": 2}).num_key_value_heads == 2  # GQA kept


@pytest.mark.parametrize("kwargs, words", [
    (dict(config="lama"), "did you mean llama"),
    (dict(config="transformers.LlamaModel"), "not a transformers config class"),
    (dict(config="llama", config_kwargs={"num_hiden_layers": 2}), "did you mean num_hidden_layers"),
    (dict(config="gpt2", config_kwargs={"n_embd": 64}), "set by the width"),
    (dict(config="llama", grows="width"), "model.grows"),
])
def test_bad_config_is_one_line(kwargs, words):
    with pytest.raises(CoordCheckError, match=words):
        hf_config(128, **kwargs)
    with pytest.raises(CoordCheckError, match="multiple of 4"):
        hf_config(130, "llama")


def test_resolvers_write_width_dependent_fields_in_yaml():
    cfg = compose_config(["model=hf", "width=512", "base_width=128", "+model.config_kwargs.logits_scaling=${cc.ratio:}",
                          "+model.config_kwargs.attention_multiplier=${cc.head_dim:-1}", "+x=${cc.ratio:-1}"])
    kw = OmegaConf.to_container(cfg.model.config_kwargs, resolve=True)
    assert (kw["logits_scaling"], kw["attention_multiplier"], cfg.x) == (4.0, 1 / 128, 0.25)
    heads = compose_config(["model=hf", "width=512", "model.grows=heads", "model.head_dim=64", "+d=${cc.head_dim:}"])
    assert heads.d == 64.0


def test_builds_offline_without_touching_the_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"network access: {args}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    for name in OFFLINE:
        monkeypatch.delenv(name, raising=False)
    model = build(64, "llama", config_kwargs=TINY)
    assert all(__import__("os").environ[k] == "1" for k in OFFLINE)
    assert model.config.hidden_size == 64 and model(tokens(seq_len=8).inputs).logits.shape == (4, 8, 256)


def test_labels_are_next_token_targets_and_logits_are_read_without_options():
    model, batch = build(64, "granite", config_kwargs=TINY), tokens(seq_len=8)
    own = forward_loss(model, batch.inputs, batch.targets, "model", forward_targets="labels")
    out = model(batch.inputs, labels=batch.targets)
    assert list(out.keys()) == ["loss", "logits"]  # the loss first: the logits are read by name
    assert torch.allclose(own, cross_entropy(out, batch.targets))
    assert torch.allclose(own, forward_loss(model, batch.inputs, batch.targets, cross_entropy))


@pytest.mark.parametrize("attn, suffix, head_dim", [("sdpa", "(sdpa)", 16), ("eager", "(softmax)", 0)])
def test_probes_see_the_attention_logits(attn, suffix, head_dim):
    model = build(64, "llama", attn_implementation=attn, config_kwargs=TINY)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    records, layout = train_with_probes(model, opt, tokens(seq_len=8), steps=1, stats=("std",))
    name = f"model.layers.0.self_attn.{suffix}"
    assert layout[name][1] == "attention"
    assert records[0].head_dims.get(name, 0) == head_dim  # eager: a softmax's input, whose q.k length is not seen


@pytest.mark.slow
def test_without_transformers_one_line_says_what_to_install():
    code = ("import sys; sys.modules['transformers'] = None; sys.argv = ['coordcheck', 'model=hf', 'threads=1']; "
            "from coordcheck.__main__ import cli; cli()")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [f"coordcheck: error: {INSTALL}"]
    assert 'pip install -e ".[hf]"' in done.stderr


def test_width_dependent_fields_keep_one_configuration_across_widths():
    from coordcheck.app.jobs import config_id, job_hash

    narrow, wide = (compose_config(["model=hf", f"width={w}", "+model.config_kwargs.logits_scaling=${cc.ratio:}"])
                    for w in (128, 512))
    assert config_id(narrow) == config_id(wide)  # one configuration: its slopes are fitted over both widths
    assert job_hash(narrow) != job_hash(wide) and wide.model.config_kwargs.logits_scaling == 4.0


def test_gpt2_dropout_is_off_unless_set():
    assert (hf_config(128, "gpt2").resid_pdrop, hf_config(128, "gpt2", config_kwargs={"attn_pdrop": 0.1}).attn_pdrop
            ) == (0.0, 0.1)


# The checks, from the command line alone (+experiment=granite_mup), at the smallest sizes that still decide:
# widths 64-256 (base 64; the documented run is 128-512), 2 seeds, the causes' probes. Each ~15-25 s on one core.
GRANITE = ["+experiment=granite_mup", "width=64,128,256", "base_width=64", "seeds=2", "tensors=[out,delta,in,own]",
           "threads=1", "progress=false", "report.figures=false"]


def _granite_verdict(monkeypatch, capsys, tmp_path, *overrides: str, steps: int) -> dict:
    import json

    from conftest import run_in_process

    code = run_in_process(monkeypatch, *GRANITE, f"steps={steps}", *overrides, f"hydra.sweep.dir={tmp_path}",
                          "--multirun")
    capsys.readouterr()
    assert code == 0
    return json.loads((tmp_path / "report" / "report.json").read_text())


@pytest.mark.slow
def test_granite_made_mup_by_its_config_knobs_passes(monkeypatch, capsys, tmp_path):
    report = _granite_verdict(monkeypatch, capsys, tmp_path, steps=4)
    assert report["status"] == "pass", report["reason"]


@pytest.mark.slow
def test_granite_with_standard_attention_fails_naming_the_attention(monkeypatch, capsys, tmp_path):
    sqrt = "model.config_kwargs.attention_multiplier=${cc.head_dim:-0.5}"  # 1/sqrt(head_dim)
    report = _granite_verdict(monkeypatch, capsys, tmp_path, sqrt, steps=2)
    assert report["status"] == "fail"
    first = report["causes"][0]
    assert first["kind"] == "attention_scale" and "1/sqrt(d_head) instead of 1/d_head" in first["line"], first


@pytest.mark.slow
def test_granite_without_the_output_multiplier_fails_naming_the_output(monkeypatch, capsys, tmp_path):
    report = _granite_verdict(monkeypatch, capsys, tmp_path, "model.config_kwargs.logits_scaling=1", steps=2)
    assert report["status"] == "fail"
    first = report["causes"][0]
    assert first["kind"] == "output_multiplier" and first["step"] == 0, first


@pytest.mark.parametrize("override, words", [
    ("model.config=lama", "did you mean llama"),
    ("+model.config_kwargs.num_hiden_layers=3", "did you mean model.config_kwargs.num_hidden_layers?"),  # a typo
    ("+model.config_kwargs.n_expert=3", "GraniteConfig has no field 'n_expert'"),  # near no key: the config's check
    ("model.attn_implementation=flash", "must be sdpa or eager"),
    ("width=64,130", "width=130 is not a multiple of 4"),
])
def test_a_bad_model_node_is_one_line_before_any_job_runs(monkeypatch, capsys, tmp_path, override, words):
    from conftest import run_in_process

    code = run_in_process(monkeypatch, "model=hf", override, "threads=1", f"hydra.sweep.dir={tmp_path}", "--multirun")
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("coordcheck: error:") and words in err[0], err
    assert not any(tmp_path.iterdir())  # no job ran


# -- depth: the number of blocks from the harness's depth ---------------------------------------------------------
@pytest.mark.parametrize("config, field", [("llama", "num_hidden_layers"), ("gpt2", "n_layer"), ("t5", "num_layers")])
def test_depth_sets_the_config_classes_own_number_of_layers(config, field):
    from coordcheck.setup.hf import depth_field

    c = hf_config(64, config, depth=3, config_kwargs={"num_hidden_layers": 2} if config == "llama" else None)
    assert depth_field(type(c)) == field and getattr(c, field) == 3 == c.num_hidden_layers  # over config_kwargs' 2
    assert hf_config(64, "llama", config_kwargs={"num_hidden_layers": 2}).num_hidden_layers == 2  # None: as configured
    with pytest.raises(CoordCheckError, match="depth must be a positive integer"):
        hf_config(64, config, depth=0)


def test_the_builder_takes_the_depth_and_builds_that_many_blocks():
    from coordcheck.setup.depth import depth_keyword

    assert depth_keyword(build) == "depth"
    model = build(64, "llama", config_kwargs=TINY, depth=3)
    assert len(model.model.layers) == 3


def test_a_depth_sweep_of_a_hf_model_builds_each_depth(monkeypatch, capsys, tmp_path):
    import pandas as pd

    from conftest import run_in_process

    code = run_in_process(monkeypatch, "model=hf", "model.config=llama", "parametrization=none", "depth=2,3",
                          "width=64", "seeds=1", "steps=1", "threads=1", "progress=false", "report.figures=false",
                          f"hydra.sweep.dir={tmp_path}", "--multirun")
    capsys.readouterr()
    assert code == 0
    frames = {p.parent.name: pd.read_parquet(p) for p in tmp_path.glob("*/frame.parquet")}
    assert len(frames) == 2
    for name, f in frames.items():
        (depth,) = f["depth"].unique()
        assert f"depth={depth}" in name
        blocks = {m.split(".")[2] for m in f["module"] if m.startswith("model.layers.")}
        assert blocks == {str(i) for i in range(depth)}, (depth, blocks)
    assert sorted(int(f["depth"].iloc[0]) for f in frames.values()) == [2, 3]
    assert len({f["family_id"].iloc[0] for f in frames.values()}) == 1
