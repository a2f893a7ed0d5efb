"""The number of experts as an axis: a builder given ``experts`` experts (and, with ``granularity``, experts of a
size that keeps their total fixed).

Stage: build. Input: the model builder (a ``functools.partial`` of the model node, or any callable), the number of
experts ``n``, ``key`` (the builder's keyword for it; ``auto``: the first of :data:`EXPERTS_KEYS` it takes; for a
Hugging Face config, the first of them the config class has) and ``granularity``. Output: the builder with the count
set — the coordinate check's ``experts=4,8,16 --multirun`` (at one width: the experts verdict,
:mod:`coordcheck.judge.experts`).

``granularity=true`` keeps the total expert width fixed: each expert's inner size is scaled by ``base / n``, ``base``
the builder's own count (the built-in MoE's ``expert_ratio``; a Hugging Face config's ``moe_intermediate_size`` is
set from the width by :func:`coordcheck.setup.hf.hf_config`, so granularity is the built-in MoE's only).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from coordcheck.core.errors import CoordCheckError

__all__ = ["EXPERTS_KEYS", "with_experts", "check_experts"]

EXPERTS_KEYS = ("n_experts", "num_experts", "num_local_experts", "n_routed_experts")
RATIO_KEY = "expert_ratio"  # the built-in MoE's expert size, as a fraction of the width


def check_experts(value: Any, name: str = "experts", optional: bool = False) -> int | None:
    """``value`` as a number of experts (an integer >= 2), or a one-line error."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise CoordCheckError(f"{name} must be a number of experts, an integer >= 2 (e.g. {name}=4,8,16 --multirun), "
                              f"got {value!r}")
    return value


def _params(func: Callable) -> dict[str, inspect.Parameter]:
    try:
        return dict(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return {}


def with_experts(build: Callable, n: int, key: str = "auto", granularity: bool = False) -> Callable:
    """``build`` with ``n`` experts (module docstring); a one-line error naming what to set when it takes none."""
    n = check_experts(n)
    func = getattr(build, "func", build)
    kw = dict(getattr(build, "keywords", None) or {})
    params = _params(func)
    name = getattr(func, "__qualname__", repr(func))
    if "config_kwargs" in params:  # coordcheck.setup.hf.build: the count is a field of the config
        if granularity:
            raise CoordCheckError("granularity=true: only the built-in model=moe sets its experts' size from the "
                                  "count; a Hugging Face config's moe_intermediate_size follows the width — drop "
                                  "granularity or use model=moe")
        from coordcheck.setup.hf import config_class

        fields = set(config_class(kw.get("config", params["config"].default))().to_dict())
        field = key if key != "auto" else next((k for k in EXPERTS_KEYS if k in fields), None)
        if field is None or field not in fields:
            has = f"no field {key!r}" if key != "auto" else f"none of {', '.join(EXPERTS_KEYS)}"
            raise CoordCheckError(f"experts={n}: the config has {has}: set experts_key to its field for the number of "
                                  "experts")
        kw["config_kwargs"] = {**(kw.get("config_kwargs") or {}), field: n}
        return functools.partial(func, **kw)
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    field = key if key != "auto" else next((k for k in EXPERTS_KEYS if k in params or k in kw), None)
    if field is None or not (field in params or field in kw or takes_any):
        raise CoordCheckError(f"experts={n}: the model builder {name} takes none of {', '.join(EXPERTS_KEYS)}: set "
                              "experts_key to its keyword for the number of experts")
    if granularity:
        base = kw.get(field, params[field].default if field in params else inspect.Parameter.empty)
        ratio = kw.get(RATIO_KEY, params[RATIO_KEY].default if RATIO_KEY in params else inspect.Parameter.empty)
        if not isinstance(base, int) or isinstance(ratio, bool) or not isinstance(ratio, (int, float)):
            raise CoordCheckError(f"granularity=true: the builder {name} needs its own {field} and {RATIO_KEY} (the "
                                  "experts' size as a fraction of the width) to keep their product fixed — use "
                                  "model=moe")
        kw[RATIO_KEY] = ratio * base / n
    kw[field] = n
    return functools.partial(func, **kw)
