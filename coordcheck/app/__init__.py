"""How a check is driven: the Hydra app of ``python -m coordcheck`` (one job per width, the sweep's end:
:mod:`~coordcheck.app.jobs`), its configuration and the checks of a command line (:mod:`~coordcheck.app.config`,
:mod:`~coordcheck.app.overrides`), and the Python API ``coord_check`` (:mod:`~coordcheck.app.api`). The top stage: it
imports every stage below, none imports it.

``coordcheck.app.<name>`` is the Hydra app's name, as before the app became this package
(``coordcheck.app.SweepCallback``
in a config's ``hydra.callbacks``); loaded on first use, so that ``coordcheck.app.config`` alone stays light."""

from importlib import import_module


def __getattr__(name: str) -> object:
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(import_module("coordcheck.app.jobs"), name)
