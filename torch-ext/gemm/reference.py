"""Plain-torch fp32 references for both layouts: what every backend is tested against.

Dequantize each operand with its block scales, multiply in fp32, round once to bf16.
"""

from __future__ import annotations

import torch

BLOCK = 128


def _expand(scale: torch.Tensor, rows: int, cols: int, row_block: int, col_block: int) -> torch.Tensor:
    """Repeat a block-scale grid up to the (rows, cols) element grid."""
    return scale.repeat_interleave(row_block, 0)[:rows].repeat_interleave(col_block, 1)[:, :cols]


def gemm_reference(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor) -> torch.Tensor:
    """Seed layout: a (K, M), b (K, N), a_scale (K/128, M), b_scale (K/128, ceil(N/128)) -> (M, N) bf16."""
    K, M = a.shape
    N = b.shape[1]
    a32 = a.float() * _expand(a_scale.float(), K, M, BLOCK, 1)
    b32 = b.float() * _expand(b_scale.float(), K, N, BLOCK, BLOCK)
    return (a32.T @ b32).to(torch.bfloat16)


def gemm_natural_reference(
    x: torch.Tensor, w: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor
) -> torch.Tensor:
    """Natural layout: x (M, K), w (N, K), x_scale (M, K/128), w_scale (ceil(N/128), K/128) -> (M, N) bf16."""
    M, K = x.shape
    N = w.shape[0]
    x32 = x.float() * _expand(x_scale.float(), M, K, 1, BLOCK)
    w32 = w.float() * _expand(w_scale.float(), N, K, BLOCK, BLOCK)
    return (x32 @ w32.T).to(torch.bfloat16)


def within_tolerance(out: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """The contract's elementwise test: |out - ref| <= 1e-3 + 2e-2 * |ref|, and no NaN/inf where ref has none."""
    out32, ref32 = out.float(), ref.float()
    close = (out32 - ref32).abs() <= 1e-3 + 2e-2 * ref32.abs()
    return close & (torch.isfinite(out32) | ~torch.isfinite(ref32))
