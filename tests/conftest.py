"""Fixtures shared by the test suite: the built variant, loaded through the `kernels` loader (never
imported from the source tree), and fresh random problems in both layouts."""

from __future__ import annotations

import itertools
import os
import random
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

BUILD_DIR = Path(os.environ.get("GEMM_BUILD_DIR", REPO_ROOT / "build"))
BLOCK = 128

# Fresh random problems every session, reproducible: GEMM_TEST_SEED=<the header's number> draws the same ones.
SESSION_SEED = int(os.environ.get("GEMM_TEST_SEED") or random.SystemRandom().randrange(2**31))


def pytest_report_header(config) -> str:
    return f"gemm: random problems from GEMM_TEST_SEED={SESSION_SEED} (set it to draw the same ones again)"


def pytest_terminal_summary(terminalreporter) -> None:
    # Again at the end, where -q (which hides the header) and a log's tail still show it.
    terminalreporter.write_line(f"gemm: random problems from GEMM_TEST_SEED={SESSION_SEED}")


@pytest.fixture
def seeds(request):
    """Seeds for this test's problems: from the session's seed and the test's own id, so a test draws the
    same problems whichever other tests ran before it (rerun one test id with GEMM_TEST_SEED to repeat it)."""
    return itertools.count((SESSION_SEED + zlib.crc32(request.node.nodeid.encode())) % 2**31)


@pytest.fixture(scope="session")
def build_dir() -> Path:
    return BUILD_DIR


@pytest.fixture(scope="session")
def variant_dir(build_dir: Path) -> Path:
    from scripts import variant

    chosen = variant.loader_choice(build_dir)
    if chosen is None:
        pytest.fail(f"no variant for this machine in {build_dir}: run `make build` first")
    return build_dir / chosen


@pytest.fixture(scope="session")
def kernel(variant_dir: Path):
    """The gemm module as users get it: through kernels' loader, from the build directory."""
    from kernels import get_local_kernel

    return get_local_kernel(variant_dir.parent)


@pytest.fixture(scope="session")
def device(kernel) -> str:
    if kernel.BACKEND == "cpu":
        return "cpu"
    if not torch.cuda.is_available():
        pytest.skip(f"the {kernel.BACKEND} variant needs a GPU, and this machine has none")
    return "cuda"


@pytest.fixture(params=["float8_e4m3fn", "float8_e4m3fnuz"])
def fp8(request, kernel) -> torch.dtype:
    """Each FP8 format the built backend computes with (the other one skips, saying so)."""
    dtype = getattr(torch, request.param)
    if dtype not in kernel.SUPPORTED_DTYPES:
        pytest.skip(f"the {kernel.BACKEND} backend computes in {kernel.SUPPORTED_DTYPES}, not {dtype}")
    return dtype


@dataclass
class Problem:
    """One random instance in the seed layout; `natural()` gives the same product in the natural layout."""

    a: torch.Tensor  # (K, M)
    b: torch.Tensor  # (K, N)
    a_scale: torch.Tensor  # (K/128, M)
    b_scale: torch.Tensor  # (K/128, ceil(N/128))

    @property
    def mnk(self) -> tuple[int, int, int]:
        return self.a.shape[1], self.b.shape[1], self.a.shape[0]

    def natural(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (M, K), w (N, K), x_scale (M, K/128), w_scale (ceil(N/128), K/128): the same product."""
        return (
            self.a.T.contiguous(),
            self.b.T.contiguous(),
            self.a_scale.T.contiguous(),
            self.b_scale.T.contiguous(),
        )


def make_problem(m: int, n: int, k: int, dtype: torch.dtype, device: str, seed: int) -> Problem:
    """randn values cast to FP8 and randn (signed) scales, as the challenge draws them; never zeros."""
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(device)

    nb = (n + BLOCK - 1) // BLOCK
    return Problem(
        a=randn(k, m).to(dtype),
        b=randn(k, n).to(dtype),
        a_scale=randn(k // BLOCK, m),
        b_scale=randn(k // BLOCK, nb),
    )


def at_odd_offset(t: torch.Tensor) -> torch.Tensor:
    """The same values, contiguous, one element past an aligned allocation (1 byte for fp8, 2 for bf16,
    4 for fp32): what a slice of a larger buffer hands the op."""
    backing = torch.empty(t.numel() + 1, dtype=t.dtype, device=t.device)
    moved = backing[1:].view(t.shape)
    moved.copy_(t)
    assert moved.is_contiguous() and moved.storage_offset() == 1
    return moved


def poisoned_output(m: int, n: int, device: str) -> torch.Tensor:
    """An output full of NaN: any element the kernel fails to write shows up."""
    return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=device)


def assert_matches(
    out: torch.Tensor, ref: torch.Tensor, what: str, allowance: float = 0.0, terms: torch.Tensor | None = None
) -> None:
    """The contract's tolerance, elementwise, with a message that locates the worst element.

    `allowance` * `terms` widens it per element for a backend whose FP8 accumulation keeps fewer bits than
    fp32 (the cuda backend: gemm.reference explains and measures it); 0 means the contract's rule as written.
    """
    out32, ref32 = out.float(), ref.float()
    assert torch.isfinite(out32).all(), f"{what}: {(~torch.isfinite(out32)).sum()} elements unwritten or non-finite"
    err = (out32 - ref32).abs()
    bound = 1e-3 + 2e-2 * ref32.abs()
    if allowance:
        assert terms is not None, "an accumulation allowance needs the terms' magnitude"
        bound = bound + allowance * terms.float()
    bad = err > bound
    if bad.any():
        worst = int((err - bound).argmax())
        row, col = divmod(worst, out.shape[1])
        rule = "1e-3 + 2e-2|ref|" + (f" + {allowance:.3g} * sum|terms|" if allowance else "")
        pytest.fail(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements outside |out - ref| <= {rule}; worst at "
            f"({row}, {col}): got {out32[row, col].item()}, expected {ref32[row, col].item()}"
        )


def assert_seed_matches(kernel, out: torch.Tensor, a, b, a_scale, b_scale, what: str) -> None:
    """`out` against the seed-layout reference, at the tolerance the loaded backend is held to."""
    ref = kernel.reference.gemm_reference(a, b, a_scale, b_scale)
    allowance = kernel.ACCUMULATION_ALLOWANCE
    terms = kernel.reference.magnitude(a, b, a_scale, b_scale) if allowance else None
    assert_matches(out, ref, what, allowance, terms)


def assert_natural_matches(kernel, out: torch.Tensor, x, w, x_scale, w_scale, what: str) -> None:
    """`out` against the natural-layout reference, at the tolerance the loaded backend is held to."""
    ref = kernel.reference.gemm_natural_reference(x, w, x_scale, w_scale)
    allowance = kernel.ACCUMULATION_ALLOWANCE
    terms = kernel.reference.natural_magnitude(x, w, x_scale, w_scale) if allowance else None
    assert_matches(out, ref, what, allowance, terms)
