"""Dotted paths to objects: what a config's ``_target_`` (or ``model.config``) names, imported as Hydra imports it.

Stage: ground (shared by the setup, which finds a Hugging Face config class by name, and the app, which checks every
``_target_`` of a command line before any job runs). Input: a dotted path (``coordcheck.setup.models.gpt``) and the
config key that holds it. Output: the object, or one line naming the key and why it cannot be imported.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Any

from coordcheck.core.errors import CoordCheckError

__all__ = ["locate"]


def locate(path: str, key: str) -> Any:
    """The object a dotted path names (``coordcheck.setup.models.gpt``), imported as Hydra's ``_target_`` is; one line
    naming ``key`` when it cannot be: the module that was not found, the attribute that is missing, or the error
    its module raised on import."""
    if not isinstance(path, str) or not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", path):
        raise CoordCheckError(f"{key}={path!r} is not a dotted path: write it as package.module.function")
    parts = path.split(".")
    obj: Any = None
    for i, part in enumerate(parts):
        parent = ".".join(parts[:i])
        if i and hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        if i and not isinstance(obj, ModuleType):
            raise CoordCheckError(f"{key}={path}: {parent!r} has no attribute {part!r}: check the name")
        name = ".".join(parts[:i + 1])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # a module it imports is missing
                raise CoordCheckError(f"{key}={path}: importing {name!r} failed: {e}: install it") from None
            if i:
                raise CoordCheckError(f"{key}={path}: {parent!r} has no attribute {part!r}: check the name") from None
            raise CoordCheckError(f"{key}={path}: module {name!r} not found: check the spelling, or install the "
                                  "package (or put its directory on PYTHONPATH)") from None
        except CoordCheckError:  # the module says what to do (coordcheck.setup.hf: what to install)
            raise
        except Exception as e:  # the module's own code failed as it was imported
            first = (str(e).strip().splitlines() or [""])[0]
            raise CoordCheckError(f"{key}={path}: importing {name!r} failed ({type(e).__name__}: {first}): "
                                  "fix that module") from None
    return obj
