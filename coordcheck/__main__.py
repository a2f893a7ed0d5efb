"""``python -m coordcheck [overrides] [--multirun]``: the Hydra app (see ``coordcheck.app``)."""

from __future__ import annotations

import re
import sys
from importlib import resources
from pathlib import Path

import hydra

from coordcheck import app
from coordcheck.errors import CoordCheckError

GROUPS = ("model", "data", "parametrization", "optimizer")


def options(group: str) -> list[str]:
    """The options of a config group (``conf/<group>/*.yaml``), from the checkout or the wheel."""
    if app.CONF_DIR.startswith("pkg://"):
        folder = resources.files("coordcheck.conf").joinpath(group)
        return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))
    return sorted(p.stem for p in (Path(app.CONF_DIR) / group).glob("*.yaml"))


def check_choices(argv: list[str]) -> None:
    """One line for an unknown group option (``model=foo``), before Hydra's multi-line message."""
    for arg in argv:
        m = re.fullmatch(rf"({'|'.join(GROUPS)})=([\w.,-]+)", arg)
        if not m:
            continue
        group, value = m.groups()
        known = options(group)
        for choice in value.split(","):
            if choice and choice not in known:
                raise CoordCheckError(f"unknown {group} {choice!r}: choose one of {', '.join(known)} (conf/{group}/)")


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
