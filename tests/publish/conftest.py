"""Fixtures for the publisher tests: a loopback Hub stand-in and fake, correctly digested variants."""

from __future__ import annotations

import json
import os
from pathlib import Path

import huggingface_hub.constants
import huggingface_hub.utils
import kernels_data
import pytest

from scripts import publish
from tests.publish.hub_standin import HubStandin

REPO = "acme/gemm"
WRITE_TOKEN = "hf_write_token"
READ_TOKEN = "hf_read_token"
CPU = "torch213-cxx11-cpu-x86_64-linux"
ROCM = "torch213-cxx11-rocm71-x86_64-linux"
CUDA = "torch213-cxx11-cu130-x86_64-linux"

_CLEARED_ENV = (
    "HF_TOKEN",
    "HUGGING_FACE_HUB_TOKEN",
    "HF_OIDC_RESOURCE",
    "HF_OIDC_ID_TOKEN",
    "GITHUB_ACTIONS",
    "ACTIONS_ID_TOKEN_REQUEST_URL",
    "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
    "GITHUB_REF_TYPE",
    "GITHUB_REF_NAME",
    "HF_ENDPOINT",
)


@pytest.fixture(autouse=True)
def _isolated_hf_env(tmp_path, monkeypatch):
    for name in _CLEARED_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # Xet's CAS protocol is not emulated: take the git-LFS path (same preupload step).
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_PROGRESS_BARS", True)
    huggingface_hub.utils.disable_progress_bars()
    yield
    huggingface_hub.utils.enable_progress_bars()


@pytest.fixture
def hub():
    tokens = {WRITE_TOKEN: {"user": "publisher", "write": True}, READ_TOKEN: {"user": "reader", "write": False}}
    with HubStandin(tokens) as standin:
        yield standin


class Project:
    """A project dir with build.toml, build/<variant>/ and benchmarks/."""

    def __init__(self, root: Path):
        self.root = root
        self.build = root / "build"
        self.build.mkdir(parents=True)
        (root / "benchmarks").mkdir()
        (root / "benchmarks" / "benchmark_gemm.py").write_text("# benchmark of gemm\nprint('bench')\n")
        (root / "benchmarks" / "run.py").write_text("# not uploaded\n")
        self.write_toml(1)

    def write_toml(self, version: int) -> None:
        (self.root / "build.toml").write_text(
            f'[general]\nname = "gemm"\nversion = {version}\nedition = 6\nlicense = "Apache-2.0"\n'
            'backends = ["cpu", "cuda", "rocm"]\n'
        )

    def variant(
        self,
        name: str = CPU,
        *,
        ops: str = "_gemm_cpu_abc1234",
        so: bytes | None = None,
        extra_files: dict[str, bytes] | None = None,
        checks: dict | None = None,
        dirty: bool = False,
        version: int = 1,
        tamper=None,
    ) -> Path:
        d = self.build / name
        if d.exists():
            for p in sorted(d.rglob("*"), reverse=True):
                p.unlink() if p.is_file() else p.rmdir()
        d.mkdir(parents=True, exist_ok=True)
        backend = name.split("-")[2]
        backend_type = "cuda" if backend.startswith("cu") else "rocm" if backend.startswith("rocm") else "cpu"
        (d / "__init__.py").write_text(f"from ._ops import ops  # {ops}\n")
        (d / "_ops.py").write_text(f"import torch\nfrom . import {ops}\nops = torch.ops.{ops}\n")
        (d / f"{ops}.abi3.so").write_bytes(so if so is not None else b"\x7fELF\x02\x01\x01\0" + os.urandom(4096))
        for rel, data in (extra_files or {}).items():
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_bytes(data)
        digest = kernels_data.Digest.hash_variant(kernels_data.DigestAlgorithm.SHA256, d)
        meta = {
            "name": "gemm",
            "id": ops,
            "version": version,
            "license": "Apache-2.0",
            "python-depends": [],
            "backend": {"type": backend_type, **({"archs": ["gfx942"]} if backend_type == "rocm" else {})},
            "digest": {"algorithm": "sha256", "files": digest.files},
            "provenance": {
                "kernel-builder": {"version": "gemm-scripts-1"},
                "kernel": {"commit": "0123456789abcdef0123456789abcdef01234567", "dirty": dirty},
            },
            "build": {
                "variant": name,
                "torch": "2.13.0",
                "python": "3.11",
                "compiler": "clang-19",
                "flags": ["-O3"],
                "host": "ci",
                "image": None,
            },
            "checks": checks
            if checks is not None
            else {
                "abi": {
                    "manylinux": "manylinux_2_28",
                    "manylinux_violations": [],
                    "python_abi": "3.9",
                    "python_abi_violations": [],
                    "ok": True,
                },
                "digest": {"ok": True},
                "loader": {"ok": True, "chosen": name},
                "smoke": {"ok": True},
                **({"loaders": {"ok": True}, "machine_code": {"ok": True}} if backend_type == "rocm" else {}),
            },
        }
        (d / "metadata.json").write_text(json.dumps(meta, indent=2))
        if tamper is not None:
            tamper(d)
        return d

    def local_files(self, name: str) -> dict[str, bytes]:
        d = self.build / name
        return {f"build/{name}/{p.relative_to(d).as_posix()}": p.read_bytes() for p in d.rglob("*") if p.is_file()}


@pytest.fixture
def project(tmp_path) -> Project:
    return Project(tmp_path / "proj")


@pytest.fixture
def run_publish(hub, project, monkeypatch):
    """Run the publisher in-process against the stand-in; returns (exit code, output)."""

    def run(*extra: str, token: str | None = WRITE_TOKEN, repo: str = REPO) -> tuple[int, str]:
        if token is None:
            monkeypatch.delenv("HF_TOKEN", raising=False)
        else:
            monkeypatch.setenv("HF_TOKEN", token)
        lines: list[str] = []
        argv = [
            "--build-dir",
            str(project.build),
            "--repo",
            repo,
            "--endpoint",
            hub.url,
            "--retry-delay",
            "0.01",
            "--retries",
            "3",
            *extra,
        ]
        rc = publish.main(argv, log=lines.append)
        return rc, "\n".join(lines)

    return run


def writes(hub: HubStandin) -> list[tuple[str, str]]:
    """Requests that could change the stand-in's state."""
    return [
        (m, r)
        for m, r in hub.requests
        if r in ("create_repo", "branch", "preupload", "lfs_batch", "lfs_put", "commit") and m != "GET"
    ]
