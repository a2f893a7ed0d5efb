"""Hydra configs; shipped inside the wheel as the package ``coordcheck.conf`` (see pyproject)."""
