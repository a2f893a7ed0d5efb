import pandas as pd
import pytest

from coordcheck.core.frame import COLUMNS, FrameError, conform, empty_frame, read_frame, write_frame


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


def test_atomic_files_get_the_umask_mode_not_mkstemps(tmp_path):
    import os
    import stat

    from coordcheck.core.frame import atomic_write

    old = os.umask(0o022)
    try:
        path = atomic_write(tmp_path / "report.md", lambda p: p.write_text("x"))
        os.umask(0o027)
        private = atomic_write(tmp_path / "job.json", lambda p: p.write_text("{}"))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # group- and world-readable, as any new file (was 0600)
    assert stat.S_IMODE(private.stat().st_mode) == 0o640  # a stricter umask is respected
