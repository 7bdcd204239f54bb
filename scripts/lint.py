"""Lint everything CI lints, the same way CI does (``make lint``)::

    python -m scripts.lint [--only ruff,actionlint,zizmor,hadolint] [--list]

Linters, run in this order, all of them even after a failure:

- ``ruff``: ``ruff check`` and ``ruff format --check`` on scripts/ tests/ benchmarks/ torch-ext/
  (the folders that exist; settings from pyproject.toml/ruff.toml when present);
- ``actionlint``: every workflow under .github/workflows, with shellcheck on each ``run:``
  (custom runner labels come from .github/actionlint.yaml); missing shellcheck is an error;
- ``zizmor``: the security audits on .github/ (workflows and dependabot.yml), ``--offline`` so
  CI needs no GitHub API token; every finding fails;
- ``hadolint``: docker/Dockerfile; skipped, with the reason printed, only if that file does not exist.
- ``shellcheck``: the repository's own shell scripts (``.ci/*`` and ``scripts/*.sh``, found by their
  ``#!`` line), which no workflow's ``run:`` covers.

Tools are looked up next to this interpreter first (the venv's ``bin/``), then on PATH.
Exit status: 0 when every selected linter passes, 1 when any reports findings, 2 when a tool is missing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
PYTHON_DIRS = ("scripts", "tests", "benchmarks", "torch-ext")
WORKFLOW_DIR = Path(".github/workflows")
DOCKERFILE = Path("docker/Dockerfile")


class ToolMissing(RuntimeError):
    pass


@dataclass(frozen=True)
class Result:
    name: str
    status: str  # "ok", "failed", "skipped", "missing"
    detail: str = ""
    seconds: float = 0.0


def find_tool(name: str) -> str:
    """The tool beside this interpreter (venv bin/) if there, else on PATH."""
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise ToolMissing(f"{name} not found next to {sys.executable} or on PATH")
    return found


def _run(cmd: Sequence[str], root: Path) -> subprocess.CompletedProcess[str]:
    print("+ " + " ".join(cmd), flush=True)
    proc = subprocess.run(list(cmd), cwd=root, capture_output=True, text=True, check=False)
    out = (proc.stdout + proc.stderr).strip()
    if out:
        print(out, flush=True)
    return proc


def workflow_files(root: Path) -> list[Path]:
    d = root / WORKFLOW_DIR
    return sorted(p.relative_to(root) for p in (*d.glob("*.yml"), *d.glob("*.yaml")))


def lint_ruff(root: Path) -> Result:
    ruff = find_tool("ruff")
    dirs = [d for d in PYTHON_DIRS if (root / d).is_dir()]
    if not dirs:
        return Result("ruff", "skipped", "no Python folders")
    check = _run([ruff, "check", "--no-cache", *dirs], root)
    fmt = _run([ruff, "format", "--check", "--no-cache", *dirs], root)
    if check.returncode or fmt.returncode:
        which = [n for n, p in (("check", check), ("format --check", fmt)) if p.returncode]
        return Result("ruff", "failed", f"ruff {' and '.join(which)} reported findings in {', '.join(dirs)}")
    return Result("ruff", "ok", ", ".join(dirs))


def actionlint_command(root: Path) -> list[str]:
    """The actionlint invocation (shellcheck required, so `run:` scripts are always checked)."""
    files = workflow_files(root)
    cmd = [find_tool("actionlint"), "-shellcheck", find_tool("shellcheck")]
    config = root / ".github/actionlint.yaml"
    if config.is_file():
        cmd += ["-config-file", str(config.relative_to(root))]
    return cmd + [str(f) for f in files]


def lint_actionlint(root: Path) -> Result:
    if not workflow_files(root):
        return Result("actionlint", "skipped", f"no workflows under {WORKFLOW_DIR}")
    proc = _run(actionlint_command(root), root)
    if proc.returncode:
        return Result("actionlint", "failed", "findings in the workflows")
    return Result("actionlint", "ok", f"{len(workflow_files(root))} workflows")


def zizmor_command(root: Path) -> list[str]:
    """zizmor on .github/ (workflows + dependabot), offline; config from .github/zizmor.yml."""
    cmd = [find_tool("zizmor"), "--offline", "--no-progress", "--format", "plain"]
    config = root / ".github/zizmor.yml"
    if config.is_file():
        cmd += ["--config", str(config.relative_to(root))]
    return cmd + [".github"]


def lint_zizmor(root: Path) -> Result:
    if not (root / ".github").is_dir():
        return Result("zizmor", "skipped", "no .github folder")
    proc = _run(zizmor_command(root), root)
    if proc.returncode:
        return Result("zizmor", "failed", f"zizmor exited {proc.returncode} (findings or error)")
    return Result("zizmor", "ok", ".github")


def lint_hadolint(root: Path) -> Result:
    if not (root / DOCKERFILE).is_file():
        return Result("hadolint", "skipped", f"{DOCKERFILE} does not exist")
    cmd = [find_tool("hadolint")]
    config = root / "docker/hadolint.yaml"
    if config.is_file():
        cmd += ["--config", str(config.relative_to(root))]
    proc = _run([*cmd, str(DOCKERFILE)], root)
    if proc.returncode:
        return Result("hadolint", "failed", f"findings in {DOCKERFILE}")
    return Result("hadolint", "ok", str(DOCKERFILE))


def shell_scripts(root: Path) -> list[Path]:
    """The bash scripts of .ci/ and scripts/ (by the #! line: .ci/run has no extension)."""
    found = []
    for path in sorted([*(root / ".ci").glob("*"), *(root / "scripts").glob("*.sh")]):
        if path.is_file():
            with path.open("rb") as f:
                first = f.readline()
            if first.startswith(b"#!") and (b"bash" in first or first.rstrip().endswith(b"/sh")):
                found.append(path.relative_to(root))
    return found


def lint_shellcheck(root: Path) -> Result:
    files = shell_scripts(root)
    if not files:
        return Result("shellcheck", "skipped", "no shell scripts")
    proc = _run([find_tool("shellcheck"), *map(str, files)], root)
    if proc.returncode:
        return Result("shellcheck", "failed", "findings in the shell scripts")
    return Result("shellcheck", "ok", ", ".join(map(str, files)))


LINTERS: dict[str, Callable[[Path], Result]] = {
    "ruff": lint_ruff,
    "actionlint": lint_actionlint,
    "zizmor": lint_zizmor,
    "hadolint": lint_hadolint,
    "shellcheck": lint_shellcheck,
}


def run_linters(names: Sequence[str], root: Path = REPO_ROOT) -> list[Result]:
    results = []
    for name in names:
        start = time.monotonic()
        try:
            result = LINTERS[name](root)
        except ToolMissing as exc:
            result = Result(name, "missing", str(exc))
        results.append(Result(result.name, result.status, result.detail, time.monotonic() - start))
    return results


def _only(value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in LINTERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"--only takes a comma list of {', '.join(LINTERS)}, got {value!r}")
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m scripts.lint", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", type=_only, default=list(LINTERS), help="comma list of linters to run")
    p.add_argument("--list", action="store_true", help="print the linters and exit")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(LINTERS))
        return 0
    results = run_linters(args.only)
    print("\nlint summary:")
    for r in results:
        print(f"  {r.name:<10} {r.status:<8} {r.seconds:5.1f}s  {r.detail}")
    if any(r.status == "missing" for r in results):
        return 2
    return 1 if any(r.status == "failed" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
