"""MLflow: one run per job and a ``report`` run per sweep, in an experiment per kind of sweep.

Stage: logging. Input: what :func:`coordcheck.loggers.base.emit` passes. Output: runs in the
tracking store — by default a local one in the sweep directory, ``sqlite:///SWEEP_DIR/mlflow/mlflow.db``
with artifacts in ``SWEEP_DIR/mlflow/artifacts`` (MLflow 3 refuses its ``./mlruns`` file store
unless ``MLFLOW_ALLOW_FILE_STORE=true``; ``tracking_uri=file:...`` still reaches it then), or any
``tracking_uri`` (a server, Databricks). Jobs running at once create the local store under a file
lock. Runs are tagged :data:`~coordcheck.loggers.keys.TAG_SWEEP` with the sweep directory. Params
and scalars as MLflow params and metrics; texts as ``<key>.md`` artifacts, tables as ``<key>.csv``
(``table/slopes.csv``), figures as ``figure/<name>.png``.
View: ``mlflow ui --backend-store-uri sqlite:///SWEEP_DIR/mlflow/mlflow.db``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pandas as pd

from coordcheck.loggers import keys
from coordcheck.loggers.base import RunInfo, Tracker, require

__all__ = ["MLflowTracker", "EXPERIMENTS", "local_uri"]

EXPERIMENTS = {"coordcheck": "coordcheck", "transfer": "coordcheck.transfer"}  # experiment_name: null
MAX_PARAM = 6000  # characters of a param value MLflow stores (longer ones are cut)


def local_uri(root: Path) -> str:
    """The default tracking URI of a sweep directory: its own SQLite store."""
    return f"sqlite:///{(root / 'mlflow' / 'mlflow.db').resolve()}"


@contextlib.contextmanager
def _locked(path: Path | None) -> Iterator[None]:
    """An exclusive lock on ``path`` (none for None, or without ``fcntl``): jobs running at once (joblib, submitit)
    must not create the same SQLite store together — its migrations race ("table _alembic_tmp_experiments already
    exists")."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        fcntl = None
    if path is None or fcntl is None:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class MLflowTracker(Tracker):
    """``logger=mlflow``. ``tracking_uri``: null for :func:`local_uri`; ``experiment_name``: null for
    :data:`EXPERIMENTS` of the sweep's kind; ``artifact_location``: where a new experiment keeps its artifacts."""

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, artifact_location: str | None = None,
                 experiment_name: str | None = None, *, strict: bool = False) -> None:
        super().__init__(strict=strict)
        self.tracking_uri, self.artifact_location = tracking_uri, artifact_location
        self.experiment_name = experiment_name
        self.client = self.run_id = None

    def start(self, run: RunInfo) -> None:
        require("mlflow", "mlflow")
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        for name in ("mlflow", "alembic"):  # "Creating initial MLflow database tables..." and the like
            logging.getLogger(name).setLevel(logging.WARNING)
        uri, artifacts, lock = self.tracking_uri, self.artifact_location, None
        if uri is None:
            (run.root / "mlflow").mkdir(parents=True, exist_ok=True)
            uri, lock = local_uri(run.root), run.root / "mlflow" / ".lock"
            artifacts = artifacts or (run.root / "mlflow" / "artifacts").resolve().as_uri()
        name = self.experiment_name or EXPERIMENTS[run.kind]
        with _locked(lock):  # the client creates a new store's tables
            self.client = client = MlflowClient(tracking_uri=uri)
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                try:
                    experiment_id = client.create_experiment(name, artifact_location=artifacts)
                except MlflowException:  # another job created it meanwhile (a server's store)
                    experiment = client.get_experiment_by_name(name)
                    if experiment is None:
                        raise
                    experiment_id = experiment.experiment_id
            else:
                experiment_id = experiment.experiment_id
        tags = {keys.TAG_SWEEP: str(run.root.resolve()), keys.TAG_KIND: run.kind, keys.TAG_ROLE: run.role}
        self.run_id = client.create_run(experiment_id, run_name=run.name, tags=tags).info.run_id

    def log_params(self, params: Mapping[str, str]) -> None:
        from mlflow.entities import Param

        items = [Param(k, str(v)[:MAX_PARAM]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=items[i:i + 100])

    def log_scalars(self, step: int, values: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(self.run_id, metrics=[Metric(k, float(v), now, step) for k, v in values.items()])

    def log_text(self, key: str, text: str) -> None:
        self.client.log_text(self.run_id, text, f"{key}.md")

    def log_table(self, key: str, table: pd.DataFrame) -> None:
        self.client.log_text(self.run_id, table.to_csv(index=False), f"{key}.csv")

    def log_image(self, key: str, path: Path) -> None:
        folder, _, stem = key.rpartition("/")
        if Path(path).stem == stem:
            self.client.log_artifact(self.run_id, str(path), artifact_path=folder or None)
        else:
            import shutil
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                self.client.log_artifact(self.run_id, shutil.copy(path, Path(tmp) / f"{stem}{Path(path).suffix}"),
                                         artifact_path=folder or None)

    def finish(self, failed: bool = False) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id, status="FAILED" if failed else "FINISHED")
            self.run_id = None
