"""The op under torch.compile (its fake implementation lets Dynamo trace it) and torch's opcheck."""

from __future__ import annotations

import torch

from tests.conftest import assert_matches, make_problem


def test_torch_compile_fullgraph(kernel, device):
    p = make_problem(96, 300, 256, kernel.SUPPORTED_DTYPES[0], device, seed=21)

    def both_layouts(a, b, a_scale, b_scale):
        seed = kernel.gemm(a, b, a_scale, b_scale)
        natural = kernel.gemm_natural(
            a.T.contiguous(), b.T.contiguous(), a_scale.T.contiguous(), b_scale.T.contiguous()
        )
        return seed.float() + natural.float()

    torch._dynamo.reset()
    compiled = torch.compile(both_layouts, fullgraph=True, backend="aot_eager")
    got = compiled(p.a, p.b, p.a_scale, p.b_scale)
    ref = kernel.reference.gemm_reference(p.a, p.b, p.a_scale, p.b_scale).float() * 2
    allowance = kernel.ACCUMULATION_ALLOWANCE
    terms = 2 * kernel.reference.magnitude(p.a, p.b, p.a_scale, p.b_scale) if allowance else None
    assert_matches(got, ref, "compiled", allowance, terms)


UTILS = ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


def test_opcheck(kernel, device):
    """Fake kernel and dispatch registrations agree (torch.library.opcheck). Its test_schema step is left
    out: it multiplies the inputs, and torch has no multiply for float8 tensors."""
    p = make_problem(64, 128, 256, kernel.SUPPORTED_DTYPES[0], device, seed=22)
    c = torch.empty(64, 128, dtype=torch.bfloat16, device=device)
    torch.library.opcheck(kernel.ops.gemm.default, (p.a, p.b, p.a_scale, p.b_scale, c), test_utils=UTILS)
    x, w, xs, ws = p.natural()
    torch.library.opcheck(kernel.ops.gemm_natural.default, (x, w, xs, ws, c), test_utils=UTILS)
    if device != "cpu":  # quantize_activations' kernel: the GPU builds implement it
        values = torch.randn(64, 256, device=device)
        q = torch.empty(64, 256, dtype=kernel.SUPPORTED_DTYPES[0], device=device)
        scale = torch.empty(64, 2, device=device)
        torch.library.opcheck(kernel.ops.quantize_rows.default, (values, True, q, scale), test_utils=UTILS)


def test_torch_compile_dynamic_rows_including_none(kernel, device):
    """One compiled gemm_natural over changing M, 0 included (an MoE expert's share of a batch): each call
    equals the eager one."""
    torch._dynamo.reset()
    compiled = torch.compile(kernel.gemm_natural, fullgraph=True, dynamic=True, backend="aot_eager")
    for m in (5, 0, 37):
        x, w, xs, ws = make_problem(m, 200, 256, kernel.SUPPORTED_DTYPES[0], device, seed=23 + m).natural()
        got = compiled(x, w, xs, ws)
        assert got.shape == (m, 200)
        assert torch.equal(got, kernel.gemm_natural(x, w, xs, ws)), f"M={m}: compiled and eager differ"


def test_compiled_call_refuses_an_output_overlapping_an_input(kernel, device):
    """Under torch.compile the wrapper's address check cannot read fake tensors, and functionalization hands
    the kernel a copy of the output: without the check op in the graph, aot_eager accepted c over a's bytes
    and overwrote a. Both backends refuse it now with the check op's ValueError (the op reads the output the
    GEMM writes, so the compiled graph runs it first; before it, inductor's refusal was the binding's
    RuntimeError), leave a as it was, and compile a valid call to the eager result."""
    M, N, K = 64, 200, 256
    p = make_problem(M, N, K, kernel.SUPPORTED_DTYPES[0], device, seed=23)
    arena = torch.zeros(M * N * 2 + K * M, dtype=torch.uint8, device=device)
    c = arena[: M * N * 2].view(torch.bfloat16).view(M, N)
    a = arena[M * N : M * N + K * M].view(p.a.dtype).view(K, M)  # c's second half
    a.copy_(p.a)
    expected = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale)
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        compiled = torch.compile(kernel.gemm, fullgraph=True, backend=backend)
        try:
            compiled(a, p.b, p.a_scale, p.b_scale, c)
        except ValueError as e:
            assert "c must not share memory with an input" in str(e), (backend, e)
        else:
            raise AssertionError(f"{backend}: an output overlapping a was accepted")
        assert torch.equal(a.view(torch.uint8), p.a.view(torch.uint8)), f"{backend}: a was overwritten"
        out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
        compiled(p.a, p.b, p.a_scale, p.b_scale, out)
        assert torch.equal(out, expected), backend


def test_traced_outside_dynamo_with_an_output(kernel, device, seeds):
    """make_fx, aot_function and FakeTensorMode trace with tensors that have no addresses: the output check
    goes into the graph as an op, as under torch.compile (reading addresses there raised "Cannot access data
    pointer", or refused a valid call because every fake address is 0), and the traced graph computes the
    eager result."""
    from functorch.compile import aot_function, nop
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    M, N, K = 24, 136, 256
    p = make_problem(M, N, K, kernel.SUPPORTED_DTYPES[0], device, seed=next(seeds))
    x, w, xs, ws = p.natural()
    expected = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale)

    def seed_call(a, b, sa, sb, c):
        return kernel.gemm(a, b, sa, sb, c)

    def natural_call(x, w, xs, ws, out):
        return kernel.gemm_natural(x, w, xs, ws, out)

    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) for t in (p.a, p.b, p.a_scale, p.b_scale)]
        assert seed_call(*fake, torch.empty(M, N, dtype=torch.bfloat16, device=device)).shape == (M, N)
    for fn, args in ((seed_call, (p.a, p.b, p.a_scale, p.b_scale)), (natural_call, (x, w, xs, ws))):
        graph = make_fx(fn, tracing_mode="fake")(*args, torch.empty(M, N, dtype=torch.bfloat16, device=device))
        out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
        graph(*args, out)
        assert torch.equal(out, expected), fn.__name__
        out = torch.empty(M, N, dtype=torch.bfloat16, device=device)
        aot_function(fn, fw_compiler=nop)(*args, out)
        assert torch.equal(out, expected), fn.__name__
