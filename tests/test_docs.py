"""The documentation: the site builds (``mkdocs build --strict``) and every command README.md and docs/ show runs.

How a page's commands are found and run (the rules pages are written to; docs/development.md repeats them):

- Every line of a ```` ```bash ```` fence is a command: blank lines and ``#`` lines skipped, a trailing
  ``# comment`` dropped, ``\\`` continuations joined, ``a && b`` split. Other fences are not run:
  ```` ```python ```` is compiled and its ``coordcheck`` imports executed, ```` ```yaml ```` parsed,
  ```` ```text ```` left alone (for a command no test can run: a cluster, the network). Inline
  ``python experiments/X.py --flag``: X.py exists and has ``--flag``.
- Checked, not run: ``python -m venv``, ``pip install`` (the extras it names exist), ``python -m pytest`` (the
  README's test command is .ci/run's), ``ruff``, ``python -m mkdocs`` (:func:`test_site_builds_strict` builds).
  A leading ``.venv/bin/`` is dropped.
- Run at tiny size, in page order, in one temporary directory per page: ``python -m coordcheck``,
  ``coordcheck.transfer``, ``coordcheck.gradflow`` (in this process, through their ``cli()``),
  ``coordcheck.report`` and ``coordcheck.transfer.report`` (their ``main(argv)``), the console scripts of
  pyproject.toml (as their module), and ``python experiments/X.py`` where :data:`EXPERIMENTS` has a tiny form
  (in this process too). Widths become 16/32/64, other swept lists their first two values, ``steps=2 seeds=1``,
  ``progress=false threads=1``, no figures unless asked for, output directories ``outputs/{multirun,run}/cmdN``,
  ``hydra/launcher=parallel`` one job at a time; a report's ``DIR``/``SWEEP_DIR``/missing ``outputs/...``
  argument is the page's latest sweep; ``device=cuda`` without CUDA must be the one-line error (exit 2).
- Exit 0 and no traceback; with ``--strict``/``report.strict=true`` 0, 1 or 2 and a report; a trailing comment
  ``# exit N`` expects N (2: one ``coordcheck: error:`` line).
- Facts that would go stale are checked against a run: docs/quickstart.md's sweep directory (every file a default
  sweep writes is listed, every listed file is written) and its good result (what the command prints last).
"""

from __future__ import annotations

import ast
import importlib
import os
import re
import runpy
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_in_process

DOCS = ROOT / "docs"
STAND_IN = ROOT / "tests" / "docs"  # my_pkg: the user's package of the docs' commands
# Pages in the nav that are not written yet: the site builds with a stub for each, and links to them are not
# checked. Empty: every page is in, so a missing one fails.
PENDING: tuple[str, ...] = ()

TINY_WIDTHS = ("16", "32", "64")  # divisible by the built-in GPT's 4 heads
HYDRA_CLIS = {  # module -> what replaces (or is added to) the command's own values
    "coordcheck": {"steps": "2", "seeds": "1", "progress": "false", "threads": "1"},
    "coordcheck.transfer": {"steps": "2", "seeds": "1", "eval_batches": "1", "progress": "false", "threads": "1"},
    "coordcheck.gradflow": {},
}
FIGURES_OFF = {"coordcheck": "report.figures", "coordcheck.transfer": "report.figures",
               "coordcheck.gradflow": "figures"}
ASKS_FOR_FIGURES = ("figures", "layout", "size", "steps")  # report.<one of these>=..., --<one of these>
REPORTS = ("coordcheck.report", "coordcheck.transfer.report")
TRANSFER_LRS = "0.004,0.016"
# python experiments/<script> in a bash fence: its tiny form (appended; "{tmp}" is the page's directory). Each
# one here must be given a sweep directory (without one these scripts run their full sweep first).
EXPERIMENTS = {"sp_vs_mup.py": ["--out", "{tmp}/figures"]}
EXIT_COMMENT = re.compile(r"^exit (\d+)\b")


# --------------------------------------------------------------------------------------------- reading pages


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def fences(text: str) -> list[tuple[str, str, int]]:
    """``(language, body, line)`` of every fenced block (```` ``` ```` at any indent)."""
    out, lang, body, start = [], None, [], 0
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*```(\S*)\s*$", line)
        if m and lang is None:
            lang, body, start = m.group(1), [], i
        elif m and not m.group(1):
            out.append((lang, "\n".join(body), start))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


def split_comment(line: str) -> tuple[str, str]:
    """``(code, comment)``: the first ``#`` outside quotes, at the start or after a blank, starts the comment."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


@dataclass
class Command:
    argv: list[str]
    comment: str
    line: int
    text: str = field(default="")


def commands(body: str, start: int = 0) -> list[Command]:
    """The commands of a bash fence, in order (``&&`` split, continuations joined, comments dropped)."""
    out, pending, first = [], "", None
    for i, raw in enumerate(body.splitlines(), start + 1):
        if not pending and (not raw.strip() or raw.lstrip().startswith("#")):
            continue
        code, comment = split_comment(raw)
        first = first or i
        if code.endswith("\\"):
            pending += code[:-1] + " "
            continue
        text, pending = pending + code, ""
        parts, argv = [], []
        for token in shlex.split(text):
            if token == "&&":
                parts.append(argv)
                argv = []
            else:
                argv.append(token)
        parts.append(argv)
        out += [Command(a, comment, first, text) for a in parts if a]
        first = None
    return out


def page_commands(page: Path) -> list[Command]:
    return [c for lang, body, line in fences(page.read_text()) if lang == "bash" for c in commands(body, line)]


def program(argv: list[str]) -> list[str]:
    """``argv`` with a leading ``.venv/bin/`` dropped."""
    return [argv[0].removeprefix(".venv/bin/"), *argv[1:]]


def scripts() -> dict[str, str]:
    """Console script -> the module it runs (``coordcheck-report`` -> ``coordcheck.report``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {name: target.split(":")[0].removesuffix(".__main__") for name, target in project["scripts"].items()}


def kind(argv: list[str]) -> tuple[str, str, list[str]]:
    """``(kind, module or script, args)``; kind is venv, pip, pytest, mkdocs, ruff, hydra, report, experiment."""
    argv = program(argv)
    if argv[0] in scripts():
        argv = ["python", "-m", scripts()[argv[0]], *argv[1:]]
    if argv[0] == "pip" or argv[:3] == ["python", "-m", "pip"]:
        return "pip", "", argv[1:]
    if argv[0] == "ruff":
        return "ruff", "", argv[1:]
    if argv[0] == "torchrun" and "-m" in argv and argv[argv.index("-m") + 1] in HYDRA_CLIS:
        return "torchrun", argv[argv.index("-m") + 1], argv[argv.index("-m") + 2:]  # (run with 2 processes, gloo)
    if argv[0] == "python" and len(argv) > 1 and argv[1].startswith("experiments/"):
        return "experiment", argv[1].removeprefix("experiments/"), argv[2:]
    if argv[0] == "python" and len(argv) > 2 and argv[1] == "-m":
        module, args = argv[2], argv[3:]
        for name in ("venv", "pytest", "mkdocs"):
            if module == name:
                return name, module, args
        if module in HYDRA_CLIS:
            return "hydra", module, args
        if module in REPORTS:
            return "report", module, args
    raise AssertionError(f"not a runnable docs command: {shlex.join(argv)} (tests/test_docs.py says which are)")


# ------------------------------------------------------------------------------------------ tiny rewriting


def split_values(value: str) -> list[str]:
    """A sweep's values (``a,b,c``); a bracketed list or a quoted value is one value."""
    return [value] if value[:1] in "[{'\"" else value.split(",")


def asks_for_figures(args: list[str]) -> bool:
    keys = {a.partition("=")[0].lstrip("+~") for a in args if "=" in a}
    return any(k in {f"report.{w}" for w in ASKS_FOR_FIGURES} | {"figures"} for k in keys) or any(
        a.split("=")[0] in {f"--{w}" for w in ASKS_FOR_FIGURES} | {"--no-figures"} for a in args)


def tiny_hydra(module: str, args: list[str], n: int, as_written: bool = False) -> tuple[list[str], str | None]:
    """The tiny form of a Hydra CLI's arguments, and the sweep directory it writes (None for a single run).
    ``as_written``: only the output directories are added (a command shown for its error fails before training)."""
    multirun = "--multirun" in args or "-m" in args
    forced, seen, out = HYDRA_CLIS[module], set(), []
    for a in args:
        key, eq, value = a.partition("=")
        name = key.lstrip("+~")
        if as_written and name not in ("hydra.sweep.dir", "hydra.run.dir"):
            seen.add(name)
            out.append(a)
            continue
        if a.startswith("-") or not eq:
            out.append(a)
            continue
        if name == "width":
            k = len(split_values(value))
            value = ",".join(TINY_WIDTHS[:min(k, 3)]) if k > 1 else "32"
        elif name in forced:
            value = forced[name]
        elif multirun and len(split_values(value)) > 2:
            value = ",".join(split_values(value)[:2])
        seen.add(name)
        out.append(f"{key}={value}")
    extra = [f"{k}={v}" for k, v in forced.items() if k not in seen and not as_written]
    if "width" not in seen and not as_written:
        extra.append(f"width={','.join(TINY_WIDTHS)}" if multirun else "width=32")
    if module == "coordcheck.transfer" and multirun and "lr" not in seen and not as_written:
        extra.append(f"lr={TRANSFER_LRS}")
    if not asks_for_figures(args) and not as_written:
        extra.append(f"{FIGURES_OFF[module]}=false")
    if "hydra/launcher=parallel" in args and not any(a.startswith("hydra.launcher.n_jobs=") for a in args):
        extra.append("hydra.launcher.n_jobs=1")  # joblib then runs the jobs here: the launcher's own tests fork
    sweep = next((a.partition("=")[2] for a in args if a.startswith("hydra.sweep.dir=")), None)
    if sweep is None and multirun:
        sweep = f"outputs/multirun/cmd{n}"
        extra.append(f"hydra.sweep.dir={sweep}")
    if not any(a.startswith("hydra.run.dir=") for a in args):
        extra.append(f"hydra.run.dir=outputs/run/cmd{n}")
    assert not sweep or not Path(sweep).is_absolute(), f"hydra.sweep.dir={sweep}: write it relative"
    flags_at_end = len(out)
    while flags_at_end and out[flags_at_end - 1] in ("--multirun", "-m"):
        flags_at_end -= 1  # --multirun before or after all overrides, never between them
    out[flags_at_end:flags_at_end] = extra
    return out, (sweep if multirun else None)


def with_sweep(args: list[str], cwd: Path, sweep: str | None) -> list[str]:
    """``DIR``, ``SWEEP_DIR`` or a missing ``outputs/...`` path -> the page's latest sweep directory."""
    out = []
    for a in args:
        missing = a.startswith("outputs/") and not (cwd / a).exists()
        if not a.startswith("-") and (a in ("DIR", "SWEEP_DIR") or missing):
            assert sweep, f"{a}: no sweep ran before this command on its page"
            a = sweep
        out.append(a)
    return out


# ------------------------------------------------------------------------------------------------- running


def expected(cmd: Command, args: list[str]) -> set[int]:
    m = EXIT_COMMENT.match(cmd.comment)
    if m:
        return {int(m.group(1))}
    if "--strict" in args or "report.strict=true" in args:
        return {0, 1, 2}
    return {0}


def needs_missing_cuda(args: list[str]) -> bool:
    import torch

    return any(a.startswith("device=cuda") for a in args) and not torch.cuda.is_available()


def run_script(monkeypatch: pytest.MonkeyPatch, script: Path, args: list[str]) -> int | None:
    """``python script args`` in this process (as ``__main__``); its exit status."""
    monkeypatch.setattr(sys, "argv", [str(script), *args])
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as done:
        return done.code
    return 0


def run_page(page: Path, tmp: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> list[str]:
    """Run every command of ``page`` at tiny size in ``tmp``; what ran, one line each."""
    monkeypatch.chdir(tmp)
    monkeypatch.syspath_prepend(str(STAND_IN))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), str(STAND_IN), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    import torch

    threads = torch.get_num_threads()  # restored below: threads=1 sets it in this process
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    ran, sweep = [], None
    try:
        for n, cmd in enumerate(page_commands(page), 1):
            what, module, args = kind(cmd.argv)
            where = f"{page.name}:{cmd.line}: {cmd.text}"
            if what == "pip":
                for group in re.findall(r"\.\[([^\]]+)\]", " ".join(args)):
                    for extra in group.split(","):
                        assert extra.strip() in extras, f"{where}: no extra {extra!r} in pyproject.toml"
                continue
            if what in ("venv", "pytest", "ruff", "mkdocs"):  # mkdocs: test_site_builds_strict
                continue
            capsys.readouterr()
            if what == "hydra":
                args, made = tiny_hydra(module, args, n, as_written=expected(cmd, args) == {2})
                code = run_in_process(monkeypatch, *args, module=module)
            elif what == "torchrun":  # two processes on the CPU (gloo), as the page's command asks
                args, made = tiny_hydra(module, args, n)
                r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                                    "--nproc-per-node=2", "-m", module, *args], capture_output=True, text=True,
                                   timeout=600, cwd=tmp)
                code = r.returncode
                print(r.stdout, end="")
                print(r.stderr[-3000:], end="", file=sys.stderr)
            elif what == "report":
                args = with_sweep(args, tmp, sweep)
                if not asks_for_figures(args):
                    args.append("--no-figures")
                made, code = None, importlib.import_module(module).main(args)
            else:
                assert module in EXPERIMENTS, f"{where}: add a tiny form of experiments/{module} to EXPERIMENTS"
                args = with_sweep(args, tmp, sweep) + [a.format(tmp=tmp) for a in EXPERIMENTS[module]]
                assert any(a == sweep for a in args), f"{where}: give it the sweep directory (SWEEP_DIR)"
                made, code = None, run_script(monkeypatch, ROOT / "experiments" / module, args)
            out, err = capsys.readouterr()
            code = 0 if code is None else code
            ran.append(f"{code} {module} {shlex.join(args)}")
            if what != "experiment" and needs_missing_cuda(args):
                assert code == 2 and "no CUDA device" in err, f"{where}: exit {code}\n{err[-2000:]}"
                continue
            assert code in expected(cmd, args), f"{where}\nran: {shlex.join(args)}\nexit {code}\n{err[-3000:]}"
            assert "Traceback" not in err, f"{where}\n{err[-3000:]}"
            if expected(cmd, args) == {2}:
                assert err.strip().startswith("coordcheck") and len(err.strip().splitlines()) == 1, err
            if "--strict" in args or "report.strict=true" in args:
                judged = made or next(a for a in args if not a.startswith("-"))
                assert any((tmp / judged / "report" / f).exists() for f in ("report.md", "transfer.md")), (
                    f"{where}: no report in {judged}")
            sweep = made or sweep
    finally:
        torch.set_num_threads(threads)
    return ran


# ---------------------------------------------------------------------------------------------------- tests


def _has_runs(page: Path) -> bool:
    return any(kind(c.argv)[0] in ("hydra", "torchrun", "report", "experiment") for c in page_commands(page))


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(ROOT)),
                                               marks=[pytest.mark.slow] if _has_runs(p) else [])
                                  for p in pages()])
def test_every_shown_command_runs(page, tmp_path, monkeypatch, capsys):
    ran = run_page(page, tmp_path, monkeypatch, capsys)
    assert len(ran) == sum(kind(c.argv)[0] in ("hydra", "torchrun", "report", "experiment")
                           for c in page_commands(page))


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_and_yaml_blocks_are_valid(page):
    for lang, body, line in fences(page.read_text()):
        if lang == "python":
            tree = ast.parse(body, filename=f"{page.name}:{line}")
            for node in ast.walk(tree):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    if any(n.split(".")[0] == "coordcheck" for n in names):
                        exec(compile(ast.Module([node], []), f"{page.name}:{line}", "exec"), {})
        elif lang == "yaml":
            yaml.safe_load(body)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_experiments_exist_with_their_flags(page):
    for cited in re.findall(r"`python (experiments/[^`]+)`", page.read_text()):
        script, *args = shlex.split(cited)
        source = (ROOT / script).read_text() if (ROOT / script).is_file() else ""
        assert source, f"{page.name}: {script} does not exist"
        for flag in (a for a in args if a.startswith("--")):
            assert f'"{flag.split("=")[0]}"' in source, f"{page.name}: {script} has no {flag}"


def test_readme_test_command_is_ci_s():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    shown = [body for lang, body, _ in fences((ROOT / "README.md").read_text()) if lang == "bash"]
    assert ci in shown and "pytest" in ci


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert "docs/index.md" in local and len(local) >= 10
    for link in local:
        assert (ROOT / link).exists() or Path(link).name in PENDING, f"README links to a missing {link}"


def test_readme_is_a_screen_or_two():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 120


def test_rewriting_is_tiny():
    args, sweep = tiny_hydra("coordcheck", ["width=256,512,1024,2048", "steps=20", "lr=0.1,0.2,0.3",
                                            "'tensors=[out,delta,in,own]'", "--multirun"], 3)
    assert args[:4] == ["width=16,32,64", "steps=2", "lr=0.1,0.2", "'tensors=[out,delta,in,own]'"]
    assert args[-1] == "--multirun" and "report.figures=false" in args and sweep == "outputs/multirun/cmd3"
    assert "seeds=1" in args and "threads=1" in args and "hydra.sweep.dir=outputs/multirun/cmd3" in args
    one, none = tiny_hydra("coordcheck.gradflow", ["model=gpt", "width=512"], 1)
    assert one[:2] == ["model=gpt", "width=32"] and "figures=false" in one and none is None
    t, _ = tiny_hydra("coordcheck.transfer", ["--multirun", "report.size=slides"], 2)
    assert t[0] == "--multirun" and f"lr={TRANSFER_LRS}" in t and "width=16,32,64" in t
    assert "report.figures=false" not in t and "eval_batches=1" in t


def test_commands_are_read_as_a_shell_would():
    body = ("# a comment\npython -m venv .venv && .venv/bin/pip install -e \".[test]\"   # install\n"
            "python -m coordcheck model=custom \\\n  width=8,16 --multirun   # exit 2: why\n")
    a, b, c = commands(body)
    assert a.argv == ["python", "-m", "venv", ".venv"] and b.argv[-1] == ".[test]"
    assert c.argv == ["python", "-m", "coordcheck", "model=custom", "width=8,16", "--multirun"]
    assert c.comment == "exit 2: why" and expected(c, c.argv) == {2}
    assert kind(["coordcheck-report", "DIR"]) == ("report", "coordcheck.report", ["DIR"])
    with pytest.raises(AssertionError, match="not a runnable"):
        kind(["curl", "https://example.com"])


@pytest.mark.slow
def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: a broken page, link, anchor or API reference fails (pages still to be merged
    get a stub)."""
    docs = tmp_path / "docs"
    shutil.copytree(DOCS, docs)
    for name in PENDING:
        if not (docs / name).exists():
            (docs / name).write_text(f"# {name} (to be merged)\n")
    cfg = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    cfg["docs_dir"] = str(docs)
    plugin = next(p for p in cfg["plugins"] if isinstance(p, dict) and "mkdocstrings" in p)
    plugin["mkdocstrings"]["handlers"]["python"]["paths"] = [str(ROOT)]  # the package of this checkout
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(cfg))
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-3000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert 'id="coordcheck.app.api.coord_check"' in api and 'id="coordcheck.judge.rules.Rules"' in api


def documented_files(block: str) -> tuple[dict[str, set[str]], set[str]]:
    """The files a sweep-directory tree of the docs lists, by directory (``""`` the sweep's, ``"width=256"`` a job's,
    ``"report"``), and those whose comment says ``only when`` (written in some runs only). A line is
    ``dir/file [file ...]  # comment``; ``{png,pdf}`` stands for both; ``...`` lines are skipped."""
    listed: dict[str, set[str]] = {}
    optional = set()
    for line in block.splitlines()[1:]:
        code, comment = split_comment(line)
        if not code.strip() or code.strip() == "...":
            continue
        first, *rest = code.split()
        folder, _, name = first.rpartition("/")
        for token in (name, *rest):
            stem, brace, exts = token.partition("{")
            for file in ([stem + e for e in exts.rstrip("}").split(",")] if brace else [token]):
                listed.setdefault(folder, set()).add(file)
                if comment.startswith("only when"):
                    optional.add(f"{folder}/{file}")
    return listed, optional


def written_files(sweep: Path) -> dict[str, set[str]]:
    """What a sweep directory holds, by directory as :func:`documented_files` reads the docs (``"job"`` for every
    job's directory, which must all hold the same files)."""
    out: dict[str, set[str]] = {}
    jobs = [d for d in sweep.iterdir() if (d / "job.json").is_file()]
    assert len(jobs) == len(TINY_WIDTHS)
    for path in sweep.rglob("*"):
        if path.is_file():
            rel = path.relative_to(sweep)
            job = rel.parts[0] if sweep / rel.parts[0] in jobs else None
            folder = str(rel.parent) if job is None else str(Path("job", *rel.parts[1:-1]))
            out.setdefault("" if folder == "." else folder, set()).add(rel.name if job is None else path.name)
    per_job = {frozenset(str(p.relative_to(j)) for p in j.rglob("*") if p.is_file()) for j in jobs}
    assert len(per_job) == 1, "the jobs' directories hold different files"
    return out


@pytest.mark.slow
def test_quickstart_shows_what_a_sweep_prints_and_every_file_it_writes(tmp_path, monkeypatch, capsys):
    """The default sweep (figures on, at tiny size) writes the files docs/quickstart.md lists, no more and no fewer
    (those it says are written "only when" excepted), and ends as its good result does."""
    page = (DOCS / "quickstart.md").read_text()
    tree = next(body for lang, body, _ in fences(page) if body.startswith("outputs/multirun/<date>/<time>/"))
    good = next(body for lang, body, _ in fences(page) if body.startswith("coordcheck: PASS"))
    monkeypatch.chdir(tmp_path)
    args, sweep = tiny_hydra("coordcheck", ["width=256,512,1024", "report.figures=true", "--multirun"], 1)
    assert run_in_process(monkeypatch, *args) == 0
    printed = capsys.readouterr().out.splitlines()

    verdict, report = good.splitlines()  # the status and widths are the run's; the form is the docs'
    assert verdict.startswith("coordcheck: PASS — every judged series is flat within tolerance over widths ")
    assert report == "coordcheck: report outputs/multirun/<date>/<time>/report/report.md"
    at = next(i for i, line in enumerate(printed) if re.match(r"coordcheck: (PASS|FAIL|INCONCLUSIVE) — ", line))
    assert printed[at + 1] == f"coordcheck: report {sweep}/report/report.md"

    listed, optional = documented_files(tree)
    jobs = [folder for folder in listed if folder.split("/")[0].startswith("width=")]
    listed = {folder.replace(folder.split("/")[0], "job", 1) if folder in jobs else folder: files
              for folder, files in listed.items()}
    written = written_files(tmp_path / sweep)
    for folder in sorted(set(listed) | set(written)):
        shown, made = listed.get(folder, set()), written.get(folder, set())
        assert made <= shown, f"quickstart.md does not list {sorted(made - shown)} in {folder or 'the sweep'}/"
        missing = {f for f in shown - made if f"{folder}/{f}" not in optional}
        assert not missing, f"quickstart.md lists {sorted(missing)} in {folder}/, which the sweep did not write"


def test_the_file_tree_of_the_docs_is_read_file_by_file():
    tree = ("root/\n  a.txt          # the first\n  width=8/x.json y.log\n  ...\n"
            "  report/f.{png,pdf} t.csv   # a figure\n  report/e.txt   # only when it fails\n")
    listed, optional = documented_files(tree)
    assert listed == {"": {"a.txt"}, "width=8": {"x.json", "y.log"}, "report": {"f.png", "f.pdf", "t.csv", "e.txt"}}
    assert optional == {"report/e.txt"}


def test_a_page_s_expected_error_and_its_traceback_are_told_apart(tmp_path, monkeypatch, capsys):
    page = tmp_path / "page.md"
    page.write_text("```bash\npython -m coordcheck width=0   # exit 2: one line\n```\n")
    assert run_page(page, tmp_path, monkeypatch, capsys) == [  # as written: the error is the point
        "2 coordcheck width=0 hydra.run.dir=outputs/run/cmd1"]
    page.write_text("```bash\npython -m coordcheck model=foo\n```\n")  # not marked: exit 2 is a failure
    with pytest.raises(AssertionError, match="exit 2"):
        run_page(page, tmp_path, monkeypatch, capsys)
    page.write_text("```bash\ncoordcheck-report SWEEP_DIR\n```\n")  # a report needs a sweep before it
    with pytest.raises(AssertionError, match="no sweep ran before"):
        run_page(page, tmp_path, monkeypatch, capsys)
