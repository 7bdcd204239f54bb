"""The check stage reads the GPU code objects out of a ROCm variant's .so and holds them to the gfx942
gate's rules. Here the .so is built by clang-19 from the shipped launcher (torch-free part), the way a
ROCm build bundles device code, plus a deliberately bad one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import check
from scripts import gfx942_gate as gate
from scripts.common import CheckError
from tests.conftest import REPO_ROOT

BITCODE = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")


def _hip_shared_library(source: Path, out: Path, *defines: str) -> Path:
    clang = shutil.which("clang++-19")
    if clang is None or not BITCODE.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail("clang-19 and rocm-device-libs are missing: .ci/run installs them")
        pytest.skip("clang-19 / rocm-device-libs not installed (Debian packages, .ci/apt-packages.txt)")
    out.mkdir(parents=True, exist_ok=True)
    so = out / "_gemm_rocm_0000000.abi3.so"
    cmd = [clang, "-x", "hip", "--offload-arch=gfx942", "-O3", "-std=c++17", "-fPIC", "-shared", *defines]
    cmd += [f"--hip-device-lib-path={BITCODE}", *(f"--hip-device-lib={lib}" for lib in gate.DEVICE_LIBS)]
    subprocess.run([*cmd, str(source), "-o", str(so)], check=True)
    return so


def test_shipped_kernels_pass_in_the_bundle(tmp_path):
    _hip_shared_library(
        REPO_ROOT / "gemm/rocm/gemm_rocm.hip", tmp_path / "variant", "-DROCM_KERNEL", "-DGEMM_ROCM_KERNELS_ONLY"
    )
    verdict = check.machine_code_verdict(tmp_path / "variant")
    assert verdict["ok"], verdict["violations"]
    gemm = [k for k in verdict["kernels"] if k["kernel"].startswith("gemm_kernel")]
    assert gemm and all(k["mfma_fp8"] > 0 and k["scratch"] == 0 and k["spills"] == 0 for k in gemm)
    assert {k["target"] for k in verdict["kernels"]} == {"hipv4-amdgcn-amd-amdhsa--gfx942"}


def test_bundle_without_mfma_or_with_scratch_fails(tmp_path):
    source = tmp_path / "bad.hip"
    source.write_text(
        "#include <hip/hip_runtime.h>\n"
        "// Named like a GEMM kernel, but no MFMA, and a dynamically indexed array that lives in scratch.\n"
        "__global__ void gemm_kernel_bad(float* out, const int* idx) {\n"
        "  float big[512];\n"
        "  for (int i = 0; i < 512; ++i) big[i] = out[i * 64 + threadIdx.x];\n"
        "  out[threadIdx.x] = big[idx[threadIdx.x] & 511];\n"
        "}\n"
    )
    _hip_shared_library(source, tmp_path / "variant")
    verdict = check.machine_code_verdict(tmp_path / "variant")
    assert not verdict["ok"]
    text = " ".join(verdict["violations"])
    assert "without v_mfma" in text and "scratch" in text


def test_host_only_library_is_refused(tmp_path):
    (tmp_path / "variant").mkdir()
    (tmp_path / "variant" / "_gemm_rocm_0000000.abi3.so").write_bytes(
        Path(shutil.which("true") or "/bin/true").read_bytes()
    )
    with pytest.raises(CheckError, match="no .hip_fatbin section"):
        check.machine_code_verdict(tmp_path / "variant")
