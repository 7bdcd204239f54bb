"""The quantization helpers, `linear` and the `FP8Linear` layer, through the built variant: scales in the
op's layouts, values within FP8's rounding of the input, `linear` equal to quantize-then-`gemm_natural`, the
e4m3fn -> e4m3fnuz conversion exact, the layer swapped in by `kernels.kernelize`, bad input named."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import assert_matches, at_odd_offset

BLOCK = 128
# Round to nearest in a format with 3 mantissa bits: at most 2^-4 of the value for normal numbers; in the
# subnormal range at most half the smallest step, 2^-10 (e4m3fn) or 2^-11 (e4m3fnuz) times the scale.
RELATIVE_STEP = 2.0**-4
SUBNORMAL_STEP = 2.0**-10


def _values(rows: int, cols: int, device: str, seed: int, dtype=torch.bfloat16) -> torch.Tensor:
    """randn with every 128-wide block of a row at its own magnitude (10^-4 .. 10^4): a shared scale would fail."""
    gen = torch.Generator().manual_seed(seed)
    magnitude = torch.exp(torch.randn(rows, cols // BLOCK, generator=gen) * 3).repeat_interleave(BLOCK, 1)
    return (torch.randn(rows, cols, generator=gen) * magnitude).to(dtype).to(device)


def _assert_round_trip(values: torch.Tensor, q: torch.Tensor, scale_per_element: torch.Tensor) -> None:
    x = values.float()
    err = (q.float() * scale_per_element - x).abs()
    bound = RELATIVE_STEP * x.abs() + SUBNORMAL_STEP * scale_per_element
    bad = err > bound
    assert not bad.any(), f"{int(bad.sum())} values off by more than FP8 rounding, worst {(err - bound).max()}"


@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("shape", [(1, 128), (37, 384), (256, 1024)])
def test_quantize_activations(kernel, device, fp8, shape, power_of_two):
    M, K = shape
    x = _values(M, K, device, seed=M + K + power_of_two)
    q, scale = kernel.quantize_activations(x, fp8, power_of_two=power_of_two)
    assert q.dtype == fp8 and q.shape == (M, K) and q.is_contiguous()
    assert scale.dtype == torch.float32 and scale.shape == (M, K // BLOCK) and scale.is_contiguous()
    # Each block's largest value lands on the format's maximum (within a factor 2 for power-of-two scales).
    fmax = torch.finfo(fp8).max
    block_max = q.float().abs().reshape(M, K // BLOCK, BLOCK).amax(dim=2)
    if power_of_two:
        assert torch.equal(torch.exp2(torch.log2(scale).round()), scale), "scales are not powers of two"
        assert ((block_max >= fmax / 2) & (block_max <= fmax)).all(), block_max
    else:
        assert torch.equal(block_max, torch.full_like(block_max, fmax)), block_max
    _assert_round_trip(x, q, scale.repeat_interleave(BLOCK, 1))


def test_transposed_views_give_row_major_results(kernel, device):
    """Inputs of any strides (here transposed views) quantize to the same row-major tensors as their copies."""
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(64, 256, device=device))
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(256, 384, device=device).T.to(dtype)  # (384, 256) with strides (1, 384); fits fp16
        assert not x.is_contiguous()
        for quantize in (kernel.quantize_activations, kernel.quantize_weight):
            q, scale = quantize(x)
            q_copy, scale_copy = quantize(x.contiguous())
            assert q.is_contiguous() and scale.is_contiguous(), (dtype, quantize.__name__)
            assert torch.equal(q.view(torch.uint8), q_copy.view(torch.uint8)) and torch.equal(scale, scale_copy)
        assert torch.equal(kernel.linear(x, w_fp8, w_scale), kernel.linear(x.contiguous(), w_fp8, w_scale))


def test_quantize_weight_partial_row_block(kernel, device, fp8):
    N, K = 200, 384
    w = _values(N, K, device, seed=5, dtype=torch.float32)
    q, scale = kernel.quantize_weight(w, fp8)
    assert q.dtype == fp8 and q.shape == (N, K) and q.is_contiguous()
    assert scale.dtype == torch.float32 and scale.shape == (2, 3)
    fmax = torch.finfo(fp8).max
    padded = torch.zeros(2 * BLOCK, K, device=device)
    padded[:N] = q.float().abs()
    block_max = padded.reshape(2, BLOCK, 3, BLOCK).amax(dim=(1, 3))
    assert torch.equal(block_max, torch.full_like(block_max, fmax)), block_max
    _assert_round_trip(w, q, scale.repeat_interleave(BLOCK, 0)[:N].repeat_interleave(BLOCK, 1))


def test_zero_and_tiny_blocks(kernel, device):
    """An all-zero block gets the smallest normal fp32 scale and zeros. So does a block of fp32 subnormals,
    whose own scale would be subnormal (too few bits: e4m3fnuz values would go past the range, to NaN). A
    block at 2^-130, below max x 2^-126, keeps that scale and still rounds within FP8's steps."""
    tiny = torch.finfo(torch.float32).tiny
    for fp8 in kernel.SUPPORTED_DTYPES:
        fmax = torch.finfo(fp8).max
        x = torch.zeros(4, 256, device=device)
        x[1, 128:] = -3.0
        # Largest value 1.45 x max x 2^-149: amax / max would round to the smallest subnormal, 1.45x too
        # small, and the division would land at 1.45 x max.
        x[2, :] = torch.linspace(-1.45 * fmax * 2.0**-149, 1.45 * fmax * 2.0**-149, 256)
        x[3, :] = torch.linspace(-(2.0**-130), 2.0**-130, 256)
        q, scale = kernel.quantize_activations(x, fp8)
        assert scale[0].tolist() == [tiny, tiny] and scale[1, 0].item() == tiny
        assert scale[2].tolist() == [tiny, tiny] and scale[3].tolist() == [tiny, tiny]
        assert scale[1, 1].item() == pytest.approx(3.0 / fmax)
        assert q[0].float().abs().sum().item() == 0 and q[1, :128].float().abs().sum().item() == 0
        assert torch.equal(q[1, 128:].float(), torch.full((128,), -fmax, device=device))
        assert q[2].float().abs().sum().item() == 0
        _assert_round_trip(x[3:], q[3:], scale[3:].repeat_interleave(BLOCK, 1))
        assert q[3].float().abs().max().item() == 2.0**-4  # 2^-130 / 2^-126, a normal FP8 value


@pytest.mark.parametrize("one_pass", [False, True], ids=["plain-forms", "one-pass-forms"])
@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("input_dtype", ["bfloat16", "float16", "float32"])
def test_quantizers_match_the_plain_formula(kernel, device, fp8, input_dtype, power_of_two, one_pass, monkeypatch):
    """Bit for bit: x / scale in fp32, one round-to-nearest cast; with the forms this device uses and, forced,
    with the other ones (the GPU's one-pass forms run on CPU tensors here)."""
    if one_pass != (device != "cpu"):
        monkeypatch.setattr(kernel.quantize, "_one_pass_forms", lambda t: one_pass)
    dtype = getattr(torch, input_dtype)
    x = (_values(64, 512, device, seed=31, dtype=torch.float32) / 1e3).to(dtype)  # within fp16's range
    q, scale = kernel.quantize_activations(x, fp8, power_of_two=power_of_two)
    exact = x.float().abs().reshape(64, 4, BLOCK).amax(dim=2) / torch.finfo(fp8).max
    assert torch.equal(scale, torch.exp2(torch.ceil(torch.log2(exact))) if power_of_two else exact)
    plain = (x.float() / scale.repeat_interleave(BLOCK, 1)).to(fp8)
    assert torch.equal(q.view(torch.uint8), plain.view(torch.uint8))
    w = (_values(200, 256, device, seed=37, dtype=torch.float32) / 1e3).to(dtype)
    q, scale = kernel.quantize_weight(w, fp8, power_of_two=power_of_two)
    plain = (w.float() / scale.repeat_interleave(BLOCK, 0)[:200].repeat_interleave(BLOCK, 1)).to(fp8)
    assert torch.equal(q.view(torch.uint8), plain.view(torch.uint8))


def _kernel_and_torch_code(kernel, monkeypatch, x, **kw):
    """quantize_activations through the CUDA build's kernel, then through the torch code it replaces."""
    if not kernel.quantize._uses_kernel(x):
        pytest.skip(f"quantize_activations is the torch code itself on the {kernel.BACKEND} backend ({x.device})")
    by_kernel = kernel.quantize_activations(x, **kw)
    with monkeypatch.context() as m:
        m.setattr(kernel.quantize, "_uses_kernel", lambda t: False)
        by_torch = kernel.quantize_activations(x, **kw)
    return by_kernel, by_torch


def test_quantize_kernel_runs_where_the_build_has_code_for_the_gpu(kernel, device):
    """On the GPU the build targets (Hopper: capability 9.0; MI300X: gfx942) `linear` quantizes with the
    kernel, one launch (else the bit-for-bit tests below would skip there unnoticed); on other GPUs with
    the torch code."""
    if device == "cpu":
        pytest.skip("the cpu backend quantizes with the torch code: there is no kernel to look for")
    from torch.profiler import ProfilerActivity, profile

    index = torch.cuda.current_device()
    if kernel.BACKEND == "cuda":
        targeted = torch.cuda.get_device_capability(index) == (9, 0)
    else:
        targeted = torch.cuda.get_device_properties(index).gcnArchName.startswith("gfx942")
    assert kernel.quantize._kernel_runs_on(index) == targeted
    x = _values(8, 512, device, seed=53)
    with profile(activities=[ProfilerActivity.CUDA]) as probe:  # does the profiler see GPU kernels at all?
        (x * 2).sum()
        torch.cuda.synchronize()
    if not any(e.device_type.name == "CUDA" for e in probe.events()):
        pytest.skip(
            "torch's profiler records no GPU kernels in this process (ROCm's kineto before pytorch/kineto#1338 "
            "drops them once GPU work ran before profiling): which kernel runs cannot be seen here"
        )
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        kernel.quantize_activations(x)
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type.name == "CUDA"]
    ours = [n for n in names if "quantize_rows_kernel" in n]
    assert (len(ours), len(names)) == ((1, 1) if targeted else (0, len(names))), names


@pytest.mark.parametrize("power_of_two", [False, True])
@pytest.mark.parametrize("input_dtype", ["bfloat16", "float16", "float32"])
def test_quantize_kernel_gives_the_torch_codes_bits(kernel, device, input_dtype, power_of_two, monkeypatch):
    """The one-launch kernel against the torch code, bit for bit: blocks from 1e-7 to 1e1 in magnitude, an
    all-zero block, one with a single value, values at the smallest normal scale, DeepSeek-V3's K."""
    dtype = getattr(torch, input_dtype)
    M, K = 67, 7168
    x = _values(M, K, device, seed=41 + power_of_two, dtype=torch.float32) / 1e3  # within fp16's range
    x[0, :BLOCK] = 0
    x[1, BLOCK : 2 * BLOCK] = 0
    x[1, BLOCK + 5] = -2.5
    x[2, :BLOCK] = torch.linspace(-(2.0**-120), 2.0**-120, BLOCK)  # bf16 and fp32 keep them; fp16 gives 0
    x = x.to(dtype)
    (q, scale), (q_ref, scale_ref) = _kernel_and_torch_code(kernel, monkeypatch, x, power_of_two=power_of_two)
    assert q.dtype == q_ref.dtype and q.shape == (M, K) and scale.shape == (M, K // BLOCK)
    assert torch.equal(scale, scale_ref), (scale != scale_ref).nonzero()[:5]
    bits, bits_ref = q.view(torch.uint8), q_ref.view(torch.uint8)
    assert torch.equal(bits, bits_ref), (bits != bits_ref).nonzero()[:5]


def test_quantize_kernel_takes_any_view(kernel, device, monkeypatch):
    """A transposed view and a view starting 2 bytes into its storage (the kernel reads 16-byte pieces: the
    op copies such a view first) give the torch code's bits, called through the op directly too."""
    base = _values(384, 256, device, seed=43)
    transposed = base.T  # (256, 384), strides (1, 256)
    offset = at_odd_offset(base)
    for x in (transposed, offset):
        (q, scale), (q_ref, scale_ref) = _kernel_and_torch_code(kernel, monkeypatch, x)
        assert torch.equal(scale, scale_ref) and torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    q_op, scale_op = torch.empty_like(q), torch.empty_like(scale)
    kernel.ops.quantize_rows(offset, False, q_op, scale_op)
    assert torch.equal(scale_op, scale_ref) and torch.equal(q_op.view(torch.uint8), q_ref.view(torch.uint8))


def test_quantize_kernel_spoils_only_the_blocks_with_nan_or_inf(kernel, device, monkeypatch):
    """A NaN makes its block's scale and values NaN; an inf makes the scale inf, the finite values 0 and the
    inf NaN; the other blocks are untouched. As the torch code (NaN signs aside)."""
    x = _values(3, 384, device, seed=47)
    x[0, 7] = float("nan")
    x[1, 130] = float("inf")
    (q, scale), (q_ref, scale_ref) = _kernel_and_torch_code(kernel, monkeypatch, x)
    assert torch.isnan(scale[0, 0]) and torch.isinf(scale[1, 1]) and torch.isfinite(scale[2]).all()
    torch.testing.assert_close(scale, scale_ref, rtol=0, atol=0, equal_nan=True)
    values = q.float()
    assert torch.isnan(values[0, :BLOCK]).all() and torch.isnan(values[1, 130])
    assert (values[1, BLOCK : 2 * BLOCK].nan_to_num(0) == 0).all()
    nan = torch.isnan(values)
    assert torch.equal(nan, torch.isnan(q_ref.float()))
    assert torch.equal(q.view(torch.uint8)[~nan], q_ref.view(torch.uint8)[~nan])
    clean = (slice(2, 3), slice(None))
    assert torch.equal(q[clean].view(torch.uint8), kernel.quantize_activations(x[2:].clone())[0].view(torch.uint8))


def test_linear_is_quantize_then_gemm_natural(kernel, device):
    """`linear` on (2, 5, K) activations with a bias: exactly the op on the quantized pieces, and near the
    fp32 product of the unquantized operands."""
    K, N = 512, 300
    x = _values(10, K, device, seed=11).reshape(2, 5, K)
    w = torch.randn(N, K, generator=torch.Generator().manual_seed(12)).to(device) / K**0.5
    bias = torch.randn(N, generator=torch.Generator().manual_seed(13)).to(torch.bfloat16).to(device)
    w_fp8, w_scale = kernel.quantize_weight(w)
    out = kernel.linear(x, w_fp8, w_scale, bias)
    assert out.shape == (2, 5, N) and out.dtype == torch.bfloat16

    x_fp8, x_scale = kernel.quantize_activations(x.reshape(10, K), w_fp8.dtype)
    expected = kernel.gemm_natural(x_fp8, w_fp8, x_scale, w_scale).add_(bias)
    assert torch.equal(out.reshape(10, N), expected)

    exact = x.reshape(10, K).float() @ w.float().T + bias.float()
    relative = ((out.reshape(10, N).float() - exact).norm() / exact.norm()).item()
    assert relative < 0.05, f"linear is {relative:.3f} off the fp32 product (FP8 rounding gives about 0.03)"


def test_linear_takes_the_weights_format_and_power_of_two(kernel, device):
    """x is quantized to w's FP8 format (the last supported one here, not the default) with the scales asked for."""
    fmt = kernel.SUPPORTED_DTYPES[-1]
    x = _values(8, 384, device, seed=19)
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(130, 384, device=device), fmt, power_of_two=True)
    assert w_fp8.dtype == fmt and torch.equal(torch.exp2(torch.log2(w_scale).round()), w_scale)
    for power_of_two in (False, True):
        x_fp8, x_scale = kernel.quantize_activations(x, fmt, power_of_two=power_of_two)
        expected = kernel.gemm_natural(x_fp8, w_fp8, x_scale, w_scale)
        assert torch.equal(kernel.linear(x, w_fp8, w_scale, power_of_two=power_of_two), expected)
    x_p2, _ = kernel.quantize_activations(x, fmt, power_of_two=True)
    x_exact, _ = kernel.quantize_activations(x, fmt)
    assert not torch.equal(x_p2.view(torch.uint8), x_exact.view(torch.uint8)), "power_of_two changed nothing"


def test_linear_is_inference_only(kernel, device):
    """No half-differentiable result: with x and bias requiring grad, the output carries no graph."""
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(64, 256, device=device))
    x = torch.randn(3, 256, device=device, requires_grad=True)
    bias = torch.randn(64, device=device, requires_grad=True)
    out = kernel.linear(x, w_fp8, w_scale, bias)
    assert not out.requires_grad and out.grad_fn is None
    q, scale = kernel.quantize_activations(x)
    assert not q.requires_grad and not scale.requires_grad


def test_linear_without_rows(kernel, device):
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(64, 256, device=device))
    out = kernel.linear(torch.empty(0, 3, 256, device=device), w_fp8, w_scale)
    assert out.shape == (0, 3, 64) and out.dtype == torch.bfloat16


def test_linear_under_torch_compile(kernel, device):
    x = _values(6, 256, device, seed=17)
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(96, 256, device=device))
    torch._dynamo.reset()
    compiled = torch.compile(kernel.linear, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x, w_fp8, w_scale), kernel.linear(x, w_fp8, w_scale))


def test_to_e4m3fnuz_keeps_every_value(kernel, device):
    """All 256 bit patterns: each e4m3fnuz value times the doubled scale is the e4m3fn value (-0 becomes 0);
    the NaNs stay NaN."""
    fn = torch.arange(256, dtype=torch.uint8, device=device).view(torch.float8_e4m3fn)
    scale = torch.tensor([0.75], device=device)
    fnuz, fnuz_scale = kernel.to_e4m3fnuz(fn, scale)
    assert fnuz.dtype == torch.float8_e4m3fnuz and fnuz_scale.item() == 1.5
    finite = ~torch.isnan(fn.float())
    assert int(finite.sum()) == 254
    assert torch.equal(fnuz.float()[finite] * fnuz_scale, fn.float()[finite] * scale)
    assert not torch.isnan(fnuz.float()[finite]).any() and torch.isnan(fnuz.float()[~finite]).all()


def test_gemm_on_converted_e4m3fn_operands(kernel, device):
    """An e4m3fn problem converted with to_e4m3fnuz gives the e4m3fn product on a backend that takes e4m3fnuz."""
    if torch.float8_e4m3fnuz not in kernel.SUPPORTED_DTYPES:
        pytest.skip(f"the {kernel.BACKEND} backend computes in e4m3fn itself: nothing to convert")
    M, N, K = 33, 200, 384
    gen = torch.Generator().manual_seed(23)
    x = torch.randn(M, K, generator=gen).to(torch.float8_e4m3fn).to(device)
    w = torch.randn(N, K, generator=gen).to(torch.float8_e4m3fn).to(device)
    x_scale = torch.randn(M, K // BLOCK, generator=gen).to(device)
    w_scale = torch.randn(2, K // BLOCK, generator=gen).to(device)
    x_fnuz, x_fnuz_scale = kernel.to_e4m3fnuz(x, x_scale)
    w_fnuz, w_fnuz_scale = kernel.to_e4m3fnuz(w, w_scale)
    out = kernel.gemm_natural(x_fnuz, w_fnuz, x_fnuz_scale, w_fnuz_scale)
    ref = kernel.reference.gemm_natural_reference(x, w, x_scale, w_scale)
    assert_matches(out, ref, "gemm_natural on converted operands")
    if torch.float8_e4m3fn in kernel.SUPPORTED_DTYPES:  # the CPU backend takes both: the same bits
        assert torch.equal(out, kernel.gemm_natural(x, w, x_scale, w_scale))


def test_kernelize_swaps_in_the_fp8_linear_layer(kernel, device, build_dir):
    """kernels.kernelize replaces a DeepSeek-style FP8 linear layer's forward with `layers.FP8Linear`'s."""
    from kernels import LocalLayerRepository, Mode, kernelize, use_kernel_forward_from_hub, use_kernel_mapping

    @use_kernel_forward_from_hub("FP8Linear")
    class BlockFP8Linear(torch.nn.Module):
        """The model's own layer: dequantizes the weight and multiplies in fp32."""

        def __init__(self, weight: torch.Tensor, weight_scale_inv: torch.Tensor, bias: torch.Tensor):
            super().__init__()
            self.weight = torch.nn.Parameter(weight, requires_grad=False)
            self.weight_scale_inv = torch.nn.Parameter(weight_scale_inv, requires_grad=False)
            self.bias = torch.nn.Parameter(bias, requires_grad=False)

        def forward(self, input: torch.Tensor) -> torch.Tensor:
            N, K = self.weight.shape
            scale = self.weight_scale_inv.repeat_interleave(BLOCK, 0)[:N].repeat_interleave(BLOCK, 1)
            w = self.weight.float() * scale
            return torch.nn.functional.linear(input.float(), w, self.bias.float()).to(input.dtype)

    w_fp8, w_scale = kernel.quantize_weight(torch.randn(200, 256, device=device))
    bias = torch.randn(200, device=device).to(torch.bfloat16)
    model = torch.nn.Sequential(BlockFP8Linear(w_fp8, w_scale, bias))
    x = _values(6, 256, device, seed=29).reshape(2, 3, 256)
    before = model(x)

    mapping = {"FP8Linear": {kernel.BACKEND: LocalLayerRepository(repo_path=build_dir, layer_name="FP8Linear")}}
    with use_kernel_mapping(mapping):
        kernelize(model, mode=Mode.INFERENCE | Mode.TORCH_COMPILE, device=kernel.BACKEND)
    after = model(x)
    assert after.shape == (2, 3, 200) and after.dtype == torch.bfloat16
    assert torch.equal(after, kernel.linear(x, w_fp8, w_scale, bias))
    assert not torch.equal(after, before), "the forward was not replaced (the fp32 path gives other bits)"
    after32 = model(x.float())
    assert after32.dtype == torch.float32, "the layer returns its input's dtype, as the model's own does"
    assert torch.equal(after32, kernel.linear(x.float(), w_fp8, w_scale, bias).float())
    relative = ((after.float() - before.float()).norm() / before.float().norm()).item()
    assert relative < 0.05, f"the layer is {relative:.3f} off the model's own forward"


def test_fp8_linear_layer_works_on_a_tensor_parallel_shard(kernel, device, tmp_path):
    """Tensor-parallel models hold the weight, its scales and the bias as DTensors: the layer takes their
    local tensors instead of failing inside torch on mixed tensor types. (One rank: the shard is the whole
    tensor, so this shows the unwrapping, not a split of the work.)"""
    if device != "cpu":
        pytest.skip("a one-rank gloo group serves CPU tensors; the unwrapping is the same code on every device")
    dist = pytest.importorskip("torch.distributed")
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor, Shard

    dist.init_process_group("gloo", store=dist.FileStore(str(tmp_path / "store"), 1), rank=0, world_size=1)
    try:
        mesh = DeviceMesh("cpu", [0])
        w_fp8, w_scale = kernel.quantize_weight(torch.randn(256, 384, generator=torch.Generator().manual_seed(3)))
        bias = torch.randn(256, generator=torch.Generator().manual_seed(4))
        layer = kernel.layers.FP8Linear()
        for name, value in (("weight", w_fp8), ("weight_scale_inv", w_scale), ("bias", bias)):
            setattr(layer, name, torch.nn.Parameter(DTensor.from_local(value, mesh, [Shard(0)]), requires_grad=False))
        x = _values(5, 384, device, seed=31).to(torch.bfloat16)
        out = layer(x)
        assert not isinstance(out, DTensor)
        assert torch.equal(out, kernel.linear(x, w_fp8, w_scale, bias))
    finally:
        dist.destroy_process_group()


def _bad_calls(kernel, device):
    w_fp8, w_scale = kernel.quantize_weight(torch.randn(64, 256, device=device))
    x = torch.randn(4, 256, device=device)
    int_bias = torch.zeros(64, dtype=torch.int64, device=device)
    return [
        ("x", TypeError, lambda: kernel.quantize_activations(x.to(torch.int32))),
        ("x", TypeError, lambda: kernel.quantize_activations(x.tolist())),
        ("x", ValueError, lambda: kernel.quantize_activations(x[0])),
        ("x", ValueError, lambda: kernel.quantize_activations(x[:, :200])),
        ("dtype", TypeError, lambda: kernel.quantize_activations(x, torch.bfloat16)),
        ("w", ValueError, lambda: kernel.quantize_weight(torch.randn(64, 130, device=device))),
        ("w", TypeError, lambda: kernel.linear(x, w_fp8.float(), w_scale)),
        ("w_scale", ValueError, lambda: kernel.linear(x, w_fp8, w_scale[:, :1])),
        ("x", ValueError, lambda: kernel.linear(x[:, :128], w_fp8, w_scale)),
        ("x", TypeError, lambda: kernel.linear(x.to(w_fp8.dtype), w_fp8, w_scale)),
        ("bias", ValueError, lambda: kernel.linear(x, w_fp8, w_scale, torch.zeros(65, device=device))),
        ("bias", TypeError, lambda: kernel.linear(x, w_fp8, w_scale, int_bias)),
        ("power_of_two", TypeError, lambda: kernel.quantize_activations(x, power_of_two="no")),
        ("power_of_two", TypeError, lambda: kernel.linear(x[:0], w_fp8, w_scale, power_of_two=1)),  # empty x too
        ("bias", TypeError, lambda: kernel.linear(x, w_fp8, w_scale, torch.zeros(64, device=device).to_sparse())),
        ("x", TypeError, lambda: kernel.quantize_activations(x.to_sparse())),
        ("w", TypeError, lambda: kernel.to_e4m3fnuz(x, w_scale)),
        ("w_scale", TypeError, lambda: kernel.to_e4m3fnuz(x.to(torch.float8_e4m3fn), w_scale.double())),
    ]


def test_bad_input_names_the_argument(kernel, device):
    for name, error, call in _bad_calls(kernel, device):
        with pytest.raises(error, match=rf"^{name}\b"):
            call()
