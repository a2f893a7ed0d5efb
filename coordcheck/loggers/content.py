"""What the trackers show, read from the files a job or a sweep wrote (as the report reads them).

Stage: logging. Input: a job's directory (its frame, ``frame.parquet`` or ``transfer.parquet``, and
``job.json``) and config, or a sweep's ``report/`` directory (``report.json`` / ``transfer.json``,
the markdown report, the CSV tables, the PNG figures). Output: a :class:`~coordcheck.loggers.base.Content`
under the names of :mod:`coordcheck.loggers.keys`. Reading files, not the objects in memory, makes it
the same whatever launcher ran the jobs, for the coordinate check and the transfer sweep alike.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

import pandas as pd

from coordcheck.loggers import keys
from coordcheck.loggers.base import Content

__all__ = ["job_content", "sweep_content", "environment", "flatten", "KINDS", "PACKAGES"]

PACKAGES = ("coordcheck", "torch", "mup", "hydra-core", "transformers")  # versions logged as env/<name>
JOB_FACTS = ("status", "error", "seconds", "n_params", "rows", "threads")  # job.json fields logged as job/<name>


# per kind: the job's frame, the report's JSON and markdown, the passing status, the tables (name: CSV file, or
# None for a list in the JSON), and the JSON list whose ``line`` / ``reason`` fields are the causes
KINDS: dict[str, dict[str, Any]] = {
    "coordcheck": {"frame": "frame.parquet", "json": "report.json", "md": "report.md", "passed": "pass",
                   "tables": {"slopes": "slopes.csv", "causes": None}, "causes": ("causes", "line")},
    "transfer": {"frame": "transfer.parquet", "json": "transfer.json", "md": "transfer.md", "passed": "transfers",
                 "tables": {"optima": "optima.csv", "shifts": "shifts.csv"}, "causes": ("parametrizations", "reason")},
}


def environment(job: Mapping[str, Any] | None = None) -> dict[str, str]:
    """``env/*``: the versions of :data:`PACKAGES` that are installed, python, platform, host, and where the job ran
    (``device``, ``device_name``, ``cuda``, ``precision``, ``threads`` from its ``job.json``)."""
    env = {"python": sys.version.split()[0], "platform": platform.platform(), "host": socket.gethostname()}
    for name in PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    for name in ("device", "device_name", "cuda", "precision", "threads"):
        if (job or {}).get(name) is not None:
            env[name] = str(job[name])
    return {keys.ENV.format(name=k): v for k, v in env.items()}


def flatten(tree: Any, prefix: str = "") -> dict[str, str]:
    """Leaves of a nested dict as ``a.b.c`` → string (lists stay one value: ``[128, 256]``)."""
    if isinstance(tree, Mapping):
        out: dict[str, str] = {}
        for k, v in tree.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(tree) if isinstance(tree, (list, tuple)) else str(tree)}


def _job_meta(job_dir: Path) -> dict:
    try:
        return json.loads((job_dir / "job.json").read_text())
    except (OSError, ValueError):
        return {}


def _loss_rows(kind: str, job_dir: Path) -> pd.DataFrame:
    """(seed, step, key, value) of the job's losses, from its frame; empty when it left none."""
    path = job_dir / KINDS[kind]["frame"]
    if not path.exists():
        return pd.DataFrame(columns=["seed", "step", "key", "value"])
    if kind == "transfer":
        f = pd.read_parquet(path, columns=["seed", "step", "split", "loss"])
        f["key"] = f["split"].map({"train": keys.LOSS, "heldout": keys.HELDOUT_LOSS})
        return f.rename(columns={"loss": "value"})[["seed", "step", "key", "value"]].dropna(subset=["key"])
    from coordcheck.core.frame import LOSS_MODULE

    f = pd.read_parquet(path, columns=["seed", "step", "module", "tensor", "value"])
    f = f[(f["module"] == LOSS_MODULE) & (f["tensor"] == "loss")]
    return f.assign(key=keys.LOSS)[["seed", "step", "key", "value"]]


def job_scalars(kind: str, job_dir: Path) -> list[tuple[int, dict[str, float]]]:
    """Per step: the mean loss over seeds, and each seed's when there are several (:data:`keys.LOSS_SEED`)."""
    rows = _loss_rows(kind, job_dir)
    seeds = sorted(rows["seed"].unique())
    out = []
    for step, at in rows.groupby("step", sort=True):
        values = {k: float(g["value"].mean()) for k, g in at.groupby("key")}
        if len(seeds) > 1:
            for (k, seed), g in at.groupby(["key", "seed"]):
                values[(keys.LOSS_SEED if k == keys.LOSS else keys.HELDOUT_LOSS_SEED).format(seed=seed)] = float(
                    g["value"].iloc[0])
        out.append((int(step), values))
    return out


def job_content(kind: str, job_dir: Path, config: Mapping[str, Any]) -> Content:
    """One job's run: its losses per step, the environment, its config and status (``job.json``)."""
    meta = _job_meta(job_dir)
    params = environment(meta)
    params.update({keys.CONFIG.format(name=k): v for k, v in flatten(config).items()})
    params.update({keys.JOB.format(name=k): str(meta[k]) for k in JOB_FACTS if meta.get(k) is not None})
    import yaml

    return Content(params=params, scalars=job_scalars(kind, job_dir),
                   texts={keys.CONFIG_TEXT: yaml.safe_dump(dict(config), sort_keys=False)},
                   failed=meta.get("status") not in (None, "ok"))


def sweep_content(kind: str, report_dir: Path) -> Content:
    """The sweep's end: the verdict, the whole report, the causes, the tables and the figures of ``report_dir``."""
    spec = KINDS[kind]
    payload = json.loads((report_dir / spec["json"]).read_text())
    status = str(payload["status"])
    params = environment()
    params.update({keys.VERDICT_STATUS: status, keys.REASON: str(payload.get("reason", "")),
                   keys.JOB.format(name="widths"): json.dumps(payload.get("widths", [])),
                   keys.JOB.format(name="failed"): str(len(payload.get("jobs", {}).get("problems", [])))})
    listed, field = spec["causes"]
    causes = [str(c.get(field) or "") for c in payload.get(listed) or [] if c.get(field)]
    texts = {keys.VERDICT: f"{status.upper()} — {payload.get('reason', '')}",
             keys.CAUSES: "\n".join(causes) if causes else "(no causes: none measured, or none found)"}
    if (report_dir / spec["md"]).exists():
        texts[keys.REPORT] = (report_dir / spec["md"]).read_text()
    tables = {}
    for name, csv in spec["tables"].items():
        if csv is None:
            table = pd.DataFrame(payload.get(name) or [])
        elif (report_dir / csv).exists():
            table = pd.read_csv(report_dir / csv)
        else:
            continue
        if len(table):
            tables[keys.TABLE.format(name=name)] = table
    figures = (payload.get("figures") or {}).values()  # {"coord_check (png)": "coord_check.png", ...}
    images = {keys.FIGURE.format(name=Path(rel).stem): report_dir / rel for rel in figures
              if str(rel).endswith(".png") and (report_dir / rel).exists()}
    return Content(params=params, scalars=[(0, {keys.VERDICT_PASSED: float(status == spec["passed"])})], texts=texts,
                   tables=tables, images=images)
