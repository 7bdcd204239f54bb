"""The Makefile's set-up: a venv is remade when what it was made from changes."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT


def _make_venv(root: Path, *args: str) -> subprocess.CompletedProcess:
    # PYTHON=false: any attempt to (re)make the venv fails at once, so the exit status says whether make tried.
    return subprocess.run(["make", "venv", "PYTHON=false", *args], cwd=root, capture_output=True, text=True)


def test_a_new_torch_spec_remakes_the_venv(tmp_path):
    """`make build TORCH_SPEC=...` on a machine that already has a venv must install that torch, not
    build against the old one."""
    shutil.copy(REPO_ROOT / "Makefile", tmp_path)
    (tmp_path / "requirements").mkdir()
    for name in ("build.txt", "dev.txt", "cuda-headers.txt"):
        (tmp_path / "requirements" / name).write_text("")
    first = _make_venv(tmp_path, "TORCH_SPEC=torch==2.13.0")
    assert first.returncode != 0 and "false -m venv" in first.stdout  # no venv yet: it tries
    (tmp_path / ".venv" / ".installed").touch()  # as if that install had finished
    same = _make_venv(tmp_path, "TORCH_SPEC=torch==2.13.0")
    assert same.returncode == 0 and "-m venv" not in same.stdout, same.stdout + same.stderr
    other = _make_venv(tmp_path, "TORCH_SPEC=torch==2.12.0+rocm7.1")
    assert other.returncode != 0 and "false -m venv" in other.stdout, other.stdout + other.stderr
    assert (tmp_path / ".venv" / ".torch-spec").read_text().strip() == "torch==2.12.0+rocm7.1"
