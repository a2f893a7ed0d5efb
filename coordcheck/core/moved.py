"""Old import paths, kept for one release: ``coordcheck.verdict`` and the other flat modules before the stages.

Stage: none (the ground floor; it imports no stage). Input: an ``import`` of a path that :data:`MOVED` lists (the
package's ``__init__`` puts :class:`OldPaths` on ``sys.meta_path``). Output: a stand-in module that hands on every name
from the module(s) where it lives now, and a ``DeprecationWarning`` naming the new path, once per old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["MOVED", "OldPaths", "install"]

# old path -> where its names live now (a module split by concern lists each part, searched in order)
MOVED: dict[str, tuple[str, ...]] = {
    "coordcheck.errors": ("coordcheck.core.errors",),
    "coordcheck.frame": ("coordcheck.core.frame",),
    "coordcheck.text": ("coordcheck.core.text",),
    "coordcheck.models": ("coordcheck.setup.models",),
    "coordcheck.hf": ("coordcheck.setup.hf",),
    "coordcheck.data": ("coordcheck.setup.data",),
    "coordcheck.parametrization": ("coordcheck.setup.parametrization",),
    "coordcheck.init": ("coordcheck.setup.init",),
    "coordcheck.optim": ("coordcheck.setup.optim",),
    "coordcheck.depth": ("coordcheck.setup.depth",),
    "coordcheck.device": ("coordcheck.setup.device",),
    "coordcheck.probes": ("coordcheck.record.probes", "coordcheck.record.outputs", "coordcheck.record.moments"),
    "coordcheck.own": ("coordcheck.record.own",),
    "coordcheck.moments": ("coordcheck.record.moments",),
    "coordcheck.layout": ("coordcheck.record.layout", "coordcheck.setup.blocks"),
    "coordcheck.eps": ("coordcheck.record.eps",),
    "coordcheck.param_facts": ("coordcheck.record.param_facts",),
    "coordcheck.shapes": ("coordcheck.record.shapes",),
    "coordcheck.train": ("coordcheck.run.train",),
    "coordcheck.sweep": ("coordcheck.run.sweep",),
    "coordcheck.slopes": ("coordcheck.judge.slopes",),
    "coordcheck.verdict": ("coordcheck.judge.verdict", "coordcheck.judge.rules", "coordcheck.judge.stability"),
    "coordcheck.causes": ("coordcheck.judge.explain",),
    "coordcheck.audit": ("coordcheck.judge.facts",),
    "coordcheck.depth_verdict": ("coordcheck.judge.depth",),
    "coordcheck.narrow": ("coordcheck.judge.narrow",),
    "coordcheck.places": ("coordcheck.judge.places",),
    "coordcheck.config": ("coordcheck.app.config", "coordcheck.app.checks", "coordcheck.report.knobs",
                          "coordcheck.transfer.knobs", "coordcheck.core.targets", "coordcheck.core.errors"),
    "coordcheck.overrides": ("coordcheck.app.overrides", "coordcheck.core.typos"),
    "coordcheck.api": ("coordcheck.app.api",),
    "coordcheck.gradflow_report": ("coordcheck.gradflow.checks", "coordcheck.gradflow.plot",
                                   "coordcheck.gradflow.report", "coordcheck.gradflow.schema"),
}


class _Moved(types.ModuleType):
    """A module that moved: its names, looked up where they live now."""

    def __getattr__(self, name: str) -> object:
        if name.startswith("__"):
            raise AttributeError(name)
        for home in MOVED[self.__name__]:
            module = importlib.import_module(home)
            if hasattr(module, name):
                return getattr(module, name)
        raise AttributeError(f"module {self.__name__!r} (now {', '.join(MOVED[self.__name__])}) has no attribute "
                             f"{name!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for home in MOVED[self.__name__] for n in dir(importlib.import_module(home))})


def _caller_level() -> int:
    """The ``stacklevel`` of the ``import`` statement, for the warning's line: the frames of this module up to it
    (``warnings`` itself skips the import machinery's frames)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and (frame.f_code.co_filename == __file__
                                 or frame.f_code.co_filename.startswith("<frozen importlib")):
        level += frame.f_code.co_filename == __file__
        frame = frame.f_back
    return level


class OldPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED` (only those) and loads each as a :class:`_Moved` stand-in."""

    def find_spec(self, fullname: str, path: object = None, target: object = None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec) -> types.ModuleType:
        homes = MOVED[spec.name]
        warnings.warn(f"{spec.name} is now {' and '.join(homes)}: import it from there (the old path goes in the "
                      "next release)", DeprecationWarning, stacklevel=_caller_level())
        return _Moved(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def install() -> None:
    """Put :class:`OldPaths` on ``sys.meta_path`` once (after the real finders: a real module always wins)."""
    if not any(isinstance(f, OldPaths) for f in sys.meta_path):
        sys.meta_path.append(OldPaths())
