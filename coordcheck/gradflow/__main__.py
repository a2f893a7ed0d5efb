"""``python -m coordcheck.gradflow [overrides]``: the gradient-flow command (see ``coordcheck.gradflow.app``)."""

from __future__ import annotations

from coordcheck.gradflow.app import cli

if __name__ == "__main__":
    cli()
