"""Text for people and for JSON (``coordcheck.core.text``): numbers, Markdown cells, JSON-safe values."""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordcheck.core.text import json_safe, md_escape, num, records, write_json


def test_md_escape_leaves_no_markup_and_one_line():
    assert md_escape("a|b\nc") == "a\\|b c"
    assert md_escape("blocks.0|<script>") == "blocks.0\\|\\<script>"
    assert md_escape("`x`*_[y](z)") == "\\`x\\`\\*\\_[y\\](z)"
    assert md_escape(3) == "3" and md_escape("  two   spaces \t") == "two spaces"


@pytest.mark.parametrize("text", ["256-1024", "cpu (cpu), torch 2.14.1+cu130, fp32", "blocks.0.attn.c_q",
                                  "lm_head", "layers.0.attention.(sdpa)", "20 module(s) violate muP; slope +2.03",
                                  "-0.35", "a > b", "#3", "widths [128, 256]", "x.detach()!"])
def test_md_escape_leaves_what_markdown_reads_as_text_alone(text):
    assert md_escape(text) == text  # readable in a terminal: no escape that Markdown does not need


@pytest.mark.parametrize("text, escaped", [
    ("_orig_mod.h.0", "\\_orig_mod.h.0"), ("x_ and _y", "x\\_ and \\_y"), ("a*b*c", "a\\*b\\*c"),
    ("[x](http://e)", "[x\\](http://e)"), ("&lt;b&gt;", "\\&lt;b\\&gt;"), ("~~gone~~", "\\~\\~gone\\~\\~"),
    ("# title", "\\# title"), ("> quote", "\\> quote"), ("- item", "\\- item"), ("1. first", "1\\. first"),
    ("C:\\temp", "C:\\\\temp"),
])
def test_md_escape_escapes_what_would_start_markup(text, escaped):
    assert md_escape(text) == escaped


_PUNCT = r"""!"#$%&'()*+,-./:;<=>?@[\]^_`{|}~"""


def _unescape(md: str) -> str:
    """What CommonMark shows for text with backslash escapes only: a backslash before ASCII punctuation drops."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "\\" and i + 1 < len(md) and md[i + 1] in _PUNCT:
            i += 1
        out.append(md[i])
        i += 1
    return "".join(out)


@given(st.text(alphabet=st.sampled_from("ab_1 .|*`<>[]()&;#-+~\\!"), max_size=30))
def test_md_escape_round_trips_and_keeps_table_cells_apart(text):
    md = md_escape(text)
    assert _unescape(md) == " ".join(text.split())  # renders as the text reads
    assert _cell_ends(f"| {md} | x |") == 3  # a | inside the text never ends its cell


def _cell_ends(row: str) -> int:
    """The |s that split a GitHub table row: a backslash takes the next character with it."""
    n, i = 0, 0
    while i < len(row):
        n += row[i] == "|"
        i += 2 if row[i] == "\\" else 1
    return n


@pytest.mark.parametrize("x, text", [(0.123, "+0.12"), (-1, "-1.00"), (np.float32(2.5), "+2.50"), ("0.5", "+0.50"),
                                     (None, "—"), (float("nan"), "—"), (float("inf"), "—"), ("abc", "—"), ([1], "—")])
def test_num_formats_finite_numbers_and_dashes_the_rest(x, text):
    assert num(x) == text


def test_num_takes_a_format():
    assert num(3, "{:.1f} s") == "3.0 s" and num(float("-inf"), "{:.1f}") == "—"


def test_json_safe_gives_plain_json_values():
    value = {1: np.int64(3), "f": np.float64(0.5), "nan": float("nan"), "inf": np.float32("inf"),
             "nested": [(np.bool_(True), None, "s")]}
    safe = json_safe(value)
    assert safe == {"1": 3, "f": 0.5, "nan": None, "inf": None, "nested": [[True, None, "s"]]}
    assert type(safe["1"]) is int and type(safe["f"]) is float
    json.dumps(safe, allow_nan=False)  # strict JSON: would raise on a NaN left behind


def test_records_keeps_the_columns_asked_for_in_their_order():
    df = pd.DataFrame({"b": [1.0, float("nan")], "a": ["x", "y"], "other": [0, 0]})
    assert records(df, ["a", "b", "missing"]) == [{"a": "x", "b": 1.0}, {"a": "y", "b": None}]
    assert list(records(df, ["b", "a"])[0]) == ["b", "a"]
    assert records(df.iloc[:0], ["a"]) == []


def test_write_json_is_indented_atomic_and_takes_anything(tmp_path):
    path = write_json(tmp_path / "out.json", {"path": tmp_path, "n": 1})
    assert path == tmp_path / "out.json" and [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temp file left
    text = path.read_text()
    assert text.startswith("{\n  ") and json.loads(text) == {"path": str(tmp_path), "n": 1}
    write_json(str(path), {"n": 2})  # a str path, rewritten in place
    assert json.loads(path.read_text()) == {"n": 2}
