"""The torch-facing half of gemm_rocm.hip (argument checks, the plan, launches) is compiled only inside the
rocm/pytorch containers: the gate and the emulator build its torch-free half. Here clang-19 parses the whole
file for gfx942 against this machine's (CPU) torch headers, with a stand-in for the one ROCm-only torch
header it includes, so that a typo in that half fails here and not first in the release build.

The CPU torch headers themselves do not parse as HIP (their thrust::complex paths need ROCm's thrust):
the errors a file holding only the launcher's includes gets are the baseline, and every other error counts,
wherever clang reports it (our misuse of a torch template is reported at the torch header's line). Two
controls plant errors in the launcher, one reported in our file and one inside torch's headers.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

LAUNCHER = REPO_ROOT / "gemm" / "rocm" / "gemm_rocm.hip"

# What gemm_rocm.hip uses of c10/hip/HIPStream.h (ROCm torch's hipified CUDAStream.h).
HIP_STREAM_STANDIN = """#pragma once
#include <hip/hip_runtime.h>
namespace c10 { namespace hip {
struct HIPStream { hipStream_t stream() const { return nullptr; } };
inline HIPStream getCurrentHIPStream() { return {}; }
} }
"""
# Enough of thrust::complex for c10's complex.h to declare its conversions (its math still fails, in torch).
THRUST_COMPLEX_STANDIN = """#pragma once
namespace thrust { template <class T> struct complex {
  T re, im;
  complex() = default;
  __host__ __device__ complex(T r, T i) : re(r), im(i) {}
  __host__ __device__ T real() const { return re; }
  __host__ __device__ T imag() const { return im; }
}; }
"""


def _errors(source: Path, tmp_path: Path) -> list[str]:
    clang = shutil.which("clang++-19")
    if clang is None:
        if os.environ.get("CI") == "true":
            pytest.fail("clang-19 is missing: .ci/run installs it")
        pytest.skip("clang-19 not installed (Debian packages, .ci/apt-packages.txt)")
    from torch.utils.cpp_extension import include_paths

    stubs = tmp_path / "standins"
    (stubs / "c10" / "hip").mkdir(parents=True, exist_ok=True)
    (stubs / "thrust").mkdir(exist_ok=True)
    (stubs / "c10" / "hip" / "HIPStream.h").write_text(HIP_STREAM_STANDIN)
    (stubs / "thrust" / "complex.h").write_text(THRUST_COMPLEX_STANDIN)
    cmd = [clang, "-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-std=c++17", "-fsyntax-only"]
    cmd += ["-ferror-limit=0", "-DROCM_KERNEL", "-DTORCH_EXTENSION_NAME=_gemm_rocm_check", f"-I{stubs}"]
    cmd += [f"-I{p}" for p in include_paths()]
    cmd += [f"-I{REPO_ROOT / 'torch-ext'}", f"-I{LAUNCHER.parent}", str(source)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return [line for line in proc.stderr.splitlines() if re.search(r"\berror:", line)]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory) -> set[str]:
    """The errors of a file with only the launcher's #include lines (parsed once for the module)."""
    tmp_path = tmp_path_factory.mktemp("launcher_baseline")
    includes = [line for line in LAUNCHER.read_text().splitlines() if line.startswith("#include")]
    baseline_file = tmp_path / "includes_only.hip"
    baseline_file.write_text("\n".join(includes) + "\n")
    return set(_errors(baseline_file, tmp_path))


def _new_errors(source: Path, tmp_path: Path, baseline: set[str]) -> list[str]:
    """The errors parsing `source` gives beyond the includes-only baseline's."""
    return [line for line in _errors(source, tmp_path) if line not in baseline]


def test_the_launcher_parses_for_gfx942_against_torch(tmp_path, baseline):
    assert _new_errors(LAUNCHER, tmp_path, baseline) == []


@pytest.mark.parametrize(
    ("planted", "reported"),
    [
        ("int planted = undeclared_name_for_the_test;", "undeclared_name_for_the_test"),
        # Reported at torch's StringUtil.h, with our line only in the notes: an error the baseline must not hide.
        ("struct NoStream {}; void planted() { TORCH_CHECK(true, NoStream{}); }", "invalid operands"),
    ],
)
def test_an_error_in_the_launcher_is_seen(tmp_path, baseline, planted, reported):
    text = LAUNCHER.read_text()
    anchor = "void gemm_seed(torch::Tensor& c"
    assert anchor in text
    source = tmp_path / "gemm_rocm_planted.hip"
    source.write_text(text.replace(anchor, planted + "\n" + anchor, 1))
    errors = _new_errors(source, tmp_path, baseline)
    assert errors and any(reported in e for e in errors), errors
