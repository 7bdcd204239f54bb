"""Clock and power under sustained load: is a shape's time set by the kernel or by the GPU's power cap?

    python -m benchmarks.clocks [--shapes MxNxK,...|challenge] [--impls gemm,torch_blockwise,fp8_pertensor]
                                [--seconds 2] [--build-dir build] [--out FILE.json]

For each shape and implementation the call runs back to back (replayed from a CUDA graph of 20 calls, so
that host launch costs do not idle the GPU; no cache flush: the steady state of a layer run over and
over, L2 warm where the operands fit) for --seconds while `nvidia-smi` samples the SM clock, the board power
and the active clock-event (throttle) reasons every 50 ms. The table gives time per call, TFLOP/s, the
median SM clock and power, and TFLOP/s per GHz of SM clock, which separates the kernel's work per clock
from the clock itself: two kernels at the same TFLOP/s and the same clock-limited power are bound by the
cap, not by each other. NVIDIA only; elsewhere it exits 2 with the reason (rocm-smi has other fields).
"""

from __future__ import annotations

import argparse
import collections
import json
import shutil
import statistics
import subprocess
import sys
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
SAMPLE_MS = 50
SETTLE_S = 0.3  # samples from the first 0.3 s are dropped: the clock is still moving to its loaded value


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


def _smi_query(gpu: str, fields: str, extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    cmd = ["nvidia-smi", f"--id={gpu}", f"--query-gpu={fields}", "--format=csv,noheader,nounits", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)


def smi_id(props, index: int) -> str:
    """nvidia-smi's --id for a torch device: its PCI address (domain:bus:device.function), which does not
    depend on CUDA_VISIBLE_DEVICES, where torch reports the three numbers; else torch's index, which is
    nvidia-smi's only when every GPU is visible in PCI order."""
    parts = [getattr(props, name, None) for name in ("pci_domain_id", "pci_bus_id", "pci_device_id")]
    if all(isinstance(p, int) for p in parts):
        domain, bus, dev = parts
        return f"{domain:08X}:{bus:02X}:{dev:02X}.0"
    return str(index)


def reason_field(gpu: str) -> str:
    for name in REASON_FIELDS:
        if _smi_query(gpu, name).returncode == 0:
            return name
    raise UsageError("nvidia-smi reads neither clock-event field " + " nor ".join(REASON_FIELDS))


class Sampler:
    """nvidia-smi in loop mode (-lms) for the duration of a `with` block."""

    def __init__(self, gpu: str, field: str) -> None:
        self.cmd = [
            "nvidia-smi",
            f"--id={gpu}",
            f"--query-gpu=clocks.sm,power.draw,{field}",
            "--format=csv,noheader,nounits",
            f"-lms={SAMPLE_MS}",
        ]
        self.text = ""

    def __enter__(self) -> Sampler:
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        # Each line is one sample, SAMPLE_MS apart: drop the settling ones.
        lines = out.splitlines()
        self.text = "\n".join(lines[int(SETTLE_S * 1000 / SAMPLE_MS) :])


BATCH = 20  # calls per graph replay (or per eager batch)


def batched(call, torch_mod):
    """(a function running BATCH calls, how they are launched). A CUDA graph of BATCH calls, so that the
    host's launch cost (tens of us for a Python-level peer such as torch's blockwise path) never leaves the
    GPU idle between short calls; where capture fails, the calls one by one ("eager": a call shorter than
    its launch is then host-bound, and the table shows it by its low power)."""
    for _ in range(3):  # warm-up outside the capture (cuBLAS picks its kernel, allocators settle)
        call()
    torch_mod.cuda.synchronize()
    try:
        graph = torch_mod.cuda.CUDAGraph()
        with torch_mod.cuda.graph(graph):
            for _ in range(BATCH):
                call()
        graph.replay()
        torch_mod.cuda.synchronize()
        return graph.replay, "graph"
    except Exception:  # noqa: BLE001 (any capture failure: fall back to plain launches)
        torch_mod.cuda.synchronize()

        def eager() -> None:
            for _ in range(BATCH):
                call()

        return eager, "eager"


def sustained(run_batch, torch_mod, seconds: float) -> tuple[float, int]:
    """Runs `run_batch` back to back for about `seconds`; (device us per call, calls). The host stays at
    most two batches ahead (it waits on the event of the batch before last), so it never starves the GPU
    of queued work, and the run ends within a batch of the deadline."""
    start, end = torch_mod.cuda.Event(enable_timing=True), torch_mod.cuda.Event(enable_timing=True)
    batches: collections.deque = collections.deque()
    calls, t0 = 0, time.monotonic()
    start.record()
    while time.monotonic() - t0 < seconds:
        run_batch()
        calls += BATCH
        batches.append(torch_mod.cuda.Event())
        batches[-1].record()
        if len(batches) > 2:
            batches.popleft().synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / calls, calls


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="1024x1536x7168,1024x4608x7168,6144x4608x7168,8192x8192x8192")
    ap.add_argument("--impls", default="gemm,torch_blockwise,fp8_pertensor")
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--build-dir", type=Path, default=Path("build"))
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = ap.parse_args(argv)
    if args.seconds <= SETTLE_S:
        ap.error(f"--seconds must exceed the {SETTLE_S} s settling time")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except UsageError as e:
        print(f"benchmarks.clocks: {e}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    import torch

    from .impls import BY_NAME, Context
    from .problem import make_inputs, parse_shapes
    from .run import load_kernel

    if not torch.cuda.is_available() or torch.version.cuda is None:
        raise UsageError("needs an NVIDIA GPU (torch.cuda with CUDA)")
    if shutil.which("nvidia-smi") is None:
        raise UsageError("needs nvidia-smi on PATH")
    try:
        shapes = parse_shapes(args.shapes)
    except ValueError as e:
        raise UsageError(str(e)) from e
    unknown = [n for n in args.impls.split(",") if n not in BY_NAME]
    if unknown:
        raise UsageError(f"--impls: unknown {unknown}; known: {sorted(BY_NAME)}")
    kernel, variant, _ = load_kernel(args.build_dir) if "gemm" in args.impls.split(",") else (None, None, None)
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    gpu = smi_id(props, torch.cuda.current_device())
    if _smi_query(gpu, "name").returncode != 0:  # an address this nvidia-smi does not take: the index
        gpu = str(torch.cuda.current_device())
    field = reason_field(gpu)
    limits = _smi_query(gpu, "clocks.max.sm,power.limit,name").stdout.strip()
    ctx = Context(device, "cuda", torch.float8_e4m3fn, kernel)
    rows = []
    print(f"{props.name}; max SM clock, power limit: {limits}")
    head = ("shape", "impl", "us", "TFLOP/s", "SM MHz", "W", "TF/GHz")
    print(" ".join(f"{h:>{w}}" for h, w in zip(head, (16, 16, 9, 8, 7, 6, 7), strict=True)), " clock-event reasons")
    for shape in shapes:
        inp = make_inputs(shape, device, ctx.fp8_dtype, torch.Generator().manual_seed(0))
        for name in args.impls.split(","):
            impl = BY_NAME[name]
            why = impl.available(ctx)
            if why is not None or "natural" not in impl.layouts:
                print(f"{shape.id:>16} {name:>16}  skipped: {why or 'no natural layout'}")
                continue
            call, _ = impl.build(ctx, inp, "natural")
            run_batch, launch = batched(call, torch)
            with Sampler(gpu, field) as sampler:
                us, calls = sustained(run_batch, torch, args.seconds)
            stats = summarize(parse_samples(sampler.text))
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
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        doc = {"gpu": props.name, "limits": limits, "variant": variant, "seconds": args.seconds, "rows": rows}
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
