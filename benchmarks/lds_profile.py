"""LDS bank conflicts of the gfx942 GEMM kernels, counted by the MI300X itself (rocprofv3).

    python -m benchmarks.lds_profile --build-dir build --out DIR [--shapes MxNxK,...] [--profiler rocprofv3]

gemm/rocm/tools/lds_check.cpp counts the kernels' LDS clocks under a bank model nobody has checked on an
MI300X: it takes a ds_read2_b64 / ds_write2_b64 as two 8-byte accesses (no conflict in any kernel), where
the other reading, one 16-byte access in 8-lane phases, would put 2-way conflicts on the operand reads
(gemm/rocm/DESIGN.md, "the open question"). This runs the op under

    rocprofv3 --pmc SQ_LDS_BANK_CONFLICT SQ_LDS_IDX_ACTIVE SQ_INSTS_LDS

on one shape per tile configuration and both layouts (the op picks the configuration: see the kernel
names), sums the counters per kernel and prints, for each, the cycles LDS stalled on bank conflicts
against its active cycles. Near 0 for the GEMM kernels: the model holds. A large share (the other reading
predicts ~40 % at t256x128): it does not, and the LDS layout wants rework.

Writes <out>/lds_profile.json and the profiler's raw CSV under <out>/raw/. Information only: where there is
no ROCm GPU or no profiler it writes {"available": false, "reason": ...} and exits 0; it exits 1 when the
profiled run failed, timed out (--timeout, the profiler's whole process group is killed), profiled no GEMM
kernel or read zero LDS instructions for one (counters not readable in the container), 2 on bad usage.
Whatever happens, the JSON is written.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

COUNTERS = ("SQ_LDS_BANK_CONFLICT", "SQ_LDS_IDX_ACTIVE", "SQ_INSTS_LDS")
# One shape per tile configuration in gemm/rocm/gemm_plan.h's plan (DESIGN.md's table): t256x128,
# t128x128 (2 splits, so the reduce kernel shows too), t64x64.
DEFAULT_SHAPES = "6144x7168x2048,1024x7168x2048,512x4096x512"
CALLS_PER_SHAPE = 3
DEFAULT_TIMEOUT_S = 900
SHARE_DEFINITION = "SQ_LDS_BANK_CONFLICT / SQ_LDS_IDX_ACTIVE (rocprof-compute divides by IDX_ACTIVE - CONFLICT)"


class UsageError(ValueError):
    pass


# ------------------------------------------------------------------------------------ the counters


def read_counter_csvs(root: Path) -> dict[str, dict[str, float]]:
    """Sums of each counter per kernel name, over every *counter_collection.csv under `root` (rocprofv3
    writes one per pass, in <root>/ or <root>/pass_N/ depending on its version). The CSV is long-format:
    one row per dispatch and counter, with Kernel_Name, Counter_Name and Counter_Value columns.
    'dispatches' counts each dispatch once (rows of the first counter seen for that kernel)."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    dispatches: dict[str, set[tuple[str, str]]] = defaultdict(set)
    files = sorted(root.rglob("*counter_collection.csv"))
    for path in files:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            missing = {"Kernel_Name", "Counter_Name", "Counter_Value"} - set(reader.fieldnames or ())
            if missing:
                raise ValueError(f"{path}: no {', '.join(sorted(missing))} column; is it rocprofv3's counter CSV?")
            for line, row in enumerate(reader, start=2):
                kernel, counter, value = row["Kernel_Name"], row["Counter_Name"], row["Counter_Value"]
                if kernel is None or counter is None or value is None:
                    raise ValueError(f"{path}:{line}: a short row (truncated file?)")
                try:
                    sums[kernel][counter] += float(value)
                except ValueError as e:
                    raise ValueError(f"{path}:{line}: Counter_Value {value!r} is not a number") from e
                dispatches[kernel].add((str(path), row.get("Dispatch_Id") or row.get("Correlation_Id") or ""))
    out = {k: dict(v) for k, v in sums.items()}
    for kernel, ids in dispatches.items():
        out[kernel]["dispatches"] = float(len(ids))
    return out


_DEMANGLED = re.compile(r"gemm_kernel<gemm_rocm::TileCfg<(\d+), (\d+), \d+, \d+, \d+, \d+>, (\d), (true|false)>")
_MANGLED = re.compile(r"gemm_kernelINS_7TileCfgILi(\d+)ELi(\d+)ELi\d+ELi\d+ELi\d+ELi\d+EEELi(\d)ELb([01])E")
LAYOUT_NAMES = {"0": "seed", "1": "natural"}  # gemm_plan.h: kSeed = 0, kNatural = 1


def gemm_config(name: str) -> str | None:
    """`t256x128 natural vec` for a GEMM kernel's name (demangled or not), else None."""
    for pattern in (_DEMANGLED, _MANGLED):
        match = pattern.search(name)
        if match:
            bm, bn, layout, vec = match.groups()
            path = "vec" if vec in ("true", "1") else "bytes"
            return f"t{bm}x{bn} {LAYOUT_NAMES.get(layout, layout)} {path}"
    return None


def describe_kernel(name: str) -> str:
    return gemm_config(name) or name


def summarize(sums: dict[str, dict[str, float]]) -> list[dict]:
    """One row per kernel: its counters and conflict_share = bank-conflict stall cycles / LDS-active cycles
    (None where LDS was never active)."""
    rows = []
    for name, c in sums.items():
        active = c.get("SQ_LDS_IDX_ACTIVE", 0.0)
        conflict = c.get("SQ_LDS_BANK_CONFLICT", 0.0)
        config = gemm_config(name)
        rows.append(
            {
                "kernel": config or name,
                "gemm": config is not None,
                "kernel_name": name,
                "dispatches": int(c.get("dispatches", 0)),
                **{k: c[k] for k in COUNTERS if k in c},
                "conflict_share": conflict / active if active > 0 else None,
            }
        )
    return sorted(rows, key=lambda row: row["kernel"])


def format_table(rows: list[dict]) -> str:
    head = f"{'kernel':<28} {'calls':>5} {'LDS insts':>12} {'LDS active':>12} {'bank stall':>12} {'share':>7}"
    lines = [head, "-" * len(head)]
    for r in rows:
        share = "-" if r["conflict_share"] is None else f"{100 * r['conflict_share']:.1f}%"
        lines.append(
            f"{r['kernel'][:28]:<28} {r['dispatches']:>5} {r.get('SQ_INSTS_LDS', 0):>12.0f} "
            f"{r.get('SQ_LDS_IDX_ACTIVE', 0):>12.0f} {r.get('SQ_LDS_BANK_CONFLICT', 0):>12.0f} {share:>7}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ the workload


def workload(build_dir: Path, shapes: str) -> int:
    """What runs under the profiler: each shape and layout CALLS_PER_SHAPE times through the op."""
    import torch

    from benchmarks.problem import make_inputs, parse_shapes
    from benchmarks.run import load_kernel

    module, variant, how = load_kernel(build_dir)
    print(f"lds_profile workload: {variant} ({how})", flush=True)
    gen = torch.Generator().manual_seed(0)
    for shape in parse_shapes(shapes):
        inp = make_inputs(shape, "cuda", torch.float8_e4m3fnuz, gen)
        out = torch.empty(shape.m, shape.n, dtype=torch.bfloat16, device="cuda")
        for _ in range(CALLS_PER_SHAPE):
            module.gemm(inp.a, inp.b, inp.a_scale, inp.b_scale, out)
            module.gemm_natural(inp.x, inp.w, inp.x_scale, inp.w_scale, out)
        torch.cuda.synchronize()
    return 0


def unavailable_reason(profiler: str) -> str | None:
    """Why this machine cannot take the profile, or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if getattr(torch.version, "hip", None) is None or not torch.cuda.is_available():
        return f"needs a ROCm build of torch and an AMD GPU (torch {torch.__version__}, hip={torch.version.hip})"
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
    if not arch.startswith("gfx942"):
        return f"the kernels are built for gfx942 (MI300X); this GPU is {arch or 'unknown'}"
    if find_profiler(profiler) is None:
        return f"{profiler} is not on PATH, in torch's ROCM_HOME/bin or in /opt/rocm/bin (ROCm >= 6.2 ships it)"
    return None


def find_profiler(profiler: str) -> str | None:
    """The profiler's path: on PATH, else in the ROCm torch found (images that install ROCm as wheels keep
    it under site-packages, with no /opt/rocm), else in /opt/rocm/bin."""
    found = shutil.which(profiler)
    if found or os.sep in profiler:
        return found
    try:
        from torch.utils.cpp_extension import ROCM_HOME
    except ImportError:
        ROCM_HOME = None  # noqa: N806
    for home in (ROCM_HOME, "/opt/rocm"):
        if home and (Path(home) / "bin" / profiler).is_file():
            return str(Path(home) / "bin" / profiler)
    return None


def run_profiler(cmd: list[str], timeout_s: float) -> int | None:
    """The profiler's exit status, or None when it ran past timeout_s (its whole process group killed:
    rocprofv3 runs the workload as a child)."""
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


def profile(build_dir: Path, out: Path, shapes: str, profiler: str, timeout_s: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"counters": list(COUNTERS), "shapes": shapes, "conflict_share": SHARE_DEFINITION}
    try:
        return _profile(build_dir, out, shapes, profiler, timeout_s, report)
    except Exception as e:  # information only: whatever went wrong goes into the JSON
        report["error"] = f"{type(e).__name__}: {e}"
        print(f"lds_profile: {report['error']}", file=sys.stderr)
        return 1
    finally:
        (out / "lds_profile.json").write_text(json.dumps(report, indent=2) + "\n")


def _profile(build_dir: Path, out: Path, shapes: str, profiler: str, timeout_s: float, report: dict) -> int:
    reason = unavailable_reason(profiler)
    if reason is not None:
        report.update(available=False, reason=reason)
        print(f"lds_profile: not taken: {reason}")
        return 0
    raw = out / "raw"
    shutil.rmtree(raw, ignore_errors=True)  # a previous run's CSVs would be summed in
    exe = find_profiler(profiler) or profiler
    cmd = [exe, "--pmc", *COUNTERS, "--output-format", "csv", "-d", str(raw), "-o", "lds", "--",
           sys.executable, "-m", "benchmarks.lds_profile", "--workload", "--build-dir", str(build_dir),
           "--shapes", shapes]  # fmt: skip
    print("lds_profile:", " ".join(cmd), flush=True)
    rc = run_profiler(cmd, timeout_s)
    report.update(available=True, command=cmd, exit_code=rc)
    rows = summarize(read_counter_csvs(raw)) if raw.is_dir() else []
    report["kernels"] = rows
    print(format_table(rows))
    gemm = [r for r in rows if r["gemm"]]
    if rc is None:
        report["error"] = f"{profiler} ran past --timeout {timeout_s:g} s and was killed"
    elif rc != 0:
        report["error"] = f"{profiler} exited {rc}"
    elif not gemm:
        report["error"] = f"no GEMM kernel in the profile ({len(rows)} kernels)"
    elif any(not r.get("SQ_INSTS_LDS") for r in gemm):
        report["error"] = "SQ_INSTS_LDS reads 0 for a GEMM kernel: the counters are not readable here"
    if "error" in report:
        print(f"lds_profile: {report['error']}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.lds_profile", description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", type=Path, default=Path(os.environ.get("GEMM_BUILD_DIR", "build")))
    p.add_argument("--out", type=Path, default=Path("benchmarks/results/lds_profile"))
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"comma list of MxNxK (default {DEFAULT_SHAPES})")
    p.add_argument("--profiler", default="rocprofv3")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds the profiled run may take")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)  # what runs under the profiler
    args = p.parse_args(argv)
    try:
        from benchmarks.problem import parse_shapes

        parse_shapes(args.shapes)
    except ValueError as e:
        print(f"lds_profile: {e}", file=sys.stderr)
        return 2
    if args.workload:
        return workload(args.build_dir, args.shapes)
    return profile(args.build_dir, args.out, args.shapes, args.profiler, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
