"""TensorBoard: event files, one run directory per job and ``report`` for the end of the sweep.

Stage: logging. Input: what :func:`coordcheck.loggers.base.emit` passes. Output:
``SAVE_DIR/<run name>/events.out.tfevents.*`` (``SAVE_DIR``: ``SWEEP_DIR/tensorboard`` by default),
written with ``torch.utils.tensorboard`` (needs the ``tensorboard`` package). Scalars against the
step; params, texts and tables as markdown text (a table over :data:`MAX_ROWS` rows is cut: the
whole one is the CSV in ``report/``); figures as images. View: ``tensorboard --logdir SAVE_DIR``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from coordcheck.loggers import keys
from coordcheck.loggers.base import RunInfo, Tracker, require

__all__ = ["TensorBoardTracker", "MAX_ROWS", "markdown_table"]

MAX_ROWS = 500  # rows of a table shown as TensorBoard text (its markdown view slows down beyond)


def markdown_table(table: pd.DataFrame, max_rows: int = MAX_ROWS) -> str:
    """A markdown table of the first ``max_rows`` rows (and a line saying how many were left out)."""
    def cell(v: object) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(c) for c in table.columns) + " |", "|" + "---|" * len(table.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |"
              for row in table.head(max_rows).itertuples(index=False)]
    if len(table) > max_rows:
        lines.append(f"\n({len(table) - max_rows} more rows: the whole table is the CSV in the sweep's report/)")
    return "\n".join(lines)


class TensorBoardTracker(Tracker):
    """``logger=tensorboard``. ``save_dir``: null for ``SWEEP_DIR/tensorboard``."""

    name = "tensorboard"

    def __init__(self, save_dir: str | None = None, *, strict: bool = False) -> None:
        super().__init__(strict=strict)
        self.save_dir = save_dir
        self.writer = None

    def start(self, run: RunInfo) -> None:
        require("tensorboard", "tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        root = Path(self.save_dir) if self.save_dir else run.root / "tensorboard"
        self.writer = SummaryWriter(log_dir=str(root / run.name))

    def log_params(self, params: Mapping[str, str]) -> None:
        if params:
            self.writer.add_text(keys.PARAMS, markdown_table(pd.DataFrame({"key": list(params),
                                                                           "value": list(params.values())}), 10_000))

    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, global_step=step)

    def log_text(self, key: str, text: str) -> None:
        self.writer.add_text(key, text if key != keys.CONFIG_TEXT else f"```yaml\n{text}```")

    def log_table(self, key: str, table: pd.DataFrame) -> None:
        self.writer.add_text(key, markdown_table(table))

    def log_image(self, key: str, path: Path) -> None:
        import numpy as np
        from PIL import Image

        with Image.open(path) as im:
            self.writer.add_image(key, np.asarray(im.convert("RGB")), dataformats="HWC")

    def finish(self, failed: bool = False) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
