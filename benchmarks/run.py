"""Benchmark the built gemm variant against the peers available on this platform.

    python -m benchmarks.run [--shapes challenge|tests|all|cpu-default|MxNxK,...] [--layouts seed,natural]
                             [--out benchmarks/results/<platform>/] [--build-dir build] [--quick]

Loads the op from the variant in --build-dir through `kernels.get_local_kernel` (the way users load it),
then for every shape and layout: checks each implementation's output against its fp32 reference (a
wrong result is refused, never timed), times it (warm-up; median of many calls rotated over several
input sets, interleaved call by call with the other implementations; last-level cache flushed before
each call; device events on GPU, perf_counter on CPU; --clocks samples the SM clock and power) and
reports microseconds, TFLOP/s, % of the platform's speed of light and the ratio to every peer.
Writes <out>/<variant>.json (schema in benchmarks/README.md) and <out>/<variant>.png, prints a table.
Exit status: 0 when this kernel passed every check, 1 when any of its outputs was wrong, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import functools
import importlib.util
import json
import os
import platform as pyplatform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent


class UsageError(ValueError):
    pass


# --------------------------------------------------------------------------------------- loading


def load_kernel(build_dir: Path) -> tuple[ModuleType, str, str]:
    """(module, variant name, how it was loaded). kernels is the loader; without it installed (a bare
    device machine) the variant directory is imported directly, and the JSON says so."""
    if not build_dir.is_dir():
        raise UsageError(f"--build-dir {build_dir} does not exist: run `make build` (python -m scripts.build) first")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local load never needs the Hub
    try:
        import kernels
    except ImportError:
        module, variant = _import_variant(build_dir)
        return module, variant, "importlib (the kernels package is not installed)"
    try:
        module = kernels.get_local_kernel(build_dir)
    except FileNotFoundError as e:
        raise UsageError(f"--build-dir {build_dir}: {e}") from e
    return module, Path(module.__file__).parent.name, f"kernels {getattr(kernels, '__version__', '?')} get_local_kernel"


def _import_variant(build_dir: Path) -> tuple[ModuleType, str]:
    import torch

    tv = "torch" + "".join(torch.__version__.split("+")[0].split(".")[:2])
    if torch.version.cuda:
        backend = "cu" + torch.version.cuda.replace(".", "")[:3]
    elif getattr(torch.version, "hip", None):
        backend = "rocm"
    else:
        backend = "cpu"
    candidates = sorted(
        d
        for d in build_dir.iterdir()
        if (d / "__init__.py").is_file() and d.name.startswith(tv + "-") and f"-{backend}" in d.name
    )
    if not candidates:
        raise UsageError(
            f"--build-dir {build_dir}: no variant for {tv} / {backend} (have: "
            f"{', '.join(d.name for d in build_dir.iterdir() if d.is_dir()) or 'nothing'})"
        )
    vdir = candidates[0]
    name = "gemm_" + re.sub(r"\W", "_", vdir.name)
    spec = importlib.util.spec_from_file_location(name, vdir / "__init__.py", submodule_search_locations=[str(vdir)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module, vdir.name


# ------------------------------------------------------------------------------------ environment


def _cmd(*args: str) -> str | None:
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def detect(torch_mod) -> tuple[str, str, str | None]:
    """(backend cpu|cuda|rocm, platform directory name, gpu name)."""
    if not torch_mod.cuda.is_available():
        return "cpu", "cpu", None
    name = torch_mod.cuda.get_device_name(0)
    backend = "rocm" if getattr(torch_mod.version, "hip", None) else "cuda"
    return backend, platform_folder(name), name


# The cards this project benchmarks, by the folder their results live in (benchmarks/results/<folder>/): one
# folder per chip, whatever memory size or form factor the driver's name adds ("NVIDIA H100 80GB HBM3").
KNOWN_CARDS = {"MI300X": "mi300x", "H200": "h200", "H100": "h100"}


def platform_folder(gpu_name: str) -> str:
    upper = gpu_name.upper()
    for card, folder in KNOWN_CARDS.items():
        if re.search(rf"\b{card}\b", upper):
            return folder
    return _slug(gpu_name)


def _slug(name: str) -> str:
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w and w not in {"nvidia", "amd", "instinct"}]
    return "-".join(words) or "gpu"


def environment(torch_mod, backend: str, gpu: str | None, variant_dir: Path | None, loader: str) -> dict:
    env: dict = {
        "gpu": gpu,
        "cpu": _cpu_name(),
        "cpu_count": os.cpu_count(),
        "os": f"{pyplatform.system()} {pyplatform.release()}",
        "python": pyplatform.python_version(),
        "torch": torch_mod.__version__,
        "kernels": _version("kernels"),
        "loader": loader,
    }
    if backend == "cuda":
        props = torch_mod.cuda.get_device_properties(0)
        env.update(
            cuda=torch_mod.version.cuda,
            arch=f"sm_{props.major}{props.minor}",
            sm_count=props.multi_processor_count,
            driver=_cmd("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
        )
    elif backend == "rocm":
        props = torch_mod.cuda.get_device_properties(0)
        env.update(
            hip=torch_mod.version.hip,
            arch=getattr(props, "gcnArchName", None),
            cu_count=props.multi_processor_count,
            driver=_read("/sys/module/amdgpu/version"),
            aiter=_version("aiter"),
        )
    env["git"] = _git()
    if variant_dir is not None and (variant_dir / "metadata.json").is_file():
        try:
            meta = json.loads((variant_dir / "metadata.json").read_text())
        except json.JSONDecodeError:
            meta = {}
        env["variant_metadata"] = {k: meta.get(k) for k in ("id", "version", "digest", "backend", "provenance")}
    return env


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip() or None
    except OSError:
        return None


def _cpu_name() -> str:
    text = _read("/proc/cpuinfo") or ""
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else (pyplatform.processor() or pyplatform.machine())


def _git() -> dict | None:
    commit = _cmd("git", "-C", str(REPO), "rev-parse", "HEAD")
    if commit is None:
        return None
    status = _cmd("git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no") or ""
    return {"commit": commit, "dirty": bool(status)}


# --------------------------------------------------------------------------------------- progress


class Progress:
    """tqdm when it is installed, else one plain line per step on stderr."""

    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total, self.done, self.enabled = total, 0, enabled
        self._bar = None
        self._t0 = time.perf_counter()
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, file=sys.stderr, unit="step", dynamic_ncols=True)
            except ImportError:
                pass

    def step(self, what: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.set_description(what[:48])
            self._bar.update(1)
            return
        pct = 100.0 * self.done / max(1, self.total)
        filled = int(pct / 5)
        elapsed = time.perf_counter() - self._t0
        print(
            f"[{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} {pct:3.0f}% {elapsed:6.1f}s  {what}",
            file=sys.stderr,
            flush=True,
        )

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


# ------------------------------------------------------------------------------------ speed of light


def speed_of_light(platform_name: str, backend: str, how: str, device, flusher, quick: bool):
    from . import sol
    from .impls import pertensor_fp8
    from .timing import Budget, time_fns

    if platform_name == "mi300x":
        return sol.MI300X
    if backend != "cuda":
        return None
    notes = sol.H200_NOTES if platform_name == "h200" else None
    if how == "notes":
        return notes
    import torch

    try:
        size = 8192
        g = torch.Generator().manual_seed(1)
        fp8 = [torch.randn(size, size, generator=g).to(torch.float8_e4m3fn).to(device) for _ in range(4)]
        one = torch.ones((), device=device)
        fns = [
            lambda x=x, w=w: pertensor_fp8(x, w, one, fast_accum=True) for x, w in zip(fp8[:2], fp8[2:], strict=False)
        ]
        t = time_fns(fns, device, Budget.for_device("cuda", quick), flusher)
        peak = 2.0 * size**3 / (t.us * 1e-6) / 1e12
        del fp8, fns
        src = torch.empty(1 << 30, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        tc = time_fns([lambda d=dst, s=src: d.copy_(s)], device, Budget.for_device("cuda", quick), flusher)
        bandwidth = 2.0 * src.numel() / (tc.us * 1e-6) / 1e12
        del src, dst
    except Exception as e:  # no FP8 cuBLAS on this GPU/torch: fall back to the notes (or nothing)
        print(
            f"note: could not measure the FP8 ceiling ({type(e).__name__}: {e}); "
            f"{'using the notes' if notes else 'no speed of light'}",
            file=sys.stderr,
        )
        return notes
    return sol.SpeedOfLight(
        peak_tflops=round(peak, 1),
        bandwidth_tbps=round(bandwidth, 3),
        source=(
            f"measured in this run: per-tensor cuBLAS FP8 torch._scaled_mm with fast accumulation at "
            f"{size}x{size}x{size} (median of {t.reps}, L2 flushed) = {peak:.0f} TFLOP/s; bandwidth from a "
            f"1 GiB device copy = {bandwidth:.2f} TB/s"
        ),
    )


# ----------------------------------------------------------------------------------------- timing


def _reason(e: Exception) -> str:
    """An exception as one short line, for `refused`."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"


def time_by_calls(ready, device, budget, rounds, flusher) -> tuple[dict, dict[str, str]]:
    """--interleave calls: each implementation warmed up on its own (one that fails there is left out),
    then all of them timed call by call (timing.time_interleaved), each as many times as the budget gives
    its own calls, the fewer calls of a slow one spread over the whole stretch; each one's samples cut
    into `rounds` consecutive stretches give the per-round medians, which the rounds mode reports too.
    ({impl name: (samples, round medians, timing windows)}, {impl name: why its timing failed})."""
    from .timing import reps_for, stretches, time_interleaved, warm_up

    failed: dict[str, str] = {}
    warmed = []  # (impl, fns, seconds per call, host us per call)
    for impl, _, fns, _ in ready:
        try:
            warmed.append((impl, fns, *warm_up(fns, device, budget)))
        except Exception as e:
            failed[impl.name] = _reason(e)
    if not warmed:
        return {}, failed
    reps = [reps_for(budget, w[2]) for w in warmed]
    for w in warmed:
        poison(w[1])  # after the warm-up: what the outputs hold next, the timed calls wrote
    t0 = time.monotonic()
    try:
        got = time_interleaved([w[1] for w in warmed], device, reps, [w[3] for w in warmed], flusher)
    except Exception as e:  # which call failed is not known: none of them is timed
        return {}, {**failed, **{impl.name: f"interleaved timing: {_reason(e)}" for impl, *_ in warmed}}
    window = (t0, time.monotonic())
    timed = {
        impl.name: (times, [round(statistics.median(part), 3) for part in stretches(times, rounds)], [window])
        for (impl, *_), times in zip(warmed, got, strict=True)
    }
    return timed, failed


def time_by_rounds(ready, device, budget, rounds, flusher) -> tuple[dict, dict[str, str]]:
    """--interleave rounds: each implementation timed in a block per round (the budget shared out over
    the rounds), in round_order; an implementation whose timing fails is not timed again. The same
    results as time_by_calls."""
    from .timing import round_order, time_samples

    failed: dict[str, str] = {}
    timed = {impl.name: ([], [], []) for impl, *_ in ready}
    for r in range(rounds if ready else 0):
        for impl, _, fns, _ in round_order(ready, r, rounds):
            if impl.name in failed:
                continue
            samples, medians, windows = timed[impl.name]
            try:
                t0 = time.monotonic()
                after = functools.partial(poison, fns)  # each round: the check sees its own timed calls
                got = time_samples(fns, device, budget.per_round(rounds), flusher, after_warm_up=after)
                windows.append((t0, time.monotonic()))
                samples += got
                medians.append(round(statistics.median(got), 3))
            except Exception as e:
                failed[impl.name] = _reason(e)
    return {name: result for name, result in timed.items() if name not in failed}, failed


# ------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n")[0])
    p.add_argument(
        "--shapes",
        default=None,
        help="challenge (18), tests (11), all (29), cpu-default, or MxNxK[,MxNxK...]; "
        "default: all on GPU, cpu-default on CPU",
    )
    p.add_argument("--layouts", default="seed,natural", help="comma list of seed, natural (default both)")
    p.add_argument("--out", type=Path, default=None, help="results directory (default benchmarks/results/<platform>/)")
    p.add_argument("--build-dir", type=Path, default=Path("build"), help="where `make build` put the variant")
    p.add_argument("--quick", action="store_true", help="fewer input sets and repetitions")
    p.add_argument("--impls", default=None, help="comma list restricting the implementations (default: all available)")
    p.add_argument("--sets", type=int, default=None, help="input sets rotated while timing (default 4 GPU, 2 CPU)")
    p.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="timing rounds per shape: blocks with --interleave rounds, stretches of the interleaved calls "
        "(their medians reported as round_us) with --interleave calls (default 3 GPU, 1 CPU)",
    )
    p.add_argument(
        "--interleave",
        choices=("calls", "rounds"),
        default="calls",
        help="how the implementations of a shape share the device's time: call by call, every repetition "
        "running each once, in a rotated order (default: all sample the same clock and power states), or "
        "in --rounds rounds of blocks, in a different order each round",
    )
    p.add_argument(
        "--clocks",
        action="store_true",
        help="NVIDIA: sample the SM clock, board power and clock-event reasons (nvidia-smi, every 50 ms) "
        "while each implementation is timed; their medians go into its record",
    )
    p.add_argument(
        "--peak",
        choices=("measure", "notes"),
        default="measure",
        help="CUDA: measure the FP8 ceiling in this run (default) or take it from the H200 notes",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="CPU: torch intra-op threads (default: torch's). On an oversubscribed machine, 1 "
        "avoids timing the scheduler's thread wake-ups instead of the kernel",
    )
    p.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p.add_argument("--seed", type=int, default=0, help="random seed of the inputs")
    p.add_argument("--no-progress", action="store_true")
    return p.parse_args(argv)


class Watched:
    """One input set's call of an implementation that writes its `output` in place (impls marks ours), with
    the calls made since `poison()`: the output is poisoned after the warm-up, so after the timed calls it
    holds what the last of them wrote. A kernel right only on its first calls (a cache, a skipped launch)
    would otherwise be timed as if right."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0
        functools.update_wrapper(self, fn)  # its name, and its `output` (impls' mark)

    def __call__(self):
        self.calls += 1
        return self.fn()

    def poison(self) -> None:
        self.output.fill_(float("nan"))
        self.calls = 0


def watched(fns: list) -> list:
    return [Watched(fn) if getattr(fn, "output", None) is not None else fn for fn in fns]


def poison(fns) -> None:
    for fn in fns:
        if isinstance(fn, Watched):
            fn.poison()


def wrong_in_timed_calls(fns, sets, allowance: float, first: tuple) -> str | None:
    """The first wrong output among the watched calls' (each input set's, if called since it was poisoned);
    None when all are right, or when it cannot be checked (then why). first: set 0's (reference, terms),
    which the run already holds."""
    from .problem import check, magnitude, reference

    for i, (fn, inputs) in enumerate(zip(fns, sets, strict=True)):
        if not isinstance(fn, Watched) or fn.calls == 0:
            continue
        try:
            ref, terms = first if i == 0 else (reference(inputs), magnitude(inputs) if allowance else None)
            verdict = check(fn.output, ref, terms, allowance)
        except Exception as e:  # e.g. no memory left for the reference: no number without the check
            return f"input set {i}: the check failed: {_reason(e)}"
        if not verdict.ok:
            return f"input set {i}: {verdict.message}"
    return None


def main(argv: list[str] | None = None, kernel: ModuleType | None = None) -> int:
    args = parse_args(argv)
    try:
        return _main(args, kernel)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace, kernel: ModuleType | None) -> int:
    import torch

    from . import clocks as clocks_mod
    from . import impls as impls_mod
    from . import plot as plot_mod
    from . import report
    from .problem import (
        ATOL,
        RTOL,
        check,
        magnitude,
        make_inputs,
        parse_layouts,
        parse_shapes,
        reference,
    )
    from .timing import Budget, Flusher, summarize

    backend, platform_name, gpu = detect(torch)
    try:
        shape_spec = args.shapes or ("cpu-default" if backend == "cpu" else "all")
        shapes = parse_shapes(shape_spec)
        layouts = parse_layouts(args.layouts)
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: exists and is not a directory (the results go into a folder)")
    if args.sets is not None and args.sets < 1:
        raise UsageError(f"--sets must be >= 1, got {args.sets}")
    if args.threads is not None:
        if args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)

    if kernel is None:
        kernel, variant, loader = load_kernel(args.build_dir)
    else:
        file = getattr(kernel, "__file__", None)
        variant, loader = (Path(file).parent.name if file else None), "given by the caller"
    variant_dir = Path(kernel.__file__).parent if getattr(kernel, "__file__", None) else None

    device = torch.device("cuda" if backend != "cpu" else "cpu")
    # Every implementation is checked by the loaded backend's own accuracy rule (gemm.reference): on cuda
    # the contract's tolerance plus an accumulation allowance for Hopper's FP8 tensor cores, elsewhere
    # the plain rule (allowance 0), as the tests hold each backend.
    allowance = getattr(kernel, "ACCUMULATION_ALLOWANCE", 0.0)
    dtypes = getattr(kernel, "SUPPORTED_DTYPES", None)
    if dtypes:
        fp8_dtype = dtypes[0]
    else:
        fp8_dtype = torch.float8_e4m3fnuz if backend == "rocm" else torch.float8_e4m3fn
    ctx = impls_mod.Context(device=device, backend=backend, fp8_dtype=fp8_dtype, kernel=kernel)

    wanted = None
    if args.impls:
        wanted = [s.strip() for s in args.impls.split(",") if s.strip()]
        unknown = [s for s in wanted if s not in impls_mod.BY_NAME]
        if unknown:
            raise UsageError(f"--impls: unknown {unknown}; known: {', '.join(impls_mod.BY_NAME)}")
        if not wanted:  # a run that times nothing would still replace the committed results file
            raise UsageError(f"--impls {args.impls!r} names no implementation; known: {', '.join(impls_mod.BY_NAME)}")
        if impls_mod.OURS not in wanted and args.out is None:  # nor should one without our own records
            raise UsageError(
                f"--impls {args.impls!r} leaves out {impls_mod.OURS}: give --out, so that the committed results "
                "file (our records) is not replaced"
            )
    impl_info: dict[str, dict] = {}
    active = []
    for impl in impls_mod.IMPLS:
        if wanted is not None and impl.name not in wanted:
            continue
        why = impl.available(ctx)
        impl_info[impl.name] = {
            "label": impl.label,
            "layouts": list(impl.layouts),
            "peer": impl.peer,
            "status": "ok" if why is None else "unavailable",
            "reason": why,
        }
        if why is None:
            active.append(impl)

    nsets = args.sets or ((2 if args.quick else 4) if backend != "cpu" else (1 if args.quick else 2))
    budget = Budget.for_device(device.type, args.quick)
    if args.rounds is not None and args.rounds < 1:
        raise UsageError(f"--rounds must be >= 1, got {args.rounds}")
    rounds = args.rounds or (1 if device.type == "cpu" or args.quick else 3)
    flusher = Flusher(device)
    sampler = None
    if args.clocks:
        if backend != "cuda":
            raise UsageError("--clocks needs an NVIDIA GPU (nvidia-smi)")
        try:
            sampler = clocks_mod.open_sampler(torch)
        except clocks_mod.UsageError as e:
            raise UsageError(f"--clocks: {e}") from e
    out_dir = args.out or (REPO / "benchmarks" / "results" / platform_name)
    torch.backends.cuda.matmul.allow_tf32 = False

    print(
        f"gemm benchmark: platform {platform_name} ({gpu or _cpu_name()}), variant {variant}, "
        f"{len(shapes)} shapes ({shape_spec}), layouts {','.join(layouts)}, {nsets} input sets, "
        f"flush {flusher.nbytes >> 20} MB{', quick' if args.quick else ''}",
        file=sys.stderr,
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if backend == "cpu" and load > 2 * (os.cpu_count() or 1):
        print(
            f"warning: load average {load:.0f} on {os.cpu_count()} cores: CPU times include waiting for the "
            f"scheduler{'' if torch.get_num_threads() == 1 else ' (try --threads 1)'}",
            file=sys.stderr,
        )
    note = None
    if backend == "cpu" and args.shapes is None:
        note = (
            f"CPU run on a reduced shape set (cpu-default: {len(shapes)} small shapes); "
            "--shapes all runs the 29 contract shapes (slow)"
        )
        print(f"note: {note}", file=sys.stderr)

    sol = speed_of_light(platform_name, backend, args.peak, device, flusher, args.quick)
    if sol is not None:
        print(f"speed of light: {sol.peak_tflops} TFLOP/s, {sol.bandwidth_tbps} TB/s ({sol.source})", file=sys.stderr)

    # The sampler (--clocks) runs for the whole measurement and must end with it, whatever happens.
    with contextlib.ExitStack() as stack:
        if sampler is not None:
            stack.enter_context(sampler)
        steps = sum(1 for _ in shapes for lay in layouts for i in active if lay in i.layouts)
        progress = Progress(steps, enabled=not args.no_progress)
        records: list[dict] = []
        refused: list[dict] = []
        gen = torch.Generator().manual_seed(args.seed)
        for shape in shapes:
            sets = [make_inputs(shape, device, fp8_dtype, gen) for _ in range(nsets)]
            op_ref = reference(sets[0])
            op_terms = magnitude(sets[0]) if allowance else None
            for layout in layouts:
                # Build and check every implementation first, then time them interleaved (timing.py says why).
                ready = []  # (impl, where, fns, verdict)
                for impl in active:
                    if layout not in impl.layouts:
                        continue
                    progress.step(f"{shape.id} {layout} {impl.name}")
                    where = {"m": shape.m, "n": shape.n, "k": shape.k, "layout": layout, "impl": impl.name}
                    try:
                        built = [impl.build(ctx, s, layout) for s in sets]
                        fns = [b[0] for b in built]
                        out = fns[0]()
                        own_ref = built[0][1]  # a peer that computes on other inputs: (its ref, its terms)
                        ref, terms = own_ref() if own_ref is not None else (op_ref, op_terms)
                        verdict = check(out, ref, terms, allowance)
                        del ref, terms
                        del out, built
                    except Exception as e:  # a peer that cannot run this shape: say why, keep going
                        refused.append({**where, "reason": _reason(e)})
                        continue
                    if not verdict.ok:
                        refused.append({**where, "reason": f"wrong result: {verdict.message}"})
                        continue
                    ready.append((impl, where, watched(fns), verdict))
                time_them = time_by_calls if args.interleave == "calls" else time_by_rounds
                timed, failed = time_them(ready, device, budget, rounds, flusher)
                for impl, where, fns, verdict in ready:
                    if impl.name in failed:
                        refused.append({**where, "reason": failed[impl.name]})
                        continue
                    samples, round_medians, windows = timed[impl.name]
                    wrong = wrong_in_timed_calls(fns, sets, allowance, (op_ref, op_terms))
                    if wrong:
                        refused.append({**where, "reason": f"wrong result in the timed calls: {wrong}"})
                        continue
                    t = summarize(samples)
                    clock = None
                    if sampler is not None:
                        lines = "".join(sampler.window(t0, t1) for t0, t1 in windows)
                        clock = clocks_mod.summarize(clocks_mod.parse_samples(lines))
                    records.append(
                        {
                            **where,
                            "us": round(t.us, 3),
                            "us_min": round(t.us_min, 3),
                            "us_max": round(t.us_max, 3),
                            "reps": t.reps,
                            "round_us": round_medians,
                            "tflops": float(f"{shape.flops / (t.us * 1e-6) / 1e12:.5g}"),
                            "pct_sol": None if sol is None else round(sol.pct(shape.m, shape.n, shape.k, t.us), 3),
                            "check": verdict.mode,
                            "outside_tol": verdict.bad,
                            "max_abs_err": verdict.max_abs_err,
                            "rel_err": verdict.rel_fro_err,
                            **({} if clock is None else {"clock": clock}),
                        }
                    )
                ready = timed = None
            del sets, op_ref, op_terms
        progress.close()
    if sampler is not None:
        unsampled = [r for r in records if not r["clock"]["samples"]]
        if unsampled or sampler.errors.strip():
            print(
                f"warning: --clocks: {len(unsampled)} of {len(records)} records without an nvidia-smi sample"
                + (f"; nvidia-smi said: {sampler.errors.strip()[:300]}" if sampler.errors.strip() else ""),
                file=sys.stderr,
            )

    natural_only = {i.name for i in impls_mod.IMPLS if i.layouts == ("natural",)}
    report.add_ratios(records, natural_only)
    doc = {
        "schema": report.SCHEMA,
        "platform": platform_name,
        "variant": variant,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "env": environment(torch, backend, gpu, variant_dir, loader),
        "config": {
            "shapes": shape_spec,
            "note": note,
            "layouts": layouts,
            "sets": nsets,
            "quick": args.quick,
            "seed": args.seed,
            "fp8_dtype": str(fp8_dtype).replace("torch.", ""),
            "threads": torch.get_num_threads(),
            "load_average": round(load, 1),
            "timer": "device events (torch.cuda.Event)" if device.type == "cuda" else "time.perf_counter",
            "flush_bytes": flusher.nbytes,
            "budget": budget.__dict__,
            "rounds": rounds,
            "interleave": args.interleave,
            "clocks": None if sampler is None else {"nvidia_smi": sampler.cmd[1:3], "sample_ms": clocks_mod.SAMPLE_MS},
            "tolerance": (
                f"elementwise |out - ref| <= {ATOL} + {RTOL} |ref| against the fp32 reference"
                + (
                    f"; else accepted as 'accumulation-allowance' when every element is within that plus "
                    f"{allowance:.3g} x sum|terms| (count outside the plain rule in outside_tol)"
                    if allowance
                    else ""
                )
            ),
        },
        "sol": None if sol is None else sol.to_json(),
        "impls": impl_info,
        "records": records,
        "refused": refused,
    }
    stem = variant or "results"
    json_path = report.write(doc, out_dir / f"{stem}.json")
    print()
    print(report.table(doc))
    print(f"results: {json_path}")
    if not args.no_plot:
        try:
            print(f"plot:    {plot_mod.plot(doc, out_dir / f'{stem}.png')}")
        except plot_mod.PlotUnavailable as e:
            print(f"plot:    skipped: {e}")
    ours = {impl.name for impl in impls_mod.IMPLS if not impl.peer}  # gemm and its linear entry point
    ours_refused = [r for r in refused if r["impl"] in ours]
    if ours_refused:
        print(f"error: this kernel failed {len(ours_refused)} check(s); see 'refused' above", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
