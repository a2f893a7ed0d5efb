"""``python -m coordcheck [overrides] [--multirun]``: the Hydra app (see ``coordcheck.app``)."""

from __future__ import annotations

from coordcheck.app import jobs as app
from coordcheck.app.config import GROUPS, options  # noqa: F401  (re-exported for old imports)
from coordcheck.app.checks import check_choices  # noqa: F401  (re-exported for old imports)


def cli() -> None:
    """Exit status: 2 for a user mistake (one line, before any job runs), 1 when a job failed or the sweep has no
    report; with ``report.strict=true`` the verdict's: 0 pass, 1 fail, 2 inconclusive."""
    app.run_command(app.main)


if __name__ == "__main__":
    cli()
