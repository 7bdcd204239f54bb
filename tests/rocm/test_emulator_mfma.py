"""The HIP emulator's instructions against plain arithmetic (gemm/rocm/emu, driver emu_selftest.cpp).

- Each emulated FP8 MFMA equals a plain matrix product of the decoded fp8 matrices: the test builds
  each lane's operand registers from whole matrices with AMD's element->(lane, register) formulas
  (matrix instruction calculator, CDNA3), the driver runs chained MFMAs in several waves at once, and
  the results mapped back must equal the float64 product rounded to fp32 after every MFMA (bit for
  bit) and agree with a float32 torch matmul within fp32 rounding.
- fp8 conversions: all 256 bytes decode like torch.float8_e4m3fnuz; packing f32 -> fp8 rounds like
  torch (nearest even, overflow -> NaN, no -0) on random, tie and edge values.
- Collectives (barrier, LDS, shuffles, ballot, readfirstlane, wave barrier, bpermute, atomics).
- A wave that diverges around an MFMA is refused with a message.
Every driver runs under ASan+UBSan and under TSan. Fresh random data each run; the seed is printed.
"""

from __future__ import annotations

import pytest
import torch

from tests.rocm import emu_build

SELFTEST = emu_build.EMU_DIR / "tests" / "emu_selftest.cpp"
FP8 = torch.float8_e4m3fnuz


@pytest.fixture(scope="module")
def builder(tmp_path_factory):
    b = emu_build.Builder.for_session(tmp_path_factory, "emu_selftest")
    b.prebuild(SELFTEST)  # ASan+UBSan and TSan variants compile side by side
    return b


# ----------------------------------------------------------------------------------------------
# AMD matrix instruction calculator (CDNA3), "Matrix element to register mapping":
#   v_mfma_f32_16x16x32_fp8_fp8: A[i][k] lane 16*(k//8)+i, GPR (k//4)%2 bits 8*(k%4) (= byte k%8
#     of the 64-bit operand); B[k][j] lane 16*(k//8)+j, byte k%8; C/D[i][j] GPR i%4, lane 16*(i//4)+j
#   v_mfma_f32_32x32x16_fp8_fp8: A[i][k] lane 32*(k//8)+i, byte k%8; B[k][j] lane 32*(k//8)+j;
#     C/D[i][j] GPR 4*(i//8)+i%4, lane (32*(i//4))%64+j
# ----------------------------------------------------------------------------------------------
def _ab_to_lanes(A: torch.Tensor, B: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A (m, k) and B (k, m) uint8 -> per-lane 8-byte operands (64,) int64 each."""
    k = A.shape[1]
    a = torch.zeros(64, 8, dtype=torch.uint8)
    b = torch.zeros(64, 8, dtype=torch.uint8)
    for i in range(m):
        for kk in range(k):
            a[m * (kk // 8) + i, kk % 8] = A[i, kk]
            b[m * (kk // 8) + i, kk % 8] = B[kk, i]
    return a.view(torch.int64).reshape(64), b.view(torch.int64).reshape(64)


def _acc_lane_reg(m: int, i: int, j: int) -> tuple[int, int]:
    if m == 16:
        return 16 * (i // 4) + j, i % 4
    return (32 * (i // 4)) % 64 + j, 4 * (i // 8) + i % 4


def _acc_to_lanes(C: torch.Tensor, m: int) -> torch.Tensor:
    out = torch.full((64, m * m // 64), float("nan"), dtype=torch.float32)
    for i in range(m):
        for j in range(m):
            lane, r = _acc_lane_reg(m, i, j)
            out[lane, r] = C[i, j]
    assert not out.isnan().any()
    return out


def _lanes_to_acc(lanes: torch.Tensor, m: int) -> torch.Tensor:
    out = torch.empty(m, m, dtype=torch.float32)
    for i in range(m):
        for j in range(m):
            lane, r = _acc_lane_reg(m, i, j)
            out[i, j] = lanes[lane, r]
    return out


def _random_fp8_bytes(shape, gen) -> torch.Tensor:
    x = torch.randint(0, 256, shape, generator=gen, dtype=torch.int32)
    x = torch.where(x == 0x80, torch.zeros_like(x), x)  # 0x80 is NaN in e4m3fnuz
    return x.to(torch.uint8)


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
@pytest.mark.parametrize("m", [16, 32], ids=["16x16x32", "32x32x16"])
def test_mfma_equals_matrix_product(builder, tmp_path, sanitizer, m, seeds):
    seed = next(seeds)
    gen = torch.Generator().manual_seed(seed)
    k = 512 // m
    waves, steps = 4, 3
    A = _random_fp8_bytes((waves, steps, m, k), gen)
    B = _random_fp8_bytes((waves, steps, k, m), gen)
    C = torch.randn(waves, m, m, generator=gen) * 1000
    a_ops = torch.empty(waves, steps, 64, dtype=torch.int64)
    b_ops = torch.empty(waves, steps, 64, dtype=torch.int64)
    for w in range(waves):
        for t in range(steps):
            a_ops[w, t], b_ops[w, t] = _ab_to_lanes(A[w, t], B[w, t], m)
    c_ops = torch.stack([_acc_to_lanes(C[w], m) for w in range(waves)])
    a_ops.numpy().tofile(tmp_path / "A.bin")
    b_ops.numpy().tofile(tmp_path / "B.bin")
    c_ops.numpy().tofile(tmp_path / "C.bin")

    exe = builder.build(SELFTEST, sanitizer)
    emu_build.run(exe, [f"mfma{m}", waves, steps, tmp_path], sanitizer)
    d_ops = torch.from_numpy(__import__("numpy").fromfile(tmp_path / "D.bin", dtype="float32"))
    d_ops = d_ops.reshape(waves, 64, m * m // 64)

    for w in range(waves):
        got = _lanes_to_acc(d_ops[w], m)
        exact = C[w].clone()
        ref32 = C[w].clone()
        scale = C[w].abs()
        for t in range(steps):
            Af = A[w, t].view(FP8).double()
            Bf = B[w, t].view(FP8).double()
            exact = (exact.double() + Af @ Bf).float()  # one rounding per MFMA
            ref32 = ref32 + Af.float() @ Bf.float()
            scale = scale + Af.abs().float() @ Bf.abs().float()
        msg = f"seed={seed} m={m} wave={w} sanitizer={sanitizer}"
        assert not got.isnan().any(), msg
        assert torch.equal(got, exact), f"{msg}: max diff {(got - exact).abs().max().item()}"
        tol = 4 * steps * 2.0**-23 * scale + 1e-30
        assert ((got - ref32).abs() <= tol).all(), f"{msg}: fp32 matmul differs beyond rounding"


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_cvt_fp8_to_f32_all_bytes(builder, tmp_path, sanitizer, seeds):
    seed = next(seeds)
    gen = torch.Generator().manual_seed(seed)
    order = torch.randperm(256, generator=gen).to(torch.uint8)  # every byte once, random lanes/bytes
    order.view(torch.int32).numpy().tofile(tmp_path / "words.bin")
    exe = builder.build(SELFTEST, sanitizer)
    emu_build.run(exe, ["cvt", tmp_path], sanitizer)
    import numpy as np

    f32 = torch.from_numpy(np.fromfile(tmp_path / "f32.bin", dtype="float32"))
    pk = torch.from_numpy(np.fromfile(tmp_path / "pk.bin", dtype="float32"))
    table = torch.arange(256, dtype=torch.uint8).view(FP8).float()  # torch's decoding
    ref = table[order.long()]
    torch.testing.assert_close(f32, ref, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"seed={seed}: {m}")
    torch.testing.assert_close(pk, ref, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"seed={seed}: {m}")
    assert f32.isnan().sum().item() == 1  # only 0x80


def _cvtpk_inputs(n: int, gen: torch.Generator) -> torch.Tensor:
    table = torch.arange(256, dtype=torch.uint8).view(FP8).float()
    finite = table[~table.isnan()].unique().sort().values
    mids = (finite[1:] + finite[:-1]) / 2  # exact ties: round half to even
    edges = torch.tensor(
        [
            0.0,
            -0.0,
            240.0,
            -240.0,
            247.99,
            248.0,
            -248.0,
            250.0,
            1e6,
            -1e30,
            float("inf"),
            float("-inf"),
            float("nan"),
            2.0**-10,
            2.0**-11,
            -(2.0**-11),
            2.0**-12,
            1.5 * 2.0**-11,
            2.0**-7,
            2.0**-7 * (1 - 2.0**-5),
            1e-30,
            -1e-30,
        ]
    )
    pieces = [
        finite,
        mids,
        edges,
        finite * (1 + (torch.rand(finite.shape, generator=gen) - 0.5) * 0.2),
        torch.randn(n, generator=gen) * torch.pow(2.0, torch.randint(-14, 10, (n,), generator=gen).float()),
    ]
    x = torch.cat(pieces)
    x = x[torch.randperm(x.numel(), generator=gen)]
    return x


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_cvt_pk_fp8_f32_rounds_like_torch(builder, tmp_path, sanitizer, seeds):
    import numpy as np

    seed = next(seeds)
    gen = torch.Generator().manual_seed(seed)
    a = _cvtpk_inputs(1500, gen)
    b = _cvtpk_inputs(1500, gen)
    n = min(a.numel(), b.numel())
    a, b = a[:n].contiguous(), b[:n].contiguous()
    old = torch.randint(-(2**31), 2**31 - 1, (n,), generator=gen, dtype=torch.int64).to(torch.int32)
    sel = torch.randint(0, 2, (n,), generator=gen, dtype=torch.int32)
    for name, t in (("a", a), ("b", b), ("old", old), ("sel", sel)):
        t.numpy().tofile(tmp_path / f"{name}.bin")
    exe = builder.build(SELFTEST, sanitizer)
    emu_build.run(exe, ["cvtpk", n, tmp_path], sanitizer)
    out = np.fromfile(tmp_path / "out.bin", dtype="uint32").astype(np.int64)
    fa = a.to(FP8).view(torch.uint8).long().numpy()
    fb = b.to(FP8).view(torch.uint8).long().numpy()
    o = old.numpy().astype(np.int64) & 0xFFFFFFFF
    pk = fa | (fb << 8)
    s = sel.numpy()
    expect = np.where(s == 1, (o & 0x0000FFFF) | (pk << 16), (o & 0xFFFF0000) | pk)
    bad = np.nonzero(out != expect)[0]
    assert bad.size == 0, (
        f"seed={seed}: {bad.size} mismatches, first: a={a[bad[0]].item()!r} "
        f"b={b[bad[0]].item()!r} sel={s[bad[0]]} got={out[bad[0]]:#010x} want={expect[bad[0]]:#010x}"
    )


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_collectives_lds_atomics(builder, tmp_path, sanitizer):
    import numpy as np

    exe = builder.build(SELFTEST, sanitizer)
    emu_build.run(exe, ["misc", tmp_path], sanitizer)

    def load(name, dtype="int32"):
        return np.fromfile(tmp_path / f"{name}.bin", dtype=dtype)

    g = np.arange(3 * 256)
    block, tid = g // 256, g % 256
    lane, wave0 = tid % 64, tid - tid % 64
    np.testing.assert_array_equal(load("lds"), (255 - tid) * 7 + block * 1000)
    np.testing.assert_array_equal(load("xor5"), tid ^ 5)
    np.testing.assert_array_equal(load("shfl"), wave0 + 63 - lane)
    src = lane + 3
    np.testing.assert_array_equal(load("down"), np.where((src & ~15) != (lane & ~15), tid, wave0 + src))
    np.testing.assert_array_equal(load("up"), np.where(lane - 2 < 0, tid, tid - 2))
    mask = sum(1 << lane_ for lane_ in range(64) if lane_ % 3 == 0)
    assert (load("ballot", "uint64") == np.uint64(mask)).all()
    np.testing.assert_array_equal(load("first"), wave0)
    np.testing.assert_array_equal(load("mbcnt"), lane)
    np.testing.assert_array_equal(load("wave"), 3 * (wave0 + (lane + 1) % 64))
    np.testing.assert_array_equal(load("bperm"), wave0 + (lane ^ 9))
    np.testing.assert_array_equal(load("sums", "float32"), [768.0, 3 * sum(range(256))])
    np.testing.assert_array_equal(load("isum"), [768])


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_divergent_mfma_is_refused(builder, sanitizer):
    exe = builder.build(SELFTEST, sanitizer)
    proc = emu_build.run(exe, ["diverge"], sanitizer, expect_ok=False)
    assert proc.returncode != 0, proc.stdout
    assert "hip_emu:" in proc.stderr and "mfma_f32_16x16x32_fp8_fp8" in proc.stderr, proc.stderr[-2000:]


# ----------------------------------------------------------------------------------------------
# The safety nets themselves: each kind of kernel bug is caught by the tool meant to catch it.
# ----------------------------------------------------------------------------------------------
def test_tsan_reports_an_lds_race(builder):
    exe = builder.build(SELFTEST, "tsan")
    proc = emu_build.run(exe, ["race"], "tsan", expect_ok=False)
    assert proc.returncode != 0 and "data race" in proc.stderr, proc.stderr[-2000:]


def test_asan_reports_lds_out_of_bounds(builder):
    exe = builder.build(SELFTEST, "asan")
    proc = emu_build.run(exe, ["lds_oob"], "asan", expect_ok=False)
    assert proc.returncode != 0 and "global-buffer-overflow" in proc.stderr, proc.stderr[-2000:]
    assert "buf" in proc.stderr  # names the __shared__ array


def test_unwritten_lds_reads_poison_in_every_workgroup(builder, tmp_path):
    import numpy as np

    exe = builder.build(SELFTEST, "tsan")  # poisoning is on outside ASan builds
    proc = emu_build.run(exe, ["lds_uninit", tmp_path], "tsan")
    assert "poisoning=1" in proc.stdout
    out = np.fromfile(tmp_path / "out.bin", dtype=np.uint32)
    assert (out[:64] == 7).all()
    assert (out[64:] == 0xFFFFFFFF).all(), "the second workgroup saw the first one's LDS"


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_divergent_barrier_reports_deadlock(builder, sanitizer, monkeypatch):
    monkeypatch.setenv("GEMM_EMU_TIMEOUT_S", "3")
    exe = builder.build(SELFTEST, sanitizer)
    proc = emu_build.run(exe, ["deadlock"], sanitizer, timeout=120, expect_ok=False)
    assert proc.returncode != 0
    assert "hip_emu: deadlock" in proc.stderr, proc.stderr[-2000:]
    assert "threads 0-31: __syncthreads" in proc.stderr, proc.stderr[-2000:]
    assert "threads 32-63: __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8" in proc.stderr, proc.stderr[-2000:]


@pytest.mark.parametrize("sanitizer", emu_build.SANITIZERS)
def test_dynamic_lds(builder, tmp_path, sanitizer):
    import numpy as np

    exe = builder.build(SELFTEST, sanitizer)
    emu_build.run(exe, ["dynlds", 128, tmp_path], sanitizer)
    out = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(2, 2, 128)
    assert np.isnan(out[:, 0]).all(), "dynamic LDS is not poisoned at workgroup start"
    i = np.arange(128)
    for b in range(2):
        np.testing.assert_array_equal(out[b, 1], 127 - i + 1000 * b)
    if sanitizer == "asan":
        proc = emu_build.run(exe, ["dynlds_oob", 128, tmp_path], sanitizer, expect_ok=False)
        assert proc.returncode != 0 and "heap-buffer-overflow" in proc.stderr, proc.stderr[-2000:]
