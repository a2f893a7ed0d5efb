"""``python -m coordcheck.report SWEEP_DIR [--strict]``: the report of a sweep from its files on disk."""

from coordcheck.report.command import cli

if __name__ == "__main__":
    cli()
