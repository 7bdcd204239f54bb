"""`make docker-build` for real: a Docker engine, the builder Dockerfile FROM a stand-in base (Debian +
CPU torch, tests/docker/standin.py), the build stage and its checks inside the container, and the
CPU variant that comes out, loaded through `kernels` in a fresh interpreter and checked against an
fp32 reference, then against the kernel correctness tests.

The engine: CI (`.ci/run`) starts dockerd; outside CI the module skips only when `docker info` fails.
The real rocm/pytorch bases go through the same code with no change: only BASE_IMAGE differs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts import matrix
from tests.docker import standin

REPO = Path(__file__).resolve().parents[2]
BUILD_TIMEOUT = 1500


def _engine_or_skip() -> None:
    try:
        proc = subprocess.run(["docker", "info"], capture_output=True, text=True, timeout=120)
        ok, why = proc.returncode == 0, (proc.stderr or proc.stdout).strip()[-500:]
    except (OSError, subprocess.TimeoutExpired) as exc:
        ok, why = False, str(exc)
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must provide a Docker engine (.ci/run starts dockerd), but `docker info` failed: {why}")
        pytest.skip(f"no Docker engine here (`docker info` failed: {why})")


def docker_build_command(base_image: str) -> list[str]:
    """`make docker-build BASE_IMAGE=...` when the Makefile has the target, else the module itself."""
    if shutil.which("make") and (REPO / "Makefile").is_file():
        probe = subprocess.run(
            ["make", "-n", "docker-build", f"BASE_IMAGE={base_image}"], cwd=REPO, capture_output=True, text=True
        )
        if probe.returncode == 0 and "scripts.docker_build" in probe.stdout:
            return ["make", "docker-build", f"BASE_IMAGE={base_image}"]
    return [sys.executable, "-m", "scripts.docker_build", "--base-image", base_image]


def run_docker_build(base_image: str, out: Path, ccache: Path, log: Path) -> float:
    env = {**os.environ, "GEMM_BUILD_DIR": str(out), "GEMM_CCACHE_DIR": str(ccache)}
    cmd = docker_build_command(base_image)
    t0 = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT)
    seconds = time.monotonic() - t0
    text = log.read_text()
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{text[-6000:]}"
    return seconds


@pytest.fixture(scope="module")
def standin_image() -> str:
    _engine_or_skip()
    return standin.ensure()


@pytest.fixture(scope="module")
def docker_built(standin_image, tmp_path_factory):
    root = tmp_path_factory.mktemp("docker-build")
    out, log = root / "build", root / "docker-build.log"
    seconds = run_docker_build(standin_image, out, root / "ccache", log)
    return {"out": out, "log": log.read_text(), "seconds": seconds}


def _variant(out: Path) -> Path:
    found = [d for d in out.iterdir() if d.is_dir() and (d / "metadata.json").is_file()]
    assert len(found) == 1, f"expected one variant in {out}, got {found}"
    return found[0]


def test_variant_name_metadata_and_verdicts(docker_built, standin_image):
    import docker

    vdir = _variant(docker_built["out"])
    torch_in_standin = standin.TORCH_REQ.split("==")[1].split("+")[0]
    # --base-image: the variant is whatever the torch inside names (CPU torch -> cpu variant)
    assert vdir.name == matrix.variant_name(torch_in_standin, None)
    meta = json.loads((vdir / "metadata.json").read_text())
    image = docker.from_env().images.get(standin_image)
    assert meta["build"]["image"] == {"ref": standin_image, "digest": image.id}
    assert meta["build"]["torch"].startswith(torch_in_standin)
    checks = meta["checks"]
    assert isinstance(checks["abi"]["ok"], bool) and checks["abi"]["manylinux"] == "manylinux_2_28"
    assert checks["loader"]["ok"] and checks["smoke"]["ok"]
    # inside the container, each kernels release of requirements/loaders.txt loaded it (scripts.loaders)
    from scripts import loaders

    assert checks["loaders"]["ok"] and list(checks["loaders"]["releases"]) == loaders.releases()
    assert all(r["ok"] and r["kernels"] == v for v, r in checks["loaders"]["releases"].items())
    from scripts import check

    check.verify_digest(vdir)  # the files are exactly what the container wrote
    # the summary table names the entry, the variant and the ABI verdict
    log = docker_built["log"]
    summary = log[log.rindex("entry ") :]
    row = next(line for line in summary.splitlines() if vdir.name in line)
    assert ("ok (manylinux_2_28)" if checks["abi"]["ok"] else "FAIL (") in row
    assert row.split()[0] == matrix.default_entry(matrix.load()).key
    # no leftovers: the staging directory of the entry is gone
    assert not any((docker_built["out"] / ".docker").glob("*/")), "stage directory left behind"


LOAD_AND_CHECK = r"""
import sys, torch
from pathlib import Path
from kernels import get_local_kernel

gemm = get_local_kernel(Path(sys.argv[1]))
g = torch.Generator().manual_seed(int(sys.argv[2]))
M, N, K = 67, 300, 512
dt = gemm.SUPPORTED_DTYPES[0]
a = torch.randn(K, M, generator=g).to(dt)
b = torch.randn(K, N, generator=g).to(dt)
a_s = torch.randn(K // 128, M, generator=g)
b_s = torch.randn(K // 128, (N + 127) // 128, generator=g)
c = gemm.gemm(a, b, a_s, b_s)
# fp32 reference, written here from the contract: scales broadcast over 128-blocks of K (and of N for b)
A = a.float() * a_s.repeat_interleave(128, 0)
B = b.float() * b_s.repeat_interleave(128, 0).repeat_interleave(128, 1)[:, :N]
ref = A.T @ B
err = (c.float() - ref).abs()
bad = (err > 1e-3 + 2e-2 * ref.abs()).sum().item()
print("module", gemm.__name__, "bad", bad, "max_err", err.max().item())
sys.exit(1 if bad or c.dtype != torch.bfloat16 or c.shape != (M, N) else 0)
"""


def test_variant_loads_through_kernels_and_matches_fp32(docker_built):
    out = docker_built["out"]
    seed = int.from_bytes(os.urandom(4), "little")
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_AND_CHECK, str(out), str(seed)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/",
    )
    assert proc.returncode == 0, f"seed {seed}:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert "module _gemm_cpu_" in proc.stdout


# The full correctness suite runs against the host build (same sources); against the container's
# build a representative slice (odd shapes, both layouts, allocation, scale signs) keeps CI in budget.
CORRECTNESS_SLICE = "1x129x256 or 7x200x128 or 33x1000x384 or layouts_agree or scale_signs"


def test_variant_passes_the_kernel_correctness_tests(docker_built):
    env = {**os.environ, "GEMM_BUILD_DIR": str(docker_built["out"])}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "tests/kernel/test_correctness.py",
            "-k",
            CORRECTNESS_SLICE,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert " passed" in tail
