"""Layers for `kernels.kernelize`: forwards that replace a model layer's own and read only its attributes.

`FP8Linear` replaces the forward of a block-FP8 linear layer in DeepSeek-V3's format, such as transformers'
fine-grained FP8 `FP8Linear`: `weight` (N, K) FP8, `weight_scale_inv` (ceil(N/128), K/128) float32, `bias`
(N,) or None. Register the model's class with `kernels.use_kernel_forward_from_hub("FP8Linear")` (or
`replace_kernel_forward_from_hub`), map "FP8Linear" to this repository, then `kernels.kernelize(model, ...)`.
On MI300X the weight must be e4m3fnuz: convert it once with `gemm.to_e4m3fnuz`.

Activations are always quantized at run time, per row and 128 elements of K (DeepSeek-V3's "dynamic"
scheme). A layer configured with `activation_scheme="static"` has its per-tensor `activation_scale` ignored:
its outputs then differ from transformers' own forward, by the finer scales. Inputs are local tensors (a
tensor-parallel plan's hooks place them), as in transformers' FP8Linear.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

from . import linear


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    """A tensor-parallel model holds its parameters as DTensors: the layer works on this rank's shard of the
    weight and its scales, as transformers' own FP8Linear does (the plan's hooks place input and output).
    A DTensor exists only once torch.distributed.tensor is imported: not importing it here keeps it (about
    half a second) off every load of the kernel."""
    dtensor = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return t.to_local() if dtensor is not None and isinstance(t, dtensor) else t


class FP8Linear(nn.Module):
    """``input @ (weight * weight_scale_inv).T + bias``, input quantized per row and 128 elements of K."""

    # kernels reads these: the forward has no backward, and traces under torch.compile (fake kernels).
    can_torch_compile = True
    has_backward = False

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        block = getattr(self, "block_size", None)  # transformers' FP8Linear records it
        if block is not None and tuple(block) != (128, 128):
            raise ValueError(f"FP8Linear: the op takes 128 x 128 weight blocks, this layer has {tuple(block)}")
        weight, scale = _local(self.weight), _local(self.weight_scale_inv)
        out = linear(input, weight, scale, _local(getattr(self, "bias", None)))
        return out.to(input.dtype)
