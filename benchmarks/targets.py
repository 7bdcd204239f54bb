"""Issue 4's speed targets, read from a results file of `benchmarks.run` (a benchmark, never a timed test).

    python -m benchmarks.targets benchmarks/results/h200/torch211-cxx11-cu130-x86_64-linux.json [--json F]

On the 18 challenge shapes:
  - natural layout: our time at least 1.0x the blockwise peer's on every shape, and 1.1x in geomean;
  - seed layout: our time within 1.15x of our own natural-layout time on every shape;
  - the largest shapes (the 4 with the most FLOPs in the file, 8192^3 included when it was run): at least
    85 % of the per-tensor FP8 peer's throughput.
Prints a row per shape and a line per target; exits 0 whether or not the targets are met (they are goals,
read by people), 2 when the file lacks a record a target needs.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import report, sol
from benchmarks.problem import BENCH_SHAPES

NATURAL_MIN = 1.0  # ours / peer speed on each shape (peer time / our time)
NATURAL_GEOMEAN = 1.1
SEED_MAX = 1.15  # seed time / natural time, ours
PERTENSOR_MIN = 0.85  # per-tensor time / our time on the largest shapes
LARGEST_COUNT = 4


class TargetsError(ValueError):
    pass


def evaluate(doc: dict, ours: str = "gemm", peer: str = "torch_blockwise", pertensor: str = "fp8_pertensor") -> dict:
    """Each target's numbers, shape by shape, from the records' median times."""
    times = {(r["m"], r["n"], r["k"], r["layout"], r["impl"]): float(r["us"]) for r in doc["records"]}

    def time(shape: tuple[int, int, int], layout: str, impl: str) -> float:
        t = times.get((*shape, layout, impl))
        if t is None or t <= 0:
            raise TargetsError(f"no {layout}-layout time of {impl!r} at {'x'.join(map(str, shape))} in the results")
        return t

    rows = []
    for shape in BENCH_SHAPES:
        natural, peer_us = time(shape, "natural", ours), time(shape, "natural", peer)
        seed_us = time(shape, "seed", ours)
        rows.append(
            {
                "shape": "x".join(map(str, shape)),
                "natural_us": natural,
                "peer_us": peer_us,
                "seed_us": seed_us,
                "vs_peer": peer_us / natural,
                "seed_over_natural": seed_us / natural,
            }
        )
    measured = {key[:3] for key in times if key[3] == "natural" and key[4] == ours}
    largest = sorted(measured, key=lambda s: s[0] * s[1] * s[2], reverse=True)[:LARGEST_COUNT]
    big = [
        {"shape": "x".join(map(str, s)), "of_pertensor": time(s, "natural", pertensor) / time(s, "natural", ours)}
        for s in largest
    ]
    vs_peer = [r["vs_peer"] for r in rows]
    seed = [r["seed_over_natural"] for r in rows]
    n = len(rows)
    summary = {
        "natural_at_least": {"target": NATURAL_MIN, "met": sum(v >= NATURAL_MIN for v in vs_peer), "of": n,
                             "min": min(vs_peer)},
        "natural_geomean": {"target": NATURAL_GEOMEAN, "value": sol.geomean(vs_peer)},
        "seed_within": {"target": SEED_MAX, "met": sum(v <= SEED_MAX for v in seed), "of": n,
                        "geomean": sol.geomean(seed)},
        "largest_of_pertensor": {"target": PERTENSOR_MIN,
                                 "met": sum(b["of_pertensor"] >= PERTENSOR_MIN for b in big), "of": len(big)},
    }  # fmt: skip
    s = summary
    s["all_met"] = (
        s["natural_at_least"]["met"] == n
        and s["natural_geomean"]["value"] >= NATURAL_GEOMEAN
        and s["seed_within"]["met"] == n
        and s["largest_of_pertensor"]["met"] == len(big)
    )
    return {
        "platform": doc.get("platform"),
        "variant": doc.get("variant"),
        "date": doc.get("date"),
        "peer": peer,
        "pertensor": pertensor,
        "shapes": rows,
        "largest": big,
        "summary": summary,
    }


def text(result: dict) -> str:
    lines = [f"{result['platform']} {result['variant']} ({result['date']}); peer {result['peer']}"]
    head = ("M x N x K", 15), ("natural us", 10), ("peer us", 8), ("peer/ours", 9), ("seed us", 8), ("seed/natural", 12)
    lines.append("  " + "  ".join(f"{name:>{width}}" for name, width in head))
    for r in result["shapes"]:
        lines.append(
            f"  {r['shape']:>15}  {r['natural_us']:>10.1f}  {r['peer_us']:>8.1f}  {r['vs_peer']:>9.3f}"
            f"  {r['seed_us']:>8.1f}  {r['seed_over_natural']:>12.3f}"
        )
    for b in result["largest"]:
        lines.append(f"  largest {b['shape']}: {b['of_pertensor']:.3f} of {result['pertensor']}'s throughput")
    s = result["summary"]
    na, ng, sw, lp = s["natural_at_least"], s["natural_geomean"], s["seed_within"], s["largest_of_pertensor"]
    lines.append(f"natural >= {na['target']}x peer: {na['met']}/{na['of']} (lowest {na['min']:.3f})")
    lines.append(f"natural geomean {ng['value']:.3f} (target >= {ng['target']})")
    lines.append(f"seed within {sw['target']}x natural: {sw['met']}/{sw['of']} (geomean {sw['geomean']:.3f})")
    lines.append(f"largest shapes >= {lp['target']} of per-tensor: {lp['met']}/{lp['of']}")
    lines.append("all targets met" if s["all_met"] else "targets not all met")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path, help="a results file of benchmarks.run")
    ap.add_argument("--peer", default="torch_blockwise", help="the blockwise peer (ROCm: aiter_blockscale)")
    ap.add_argument("--pertensor", default="fp8_pertensor", help="the per-tensor FP8 peer")
    ap.add_argument("--json", type=Path, help="also write the numbers here")
    args = ap.parse_args(argv)
    try:
        result = evaluate(report.read(args.results), peer=args.peer, pertensor=args.pertensor)
    except (report.SchemaError, TargetsError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(text(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
