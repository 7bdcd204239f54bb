"""The gfx942 GEMM kernel source (gemm/rocm/gemm_kernels.h), unmodified, run on the CPU by the HIP
emulator (gemm/rocm/emu) under ASan+UBSan and under TSan, against the fp32 reference of the contract.

The driver (gemm/rocm/emu/tests/emu_gemm.cpp) goes through the kernels' own dispatch
(gemm_rocm::run_gemm) with a forced plan, so the small shapes below reach every row of the
configuration table, both layouts, the vector and the byte load paths (aligned and misaligned
bases), split-K with uneven splits, ragged M and N (M = 1, odd, N not a multiple of 128) and K = 128,
and both epilogues: 4 columns a store (N % 4 == 0, aligned c) and one element at a time (N % 4 != 0,
or c off 8-byte alignment in the bytes-misaligned cases).
Inputs are fresh random fp8 (e4m3fnuz) values with signed random scales; the output is poisoned
with NaN before the call, and every element must be written and within
|out - ref| <= 1e-3 + 2e-2 |ref|.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from tests.rocm import emu_build

DRIVER = emu_build.EMU_DIR / "tests" / "emu_gemm.cpp"
FP8 = torch.float8_e4m3fnuz
ATOL, RTOL = 1e-3, 2e-2
TILES = {0: (256, 128), 1: (128, 128), 2: (64, 64)}  # gemm_plan.h config_info(), checked below

# (layout, config, splits, path, M, N, K). Sizes are kept small: the emulator pays a rendezvous of
# 64 threads per MFMA (t256x128: 512 per K-block, t128x128: 256, t64x64: 32).
ASAN_CASES = [
    ("seed", 0, 1, "vec", 200, 100, 256),
    ("natural", 0, 2, "vec", 100, 120, 384),
    ("natural", 0, 2, "vec", 36, 122, 256),  # fp32 partials element by element (N % 4 != 0)
    ("seed", 0, 1, "bytes-misaligned", 37, 77, 256),
    ("natural", 0, 1, "bytes", 1, 129, 128),
    ("seed", 1, 3, "vec", 68, 132, 640),
    ("natural", 1, 1, "bytes-misaligned", 129, 127, 256),
    ("seed", 1, 2, "bytes", 1, 1, 256),
    ("natural", 1, 1, "vec", 64, 256, 128),
    ("seed", 2, 1, "vec", 68, 132, 256),
    ("natural", 2, 4, "vec", 65, 63, 512),
    ("seed", 2, 1, "bytes-misaligned", 3, 5, 128),
    ("natural", 2, 2, "bytes", 130, 70, 384),
    ("seed", 2, 1, "vec", 1024, 128, 128),  # 16 x 2 tiles: XCD remap + groups of 8 tile-rows
    ("natural", 2, 1, "bytes", 128, 256, 128),  # 2 x 4 tiles: XCD remap
    ("seed", 2, 1, "bytes-misaligned", 20, 128, 128),  # N % 4 == 0, c not 8-byte aligned: element stores
    ("natural", 2, 2, "bytes-misaligned", 36, 64, 256),  # ... and 16-byte partial stores, element reduce
    ("seed", -1, 0, "vec", 96, 300, 512),  # the planner's own choice
    ("natural", -1, 0, "vec", 64, 200, 512),
]
TSAN_CASES = [
    ("natural", 2, 2, "vec", 65, 70, 256),
    ("seed", 0, 1, "vec", 40, 40, 128),
    ("seed", 1, 2, "bytes-misaligned", 21, 130, 256),
    # Three K-blocks in one split, per configuration: the double-buffered LDS stages (operands and a_scale)
    # are reused across iterations, which one K-block a split never exercises.
    ("natural", 2, 1, "vec", 65, 70, 384),
    ("seed", 1, 1, "vec", 40, 40, 384),
    ("seed", 0, 1, "vec", 40, 40, 384),
]


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    b = emu_build.Builder.for_session(tmp_path_factory, "emu_gemm")
    b.prebuild(DRIVER)  # ASan+UBSan and TSan variants compile side by side
    return b


def _case_id(case) -> str:
    layout, config, splits, path, m, n, k = case
    return f"{layout}-c{config}-s{splits}-{path}-{m}x{n}x{k}"


def _epilogue(case) -> tuple[str, str]:
    """Where a case's kernel stores (c, or the split-K workspace) and how: 4 columns a store where
    N % 4 == 0 and the base is aligned (the driver's c is off 8-byte alignment in bytes-misaligned
    cases; the workspace is always aligned), else one element at a time."""
    _, _, splits, path, _, n, k = case
    kbs = k // 128
    effective = 1 if splits <= 1 else -(-kbs // -(-kbs // min(splits, kbs)))
    dest = "workspace" if effective > 1 else "c"
    vec4 = n % 4 == 0 and (dest == "workspace" or path != "bytes-misaligned")
    return dest, "vec4" if vec4 else "element"


def _inputs(m: int, n: int, k: int, gen: torch.Generator):
    kb, nb = k // 128, (n + 127) // 128
    A = (torch.randn(m, k, generator=gen) * 2).to(FP8)
    B = (torch.randn(n, k, generator=gen) * 2).to(FP8)
    sa = torch.randn(m, kb, generator=gen)  # signed scales, as the challenge draws them
    sb = torch.randn(nb, kb, generator=gen)
    return A, B, sa, sb


def _reference(A, B, sa, sb) -> torch.Tensor:
    m, k = A.shape
    n = B.shape[0]
    Af = A.float() * sa.repeat_interleave(128, dim=1)
    Bf = B.float() * sb.repeat_interleave(128, dim=0)[:n].repeat_interleave(128, dim=1)
    return Af @ Bf.T


def _run_case(builder, tmp_path, sanitizer, case, seed: int, row: int = 0):
    """row > 0: at most that many blocks a grid row, so the tiles go over z (gemm_plan.h set_grid)."""
    layout, config, splits, path, m, n, k = case
    gen = torch.Generator().manual_seed(seed)
    A, B, sa, sb = _inputs(m, n, k, gen)
    if layout == "seed":
        tensors = {"a": A.T.contiguous(), "b": B.T.contiguous(), "sa": sa.T.contiguous(), "sb": sb.T.contiguous()}
    else:
        tensors = {"a": A, "b": B, "sa": sa, "sb": sb}
    for name, t in tensors.items():
        (t.view(torch.uint8) if t.dtype == FP8 else t).numpy().tofile(tmp_path / f"{name}.bin")
    poison = torch.full((m, n), 0x7FC1, dtype=torch.int16)  # bf16 NaN in every element
    poison.numpy().tofile(tmp_path / "c.bin")

    exe = builder.build(DRIVER, sanitizer)
    args = [layout, config, splits, path, m, n, k, tmp_path] + ([row] if row else [])
    proc = emu_build.run(exe, args, sanitizer, timeout=900)
    plan = json.loads(proc.stdout.strip().splitlines()[-1])
    msg = f"seed={seed} case={_case_id(case)} sanitizer={sanitizer} plan={plan}"

    # The forced plan was honoured.
    if config >= 0:
        assert plan["config"] == config, msg  # every config has a byte path (EMU_NEEDS.md)
        bm, bn = TILES[config]
        assert (plan["tiles_m"], plan["tiles_n"]) == ((m + bm - 1) // bm, (n + bn - 1) // bn), msg
    if splits > 0:
        kbs = k // 128
        per = -(-kbs // min(splits, kbs))
        assert plan["splits"] == -(-kbs // per) and plan["kb_per_split"] == per, msg
    assert plan["vec"] == (path == "vec"), msg
    tiles = plan["tiles_m"] * plan["tiles_n"]
    if row:  # rows of `row` blocks at most, fewer than one row spare
        z = -(-tiles // row)
        assert (plan["grid_x"], plan["grid_z"]) == (-(-tiles // z), z) and z > 1, msg
    else:
        assert (plan["grid_x"], plan["grid_z"]) == (tiles, 1), msg
    assert plan["launches"] == (2 if plan["splits"] > 1 else 1), msg

    out = torch.from_numpy(np.fromfile(tmp_path / "c.bin", dtype=np.int16)).view(torch.bfloat16).reshape(m, n).float()
    ref = _reference(A, B, sa, sb)
    assert not ref.isnan().any()
    unwritten = out.isnan()
    assert not unwritten.any(), (
        f"{msg}: {int(unwritten.sum())} outputs left unwritten (poison), first at "
        f"{tuple(unwritten.nonzero()[0].tolist())}"
    )
    err = (out - ref).abs()
    bad = err > ATOL + RTOL * ref.abs()
    assert not bad.any(), (
        f"{msg}: {int(bad.sum())} of {m * n} outside tolerance; worst at "
        f"{tuple(np.unravel_index(int(err.argmax()), (m, n)))}: out "
        f"{out.flatten()[err.argmax()].item()} ref {ref.flatten()[err.argmax()].item()}"
    )
    return plan


@pytest.mark.parametrize("case", ASAN_CASES, ids=_case_id)
def test_kernel_matches_reference_asan_ubsan(builder, tmp_path, case, seeds):
    _run_case(builder, tmp_path, "asan", case, next(seeds))


# The tiles over several grid rows, as on the GPU past HIP's 2^32 - 1 work-items a dimension (M of a few rows,
# N near 2^30): (case, blocks a row). 32 tiles in rows of 5: 7 rows, 3 blocks past the last tile; 9 tiles
# in rows of 2 with split-K: 5 rows, 1 spare; 4 tiles in rows of 3 on the byte path.
ROW_CASES = [
    (("seed", 2, 1, "vec", 1024, 128, 128), 5),
    (("natural", 1, 2, "vec", 300, 260, 384), 2),
    (("seed", 0, 1, "bytes", 300, 200, 128), 3),
]


@pytest.mark.parametrize("case,row", ROW_CASES, ids=lambda v: _case_id(v) if isinstance(v, tuple) else f"row{v}")
def test_tiles_over_several_grid_rows_asan_ubsan(builder, tmp_path, case, row, seeds):
    """Every tile computed once and every output written, the spare blocks of the last row writing nothing
    (ASan sees a stray store); the same kernel, with only the launch grid changed."""
    _run_case(builder, tmp_path, "asan", case, next(seeds), row)


@pytest.mark.parametrize("case", TSAN_CASES, ids=_case_id)
def test_kernel_matches_reference_tsan(builder, tmp_path, case, seeds):
    _run_case(builder, tmp_path, "tsan", case, next(seeds))


def test_cases_cover_the_configuration_table():
    """Every row of the table is forced with both layouts and both load paths; split-K and ragged shapes."""
    src = (emu_build.ROCM_DIR / "gemm_plan.h").read_text()
    import re

    rows = re.findall(r'\{"(\w+)",\s*(\d+),\s*(\d+),', src)
    assert len(rows) >= 1
    assert {i: (int(bm), int(bn)) for i, (_, bm, bn) in enumerate(rows)} == TILES, (
        "gemm_plan.h's table changed: update TILES and the cases"
    )
    for config in TILES:
        for layout in ("seed", "natural"):
            paths = {c[3] for c in ASAN_CASES if c[0] == layout and c[1] == config}
            assert "vec" in paths and paths & {"bytes", "bytes-misaligned"}, (config, layout, paths)
    assert any(c[2] > 1 for c in ASAN_CASES) and any(c[2] > 1 for c in TSAN_CASES)
    # Both epilogues (4 columns a store, element by element) into both destinations, every config.
    epilogues = {(c[1], *_epilogue(c)) for c in ASAN_CASES}
    for config in TILES:
        for dest in ("c", "workspace"):
            for store in ("vec4", "element"):
                assert (config, dest, store) in epilogues, (config, dest, store)
    assert any(c[4] == 1 for c in ASAN_CASES) and any(c[5] % 128 and c[5] % 2 for c in ASAN_CASES)
