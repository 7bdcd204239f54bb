"""The gfx942 gate: compile the HIP backend for MI300X with clang-19 and check its machine code.

Every HIP translation unit of gemm/rocm is compiled device-only for gfx942 (no offload bundle, a
linked code object per TU); the torch part of the launcher is left out with -DGEMM_ROCM_KERNELS_ONLY
(no torch headers here), which instantiates the very dispatch the torch entry points run. Then each
kernel of each code object is checked:

- a GEMM kernel (name contains ``gemm_kernel``) holds ``v_mfma_*fp8*`` instructions,
- no scratch: private segment 0, no dynamic stack,
- no VGPR or SGPR spills,
- LDS (group segment) within 64 KiB,
- latency hiding: no global load of a GEMM kernel's K loop is waited for with no MFMA issued since
  the load (``load_use``; the seed byte-load fallback is reported, not checked).

A table per kernel is printed (VGPR, AGPR, SGPR, LDS, waves/SIMD, MFMA count, and the load-to-use
metric: global loads whose ``s_waitcnt vmcnt`` comes with no MFMA issued since the load, out of
all, and the same for the K loop's loads with their fewest/median MFMAs in between; see
``load_use``). Exit status 0 when every kernel passes, 1 on a violation,
2 when the toolchain or a source is missing / does not compile.

    python -m scripts.gfx942_gate [--src FILE ...] [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ROCM_DIR = REPO / "gemm" / "rocm"
ARCH = "gfx942"
# Flags the gfx942 objects are built with; the rocm build stage should use the same optimisation
# flags so that the gate inspects what ships.
HIP_FLAGS = ["-std=c++17", "-O3", "-DROCM_KERNEL"]
GATE_DEFINES = ["-DGEMM_ROCM_KERNELS_ONLY"]
DEFAULT_DEVICE_LIBS = Path("/usr/lib/x86_64-linux-gnu/amdgcn/bitcode")
# The device libraries linked in, as hipcc links them: ocml holds the math functions (log2f, exp2f of
# the quantization kernel).
DEVICE_LIBS = ("hip.bc", "ockl.bc", "ocml.bc")
LDS_LIMIT = 64 * 1024
# Latency hiding: in a GEMM kernel's K loop every global load must have at least one MFMA issued
# before the s_waitcnt that retires it (the staging loads are meant to have a whole stage in
# flight). Exempt, report-only: the seed layout's byte-load fallback (M or N not a multiple of 4, or
# misaligned bases), whose bytes are assembled into words right after loading.
LATENCY_EXEMPT = (", seed, bytes>",)
VGPR_FILE_PER_SIMD = 512  # per lane, arch VGPRs + AGPRs (gfx90a/gfx942 unified register file)
MAX_WAVES_PER_SIMD = 8
SIMDS_PER_CU = 4
MFMA_FP8 = re.compile(r"\bv_mfma_\w*fp8\w*")
MFMA_ANY = re.compile(r"\bv_mfma_\w+")
SYMBOL = re.compile(r"^[0-9a-f]+ <([^>]+)>:\s*$")
VMEM_LOAD = re.compile(r"\b(global_load|flat_load|buffer_load)\w*")
VMEM_STORE = re.compile(r"\b(global_store|flat_store|buffer_store|global_atomic|flat_atomic|buffer_atomic)\w*")
VMCNT = re.compile(r"\bs_waitcnt\b.*\bvmcnt\((\d+)\)")
INST_ADDR = re.compile(r"//\s*([0-9A-Fa-f]+):")  # llvm-objdump's address comment
MAX_VMCNT = 63  # the counter's range on gfx9


class GateError(Exception):
    """The gate could not run (toolchain missing, compile error): exit status 2."""


@dataclass
class KernelReport:
    tu: str
    symbol: str
    name: str
    vgpr: int
    agpr: int
    sgpr: int
    lds: int
    scratch: int
    dynamic_stack: bool
    vgpr_spill: int
    sgpr_spill: int
    max_threads: int
    mfma: int
    mfma_fp8: int
    waves_per_simd: int
    violations: list[str] = field(default_factory=list)
    loads: int = 0  # global (vector memory) load instructions that are waited for
    loads_wait0: int = 0  # ... with no MFMA between the load and its wait (see load_use)
    loop_loads: int = 0  # those inside the K loop
    loop_loads_wait0: int = 0  # ... with no MFMA between the load and its wait in the loop
    loop_load_mfma_min: int = 0  # fewest / median MFMAs between a loop load and its wait
    loop_load_mfma_median: float = 0.0

    @property
    def is_gemm(self) -> bool:
        return "gemm_kernel" in self.name


def tool(name: str) -> str:
    """Path of an LLVM 19 tool (env GEMM_CLANG overrides clang++-19)."""
    override = os.environ.get("GEMM_CLANG") if name == "clang++-19" else None
    found = shutil.which(override or name)
    if not found and not override and name.endswith("-19") and name != "clang++-19":
        # Inside rocm/pytorch images (scripts/check.py reads shipped .so files there) the LLVM tools
        # carry no version suffix and live in ROCm's own LLVM.
        rocm_llvm = Path(os.environ.get("ROCM_PATH", "/opt/rocm")) / "llvm" / "bin"
        plain = name.removesuffix("-19")
        found = shutil.which(plain) or shutil.which(plain, path=str(rocm_llvm))
    if not found:
        raise GateError(
            f"{override or name} not found: install clang-19 lld-19 llvm-19 libamdhip64-dev rocm-device-libs "
            "(Debian packages, see .ci/apt-packages.txt)"
        )
    return found


def device_lib_path() -> Path:
    path = Path(os.environ.get("GEMM_HIP_DEVICE_LIB_PATH", DEFAULT_DEVICE_LIBS))
    for lib in DEVICE_LIBS:
        if not (path / lib).is_file():
            raise GateError(f"HIP device library {path / lib} missing (package rocm-device-libs)")
    return path


def default_sources() -> list[Path]:
    """Every HIP translation unit of the backend (gemm/rocm/*.hip; the emulator's tree excluded)."""
    return sorted(ROCM_DIR.glob("*.hip"))


def compile_tu(src: Path, out_dir: Path, extra: list[str] | None = None) -> Path:
    """Device-only gfx942 code object of one translation unit."""
    obj = out_dir / (src.stem + f".{ARCH}.o")
    bc = device_lib_path()
    cmd = [
        tool("clang++-19"), "-x", "hip", f"--offload-arch={ARCH}", "--cuda-device-only",
        "--no-gpu-bundle-output", *HIP_FLAGS, *GATE_DEFINES, *(extra or []),
        f"--hip-device-lib-path={bc}", *(f"--hip-device-lib={lib}" for lib in DEVICE_LIBS),
        f"-I{src.parent}", "-c", str(src), "-o", str(obj),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise GateError(f"compiling {src} for {ARCH} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return obj


def demangle(symbols: list[str]) -> dict[str, str]:
    filt = shutil.which("llvm-cxxfilt-19") or shutil.which("c++filt")
    if not filt or not symbols:
        return {s: s for s in symbols}
    proc = subprocess.run([filt], input="\n".join(symbols), capture_output=True, text=True)
    names = proc.stdout.splitlines()
    return dict(zip(symbols, names, strict=True)) if len(names) == len(symbols) else {s: s for s in symbols}


def short_name(name: str) -> str:
    """`void gemm_rocm::gemm_kernel<gemm_rocm::TileCfg<256, 128, 4, 2, 16, 2>, 0, true>(...)`
    -> `gemm_kernel<256x128 w4x2 mfma16, seed, vec>`."""
    m = re.search(r"gemm_kernel<gemm_rocm::TileCfg<(\d+), (\d+), (\d+), (\d+), (\d+), \d+>, (\d), (\w+)>", name)
    if m:
        bm, bn, wm, wn, mt, layout, vec = m.groups()
        lay = {"0": "seed", "1": "natural"}.get(layout, layout)
        path = "vec" if vec == "true" else "bytes"
        return f"gemm_kernel<{bm}x{bn} w{wm}x{wn} mfma{mt}, {lay}, {path}>"
    name = re.sub(r"^void ", "", name)
    return re.sub(r"\(.*\)$", "", name).replace("gemm_rocm::", "")


def disassemble(obj: Path) -> dict[str, list[str]]:
    """symbol -> its instruction lines, in program order."""
    proc = subprocess.run([tool("llvm-objdump-19"), "-d", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise GateError(f"llvm-objdump-19 -d {obj} failed: {proc.stderr}")
    code: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        m = SYMBOL.match(line)
        if m:
            current = m.group(1)
            code.setdefault(current, [])
        elif current and line.strip():
            code[current].append(line)
    return code


def mfma_counts(code: list[str]) -> tuple[int, int]:
    """(all MFMA instructions, fp8 MFMA instructions) of one kernel."""
    total = sum(1 for line in code if MFMA_ANY.search(line))
    return total, sum(1 for line in code if MFMA_FP8.search(line))


@dataclass(frozen=True)
class LoadUse:
    mfmas: int  # MFMAs issued between the load and the s_waitcnt that retires it (fewest over paths)
    in_loop: bool  # the load sits in a cycle of the control-flow graph (the K loop)
    addr: int


def _branch_target(addr: int, arg: str) -> int:
    off = int(arg, 0)
    return addr + 4 + 4 * (off - 65536 if off >= 32768 else off)  # SOPP simm16, in dwords


def load_use(code: list[str]) -> list[LoadUse]:
    """Load-to-use distance of every global load of one kernel, in MFMAs: how many MFMA instructions
    issue between the load and the ``s_waitcnt vmcnt(n)`` that retires it (a distance of 0: the wave
    stalls on the load with no matrix work in the shadow of its latency).

    gfx942 counts vector memory loads and stores in one in-order counter, so ``vmcnt(n)`` retires all
    but the newest n. The control-flow graph is followed (basic blocks split at branches and branch
    targets): a forward data-flow pass keeps, per basic block entry, the queue of pending operations
    with the fewest MFMAs issued since each (merging paths); a load at the end of the loop body waited
    at the top of the next iteration is therefore measured across the back edge. For a load inside a
    loop only the waits inside a loop count (the steady state: the wait after the loop exit for the
    loads of the last, unused stage is not a stall per iteration). Loads never waited for are left out."""
    insts: list[tuple[int, str, str, str, int]] = []  # addr, opcode, first operand, kind, vmcnt
    for line in code:
        m = INST_ADDR.search(line)
        toks = line.split("//")[0].split()
        if not m or not toks:
            continue
        op = toks[0]
        w = VMCNT.search(line)
        kind = ("M" if MFMA_ANY.match(op) else "L" if VMEM_LOAD.match(op) else "S" if VMEM_STORE.match(op)
                else "W" if w else "-")  # fmt: skip
        insts.append((int(m.group(1), 16), op, toks[1] if len(toks) > 1 else "", kind, int(w.group(1)) if w else 0))
    if not insts:
        return []
    index = {inst[0]: i for i, inst in enumerate(insts)}
    target: dict[int, int | None] = {}
    leaders = {0}
    for i, (addr, op, arg, _, _) in enumerate(insts):
        if op == "s_branch" or op.startswith("s_cbranch"):
            target[i] = index.get(_branch_target(addr, arg))
            if target[i] is not None:
                leaders.add(target[i])
            leaders.add(i + 1)
        elif op in ("s_endpgm", "s_setpc_b64"):
            leaders.add(i + 1)
    starts = sorted(x for x in leaders if x < len(insts))
    blocks = [(s, starts[k + 1] if k + 1 < len(starts) else len(insts)) for k, s in enumerate(starts)]
    block_at = {s: k for k, (s, _) in enumerate(blocks)}
    succ: list[list[int]] = []
    for _, e in blocks:
        op = insts[e - 1][1]
        fall = [block_at[e]] if e < len(insts) else []
        if op in ("s_endpgm", "s_setpc_b64"):
            succ.append([])
        elif e - 1 in target:
            jump = [block_at[target[e - 1]]] if target[e - 1] is not None else []
            succ.append(jump if op == "s_branch" else fall + jump)
        else:
            succ.append(fall)

    # Pending vector memory operations, newest first; each position holds, per load that may occupy
    # it on some path, the fewest MFMAs issued since that load (a store: no load)
    Queue = tuple[tuple[tuple[int, int], ...], ...]

    def run_block(k: int, state: Queue, rec: dict[int, dict[int, int]] | None = None) -> Queue:
        q = list(state)
        for i in range(*blocks[k]):
            kind = insts[i][3]
            if kind == "M":
                q = [tuple((j, d + 1) for j, d in pos) for pos in q]
            elif kind in ("L", "S"):
                q.insert(0, ((i, 0),) if kind == "L" else ())
            elif kind == "W":
                keep = insts[i][4]
                if rec is not None:
                    for pos in q[keep:]:
                        for j, d in pos:
                            rec.setdefault(j, {})[k] = min(rec.get(j, {}).get(k, d), d)
                del q[keep:]
            del q[MAX_VMCNT:]
        return tuple(q)

    def merge_pos(x: tuple[tuple[int, int], ...], y: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        if x == y:
            return x
        best = dict(x)
        for j, d in y:
            best[j] = min(best.get(j, d), d)
        return tuple(sorted(best.items()))

    def merge(a: Queue | None, b: Queue) -> Queue:
        if a is None or a == b:
            return b
        n = max(len(a), len(b))
        pa, pb = a + ((),) * (n - len(a)), b + ((),) * (n - len(b))
        return tuple(merge_pos(x, y) for x, y in zip(pa, pb, strict=True))

    entry: list[Queue | None] = [None] * len(blocks)
    entry[0] = ()
    work, queued = [0], {0}
    while work:  # forward data flow to the fixed point (MFMA counts only decrease at merges)
        k = heapq.heappop(work)
        queued.discard(k)
        out = run_block(k, entry[k])
        for t in succ[k]:
            merged = merge(entry[t], out)
            if merged != entry[t]:
                entry[t] = merged
                if t not in queued:
                    heapq.heappush(work, t)
                    queued.add(t)
    rec: dict[int, dict[int, int]] = {}
    for k, state in enumerate(entry):
        if state is not None:
            run_block(k, state, rec)

    cyclic: dict[int, bool] = {}

    def in_cycle(k: int) -> bool:
        if k not in cyclic:
            seen, stack = set(), list(succ[k])
            while stack and k not in seen:
                x = stack.pop()
                if x not in seen:
                    seen.add(x)
                    stack.extend(succ[x])
            cyclic[k] = k in seen
        return cyclic[k]

    block_of = {i: k for k, (s, e) in enumerate(blocks) for i in range(s, e)}
    uses = []
    for j in sorted(rec):
        looped = in_cycle(block_of[j])
        inner = [d for wk, d in rec[j].items() if in_cycle(wk)] if looped else []
        uses.append(LoadUse(min(inner) if inner else min(rec[j].values()), looped, insts[j][0]))
    return uses


def kernel_metadata(obj: Path) -> list[dict]:
    proc = subprocess.run([tool("llvm-readelf-19"), "--notes", str(obj)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise GateError(f"llvm-readelf-19 --notes {obj} failed: {proc.stderr}")
    text = proc.stdout
    start = text.find("---")
    end = text.find("\n...", start)
    if start < 0 or end < 0:
        raise GateError(f"no AMDGPU metadata in {obj}")
    doc = yaml.safe_load(text[start : end + 4].replace("---", "", 1).replace("\n...", ""))
    return list(doc.get("amdhsa.kernels", []))


def waves_per_simd(vgpr_total: int, lds: int, max_threads: int) -> int:
    """Occupancy of one SIMD: registers (512-entry file, granule 8) and LDS (64 KiB per CU) decide how
    many whole workgroups a CU holds; a workgroup's waves spread over the CU's 4 SIMDs."""
    granule = 8
    regs = max(granule, -(-vgpr_total // granule) * granule)
    by_regs = min(MAX_WAVES_PER_SIMD, VGPR_FILE_PER_SIMD // regs)
    waves_per_block = max(1, -(-max_threads // 64))
    blocks = (by_regs * SIMDS_PER_CU) // waves_per_block  # whole workgroups the register files hold
    if lds > 0:
        blocks = min(blocks, LDS_LIMIT // lds)
    if blocks == 0:
        return 0
    return max(1, min(by_regs, blocks * waves_per_block // SIMDS_PER_CU))


def inspect_object(obj: Path, tu: str) -> list[KernelReport]:
    code = disassemble(obj)
    metas = kernel_metadata(obj)
    names = demangle([m[".name"] for m in metas])
    reports = []
    for md in metas:
        sym = md[".name"]
        total, fp8 = mfma_counts(code.get(sym, []))
        uses = load_use(code.get(sym, []))
        loop = [u.mfmas for u in uses if u.in_loop]
        vgpr_count = int(md.get(".vgpr_count", 0))  # unified count (arch VGPRs + AGPRs)
        agpr = int(md.get(".agpr_count", 0))
        lds = int(md.get(".group_segment_fixed_size", 0))
        threads = int(md.get(".max_flat_workgroup_size", 1024))
        rep = KernelReport(
            tu=tu,
            symbol=sym,
            name=short_name(names.get(sym, sym)),
            vgpr=vgpr_count - agpr if vgpr_count >= agpr else vgpr_count,
            agpr=agpr,
            sgpr=int(md.get(".sgpr_count", 0)),
            lds=lds,
            scratch=int(md.get(".private_segment_fixed_size", 0)),
            dynamic_stack=bool(md.get(".uses_dynamic_stack", False)),
            vgpr_spill=int(md.get(".vgpr_spill_count", 0)),
            sgpr_spill=int(md.get(".sgpr_spill_count", 0)),
            max_threads=threads,
            mfma=total,
            mfma_fp8=fp8,
            waves_per_simd=waves_per_simd(vgpr_count, lds, threads),
            loads=len(uses),
            loads_wait0=sum(1 for u in uses if u.mfmas == 0),
            loop_loads=len(loop),
            loop_loads_wait0=sum(1 for d in loop if d == 0),
            loop_load_mfma_min=min(loop, default=0),
            loop_load_mfma_median=float(statistics.median(loop)) if loop else 0.0,
        )
        if rep.is_gemm and rep.mfma_fp8 == 0:
            rep.violations.append("GEMM kernel without v_mfma_*fp8* instructions")
        if rep.scratch != 0:
            rep.violations.append(f"uses scratch: private segment {rep.scratch} B/lane")
        if rep.dynamic_stack:
            rep.violations.append("uses a dynamic stack")
        if rep.vgpr_spill:
            rep.violations.append(f"{rep.vgpr_spill} VGPR spills")
        if rep.sgpr_spill:
            rep.violations.append(f"{rep.sgpr_spill} SGPR spills")
        if rep.lds > LDS_LIMIT:
            rep.violations.append(f"LDS {rep.lds} B > {LDS_LIMIT} B")
        if rep.waves_per_simd < 1:
            rep.violations.append("cannot be resident (occupancy 0)")
        reports.append(rep)
    return reports


def latency_violations(rep: KernelReport) -> list[str]:
    """The latency-hiding rule (LATENCY_EXEMPT). Applied by run_gate to what clang-19 builds, kept out
    of inspect_object's structural rules (which scripts/check.py also applies to shipped bundles)."""
    if rep.is_gemm and rep.loop_loads_wait0 and not any(x in rep.name for x in LATENCY_EXEMPT):
        return [f"{rep.loop_loads_wait0} of {rep.loop_loads} K-loop global loads waited for with no MFMA in between"]
    return []


def run_gate(sources: list[Path], out_dir: Path) -> list[KernelReport]:
    if not sources:
        raise GateError(f"no HIP translation units found under {ROCM_DIR}")
    reports: list[KernelReport] = []
    for src in sources:
        if not src.is_file():
            raise GateError(f"source {src} not found")
        obj = compile_tu(src, out_dir)
        tu = str(src.relative_to(REPO)) if src.is_relative_to(REPO) else str(src)
        found = inspect_object(obj, tu)
        for rep in found:
            rep.violations += latency_violations(rep)
        if not any(r.is_gemm for r in found):
            stub = KernelReport(tu, "-", "(no gemm_kernel in this TU)", 0, 0, 0, 0, 0, False, 0, 0, 0, 0, 0, 0)
            stub.violations.append("translation unit defines no GEMM kernel")
            found.append(stub)
        reports.extend(found)
    return reports


def format_table(reports: list[KernelReport]) -> str:
    head = ["kernel", "VGPR", "AGPR", "SGPR", "LDS B", "scratch", "spill v/s", "waves/SIMD", "MFMA", "ld wait0",
            "loop ld wait0", "loop ld-use", "status"]  # fmt: skip
    rows = [head]
    for r in reports:
        status = "ok" if not r.violations else "FAIL: " + "; ".join(r.violations)
        rows.append([
            r.name, str(r.vgpr), str(r.agpr), str(r.sgpr), str(r.lds), str(r.scratch),
            f"{r.vgpr_spill}/{r.sgpr_spill}", str(r.waves_per_simd), f"{r.mfma_fp8}/{r.mfma}",
            f"{r.loads_wait0}/{r.loads}", f"{r.loop_loads_wait0}/{r.loop_loads}",
            f"{r.loop_load_mfma_min}/{r.loop_load_mfma_median:g}", status,
        ])  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(head) - 1)]
    lines = []
    for row in rows:
        cells = [row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i]) for i in range(len(widths))]
        lines.append("  ".join(cells) + "  " + row[-1])
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scripts.gfx942_gate", description=__doc__.split("\n")[0])
    ap.add_argument("--src", action="append", type=Path, help="HIP translation unit (default: gemm/rocm/*.hip)")
    ap.add_argument("--out", type=Path, help="keep the code objects in this directory")
    ap.add_argument("--json", type=Path, help="write the per-kernel report as JSON here")
    args = ap.parse_args(argv)
    sources = [s.resolve() for s in args.src] if args.src else default_sources()
    try:
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            reports = run_gate(sources, args.out)
        else:
            with tempfile.TemporaryDirectory(prefix="gfx942_gate.") as tmp:
                reports = run_gate(sources, Path(tmp))
    except GateError as exc:
        print(f"gfx942 gate: cannot run: {exc}", file=sys.stderr)
        return 2
    print(f"gfx942 gate: {len(sources)} translation unit(s), {len(reports)} kernel(s), arch {ARCH}")
    print(format_table(reports))
    print(
        "ld wait0: global loads waited for with no MFMA issued since the load / all waited global loads; "
        "loop ld wait0: the same for the loads inside the K loop; loop ld-use: fewest/median MFMAs between "
        "a loop load and its wait (control flow followed, back edge included)"
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) | {"is_gemm": r.is_gemm} for r in reports], indent=2))
    bad = [r for r in reports if r.violations]
    if bad:
        for r in bad:
            print(f"gfx942 gate: FAIL {r.tu}: {r.name} ({r.symbol}): {'; '.join(r.violations)}", file=sys.stderr)
        return 1
    print("gfx942 gate: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
