import pandas as pd
import pytest

from coordcheck.frame import COLUMNS, FrameError, conform, empty_frame, read_frame, write_frame


def _frame(n=4):
    df = empty_frame()
    rows = {c: ["x"] * n for c, t in COLUMNS.items() if t == "str"}
    rows.update({"lr": [0.01] * n, "width": [64] * n, "seed": [0] * n, "step": list(range(n)),
                 "layer_index": [1] * n, "call_order": [0] * n, "value": [1.0, 2.0, float("nan"), float("inf")][:n]})
    return conform(pd.concat([df, pd.DataFrame(rows)]))


def test_roundtrip_keeps_schema_and_nonfinite(tmp_path):
    df = _frame()
    write_frame(df, tmp_path / "frame.parquet")
    back = read_frame(tmp_path / "frame.parquet")
    assert list(back.columns) == list(COLUMNS)
    assert back.dtypes["width"] == "int64" and back.dtypes["value"] == "float64"
    assert back["value"].isna().sum() == 1 and (back["value"] == float("inf")).sum() == 1
    assert [p.name for p in tmp_path.iterdir()] == ["frame.parquet"]  # no temp files left


def test_failed_write_leaves_nothing(tmp_path):
    df = _frame().drop(columns=["module"])
    with pytest.raises(FrameError, match="missing columns"):
        write_frame(df, tmp_path / "frame.parquet")
    assert list(tmp_path.iterdir()) == []


def test_foreign_and_corrupt_files_are_frame_errors(tmp_path):
    pd.DataFrame({"a": [1]}).to_parquet(tmp_path / "foreign.parquet")
    (tmp_path / "corrupt.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(FrameError, match="missing columns"):
        read_frame(tmp_path / "foreign.parquet")
    with pytest.raises(FrameError, match="unreadable"):
        read_frame(tmp_path / "corrupt.parquet")
