"""Fixed and fresh batches (``coordcheck.setup.data``): the same for every width and model seed, never the global
RNG's."""

import pytest
import torch

from coordcheck.setup.data import HELDOUT_FRACTION, Batch, as_batch, gaussian, text, text_stream, tokens
from coordcheck.core.errors import CoordCheckError


def take(it, n):
    return [next(it) for _ in range(n)]


def test_batches_are_fixed_and_independent_of_global_rng():
    torch.manual_seed(1)
    a = tokens(batch_size=2, seq_len=8)
    torch.manual_seed(2)
    b = tokens(batch_size=2, seq_len=8)
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.inputs[:, 1:], a.targets[:, :-1])
    t = text(batch_size=2, seq_len=16)
    assert t.inputs.shape == (2, 16) and int(t.inputs.max()) < 256 and t.name == "text"
    g = gaussian(batch_size=4, dim=3, n_classes=2)
    assert g.inputs.shape == (4, 3) and set(g.targets.tolist()) <= {0, 1}


def test_drawing_a_batch_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state()
    tokens(), text(), gaussian(), take(text_stream("train", 0), 2)
    assert torch.equal(before, torch.get_rng_state())


@pytest.mark.parametrize("make", [tokens, text, gaussian])
def test_the_data_seed_picks_the_batch(make):
    assert torch.equal(make(seed=3).inputs, make(seed=3).inputs)
    assert not torch.equal(make(seed=3).inputs, make(seed=4).inputs)


def test_shapes_dtypes_and_names():
    t = tokens(batch_size=3, seq_len=5, vocab_size=7)
    assert t.inputs.shape == t.targets.shape == (3, 5) and t.inputs.dtype == torch.int64
    assert int(t.inputs.max()) < 7 and (t.name, t.policy) == ("tokens", "fixed")
    g = gaussian(batch_size=6, dim=4, n_classes=3)
    assert g.inputs.shape == (6, 4) and g.inputs.dtype == torch.float32
    assert g.targets.shape == (6,) and g.targets.dtype == torch.int64 and (g.name, g.policy) == ("gaussian", "fixed")
    x = text(batch_size=2, seq_len=8)
    assert torch.equal(x.inputs[:, 1:], x.targets[:, :-1])  # next-byte targets


def test_tokens_batch_is_contiguous():
    for b in (tokens(), text()):
        assert b.inputs.is_contiguous() and b.targets.is_contiguous()
        b.targets.view(-1)  # models that flatten their targets with .view work on the built-in batches


def test_text_is_byte_level():
    with pytest.raises(CoordCheckError, match="byte-level and needs model.vocab_size >= 256, got 100"):
        text(vocab_size=100)


def test_as_batch_takes_a_batch_or_a_pair_of_tensors():
    b = tokens()
    assert as_batch(b) is b
    x, y = torch.zeros(2, 3), torch.zeros(2, dtype=torch.long)
    for pair in ((x, y), [x, y]):
        got = as_batch(pair, name="mine")
        assert isinstance(got, Batch) and got.inputs is x and got.targets is y and got.name == "mine"
    assert as_batch((x, y)).name == "custom"


@pytest.mark.parametrize("obj, kind", [(3, "int"), ((torch.zeros(1),), "tuple"), ((torch.zeros(1), [0]), "tuple"),
                                       ("tokens", "str")])
def test_as_batch_refuses_anything_else_in_one_line(obj, kind):
    with pytest.raises(CoordCheckError) as e:
        as_batch(obj)
    assert str(e.value) == f"data must be a name, a Batch or an (inputs, targets) pair of tensors, got {kind}"


def test_text_stream_is_fresh_deterministic_and_holds_out_its_tail():
    a, b = take(text_stream("train", 0), 3), take(text_stream("train", 0), 3)
    assert all(torch.equal(x.inputs, y.inputs) for x, y in zip(a, b))  # same seed, same batches, same order
    assert not torch.equal(a[0].inputs, a[1].inputs)  # a fresh batch every step
    assert not torch.equal(a[0].inputs, next(text_stream("train", 1)).inputs)
    held = next(text_stream("heldout", 0, batch_size=4, seq_len=16))
    assert held.inputs.shape == (4, 16) and torch.equal(held.inputs[:, 1:], held.targets[:, :-1])
    assert a[0].policy == "fresh" and a[0].name == "text"


def test_heldout_windows_come_from_the_corpus_tail_and_training_windows_from_the_rest():
    from pydoc_data.topics import topics  # the corpus, rebuilt here as its docstring describes it

    corpus = "\n".join(topics[k] for k in sorted(topics)).encode("utf-8")
    cut = int(len(corpus) * (1 - HELDOUT_FRACTION))
    for split, part in (("train", corpus[:cut + 64]), ("heldout", corpus[cut:])):
        for b in take(text_stream(split, 0, batch_size=8, seq_len=64), 4):
            assert all(bytes(row.tolist()) in part for row in b.inputs), split


@pytest.mark.parametrize("kwargs, words", [({"split": "test"}, "split must be one of"),
                                           ({"vocab_size": 100}, "vocab_size >= 256")])
def test_text_stream_bad_arguments_are_one_line(kwargs, words):
    with pytest.raises(CoordCheckError, match=words):
        text_stream(**kwargs)
