"""The op's formats: the FP8 types each backend computes with (MI300X (gfx942) hardware uses e4m3fnuz,
Hopper e4m3fn) and the scale block size.

Its own module so that both the op's entry points and the quantization helpers can read it."""

from __future__ import annotations

import torch

from ._ops import BACKEND

BLOCK = 128
"""Scale block size along K (and along N for the weight scales)."""

_DTYPES_BY_BACKEND = {
    "cpu": (torch.float8_e4m3fn, torch.float8_e4m3fnuz),
    "cuda": (torch.float8_e4m3fn,),
    "rocm": (torch.float8_e4m3fnuz,),
}
SUPPORTED_DTYPES: tuple[torch.dtype, ...] = _DTYPES_BY_BACKEND[BACKEND]
