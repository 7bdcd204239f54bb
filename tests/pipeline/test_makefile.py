"""The Makefile's set-up: a venv is remade with the torch asked for, and keeps it when none is named."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT


def _make_venv(root: Path, spec: str | None = None) -> str:
    """`make venv`, with TORCH_SPEC on the command line or not at all. PYTHON=true and PY=echo: making the
    venv does nothing, and the pip lines print the spec they would install. Returns make's output."""
    env = {k: v for k, v in os.environ.items() if k not in ("TORCH_SPEC", "MAKEFLAGS")}
    args = ["make", "venv", "PYTHON=true", "PY=echo", *([f"TORCH_SPEC={spec}"] if spec else [])]
    proc = subprocess.run(args, cwd=root, env=env, capture_output=True, text=True, check=True)
    return proc.stdout


def test_the_venv_is_made_with_the_torch_asked_for_and_keeps_it(tmp_path):
    """`make build TORCH_SPEC=...` on a machine with a venv must install that torch, not build against the
    old one; a later plain `make test` must keep it, not fall back to the default spec."""
    shutil.copy(REPO_ROOT / "Makefile", tmp_path)
    (tmp_path / "requirements").mkdir()
    for name in ("build.txt", "dev.txt", "cuda-headers.txt"):
        (tmp_path / "requirements" / name).write_text("")
    stamp = tmp_path / ".venv" / ".torch-spec"

    first = _make_venv(tmp_path)  # a new venv: the Makefile's default spec
    assert "-m venv" in first and "install --quiet torch==2.13.0 -r" in first, first
    assert stamp.read_text().strip() == "torch==2.13.0"
    assert "-m venv" not in _make_venv(tmp_path)  # nothing changed: nothing to do

    rocm = "torch==2.12.0+rocm7.1"
    other = _make_venv(tmp_path, rocm)
    assert "-m venv" in other and f"install --quiet {rocm} -r" in other, other
    assert stamp.read_text().strip() == rocm
    assert "-m venv" not in _make_venv(tmp_path, rocm)
    assert "-m venv" not in _make_venv(tmp_path)  # a plain make keeps the venv's torch
    assert stamp.read_text().strip() == rocm
