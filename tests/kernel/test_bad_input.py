"""Every bad-input class of the contract raises a Python exception naming the argument, and the
output is left untouched."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_problem

M, N, K = 64, 200, 256


@pytest.fixture
def seed_args(kernel, device):
    p = make_problem(M, N, K, kernel.SUPPORTED_DTYPES[0], device, seed=7)
    c = torch.full((M, N), 3.0, dtype=torch.bfloat16, device=device)
    return {"a": p.a, "b": p.b, "a_scale": p.a_scale, "b_scale": p.b_scale, "c": c}


@pytest.fixture
def natural_args(kernel, device):
    x, w, xs, ws = make_problem(M, N, K, kernel.SUPPORTED_DTYPES[0], device, seed=8).natural()
    out = torch.full((M, N), 3.0, dtype=torch.bfloat16, device=device)
    return {"x": x, "w": w, "x_scale": xs, "w_scale": ws, "out": out}


def _expect_error(fn, args: dict, out_name: str, error, *words: str) -> None:
    out = args[out_name]
    before = out.clone() if isinstance(out, torch.Tensor) else None
    with pytest.raises(error) as info:
        fn(**args)
    message = str(info.value)
    for word in words:
        assert word in message, f"error message {message!r} lacks {word!r}"
    if before is not None and isinstance(out, torch.Tensor) and out.shape == before.shape:
        assert torch.equal(out, before), f"{out_name} was modified by a rejected call"


# (argument to replace, how to break it, exception, words the message must contain)
SEED_CASES = {
    "a wrong dtype": ("a", lambda v: v.to(torch.float16), TypeError, ("a must be", "float16")),
    "b other fp8 dtype": ("b", lambda v: v.view(torch.uint8), TypeError, ("b must",)),
    "a not a tensor": ("a", lambda v: v.tolist(), TypeError, ("a must be a torch.Tensor",)),
    "a 3-D": ("a", lambda v: v.unsqueeze(0), ValueError, ("a must be 2-D",)),
    "a challenge view": ("a", lambda v: v.T, ValueError, ("a must be a row-major contiguous (K, M)", "pass a.T")),
    "b challenge view": ("b", lambda v: v.T, ValueError, ("pass b.T",)),
    "a strided": ("a", lambda v: torch.cat([v, v], 1)[:, ::2], ValueError, ("a must be row-major",)),
    "b wrong K": ("b", lambda v: v[:128].contiguous(), ValueError, ("b must have shape (K, N)",)),
    "a_scale wrong shape": ("a_scale", lambda v: v[:, :10].contiguous(), ValueError, ("a_scale", "(K/128, M)")),
    "a_scale transposed": ("a_scale", lambda v: v.T.contiguous(), ValueError, ("a_scale", "pass a_scale.T")),
    "a_scale float16": ("a_scale", lambda v: v.half(), TypeError, ("a_scale must be torch.float32",)),
    "b_scale wrong shape": ("b_scale", lambda v: v[:, :1].contiguous(), ValueError, ("b_scale", "ceil(N/128)")),
    "c wrong dtype": ("c", lambda v: v.float(), TypeError, ("c must be torch.bfloat16",)),
    "c wrong shape": ("c", lambda v: v[:, :100].contiguous(), ValueError, ("c must have shape",)),
    "c transposed": ("c", lambda v: v.T.contiguous().T, ValueError, ("c", "row-major")),
    "b on meta": ("b", lambda v: v.to("meta"), ValueError, ("b is on meta",)),
}


@pytest.mark.parametrize("case", list(SEED_CASES), ids=list(SEED_CASES))
def test_seed_layout_rejects(kernel, seed_args, case):
    name, breaks, error, words = SEED_CASES[case]
    seed_args[name] = breaks(seed_args[name])
    _expect_error(kernel.gemm, seed_args, "c", error, *words)


NATURAL_CASES = {
    "x wrong dtype": ("x", lambda v: v.to(torch.bfloat16), TypeError, ("x must be",)),
    "x transposed": ("x", lambda v: v.T.contiguous().T, ValueError, ("x", ".T")),
    "w wrong K": ("w", lambda v: v[:, :128].contiguous(), ValueError, ("w must have shape (N, K)",)),
    "x_scale transposed": ("x_scale", lambda v: v.T.contiguous(), ValueError, ("pass x_scale.T",)),
    "w_scale wrong shape": ("w_scale", lambda v: v[:1].contiguous(), ValueError, ("w_scale", "ceil(N/128)")),
    "out wrong shape": ("out", lambda v: v[:10].contiguous(), ValueError, ("out must have shape",)),
}


@pytest.mark.parametrize("case", list(NATURAL_CASES), ids=list(NATURAL_CASES))
def test_natural_layout_rejects(kernel, natural_args, case):
    name, breaks, error, words = NATURAL_CASES[case]
    natural_args[name] = breaks(natural_args[name])
    _expect_error(kernel.gemm_natural, natural_args, "out", error, *words)


def test_k_not_multiple_of_128(kernel, device):
    dtype = kernel.SUPPORTED_DTYPES[0]
    a = torch.randn(200, 8, device=device).to(dtype)
    b = torch.randn(200, 8, device=device).to(dtype)
    with pytest.raises(ValueError, match=r"K \(a.shape\[0\]\) must be a positive multiple of 128, got 200"):
        kernel.gemm(a, b, torch.ones(1, 8, device=device), torch.ones(1, 1, device=device))


@pytest.mark.parametrize("layout", ["seed", "natural"])
def test_k_past_the_32_bit_limit_is_refused(kernel, device, layout):
    """K = 2^31 (a multiple of 128) is one past what the GPU kernels index: refused on every backend, by the
    wrapper and by the binding, instead of being narrowed (2^32 + 128 would read as 128). The operands are
    2 GiB each of untouched memory."""
    dtype, big = kernel.SUPPORTED_DTYPES[0], 2**31
    kb = big // 128
    if layout == "seed":
        args = (torch.empty(big, 1, dtype=dtype, device=device), torch.empty(big, 1, dtype=dtype, device=device),
                torch.ones(kb, 1, device=device), torch.ones(kb, 1, device=device))  # fmt: skip
        wrapper, op, source = kernel.gemm, kernel.ops.gemm, r"a.shape\[0\]"
    else:
        args = (torch.empty(1, big, dtype=dtype, device=device), torch.empty(1, big, dtype=dtype, device=device),
                torch.ones(1, kb, device=device), torch.ones(1, kb, device=device))  # fmt: skip
        wrapper, op, source = kernel.gemm_natural, kernel.ops.gemm_natural, r"x.shape\[1\]"
    with pytest.raises(ValueError, match=rf"^K \({source}\) must be at most 2\^31 - 128 = 2147483520, got {big}$"):
        wrapper(*args)
    out = torch.full((1, 1), 3.0, dtype=torch.bfloat16, device=device)
    with pytest.raises(RuntimeError, match=f"M, N and K must each be at most 2\\^31 - 128, got M=1, N=1, K={big}"):
        op(*args, out)
    assert out.item() == 3.0


def test_mismatched_fp8_dtypes(kernel, seed_args):
    other = [d for d in (torch.float8_e4m3fn, torch.float8_e4m3fnuz) if d != seed_args["a"].dtype][0]
    if other not in kernel.SUPPORTED_DTYPES:
        pytest.skip(f"the {kernel.BACKEND} backend takes only {kernel.SUPPORTED_DTYPES}")
    seed_args["b"] = seed_args["b"].view(other)
    _expect_error(kernel.gemm, seed_args, "c", TypeError, "b must have the same dtype")


def test_unsupported_device(kernel, seed_args):
    """Tensors on a device this build has no kernel for (meta stands in for any such device)."""
    args = {k: v.to("meta") for k, v in seed_args.items()}
    with pytest.raises(ValueError, match=f"a is on meta, but this build of gemm \\(backend {kernel.BACKEND}\\)"):
        kernel.gemm(**args)


def test_output_aliasing_an_input(kernel, device):
    dtype = kernel.SUPPORTED_DTYPES[0]
    storage = torch.randn(K * M, device=device)  # 4 bytes per element: room for both views
    a = storage.view(torch.uint8)[: K * M].view(dtype).view(K, M)
    c = storage.view(torch.bfloat16)[: M * N].view(M, N)
    p = make_problem(M, N, K, dtype, device, seed=9)
    with pytest.raises(ValueError, match="c must not share memory with an input"):
        kernel.gemm(a, p.b, p.a_scale, p.b_scale, c)


def test_output_overlapping_an_input_through_another_storage(kernel, device):
    """Two views of one foreign buffer (numpy here) are two storages over the same bytes: the overlap is
    in the addresses, so that is what both the wrapper and the binding compare."""
    if device != "cpu":
        pytest.skip("numpy arrays are host memory; the same address comparison runs on every device")
    np = pytest.importorskip("numpy")
    dtype = kernel.SUPPORTED_DTYPES[0]
    buffer = np.zeros(2 * M * N * 2, dtype=np.uint8)
    p = make_problem(M, N, K, dtype, device, seed=10)
    c = torch.from_numpy(buffer[: M * N * 2]).view(torch.bfloat16).view(M, N)
    a_bytes = K * M
    a = torch.from_numpy(buffer[M * N : M * N + a_bytes]).view(dtype).view(K, M)  # overlaps c's second half
    a.copy_(p.a)
    before = a.clone()
    assert a.untyped_storage().data_ptr() != c.untyped_storage().data_ptr()  # two storages
    with pytest.raises(ValueError, match="c must not share memory with an input"):
        kernel.gemm(a, p.b, p.a_scale, p.b_scale, c)
    with pytest.raises(RuntimeError, match="c must not share memory with an input"):
        kernel.ops.gemm(a, p.b, p.a_scale, p.b_scale, c)
    assert torch.equal(a.view(torch.uint8), before.view(torch.uint8))


def test_output_beside_an_input_in_one_buffer_is_accepted(kernel, device):
    """Disjoint slices of one allocation do not alias: such a call is valid and computes the product."""
    dtype = kernel.SUPPORTED_DTYPES[0]
    p = make_problem(M, N, K, dtype, device, seed=11)
    arena = torch.empty(K * M + 2 * M * N + 64, dtype=torch.uint8, device=device)
    a = arena[: K * M].view(dtype).view(K, M)
    a.copy_(p.a)
    c = arena[K * M + 64 :].view(torch.bfloat16).view(M, N)  # 64 bytes past a's last byte
    expected = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale)
    assert kernel.gemm(a, p.b, p.a_scale, p.b_scale, c) is c
    torch.testing.assert_close(c, expected, rtol=0, atol=0)
    c.fill_(0)
    kernel.ops.gemm(a, p.b, p.a_scale, p.b_scale, c)
    torch.testing.assert_close(c, expected, rtol=0, atol=0)


def test_an_outputs_layout_error_gives_no_transpose_advice(kernel, seed_args):
    """For an input, `.T` of a transposed view is the zero-copy fix; an output written in place has none."""
    for bad in (seed_args["c"].T.contiguous(), seed_args["c"].T.contiguous().T):
        args = dict(seed_args, c=bad)
        with pytest.raises(ValueError, match="^c must") as info:
            kernel.gemm(**args)
        assert ".T" not in str(info.value), str(info.value)


def test_direct_op_mixing_a_meta_tensor_is_refused(kernel, seed_args):
    """The dispatcher sends a call with any meta tensor to the fake kernel, not the binding: it must not
    return quietly with c unwritten."""
    args = dict(seed_args, a_scale=seed_args["a_scale"].to("meta"))
    with pytest.raises(ValueError, match="every tensor must be on one device, .*a_scale on meta"):
        kernel.ops.gemm(**args)
    meta = {k: v.to("meta") for k, v in seed_args.items()}
    kernel.ops.gemm(**meta)  # all on meta: shape inference, as torch.compile's fake tensors do


def test_direct_natural_op_names_its_own_arguments(kernel, natural_args):
    x, w = natural_args["x"], natural_args["w"]
    with pytest.raises(RuntimeError, match="w must be float8"):
        kernel.ops.gemm_natural(
            x, w.view(torch.int8), natural_args["x_scale"], natural_args["w_scale"], natural_args["out"]
        )
    other = next(d for d in (torch.float8_e4m3fn, torch.float8_e4m3fnuz) if d != x.dtype)
    with pytest.raises(RuntimeError, match="x and w must share one dtype"):
        kernel.ops.gemm_natural(x, w.view(other), natural_args["x_scale"], natural_args["w_scale"], natural_args["out"])


def test_direct_op_call_is_checked_in_cpp(kernel, seed_args):
    """Callers that bypass the Python wrapper get a RuntimeError from the binding, not a crash."""
    args = dict(seed_args)
    args["b_scale"] = args["b_scale"][:, :1].contiguous()
    with pytest.raises(RuntimeError, match="b_scale must have shape"):
        kernel.ops.gemm(args["a"], args["b"], args["a_scale"], args["b_scale"], args["c"])
    x = args["a"].T.contiguous()
    with pytest.raises(RuntimeError, match="w_scale must have shape"):
        kernel.ops.gemm_natural(x, x, args["a_scale"].T.contiguous(), args["a_scale"], args["c"])
    if kernel.BACKEND != "cpu":  # quantize_activations' kernel: the GPU builds implement it
        values = torch.randn(4, 256, device=x.device)
        q = torch.empty(4, 256, dtype=kernel.SUPPORTED_DTYPES[0], device=x.device)
        scale = torch.empty(4, 2, device=x.device)
        with pytest.raises(RuntimeError, match="scale must have shape"):
            kernel.ops.quantize_rows(values, False, q, scale[:, :1].contiguous())
        with pytest.raises(RuntimeError, match="x must be row-major contiguous"):
            kernel.ops.quantize_rows(values.T.contiguous().T, False, q, scale)
        with pytest.raises(RuntimeError, match="q must be"):
            kernel.ops.quantize_rows(values, False, q.view(torch.uint8), scale)


def test_direct_ops_name_the_operand_whose_k_or_rank_is_wrong(kernel, seed_args, natural_args):
    a, b = seed_args["a"], seed_args["b"]
    short = a[:200].contiguous()
    with pytest.raises(RuntimeError, match=r"K \(a.shape\[0\]\) must be a positive multiple of 128, got 200"):
        kernel.ops.gemm(short, b[:200].contiguous(), seed_args["a_scale"], seed_args["b_scale"], seed_args["c"])
    x, w = natural_args["x"], natural_args["w"]
    with pytest.raises(RuntimeError, match=r"K \(x.shape\[1\]\) must be a positive multiple of 128, got 200"):
        kernel.ops.gemm_natural(
            x[:, :200].contiguous(), w[:, :200].contiguous(), natural_args["x_scale"], natural_args["w_scale"],
            natural_args["out"],
        )  # fmt: skip
    with pytest.raises(RuntimeError, match="^b must be 2-D, got 3-D"):
        kernel.ops.gemm(a, b.unsqueeze(0), seed_args["a_scale"], seed_args["b_scale"], seed_args["c"])


@pytest.mark.parametrize("name", ["a_scale"])  # b_scale is (2, 2) here: a transposed one cannot be told
def test_the_transposed_hint_is_a_fix_that_works(kernel, seed_args, name):
    """A scale made in the other layout (contiguous, reversed shape): the hint's fix must pass the next
    check too, not lead to the view the layout check refuses; a reversed view's fix stays the zero-copy .T."""
    right = seed_args[name]
    for given, fix in ((right.T.contiguous(), lambda t: t.T.contiguous()), (right.T, lambda t: t.T)):
        args = dict(seed_args, **{name: given})
        with pytest.raises(ValueError, match="it looks transposed") as info:
            kernel.gemm(**args)
        expected = f"pass {name}.T.contiguous()" if given.is_contiguous() else f"pass {name}.T"
        assert str(info.value).endswith(expected) or f"{expected} (one copy)" in str(info.value), info.value
        kernel.gemm(**dict(args, **{name: fix(given)}))  # following the hint: accepted


def test_a_negated_view_as_output_is_refused(kernel, seed_args):
    """torch's fallback for a lazily negated in-place output fails inside torch and aborts the interpreter:
    the wrapper refuses it first. (Inputs with the negative bit are materialized by torch and work.)"""
    c = torch._neg_view(seed_args["c"])
    _expect_error(kernel.gemm, dict(seed_args, c=c), "c", ValueError, "c must not be a negated or conjugated view")


def test_a_square_weights_transposed_view_gets_a_hint_that_works(kernel, device, seeds):
    """A (N, K) weight held as a transposed view of the same shape, N == K: `.T` would be accepted and give
    another product, so the message names `.contiguous()` for that case, and following it is right."""
    p = make_problem(8, 256, 256, kernel.SUPPORTED_DTYPES[0], device, seed=next(seeds))
    x, w, xs, ws = p.natural()
    view = w.T.contiguous().T  # w's values, strides (1, 256)
    with pytest.raises(ValueError) as info:
        kernel.gemm_natural(x, view, xs, ws)
    message = str(info.value)
    assert "if its values are (N, K), pass w.contiguous() (one copy)" in message, message
    assert "if it is the (K, N) view of the values, pass w.T (zero-copy)" in message, message
    torch.testing.assert_close(
        kernel.gemm_natural(x, view.contiguous(), xs, ws), kernel.gemm_natural(x, w, xs, ws), rtol=0, atol=0
    )


@pytest.mark.parametrize("op", ["gemm", "gemm_natural"])
def test_direct_op_with_a_negated_output_raises_instead_of_aborting(kernel, seed_args, natural_args, op, tmp_path):
    """torch's own fallback for a negated in-place output aborts the interpreter: the op's Negative-key kernel
    refuses it. Run in a child process, so that a regression fails this test instead of ending the session."""
    import subprocess
    import sys
    import textwrap

    from tests.conftest import REPO_ROOT

    args = seed_args if op == "gemm" else natural_args
    out_name = "c" if op == "gemm" else "out"
    torch.save({k: v.cpu() for k, v in args.items()}, tmp_path / "args.pt")
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {str(REPO_ROOT)!r})
        from kernels import get_local_kernel
        from tests.conftest import BUILD_DIR
        kernel = get_local_kernel(BUILD_DIR)
        device = {str(seed_args["a"].device)!r}
        args = {{k: v.to(device) for k, v in torch.load({str(tmp_path / "args.pt")!r}).items()}}
        out, scale = {out_name!r}, {"a_scale" if op == "gemm" else "x_scale"!r}
        before = args[out].clone()
        try:
            kernel.ops.{op}(**dict(args, **{{out: torch._neg_view(args[out])}}))
        except ValueError as e:
            print("refused:", e)
        print("untouched:", torch.equal(args[out], before))
        kernel.ops.{op}(**args)
        negated = dict(args, **{{scale: torch._neg_view(-args[scale]), out: torch.empty_like(before)}})
        kernel.ops.{op}(**negated)  # the same scale values, negated lazily: materialized, same product
        print("same:", torch.equal(negated[out], args[out]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"refused: {op}: {out_name} must not be a negated view" in proc.stdout, proc.stdout
    assert "untouched: True" in proc.stdout and "same: True" in proc.stdout, proc.stdout
