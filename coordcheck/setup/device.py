"""Where and in what precision a sweep trains: ``device`` and ``precision``, checked once, in one place.

Stage: train (shared by the coordinate check, the learning-rate sweep and the gradient-flow
probe). ``device``: ``auto`` (CUDA when torch sees it, else the CPU), ``cpu``, ``cuda``,
``cuda:N``; models are built directly on it (under a ``torch.device`` context: a width-8192
GPT built on the CPU and moved took 27.5 s per seed on an H200 machine, built on the GPU 0.64 s),
while mup's base shapes stay on the meta device. ``precision``: ``fp32``; ``bf16`` (autocast
around the forward, as LLM training runs); ``fp16`` (autocast and a gradient scaler). The
probes reduce every statistic in float32 whatever the precision.

``torch.compile`` is refused (:func:`check_compile`), from a measurement: probes hook every
module, and each hook splits the compiled graph. On this project's CPU the probes still read a
compiled GPT correctly (statistics equal to eager within 4e-6 relative), but compiling took 56 s
for 3 steps of a width-128 GPT that runs eagerly in 0.05 s: a coordinate check's few steps never
repay it.
"""

from __future__ import annotations

import contextlib
import platform
from collections.abc import Iterator

import torch

from coordcheck.core.errors import CoordCheckError

__all__ = ["DEVICES", "PRECISIONS", "resolve_device", "check_precision", "autocast", "grad_scaler", "environment",
           "check_compile"]

DEVICES = ("auto", "cpu", "cuda", "cuda:N")
PRECISIONS = ("fp32", "bf16", "fp16")
_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_device(device: object = "auto") -> torch.device:
    """``auto`` -> ``cuda`` when available else ``cpu``; ``cpu``, ``cuda``, ``cuda:N`` checked, one line if not."""
    name = "auto" if device is None else str(device)
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda" or (name.startswith("cuda:") and name[5:].isdigit()):
        if not torch.cuda.is_available():
            raise CoordCheckError(f"device={name}, but torch sees no CUDA device here: use device=cpu (or auto)")
        if ":" in name and int(name[5:]) >= torch.cuda.device_count():
            raise CoordCheckError(f"device={name}, but there are {torch.cuda.device_count()} CUDA device(s): "
                                  f"use cuda:0 .. cuda:{torch.cuda.device_count() - 1}")
        return torch.device(name)
    raise CoordCheckError(f"device must be auto, cpu, cuda or cuda:N, got {name!r}")


def check_precision(precision: object = "fp32") -> str:
    name = "fp32" if precision is None else str(precision)
    if name not in PRECISIONS:
        raise CoordCheckError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return name


def check_compile(compile: object = False) -> None:
    """``compile=true`` is refused with the reason (module docstring)."""
    if compile not in (False, None, "false"):
        raise CoordCheckError("compile=true is not supported: the probes hook every module, which splits a compiled "
                              "graph at every layer (measured: 56 s of compilation for 3 steps that run in 0.05 s "
                              "eagerly); run eagerly (compile=false)")


@contextlib.contextmanager
def autocast(device: torch.device, precision: str) -> Iterator[None]:
    """Autocast for the forward and the loss under ``bf16`` / ``fp16``; nothing under ``fp32``."""
    if precision == "fp32":
        yield
        return
    with torch.autocast(device_type=device.type, dtype=_DTYPE[precision]):
        yield


def grad_scaler(device: torch.device, precision: str) -> torch.amp.GradScaler | None:
    """A gradient scaler under ``fp16`` (as mixed-precision training uses), else None."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def environment(device: torch.device, precision: str) -> dict:
    """What ``job.json`` and the report record about where a job ran."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else (platform.processor() or "cpu")
    return {"device": str(device), "device_name": name, "torch": torch.__version__,
            "cuda": torch.version.cuda if device.type == "cuda" else None, "precision": precision}
