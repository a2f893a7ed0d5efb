"""``python -m coordcheck [overrides] [--multirun]``: the Hydra app (see ``coordcheck.app``)."""

from __future__ import annotations

import sys

import hydra

from coordcheck import app
from coordcheck.errors import CoordCheckError

from coordcheck.app import GROUPS, check_choices, options  # noqa: F401  (re-exported: coordcheck.gradflow uses them)


def cli() -> None:
    """Exit status: 2 for a user mistake (one line, before any job runs), 1 when a job failed or the sweep has no
    report; with ``report.strict=true`` the verdict's: 0 pass, 1 fail, 2 inconclusive."""
    outcome = app.OUTCOME = app.Outcome()
    try:
        check_choices(sys.argv[1:])
        app.check_command_line(sys.argv[1:])
    except CoordCheckError as e:
        print(f"coordcheck: error: {e}", file=sys.stderr)
        sys.exit(2)
    hydra.main(version_base="1.3", config_path=app.CONF_DIR, config_name="config")(app.main)()
    if outcome.failed:
        print(f"coordcheck: {len(outcome.failed)} job(s) failed (see job.json in their directories)", file=sys.stderr)
    elif outcome.strict and outcome.exit_code and outcome.error is None:
        print(f"coordcheck: report.strict=true: {outcome.status.upper()} exits {outcome.exit_code}", file=sys.stderr)
    sys.exit(outcome.exit_code)


if __name__ == "__main__":
    cli()
