"""The gfx942 quantization kernel (gemm/rocm/quantize_kernels.h), unmodified, run on the CPU by the HIP
emulator under ASan+UBSan and TSan: bit for bit what torch computes for `quantize_activations` on a GPU.

On a GPU the torch code's scale is amax times the float reciprocal of 240 (torch multiplies by the
reciprocal when it divides a tensor by a Python scalar there), at least the smallest normal float, then
x / scale rounded to nearest even into e4m3fnuz. `expected` below writes that out in CPU torch; the MI300X
runners compare the real kernel with the torch code itself (tests/kernel/test_quantize.py). The inputs
(random, from a fixed seed a case) hold blocks from 1e-7 to 1e2 in magnitude (fp16 subnormals among
them), an all-zero block, a block of values at the smallest normal scale, a NaN and an inf, and a row
count that leaves the last workgroup partly empty. A capped grid runs the kernel's loop over workgroups,
which on a GPU only tensors of 2^28 blocks (64 GiB of bf16) reach.
"""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest
import torch

from tests.rocm import emu_build

DRIVER = emu_build.EMU_DIR / "tests" / "emu_quantize.cpp"
FP8 = torch.float8_e4m3fnuz
TYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    b = emu_build.Builder.for_session(tmp_path_factory, "emu_quantize")
    b.prebuild(DRIVER)
    return b


def _inputs(rows: int, blocks: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    magnitude = torch.exp(torch.randn(rows, blocks, 1, generator=gen) * 3) / 1e3  # about 1e-7 .. 1e2
    x = (torch.randn(rows, blocks, 128, generator=gen) * magnitude).reshape(rows, blocks * 128)
    x[0, :128] = 0
    if rows > 2 and blocks > 1:
        x[1, 128:256] = torch.linspace(-(2.0**-120), 2.0**-120, 128)  # fp16 rounds these to 0
        x[2, 7] = float("nan")
        x[2, 200] = float("-inf")
    return x.to(dtype)


def expected(x: torch.Tensor, power_of_two: bool) -> tuple[torch.Tensor, torch.Tensor]:
    rows, k = x.shape
    amax = x.float().abs().reshape(rows, k // 128, 128).amax(dim=2)  # NaN if the block has one
    scale = amax * torch.tensor(1.0 / 240.0, dtype=torch.float32)
    tiny = torch.finfo(torch.float32).tiny
    scale = torch.where(scale < tiny, torch.full_like(scale, tiny), scale)
    if power_of_two:
        scale = torch.exp2(torch.ceil(torch.log2(scale)))
    q = (x.float() / scale.repeat_interleave(128, dim=1)).to(FP8)
    return q.view(torch.uint8), scale


def _run(builder, tmp_path, sanitizer, type_name, rows, blocks, power_of_two, max_groups=None):
    # A fixed seed a case: with power_of_two the emulator's scales go through the host's log2f and
    # `expected`'s through torch's log2, which may differ in the last bit within an ulp of a power of two.
    seed = zlib.crc32(f"{type_name} {rows} {blocks} {power_of_two} {sanitizer}".encode())
    x = _inputs(rows, blocks, TYPES[type_name], torch.Generator().manual_seed(seed))
    x.view(torch.uint8).numpy().tofile(tmp_path / "x.bin")
    exe = builder.build(DRIVER, sanitizer)
    args = [type_name, rows, blocks, int(power_of_two), tmp_path] + ([max_groups] if max_groups else [])
    proc = emu_build.run(exe, args, sanitizer, timeout=900)
    groups = -(-rows * blocks // 16)  # 16 blocks a workgroup
    grid = min(groups, max_groups or groups)
    # Every group once: 256 lanes, 4 shuffle steps (16 lanes a block) each; a loop that revisited groups
    # would write the same bytes again, which nothing else here would notice.
    counts = {"launches": 1, "grid": grid, "lane_shuffles": groups * 256 * 4}
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == counts
    q = torch.from_numpy(np.fromfile(tmp_path / "q.bin", dtype=np.uint8)).reshape(rows, blocks * 128)
    scale = torch.from_numpy(np.fromfile(tmp_path / "scale.bin", dtype=np.float32)).reshape(rows, blocks)
    q_ref, scale_ref = expected(x, power_of_two)
    msg = f"seed={seed} {type_name} {rows}x{blocks * 128} power_of_two={power_of_two} {sanitizer}"
    torch.testing.assert_close(scale, scale_ref, rtol=0, atol=0, equal_nan=True, msg=msg)
    wrong = (q != q_ref).nonzero()
    assert len(wrong) == 0, f"{msg}: {len(wrong)} values differ, first at {tuple(wrong[0].tolist())}"
    if rows > 2 and blocks > 1:
        assert scale[2, 0].isnan() and scale[2, 1].isinf() and (q[2, :128] == 0x80).all(), msg  # 0x80: NaN
    return q, scale


@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("type_name", list(TYPES))
def test_kernel_gives_torchs_bits_asan_ubsan(builder, tmp_path, type_name, power_of_two):
    # 37 x 3 = 111 blocks: 7 workgroups of 16, the last one with 15 blocks and 16 idle lanes.
    _run(builder, tmp_path, "asan", type_name, 37, 3, power_of_two)


def test_kernel_single_block_asan_ubsan(builder, tmp_path):
    """One row of 128: one block, 15 of the workgroup's 16 block slots idle."""
    q, scale = _run(builder, tmp_path, "asan", "bf16", 1, 1, False)
    assert scale[0, 0].item() == torch.finfo(torch.float32).tiny and (q == 0).all()  # the all-zero block


@pytest.mark.parametrize("max_groups", [1, 3])
def test_capped_grid_loops_over_every_group_asan_ubsan(builder, tmp_path, max_groups):
    """111 blocks in 7 groups on 1 or 3 workgroups: each workgroup takes every 1st or 3rd group, the last
    one partial. A kernel that did only its first group would leave poisoned outputs (caught above)."""
    _run(builder, tmp_path, "asan", "bf16", 37, 3, False, max_groups)


@pytest.mark.parametrize("max_groups", [None, 1])
def test_kernel_gives_torchs_bits_tsan(builder, tmp_path, max_groups):
    _run(builder, tmp_path, "tsan", "fp32", 5, 4, True, max_groups)
