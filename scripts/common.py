"""Shared pieces of the pipeline stages: the repository root, errors with exit codes, timed log steps."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class StageError(Exception):
    """A failure the user can act on: main() prints the message (no traceback) and exits with `exit_code`."""

    exit_code = 1


class ConfigError(StageError):
    """An input file (build.toml, the matrix file) is invalid."""

    exit_code = 2


class BuildError(StageError):
    """Compiling or laying out a variant failed."""

    exit_code = 3


class CheckError(StageError):
    """A built variant failed a check (loader choice, digest, smoke call)."""

    exit_code = 4


_ON_GITHUB = os.environ.get("GITHUB_ACTIONS") == "true"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@contextlib.contextmanager
def step(title: str) -> Iterator[None]:
    """A named, timed step; folded into a group on GitHub Actions."""
    log(f"::group::{title}" if _ON_GITHUB else f"==> {title}")
    start = time.monotonic()
    try:
        yield
    finally:
        elapsed = time.monotonic() - start
        if _ON_GITHUB:
            log("::endgroup::")
        log(f"    {title}: {elapsed:.1f}s")


def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a command; on failure raise BuildError with its output (which compilers print to stderr)."""
    try:
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    except OSError as e:  # no such compiler (CXX=...), not executable
        raise BuildError(f"cannot run {cmd[0]}: {e}") from None
    if proc.returncode != 0:
        raise BuildError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def main_wrapper(main: Callable[[], int | None]) -> None:
    """Run a stage's main(); StageError becomes its message and exit code, not a traceback."""
    try:
        code = main()
    except StageError as err:
        prefix = "::error::" if _ON_GITHUB else "error: "
        log(f"{prefix}{err}")
        sys.exit(err.exit_code)
    sys.exit(code or 0)
