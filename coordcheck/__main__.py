"""``python -m coordcheck [overrides] [--multirun]``: the Hydra app (see ``coordcheck.app``)."""

from __future__ import annotations

import sys

import hydra

from coordcheck import app


def cli() -> None:
    hydra.main(version_base="1.3", config_path=app.CONF_DIR, config_name="config")(app.main)()
    if app.FAILED_JOBS:
        print(f"coordcheck: {len(app.FAILED_JOBS)} job(s) failed (see job.json in their directories)", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    cli()
