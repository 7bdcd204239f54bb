"""Clock and power under sustained load: is a shape's time set by the kernel or by the GPU's power cap?

    python -m benchmarks.clocks [--shapes MxNxK,...|challenge] [--impls gemm,torch_blockwise,fp8_pertensor]
                                [--seconds 2] [--build-dir build] [--out FILE.json]

For each shape and implementation the call runs back to back, replayed from a CUDA graph of 20 calls so
that host launch costs do not idle the GPU, with no cache flush (the steady state of a layer run over and
over; L2 stays warm where the operands fit): first for SETTLE_S, then for --seconds timed. Meanwhile
`nvidia-smi` samples the SM clock, the board power (instantaneous where the driver has it; `power.draw` is
a 1 s average) and the active clock-event (throttle) reasons every 50 ms; only the timed window's samples
count. The table gives time per call, TFLOP/s, the median SM clock and power, and TFLOP/s per GHz of SM
clock, which separates the kernel's work per clock from the clock itself: at the power cap, the kernel
that does more per clock at the same power is the faster one. The output of the last timed call is checked
against its fp32 reference as benchmarks.run checks it: a wrong result gets no row, and a wrong result of
this kernel (not of a peer) makes the exit status 1. NVIDIA only; elsewhere it exits 2 with the reason
(rocm-smi has other fields).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

# nvidia-smi's field for the active clock-limiting reasons; older drivers name it `clocks_throttle_reasons`.
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
# Bits of that mask (nvidia-smi --help-query-gpu, "clocks_event_reasons").
REASON_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
    0x100: "display_clocks",
}
# nvidia-smi's board power: instantaneous where the driver has the field, else the 1 s average.
POWER_FIELDS = ("power.draw.instant", "power.draw")
LIMIT_FIELDS = "pci.bus_id,clocks.max.sm,power.limit"  # recorded once, beside the samples
SAMPLE_MS = 50
# Each implementation runs this long before its timed window (the clock moves to its loaded value in
# milliseconds; a 1 s power average needs a second).
SETTLE_S = {"power.draw.instant": 0.5, "power.draw": 1.0}


class UsageError(ValueError):
    pass


def reasons(mask: int) -> list[str]:
    """Names of the bits set in a clock-event mask; unknown bits as hex."""
    names = [name for bit, name in REASON_BITS.items() if mask & bit]
    rest = mask & ~sum(REASON_BITS)
    return names + ([hex(rest)] if rest else [])


def parse_samples(text: str) -> list[dict]:
    """nvidia-smi CSV lines `sm_mhz, power_w, reason_mask` -> dicts; lines it could not read are skipped
    ('[N/A]' power on some boards, a line cut at the process's end)."""
    samples = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 3:
            continue
        try:
            samples.append({"sm_mhz": float(parts[0]), "power_w": float(parts[1]), "mask": int(parts[2], 16)})
        except ValueError:
            continue
    return samples


def summarize(samples: list[dict]) -> dict:
    """Medians of the loaded samples and every reason seen in at least a quarter of them."""
    if not samples:
        return {"sm_mhz": None, "power_w": None, "reasons": [], "samples": 0}
    counts: dict[str, int] = {}
    for s in samples:
        for r in reasons(s["mask"]):
            counts[r] = counts.get(r, 0) + 1
    return {
        "sm_mhz": statistics.median(s["sm_mhz"] for s in samples),
        "power_w": statistics.median(s["power_w"] for s in samples),
        "reasons": sorted(r for r, c in counts.items() if 4 * c >= len(samples)),
        "samples": len(samples),
    }


def _smi_command(gpu: str, fields: str, *extra: str) -> list[str]:
    return ["nvidia-smi", f"--id={gpu}", f"--query-gpu={fields}", "--format=csv,noheader,nounits", *extra]


def _smi_query(gpu: str, fields: str) -> subprocess.CompletedProcess:
    return subprocess.run(_smi_command(gpu, fields), capture_output=True, text=True, timeout=30, check=False)


def smi_id(props, index: int) -> str:
    """nvidia-smi's --id for a torch device: its PCI address (domain:bus:device.function), which does not
    depend on CUDA_VISIBLE_DEVICES, where torch reports the three numbers; else torch's index, which is
    nvidia-smi's only when every GPU is visible in PCI order."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(p, int) for p in parts):
        domain, bus, dev = parts
        return f"{domain:08X}:{bus:02X}:{dev:02X}.0"
    return str(index)


def first_field(gpu: str, names: tuple[str, ...]) -> str:
    """The first of `names` this nvidia-smi reads (fields were renamed across driver versions)."""
    for name in names:
        if _smi_query(gpu, name).returncode == 0:
            return name
    raise UsageError("nvidia-smi reads none of " + ", ".join(names))


class Sampler:
    """nvidia-smi in loop mode (-lms) for the duration of a `with` block; each line it prints is stamped
    with the host's monotonic clock as it arrives, so that `window(t0, t1)` keeps one time window's."""

    def __init__(self, gpu: str, fields: str) -> None:
        self.gpu, self.fields = gpu, fields
        self.cmd = _smi_command(gpu, fields, f"-lms={SAMPLE_MS}")
        self.lines: list[tuple[float, str]] = []
        self.errors = ""

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line))

    def __enter__(self) -> Sampler:
        self.lines = []
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def __exit__(self, *exc: object) -> None:
        # Only the reader thread reads stdout (communicate() would read it too); stderr is read once
        # nvidia-smi has ended (its few error lines never fill the pipe).
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.reader.join(timeout=10)
        self.errors = self.proc.stderr.read()
        self.proc.stdout.close()
        self.proc.stderr.close()

    def window(self, t0: float, t1: float) -> str:
        return "".join(line for t, line in self.lines if t0 <= t <= t1)


def open_sampler(torch_mod) -> Sampler:
    """A Sampler (not started) of the current torch device's SM clock, board power and clock-event reasons,
    with the field names this nvidia-smi reads."""
    if shutil.which("nvidia-smi") is None:
        raise UsageError("needs nvidia-smi on PATH")
    index = torch_mod.cuda.current_device()
    gpu = smi_id(torch_mod.cuda.get_device_properties(index), index)
    if _smi_query(gpu, "name").returncode != 0:  # an address this nvidia-smi does not take: the index
        gpu = str(index)
    return Sampler(gpu, f"clocks.sm,{first_field(gpu, POWER_FIELDS)},{first_field(gpu, REASON_FIELDS)}")


BATCH = 20  # calls per graph replay (or per eager batch)


def batched(call, torch_mod):
    """(a function running BATCH calls, how they are launched, a function returning the output of the last
    call run). A CUDA graph of BATCH calls, so that the host's launch cost (tens of us for a Python-level peer
    such as torch's blockwise path) never leaves the GPU idle between short calls; where capture fails, the
    calls one by one ("eager": a call shorter than its launch is then host-bound, and the table shows it by
    its low power). The last output is what the timed calls computed, checked after the timed window: a
    replayed graph that computes something else must not pass for a fast one."""
    for _ in range(3):  # warm-up outside the capture (cuBLAS picks its kernel, allocators settle)
        out = call()
    # Our kernel writes one preallocated output every call: poisoned after the warm-up, it holds a result only
    # if the timed calls (the graph's replays) compute one. A peer's fresh output is poisoned harmlessly.
    if hasattr(out, "fill_"):
        out.fill_(float("nan"))
    torch_mod.cuda.synchronize()
    last: list = [None]
    try:
        graph = torch_mod.cuda.CUDAGraph()
        with torch_mod.cuda.graph(graph):
            for _ in range(BATCH):
                last[0] = call()  # the graph's own output buffer: every replay writes it again
        graph.replay()
        torch_mod.cuda.synchronize()
        return graph.replay, "graph", lambda: last[0]
    except Exception:  # noqa: BLE001 (any capture failure: fall back to plain launches)
        torch_mod.cuda.synchronize()

        def eager() -> None:
            for _ in range(BATCH):
                last[0] = call()

        return eager, "eager", lambda: last[0]


def sustained(run_batch, torch_mod, settle_s: float, seconds: float) -> tuple[float, int, float, float]:
    """Runs `run_batch` back to back for `settle_s`, then for about `seconds` timed; (device us per call
    in the timed window, its calls, the window's start and end on the host's monotonic clock). The host
    stays at most two batches ahead (it waits on the event of the batch before last), so it never starves
    the GPU of queued work, and each phase ends within a batch of its deadline."""
    batches: collections.deque = collections.deque()

    def run_for(duration: float) -> int:
        calls, t0 = 0, time.monotonic()
        while time.monotonic() - t0 < duration:
            run_batch()
            calls += BATCH
            batches.append(torch_mod.cuda.Event())
            batches[-1].record()
            if len(batches) > 2:
                batches.popleft().synchronize()
        return calls

    run_for(settle_s)
    start, end = torch_mod.cuda.Event(enable_timing=True), torch_mod.cuda.Event(enable_timing=True)
    start.record()
    t_start = time.monotonic()
    calls = run_for(seconds)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls, calls, t_start, time.monotonic()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="1024x1536x7168,1024x4608x7168,6144x4608x7168,8192x8192x8192")
    ap.add_argument("--impls", default="gemm,torch_blockwise,fp8_pertensor")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--build-dir", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.seconds < 0.5:
        ap.error(f"--seconds must be at least 0.5 (10 samples of {SAMPLE_MS} ms), got {args.seconds}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except (UsageError, subprocess.TimeoutExpired) as e:
        print(f"benchmarks.clocks: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    import torch

    from .impls import BY_NAME, Context
    from .problem import check, magnitude, make_inputs, parse_shapes, reference
    from .run import load_kernel

    if not torch.cuda.is_available() or torch.version.cuda is None:
        raise UsageError("needs an NVIDIA GPU (torch.cuda with CUDA)")
    sampler = open_sampler(torch)  # before the kernel loads: no nvidia-smi, no run
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as e:
        raise UsageError(str(e)) from e
    unknown = [n for n in args.impls.split(",") if n not in BY_NAME]
    if unknown:
        raise UsageError(f"--impls: unknown {unknown}; known: {sorted(BY_NAME)}")
    ours = any(not BY_NAME[n].peer for n in args.impls.split(","))  # gemm, gemm_linear: need the built kernel
    kernel, variant, _ = load_kernel(args.build_dir) if ours else (None, None, None)
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    gpu, fields = sampler.gpu, sampler.fields
    settle_s = SETTLE_S[fields.split(",")[1]]  # the power field open_sampler chose
    values = _smi_query(gpu, LIMIT_FIELDS).stdout.strip().split(", ")
    limits = dict(zip(("pci_bus_id", "max_sm_mhz", "power_limit_w"), values, strict=False))  # as far as printed
    ctx = Context(device, "cuda", torch.float8_e4m3fn, kernel)
    # Each output is held to the loaded kernel's own accuracy rule, as benchmarks.run holds it (the peers too,
    # with the same allowance); without the kernel, the plain rule.
    allowance = getattr(kernel, "ACCUMULATION_ALLOWANCE", 0.0)
    rows: list[dict] = []
    wrong: list[dict] = []
    doc = {
        "gpu": props.name,
        "nvidia_smi": {"id": gpu, "fields": fields, **limits},
        "variant": variant,
        "settle_s": settle_s,
        "seconds": args.seconds,
        "rows": rows,
        "wrong": wrong,
    }
    print(f"{props.name} (nvidia-smi --id={gpu}): " + ", ".join(f"{k} {v}" for k, v in limits.items()))
    head = ("shape", "impl", "us", "TFLOP/s", "SM MHz", "W", "TF/GHz")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (16, 16, 9, 8, 7, 6, 7), strict=True)), " clock-event reasons")
    for shape in shapes:
        inp = make_inputs(shape, device, ctx.fp8_dtype, torch.Generator().manual_seed(0))
        op_ref = reference(inp)
        op_terms = magnitude(inp) if allowance else None
        for name in args.impls.split(","):
            impl = BY_NAME[name]
            why = impl.available(ctx)
            if why is not None or "natural" not in impl.layouts:
                print(f"{shape.id:>16} {name:>16}  skipped: {why or 'no natural layout'}")
                continue
            call, own_ref = impl.build(ctx, inp, "natural")
            ref, terms = own_ref() if own_ref is not None else (op_ref, op_terms)
            run_batch, launch, last_output = batched(call, torch)
            with sampler:
                us, calls, t0, t1 = sustained(run_batch, torch, settle_s, args.seconds)
            verdict = check(last_output(), ref, terms, allowance)
            del ref, terms
            if not verdict.ok:  # a wrong result's time and power mean nothing: no row
                wrong.append({"shape": shape.id, "impl": name, "peer": impl.peer, "reason": verdict.message})
                print(f"{shape.id:>16} {name:>16}  wrong result: {verdict.message}", flush=True)
                _write(args.out, doc)
                continue
            stats = summarize(parse_samples(sampler.window(t0, t1)))
            if not stats["samples"]:
                print(f"  no nvidia-smi samples: {sampler.errors.strip()[:300] or 'none printed'}", file=sys.stderr)
            tflops = shape.flops / us / 1e6
            per_ghz = tflops / (stats["sm_mhz"] / 1e3) if stats["sm_mhz"] else None
            rows.append(
                {
                    "shape": shape.id,
                    "impl": name,
                    "us": us,
                    "calls": calls,
                    "launch": launch,
                    "tflops": tflops,
                    "tflops_per_ghz": per_ghz,
                    **stats,
                }
            )
            mhz = f"{stats['sm_mhz']:7.0f}" if stats["sm_mhz"] else "      -"
            watts = f"{stats['power_w']:6.0f}" if stats["power_w"] else "     -"
            ratio = f"{per_ghz:7.1f}" if per_ghz else "      -"
            line = f"{shape.id:>16} {name:>16} {us:9.1f} {tflops:8.0f} {mhz} {watts} {ratio}"
            print(line, "", ",".join(stats["reasons"]) + ("" if launch == "graph" else " (eager launches)"), flush=True)
            _write(args.out, doc)  # after every row: a run stopped by a timeout keeps what it measured
        del inp, op_ref, op_terms
    if wrong:
        print(f"benchmarks.clocks: {len(wrong)} wrong result(s), left out of the table", file=sys.stderr)
    return 1 if any(not w["peer"] for w in wrong) else 0


def _write(out: Path | None, doc: dict) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
