"""The benchmark runner end to end on CPU (one tiny shape, no timing assertions), its JSON schema and
its refusal to time a wrong result."""

from __future__ import annotations

import json
import re
import sys
import types

import pytest
import torch

from benchmarks import impls, plot, report, run

TINY = ["--shapes", "64x64x128", "--quick", "--no-progress"]


@pytest.fixture(scope="module")
def cpu_kernel(kernel):
    """The built variant, where it is the CPU one (these tests time it)."""
    if kernel.BACKEND != "cpu":
        pytest.skip("these runner tests time the CPU variant; the GPU run is the device's")
    return kernel


@pytest.fixture(scope="module")
def cpu_run(cpu_kernel, tmp_path_factory):
    """One CPU run of the built variant on 64x64x128, both layouts: (exit code, json path, stdout)."""
    out = tmp_path_factory.mktemp("bench")
    code = run.main([*TINY, "--out", str(out)], kernel=cpu_kernel)
    files = sorted(out.iterdir())
    return code, out, files


def test_cpu_run_writes_json_and_png(cpu_run, kernel):
    code, out, files = cpu_run
    assert code == 0
    stems = {f.suffix: f for f in files}
    assert set(stems) == {".json", ".png"}, files
    assert stems[".png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = report.read(stems[".json"])
    assert doc["platform"] == "cpu" and doc["sol"] is None
    assert doc["variant"] == stems[".json"].stem
    assert doc["env"]["torch"] == torch.__version__ and doc["env"]["kernels"]
    got = {(r["layout"], r["impl"]) for r in doc["records"]}
    assert got == {
        ("seed", "gemm"),
        ("natural", "gemm"),
        ("natural", "gemm_linear"),
        ("seed", "torch_ref"),
        ("natural", "torch_ref"),
    }
    for r in doc["records"]:
        assert (r["m"], r["n"], r["k"]) == (64, 64, 128)
        assert r["us"] > 0 and r["reps"] >= 2 and r["pct_sol"] is None
        assert r["tflops"] == pytest.approx(2 * 64 * 64 * 128 / (r["us"] * 1e-6) / 1e12, rel=1e-3)
        other = "torch_ref" if r["impl"] != "torch_ref" else "gemm"
        twin = next(t for t in doc["records"] if t["impl"] == other and t["layout"] == r["layout"])
        # Ratios are rounded to 4 decimals: a small one (the slow reference against ours) is off by up to 5e-5.
        assert r[f"ratio_vs_{other}"] == pytest.approx(twin["us"] / r["us"], rel=1e-3, abs=5e-5)
        assert r["check"] == "elementwise" and r["outside_tol"] == 0
    assert doc["impls"]["torch_blockwise"]["status"] == "unavailable"


def test_json_round_trip_and_schema_errors(cpu_run, tmp_path):
    _, out, files = cpu_run
    path = next(f for f in files if f.suffix == ".json")
    doc = report.read(path)
    again = report.write(doc, tmp_path / "again.json")
    assert json.loads(again.read_text()) == json.loads(path.read_text())
    broken = json.loads(path.read_text())
    del broken["records"][0]["us"]
    with pytest.raises(report.SchemaError, match=r"records\[0\]: missing key 'us'"):
        report.validate(broken)
    broken = json.loads(path.read_text())
    broken["records"][0]["impl"] = "mystery"
    with pytest.raises(report.SchemaError, match="mystery"):
        report.validate(broken)
    with pytest.raises(report.SchemaError, match="schema"):
        report.validate({**doc, "schema": "gemm-bench/0"})


def test_replot_from_json(cpu_run, tmp_path):
    _, out, files = cpu_run
    path = next(f for f in files if f.suffix == ".json")
    target = tmp_path / "re.png"
    assert plot.main([str(path), "--out", str(target)]) == 0
    assert target.read_bytes()[:4] == b"\x89PNG"


def test_without_matplotlib_the_json_still_comes(kernel, tmp_path, monkeypatch, capsys):
    if kernel.BACKEND != "cpu":
        pytest.skip("CPU variant only")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert run.main([*TINY, "--layouts", "natural", "--out", str(tmp_path)], kernel=kernel) == 0
    assert [f.suffix for f in tmp_path.iterdir()] == [".json"]
    assert "plot:    skipped: matplotlib is not installed" in capsys.readouterr().out


def _bad_kernel() -> types.ModuleType:
    """A 'kernel' that writes the right shape and dtype but forgets the scales."""
    mod = types.ModuleType("bad_gemm")
    mod.SUPPORTED_DTYPES = (torch.float8_e4m3fn,)

    def gemm(a, b, a_scale, b_scale, c):
        c.copy_(a.float().T @ b.float())
        return c

    def gemm_natural(x, w, x_scale, w_scale, out):
        out.copy_(x.float() @ w.float().T)
        return out

    mod.gemm, mod.gemm_natural = gemm, gemm_natural
    return mod


def test_a_wrong_kernel_is_refused_not_timed(tmp_path):
    code = run.main([*TINY, "--out", str(tmp_path), "--no-plot"], kernel=_bad_kernel())
    assert code == 1
    doc = report.read(tmp_path / "results.json")
    assert not [r for r in doc["records"] if r["impl"] == "gemm"]
    refused = [r for r in doc["refused"] if r["impl"] == "gemm"]
    assert {r["layout"] for r in refused} == {"seed", "natural"}
    assert all(r["reason"].startswith("wrong result:") for r in refused)


def _kernel_with_a_wrong_quantizer(kernel) -> types.ModuleType:
    """The real op, but quantize_activations returns scales 1.5 times too large, and linear uses it: a
    quantizer bug that a reference built on quantize_activations itself would not see."""
    mod = types.ModuleType("wrong_quantizer_gemm")
    for name in ("SUPPORTED_DTYPES", "gemm", "gemm_natural"):
        setattr(mod, name, getattr(kernel, name))

    def quantize_activations(x, dtype=None, *, power_of_two=False):
        q, scale = kernel.quantize_activations(x, dtype, power_of_two=power_of_two)
        return q, scale * 1.5

    def linear(x, w, w_scale, bias=None, *, power_of_two=False):
        q, scale = quantize_activations(x, w.dtype)
        return kernel.gemm_natural(q, w, scale, w_scale)

    mod.quantize_activations, mod.linear = quantize_activations, linear
    return mod


def test_a_wrong_linear_is_refused_and_fails_the_run(cpu_kernel, tmp_path):
    """gemm_linear is this kernel too: a wrong result there is the run's failure (exit 1), and its check
    quantizes independently, so a quantizer bug does not cancel out."""
    code = run.main([*TINY, "--out", str(tmp_path), "--no-plot"], kernel=_kernel_with_a_wrong_quantizer(cpu_kernel))
    assert code == 1
    doc = report.read(tmp_path / "results.json")
    refused = [r for r in doc["refused"] if r["impl"] == "gemm_linear"]
    assert refused and refused[0]["reason"].startswith("wrong result:")
    assert {r["impl"] for r in doc["records"]} >= {"gemm"}  # the op itself is right, and timed


def test_a_wrong_peer_is_refused_not_timed(kernel, tmp_path, monkeypatch):
    def build_wrong(ctx, inp, layout):
        return (lambda: torch.zeros(inp.shape.m, inp.shape.n, dtype=torch.bfloat16)), None

    def build_crash(ctx, inp, layout):
        def call():
            raise RuntimeError("no kernel image for this shape")

        return call, None

    extra = (
        impls.Impl("wrong_peer", "returns zeros", ("seed", "natural"), build_wrong),
        impls.Impl("crashing_peer", "raises", ("natural",), build_crash),
    )
    monkeypatch.setattr(impls, "IMPLS", impls.IMPLS + extra)
    monkeypatch.setattr(impls, "BY_NAME", {i.name: i for i in impls.IMPLS})
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--impls", "gemm,wrong_peer,crashing_peer"]
    assert run.main(args, kernel=kernel) == 0  # our kernel is right; the peers are not
    doc = report.read(next(tmp_path.glob("*.json")))
    assert {r["impl"] for r in doc["records"]} == {"gemm"}
    reasons = {(r["impl"], r["layout"]): r["reason"] for r in doc["refused"]}
    assert re.match(r"wrong result: 40\d\d of 4096 elements outside", reasons[("wrong_peer", "seed")])
    assert reasons[("crashing_peer", "natural")] == "RuntimeError: no kernel image for this shape"
    assert not any(k.startswith("ratio_vs_wrong") for r in doc["records"] for k in r)


def test_ratios_use_the_natural_layout_for_natural_only_peers():
    recs = [
        {"m": 1, "n": 2, "k": 128, "layout": "seed", "impl": "gemm", "us": 10.0},
        {"m": 1, "n": 2, "k": 128, "layout": "natural", "impl": "gemm", "us": 5.0},
        {"m": 1, "n": 2, "k": 128, "layout": "natural", "impl": "torch_blockwise", "us": 20.0},
        {"m": 1, "n": 2, "k": 128, "layout": "seed", "impl": "torch_ref", "us": 40.0},
    ]
    report.add_ratios(recs, natural_only={"torch_blockwise"})
    assert recs[0]["ratio_vs_torch_blockwise"] == 2.0 and recs[0]["ratio_vs_torch_ref"] == 4.0
    assert recs[1]["ratio_vs_torch_blockwise"] == 4.0 and "ratio_vs_torch_ref" not in recs[1]
    assert recs[2]["ratio_vs_gemm"] == 0.25


def test_bad_arguments_exit_2(capsys):
    assert run.main(["--shapes", "64x64x100"]) == 2
    assert "K must be a positive multiple of 128" in capsys.readouterr().err
    assert run.main(["--shapes", "64x64x128", "--build-dir", "/nonexistent/build"]) == 2
    assert "--build-dir /nonexistent/build does not exist" in capsys.readouterr().err


def test_an_out_that_is_a_file_or_an_empty_impls_list_exits_2_before_timing(kernel, tmp_path, capsys, monkeypatch):
    """Both used to run: --out FILE timed everything, then failed to write with a traceback (exit 1, which
    means a wrong result); --impls , timed nothing and wrote an empty results file (exit 0)."""
    a_file = tmp_path / "results.json"
    a_file.write_text("keep me")
    assert run.main([*TINY, "--out", str(a_file)], kernel=kernel) == 2
    assert "exists and is not a directory" in capsys.readouterr().err
    assert a_file.read_text() == "keep me"
    out = tmp_path / "out"
    assert run.main([*TINY, "--impls", ",", "--out", str(out)], kernel=kernel) == 2
    assert "names no implementation" in capsys.readouterr().err
    assert not out.exists()
    # peers alone into the default folder would replace the committed file holding our records
    monkeypatch.setattr(run, "REPO", tmp_path / "repo")  # were the guard gone, the file written goes there
    assert run.main([*TINY, "--impls", "torch_ref"], kernel=kernel) == 2
    assert "--impls 'torch_ref' leaves out gemm: give --out" in capsys.readouterr().err


def test_loader_without_the_kernels_package(build_dir, variant_dir, monkeypatch):
    """A bare device machine has torch but not kernels: the variant directory is imported directly."""
    monkeypatch.setitem(sys.modules, "kernels", None)  # import kernels -> ImportError
    module, variant, loader = run.load_kernel(build_dir)
    assert variant == variant_dir.name and loader.startswith("importlib")
    assert callable(module.gemm) and callable(module.gemm_natural)
    with pytest.raises(run.UsageError, match="does not exist"):
        run.load_kernel(build_dir / "nope")


def test_rounds_interleave_every_implementation(kernel, tmp_path, monkeypatch):
    """--interleave rounds --rounds N times each implementation in N blocks, rotating who goes first; the
    median is over all."""
    from benchmarks import timing

    order: list[str] = []
    real = timing.time_samples

    def spy(fns, device, budget, flush, after_warm_up=None):
        order.append(fns[0].__qualname__)
        return real(fns, device, budget, flush, after_warm_up)

    monkeypatch.setattr(timing, "time_samples", spy)  # run.py imports it from timing at call time
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--rounds", "3", "--interleave", "rounds"]
    args += ["--impls", "gemm,torch_ref"]
    assert run.main(args, kernel=kernel) == 0
    doc = report.read(next(tmp_path.glob("*.json")))
    assert doc["config"]["rounds"] == 3
    for rec in doc["records"]:
        assert len(rec["round_us"]) == 3
        assert rec["us_min"] <= rec["us"] <= rec["us_max"]
    per_layout = len(order) // len({r["layout"] for r in doc["records"]})
    first = order[:per_layout]
    assert per_layout == 6 and first[0] != first[2], f"the order did not rotate: {first}"


def test_budget_per_round_shares_the_repetitions():
    from benchmarks.timing import Budget

    b = Budget(5, 0.05, 20, 200, 0.25)
    assert b.per_round(1) is b
    r = b.per_round(3)
    assert (r.reps_min, r.reps_max, r.warmup_min) == (7, 67, 5)
    assert abs(r.target_s - 0.25 / 3) < 1e-12


def test_interleave_calls_times_every_implementation_in_one_stretch(kernel, tmp_path, monkeypatch):
    """--interleave calls: one interleaved timing per (shape, layout), every implementation in it; the
    per-round medians come from consecutive stretches of each one's samples."""
    from benchmarks import timing

    seen: list[int] = []
    real = timing.time_interleaved

    def spy(impl_fns, device, reps, host_us, flush):
        seen.append(len(impl_fns))
        return real(impl_fns, device, reps, host_us, flush)

    monkeypatch.setattr(timing, "time_interleaved", spy)
    monkeypatch.setattr(timing, "time_samples", lambda *a: pytest.fail("blocks timed in calls mode"))
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--rounds", "2", "--interleave", "calls"]
    assert run.main([*args, "--impls", "gemm,torch_ref"], kernel=kernel) == 0
    doc = report.read(next(tmp_path.glob("*.json")))
    assert doc["config"]["interleave"] == "calls" and doc["config"]["clocks"] is None
    assert seen == [2, 2], "one interleaved timing per layout, both implementations in it"
    for rec in doc["records"]:
        assert rec["reps"] >= 2  # the CPU quick budget's minimum
        assert len(rec["round_us"]) == 2 and "clock" not in rec
        assert rec["us_min"] <= rec["us"] <= rec["us_max"]


def test_interleave_calls_leaves_out_an_implementation_that_fails_to_warm_up(kernel, tmp_path, monkeypatch):
    from benchmarks import timing

    real = timing.warm_up

    def flaky(fns, device, budget):
        if "_build_torch_ref" in fns[0].__qualname__:
            raise RuntimeError("out of memory (simulated)")
        return real(fns, device, budget)

    monkeypatch.setattr(timing, "warm_up", flaky)
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--interleave", "calls", "--impls", "gemm,torch_ref"]
    assert run.main([*args, "--layouts", "natural"], kernel=kernel) == 0
    doc = report.read(next(tmp_path.glob("*.json")))
    assert [r["impl"] for r in doc["records"]] == ["gemm"]
    assert [(r["impl"], r["reason"]) for r in doc["refused"]] == [
        ("torch_ref", "RuntimeError: out of memory (simulated)")
    ]


def test_clocks_needs_an_nvidia_gpu(kernel, tmp_path, capsys):
    if kernel.BACKEND != "cpu":
        pytest.skip("on a GPU machine --clocks may run")
    assert run.main([*TINY, "--out", str(tmp_path), "--clocks"], kernel=kernel) == 2
    assert "--clocks needs an NVIDIA GPU" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("gpu_name", "folder"),
    [
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H200", "h200"),
        ("AMD Instinct MI300X", "mi300x"),
        ("NVIDIA GH200 480GB", "gh200-480gb"),
        ("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb"),
    ],
)
def test_platform_folder_is_one_per_chip(gpu_name, folder):
    assert run.platform_folder(gpu_name) == folder


def test_committed_results_sit_in_their_platforms_folder():
    """benchmarks.compare refuses results of another platform, so a committed file whose platform is not its
    folder's name would never be compared with the runs of that card (the H100's file once read h100-80gb-hbm3)."""
    committed = sorted((run.REPO / "benchmarks" / "results").glob("*/torch*.json"))
    assert committed, "no committed per-variant results"
    for path in committed:
        assert report.read(path)["platform"] == path.parent.name, path


def _wrapped(kernel, name: str, wrap) -> types.ModuleType:
    """The kernel's gemm and gemm_natural, each through wrap(op)."""
    mod = types.ModuleType(name)
    mod.SUPPORTED_DTYPES = kernel.SUPPORTED_DTYPES
    mod.gemm, mod.gemm_natural = wrap(kernel.gemm), wrap(kernel.gemm_natural)
    return mod


def _kernel_right_only_once(kernel) -> types.ModuleType:
    """The real op on its first call for each output, then nothing: right when checked, wrong when timed."""
    seen: set[int] = set()

    def once(op):
        def call(*args):
            out = args[-1]
            if id(out) not in seen:
                seen.add(id(out))
                op(*args)
            return out

        return call

    return _wrapped(kernel, "lazy_gemm", once)


def test_a_kernel_wrong_in_the_timed_calls_is_refused(cpu_kernel, tmp_path):
    """Only the first call is checked before timing; the output, poisoned again, must hold a right result
    after the timed calls too (a review showed a kernel that skips its later calls timed as right)."""
    code = run.main(
        [*TINY, "--out", str(tmp_path), "--no-plot", "--impls", "gemm"], kernel=_kernel_right_only_once(cpu_kernel)
    )
    assert code == 1
    doc = report.read(tmp_path / "results.json")
    assert not [r for r in doc["records"] if r["impl"] == "gemm"]
    reasons = {r["layout"]: r["reason"] for r in doc["refused"] if r["impl"] == "gemm"}
    assert set(reasons) == {"seed", "natural"}, doc["refused"]
    assert all(r.startswith("wrong result in the timed calls: input set 0:") for r in reasons.values()), reasons


@pytest.mark.parametrize("interleave", ["calls", "rounds"])
def test_a_kernel_right_until_the_timed_calls_is_refused(cpu_kernel, tmp_path, monkeypatch, interleave):
    """Right in its check and in every warm-up call, and doing nothing once the timed calls start: the outputs
    are poisoned after the warm-up, so the check after timing sees it, in both interleave modes and over
    several rounds and input sets."""
    from benchmarks import timing

    timing_started = []
    real = timing.time_interleaved

    def interleaved(*args, **kwargs):
        timing_started.append(True)
        return real(*args, **kwargs)

    monkeypatch.setattr(timing, "time_interleaved", interleaved)

    def until_timed(op):
        def call(*args):
            if not timing_started:
                op(*args)
            return args[-1]

        return call

    mod = _wrapped(cpu_kernel, "lazy_when_timed", until_timed)
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--impls", "gemm", "--layouts", "natural"]
    args += ["--interleave", interleave, "--rounds", "2", "--sets", "3"]
    assert run.main(args, kernel=mod) == 1
    doc = report.read(tmp_path / "results.json")
    assert not doc["records"]
    (refused,) = doc["refused"]
    assert refused["reason"].startswith("wrong result in the timed calls: input set 0:"), refused


def test_a_right_kernel_passes_the_check_after_timing_in_rounds_over_many_sets(cpu_kernel, tmp_path):
    """A set the timed calls never reached is not checked (its output stays poisoned): no false refusal."""
    args = [*TINY, "--out", str(tmp_path), "--no-plot", "--impls", "gemm", "--interleave", "rounds"]
    assert run.main([*args, "--rounds", "3", "--sets", "7"], kernel=cpu_kernel) == 0
