"""What every experiment's report shares: its directory and file names, the "How this was run" section, and the
report command's skeleton.

Stage: report (below both reports: the coordinate check's, :mod:`coordcheck.report.compliance`, and the learning-rate
sweep's, :mod:`coordcheck.transfer.report`, which share these through this module, not through each other). Input:
the jobs' facts, the sweep's command and config, a command line. Output: Markdown lines, ``config.yaml``, an exit
status. Never imports torch.
"""

from __future__ import annotations

import argparse
import glob
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from coordcheck.core.errors import EXIT, OK, CoordCheckError, exit_status
from coordcheck.core.frame import atomic_write
from coordcheck.core.text import md_escape
from coordcheck.report.knobs import cli_flag

__all__ = ["REPORT_DIR", "ERROR_NAME", "CONFIG_NAME", "ENVIRONMENT_KEYS", "run_lines", "write_config", "launched",
           "environment_line", "environments", "report_command", "ReportCommand"]

REPORT_DIR = "report"
ERROR_NAME = "error.txt"  # SWEEP_DIR/report/error.txt: why the end of a sweep left no report
CONFIG_NAME = "config.yaml"  # SWEEP_DIR/report/config.yaml: the sweep's resolved config, linked from report.md


ENVIRONMENT_KEYS = ("device", "device_name", "torch", "cuda", "precision")


def run_lines(environment: list[dict], command: str | None, config: str | None, more: list[str] = ()) -> list[str]:
    """The report's last section, "How this was run": where the jobs ran, ``more`` facts (Markdown list items, such
    as the parameters by width), a link to the resolved config (:data:`CONFIG_NAME` beside the report,
    :func:`write_config`: too long to read inline) and the command."""
    lines = ["", "## How this was run", ""]
    lines += [f"- {environment_line(e)}" for e in environment] + [f"- {m}" for m in more]
    if config:
        lines.append(f"- resolved config: [{CONFIG_NAME}]({CONFIG_NAME})")
    if environment or more or config:
        lines.append("")
    if command:
        lines += ["```", command, "```", ""]
    return lines


def write_config(out: Path, config: str | None) -> None:
    """The resolved config as :data:`CONFIG_NAME` in ``out``, atomically; without one, none (an older one is
    removed: it would describe another run)."""
    if config:
        atomic_write(out / CONFIG_NAME, lambda p: p.write_text(config.rstrip() + "\n"))
    else:
        (out / CONFIG_NAME).unlink(missing_ok=True)


def environment_line(e: dict) -> str:
    """``cuda:0 (NVIDIA H200), torch 2.11.0, CUDA 12.8, bf16`` (``, 2 processes (ddp)`` under torchrun) — escaped for
    Markdown."""
    cuda = f", CUDA {e['cuda']}" if e.get("cuda") else ""
    many = f", {e['processes']} processes ({e['parallel']})" if (e.get("processes") or 1) > 1 else ""
    return md_escape(f"{e.get('device')} ({e.get('device_name')}), torch {e.get('torch')}{cuda}, "
                     f"{e.get('precision')}{many}")


def launched(facts: list[dict]) -> str | None:
    """The command that started a sweep's processes (``torchrun ...``, ``srun ...``: the jobs' ``parallel.launch``),
    where several ran it; None for one process."""
    return next((str(p["launch"]) for f in facts if (p := f.get("parallel") or {}).get("launch")), None)


def environments(facts: list[dict]) -> list[dict]:
    """The distinct (device, device_name, torch, cuda, precision, processes, parallel) of some jobs' facts, in
    first-seen order."""
    out: list[dict] = []
    for f in facts:
        e = {k: f.get(k) for k in ENVIRONMENT_KEYS}
        if f.get("parallel"):
            e.update(processes=f["parallel"].get("processes"), parallel=f["parallel"].get("name"))
        if e["device"] is not None and e["torch"] is not None and e not in out:  # older jobs recorded none
            out.append(e)
    return out


def report_command(argv: list[str], *, prog: str, description: str, knobs: Any, sweep_help: str,
                   report: Callable[..., tuple[Any, Path]], runs: bool = False) -> int:
    """A report CLI: ``SWEEP_DIR`` and one flag per knob of ``knobs`` (a :class:`coordcheck.app.config.Knobs`), then
    ``report(sweep_dir, rules=..., <the report's own knobs>)``; the summary on stdout. Returns the exit status:
    2 for a bad flag or directory (one line), 1 for a sweep whose jobs all failed (as the sweep exited), else 0, or
    with ``--strict`` the verdict's (``errors.EXIT``). ``runs``: it also takes several paths or a glob (runs made
    elsewhere, judged as one sweep: ``report([paths], ..., out=--out)``)."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("sweep_dir", nargs="+" if runs else None, help=sweep_help)
    if runs:
        p.add_argument("--out", type=Path, default=None,
                       help="where the report goes (default: SWEEP_DIR/report, or report/ in the folder that holds "
                            "the runs)")
    knobs.add_flags(p)
    args = p.parse_args(argv)
    given = args.sweep_dir if runs else [args.sweep_dir]
    several = len(given) > 1 or any(glob.has_magic(str(g)) for g in given)
    target = [str(g) for g in given] if several else Path(given[0])
    t0 = time.perf_counter()
    rule_names = {f.name for f in fields(knobs.rules)}
    try:
        opts = knobs.values({k: getattr(args, k) for k in knobs.kinds}, flag=cli_flag)
        own = {k: v for k, v in opts.items() if k not in rule_names and k != "strict"}
        if "steps" in own:
            own["steps"] = own["steps"] or None
        if runs and args.out is not None:
            own["out"] = args.out
        result, path = report(target, rules=knobs.rules_of(opts), **own)
    except CoordCheckError as e:
        print(f"{prog.removeprefix('python -m ')}: error: {e}", file=sys.stderr)
        return exit_status(e)  # 1 where the sweep's jobs all failed (the sweep exited 1 too), else 2
    (path.parent / ERROR_NAME).unlink(missing_ok=True)  # left by a sweep whose end made no report
    lines = result.summary(path)
    at = next((i for i, line in enumerate(lines) if line.endswith(str(path))), len(lines) - 1)
    lines[at] += f" ({time.perf_counter() - t0:.1f} s)"  # the time on the report's line; the first cause stays last
    print(*lines, sep="\n")
    return EXIT[result.status] if opts["strict"] else OK


REPORT_COMMANDS = "coordcheck.reports"  # the entry-point group of the other experiments' report commands


@dataclass(frozen=True)
class ReportCommand:
    """Another experiment's report command, to which ``python -m coordcheck.report`` hands a sweep directory whose
    jobs wrote ``frame_name`` (and no coordinate-check frame): ``main(argv)`` returns the exit status. An experiment
    adds itself as an entry point of the group ``coordcheck.reports`` in ``pyproject.toml`` (the learning-rate sweep:
    ``transfer = "coordcheck.transfer.report:COMMAND"``), so that this stage never imports it."""

    frame_name: str
    main: Callable[[list[str]], int]


def report_commands() -> list[ReportCommand]:
    """The report commands the installed experiments registered (:class:`ReportCommand`)."""
    from importlib.metadata import entry_points

    return [ep.load() for ep in entry_points(group=REPORT_COMMANDS)]
