"""The gfx942 gate (scripts/gfx942_gate.py): the HIP backend compiles for MI300X with clang-19 and its
code objects pass (fp8 MFMA in every GEMM kernel, no scratch, no spills, LDS <= 64 KiB); and the gate
is able to fail: deliberately bad translation units are rejected with a clear message."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from scripts import gfx942_gate as gate

IN_CI = os.environ.get("CI", "").lower() == "true"


def _toolchain_or_skip() -> None:
    missing = [t for t in ("clang++-19", "llvm-readelf-19", "llvm-objdump-19") if not shutil.which(t)]
    if not missing:
        try:
            gate.device_lib_path()
            return
        except gate.GateError as exc:
            missing.append(str(exc))
    msg = f"gfx942 toolchain missing: {', '.join(missing)} (Debian: clang-19 lld-19 llvm-19 rocm-device-libs)"
    if IN_CI:
        pytest.fail(msg + " -- CI must have it (.ci/apt-packages.txt)")
    pytest.skip(msg)


@pytest.fixture(scope="module")
def gate_run(tmp_path_factory):
    _toolchain_or_skip()
    out = tmp_path_factory.mktemp("gate")
    sources = gate.default_sources()
    return sources, gate.run_gate(sources, out)


def test_backend_sources_found():
    names = {p.name for p in gate.default_sources()}
    assert "gemm_rocm.hip" in names, names


def test_gate_passes_on_the_backend(gate_run, capsys):
    sources, reports = gate_run
    bad = [(r.name, r.violations) for r in reports if r.violations]
    assert not bad, f"gfx942 gate violations: {bad}"
    gemm = [r for r in reports if r.is_gemm]
    # 3 tile configurations x 2 layouts x {vector loads, byte loads}
    assert len(gemm) == 12, [r.name for r in gemm]
    for r in gemm:
        assert r.mfma_fp8 > 0 and r.mfma_fp8 == r.mfma, r
        assert r.scratch == 0 and r.vgpr_spill == 0 and r.sgpr_spill == 0, r
        assert 0 < r.lds <= 64 * 1024, r
        assert r.waves_per_simd >= 2, f"{r.name}: occupancy {r.waves_per_simd} wave/SIMD below the budget"
    names = " ".join(r.name for r in gemm)
    for tile in ("256x128", "128x128", "64x64"):
        for layout in ("seed", "natural"):
            for path in ("vec", "bytes"):
                assert any(
                    r.name.startswith(f"gemm_kernel<{tile} ") and r.name.endswith(f", {layout}, {path}>") for r in gemm
                ), (tile, layout, path, names)
    # both MFMA shapes are in use: 16x16x32 (t256x128, t128x128) and 32x32x16 (t64x64)
    assert "mfma16" in names and "mfma32" in names
    assert {r.name for r in reports if r.name.startswith("splitk_reduce_kernel")} == {
        "splitk_reduce_kernel<4>",
        "splitk_reduce_kernel<1>",
    }
    print(gate.format_table(reports))
    assert "waves/SIMD" in capsys.readouterr().out


def test_gate_cli_prints_table_and_exits_zero(gate_run, capsys, tmp_path):
    sources, _ = gate_run
    rc = gate.main(["--out", str(tmp_path), "--json", str(tmp_path / "gate.json")])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "VGPR" in out and "AGPR" in out and "SGPR" in out and "LDS" in out and "waves/SIMD" in out
    assert "gfx942 gate: ok" in out
    assert (tmp_path / "gate.json").is_file()


BAD_NO_MFMA = """
#include "hip_compat.h"
// A "GEMM kernel" that multiplies on the VALU only: the gate must reject it.
__global__ void gemm_kernel_without_mfma(const float* a, const float* b, float* c, int n) {
  float s = 0.f;
  for (int k = 0; k < n; ++k) s += a[threadIdx.x * n + k] * b[k];
  c[threadIdx.x] = s;
}
"""

BAD_SCRATCH = """
#include "hip_compat.h"
typedef float floatx4 __attribute__((ext_vector_type(4)));
// Has an MFMA but a dynamically indexed private array: lives in scratch, the gate must reject it.
__global__ void gemm_kernel_with_scratch(const long* a, const int* idx, float* c) {
  float big[512];
  for (int i = 0; i < 512; ++i) big[i] = c[i * 64 + threadIdx.x];
  floatx4 acc = {big[idx[threadIdx.x]], 0.f, 0.f, 0.f};
  acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a[threadIdx.x], a[threadIdx.x + 64], acc, 0, 0, 0);
  c[threadIdx.x] = acc[0] + big[idx[threadIdx.x + 64]];
}
"""

BAD_UNHIDDEN_LOADS = """
#include "hip_compat.h"
typedef float floatx4 __attribute__((ext_vector_type(4)));
// Its K loop feeds each global load straight into the next MFMA: the wave waits for every load with
// no matrix work in between, the gate must reject it.
__global__ void gemm_kernel_with_unhidden_loads(const long* a, float* c, int n) {
  floatx4 acc = {0.f, 0.f, 0.f, 0.f};
#pragma nounroll
  for (int k = 0; k < n; ++k) {
    const long v = a[k * 64 + threadIdx.x];
    acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(v, v, acc, 0, 0, 0);
  }
  c[threadIdx.x] = acc[0];
}
"""


@pytest.mark.parametrize(
    ("source", "expected"),
    [(BAD_NO_MFMA, "without v_mfma"), (BAD_SCRATCH, "scratch"), (BAD_UNHIDDEN_LOADS, "no MFMA in between")],
    ids=["no-mfma", "scratch", "unhidden-loads"],
)
def test_gate_fails_on_a_bad_translation_unit(source, expected, tmp_path, capsys):
    _toolchain_or_skip()
    bad = tmp_path / "bad.hip"
    bad.write_text(source)
    shutil.copy(gate.ROCM_DIR / "hip_compat.h", tmp_path / "hip_compat.h")
    reports = gate.run_gate([bad], tmp_path)
    assert any(expected in v for r in reports for v in r.violations), [(r.name, r.violations) for r in reports]
    rc = gate.main(["--src", str(bad), "--out", str(tmp_path / "objs")])
    captured = capsys.readouterr()
    assert rc == 1, captured.out + captured.err
    assert "FAIL" in captured.err and expected in captured.err


def test_gate_reports_a_compile_error(tmp_path, capsys):
    _toolchain_or_skip()
    bad = tmp_path / "broken.hip"
    bad.write_text("__global__ void gemm_kernel_broken() { this is not C++; }\n")
    rc = gate.main(["--src", str(bad), "--out", str(tmp_path / "objs")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot run" in err and "broken.hip" in err


def test_gate_reports_a_missing_toolchain(monkeypatch, capsys):
    monkeypatch.setenv("GEMM_CLANG", "/nonexistent/clang++-19")
    rc = gate.main(["--src", str(Path(gate.ROCM_DIR) / "gemm_rocm.hip")])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot run" in err


def test_host_plan_invariants(tmp_path):
    """The host-side plan the launcher and the gate share (gemm_plan.h), compiled with clang-19 under
    UBSan: every split non-empty, workspace exact and bounded, tiles cover M x N, forced choices
    respected, every configuration chosen for some shape (gemm/rocm/tools/plan_check.cpp)."""
    _toolchain_or_skip()
    exe = tmp_path / "plan_check"
    cmd = [gate.tool("clang++-19"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=undefined",
           "-fno-sanitize-recover=all", f"-I{gate.ROCM_DIR}", str(gate.ROCM_DIR / "tools" / "plan_check.cpp"),
           "-o", str(exe)]  # fmt: skip
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failures" in run.stdout


def test_lds_accesses_conflict_free_and_staging_complete(tmp_path):
    """The kernel's own LDS address functions (LdsMap, TileCfg in gemm_kernels.h), evaluated on the
    host for every lane of every wave by gemm/rocm/tools/lds_check.cpp: the staging stores, the MFMA
    operand reads and the a_scale traffic of every configuration and layout take no more LDS clocks
    than their bytes need (32 banks, phases of 128 / access-size lanes), and the staging writes each
    data byte of a stage once and no pad byte. The tool's self-test shows it counts the first
    version's 2-way conflict on the natural store."""
    _toolchain_or_skip()
    exe = tmp_path / "lds_check"
    cmd = [gate.tool("clang++-19"), "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-Wno-psabi",
           "-DGEMM_HIP_EMULATOR", "-pthread", "-fsanitize=undefined", "-fno-sanitize-recover=all",
           f"-I{gate.ROCM_DIR}", str(gate.ROCM_DIR / "tools" / "lds_check.cpp"), "-o", str(exe)]  # fmt: skip
    build = subprocess.run(cmd, capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failures" in run.stdout
    # One row per configuration and layout, each with its per-K-block total.
    rows = [line for line in run.stdout.splitlines() if "MFMA clocks" in line]
    assert len(rows) == 6, run.stdout


@pytest.mark.parametrize(
    ("vgprs", "lds", "threads", "waves"),
    [
        (216, 57344, 512, 2),  # t256x128: 2 waves/SIMD, one workgroup per CU (LDS)
        (88, 18944, 256, 3),  # t64x64: LDS holds 3 workgroups of 4 waves
        (10, 0, 256, 8),  # capped at 8 waves/SIMD
        (256, 0, 1024, 0),  # 16 waves of 256 registers do not fit a CU: not launchable
        (40, 70000, 64, 0),  # LDS over 64 KiB
        (512, 0, 64, 1),
    ],
)
def test_occupancy_model(vgprs, lds, threads, waves):
    assert gate.waves_per_simd(vgprs, lds, threads) == waves


def _asm(*lines: str) -> list[str]:
    """llvm-objdump-style lines at consecutive 4-byte addresses from 0x1000."""
    return [f"\t{text:60s}// {0x1000 + 4 * i:012X}: 00000000" for i, text in enumerate(lines)]


MFMA = "v_mfma_f32_16x16x32_fp8_fp8 v[8:11], v[6:7], v[6:7], v[8:11]"


def test_load_use_straight_line():
    """vmcnt(n) retires all but the newest n vector memory operations (loads and stores share the
    in-order counter); the distance is the MFMAs issued between a load and the wait retiring it."""
    code = _asm(
        "global_load_dword v1, v0, s[0:1]",  # load 0
        "global_load_dwordx4 v[2:5], v0, s[0:1]",  # load 1
        MFMA,
        "s_waitcnt vmcnt(1)",  # retires load 0 after 1 MFMA
        "global_store_dword v0, v1, s[0:1]",
        MFMA,
        "global_load_dword v12, v0, s[0:1]",  # load 2
        "s_waitcnt vmcnt(0) lgkmcnt(0)",  # retires load 1 (2 MFMAs), the store, load 2 (0 MFMAs)
        "global_load_dword v13, v0, s[0:1]",  # never waited for: left out
        "s_endpgm",
    )
    uses = gate.load_use(code)
    assert [u.mfmas for u in uses] == [1, 2, 0]
    assert not any(u.in_loop for u in uses)
    assert gate.mfma_counts(code) == (2, 2)
    assert gate.load_use(_asm("s_waitcnt vmcnt(0)", "s_endpgm")) == []


def test_load_use_follows_the_loop_back_edge():
    """A load at the bottom of a loop body, waited at the top of the next iteration after the MFMAs
    there, is measured across the back edge; the wait after the loop exit does not count for it."""
    code = _asm(
        "global_load_dword v1, v0, s[0:1]",  # 0x1000 prologue load
        "s_waitcnt vmcnt(0)",  # 0x1004: prologue load waited with 0 MFMAs
        MFMA,  # 0x1008 loop top
        MFMA,  # 0x100c
        "s_waitcnt vmcnt(0)",  # 0x1010 the previous iteration's load retires here: 2 MFMAs
        "ds_write_b32 v2, v1",  # 0x1014
        "global_load_dword v1, v0, s[0:1]",  # 0x1018 the loop load
        "s_cbranch_scc1 65530",  # 0x101c: back to 0x1020 - 6*4 = 0x1008
        "s_waitcnt vmcnt(0)",  # 0x1020 after the loop: 0 MFMAs, not counted for the loop load
        "s_endpgm",
    )
    uses = gate.load_use(code)
    assert [(u.mfmas, u.in_loop) for u in uses] == [(0, False), (2, True)]
    # the same loop with the wait right after the load: 0 MFMAs in the loop
    bad = _asm(
        MFMA,
        MFMA,
        "global_load_dword v1, v0, s[0:1]",
        "s_waitcnt vmcnt(0)",
        "ds_write_b32 v2, v1",
        "s_cbranch_scc1 65530",  # back to 0x1018 - 6*4 = 0x1000
        "s_endpgm",
    )
    assert [(u.mfmas, u.in_loop) for u in gate.load_use(bad)] == [(0, True)]


def test_load_use_takes_the_worst_path():
    """Where paths merge, a load's distance is the fewest MFMAs on any path to its wait."""
    code = _asm(
        "global_load_dword v1, v0, s[0:1]",  # 0x1000
        "s_cbranch_scc1 1",  # 0x1004 -> 0x100c, skipping the MFMA
        MFMA,  # 0x1008
        "s_waitcnt vmcnt(0)",  # 0x100c
        "s_endpgm",
    )
    assert [u.mfmas for u in gate.load_use(code)] == [0]


def test_gate_reports_load_use_per_kernel(gate_run):
    _, reports = gate_run
    for r in reports:
        if r.is_gemm:
            # every GEMM kernel stages its tiles through global loads in its K loop
            assert r.loop_loads > 0 and 0 <= r.loop_loads_wait0 <= r.loop_loads <= r.loads, r
            assert 0 <= r.loads_wait0 <= r.loads, r
    table = gate.format_table(reports)
    assert "loop ld wait0" in table.splitlines()[0]
    # the property the gate checks: the main (vector-load) kernels hide every K-loop load behind MFMAs
    for r in reports:
        if r.is_gemm and r.name.endswith(", vec>"):
            assert r.loop_loads_wait0 == 0 and r.loop_load_mfma_min >= 1, r
    first = next(r for r in reports if r.is_gemm)
    row = next(line for line in table.splitlines() if line.startswith(first.name))
    assert f"{first.loads_wait0}/{first.loads}" in row and f"{first.loop_loads_wait0}/{first.loop_loads}" in row


def test_device_code_refuses_other_archs(tmp_path):
    """gemm_kernels.h stops a device compilation for any arch but gfx942 (the fp8 MFMA builtins read
    e4m3fnuz only there) with a clear #error, while the gfx942 device pass still compiles."""
    _toolchain_or_skip()
    base = [gate.tool("clang++-19"), "-x", "hip", "--cuda-device-only", "--no-gpu-bundle-output", "-std=c++17",
            "-O0", "-DROCM_KERNEL", *gate.GATE_DEFINES, f"--hip-device-lib-path={gate.device_lib_path()}",
            *(f"--hip-device-lib={lib}" for lib in gate.DEVICE_LIBS), f"-I{gate.ROCM_DIR}", "-fsyntax-only",
            str(gate.ROCM_DIR / "gemm_rocm.hip")]  # fmt: skip
    other = subprocess.run([*base, "--offload-arch=gfx90a"], capture_output=True, text=True)
    assert other.returncode != 0
    assert "gfx942 (MI300X) only" in other.stderr, other.stderr
    ok = subprocess.run([*base, "--offload-arch=gfx942"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
