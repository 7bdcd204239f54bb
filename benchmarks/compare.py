"""Two results files of one platform side by side: how our time moved per shape and layout, corrected for
the machine's drift between the two runs.

    python -m benchmarks.compare OLD.json NEW.json [--ours gemm] [--ref torch_blockwise] [--tolerance 0.03]
                                 [--json OUT.json] [--fail-on-slowdown]

Per shape and layout: change = new time / old time of ours. The GPU's speed drifts between runs (clocks
under a power cap, a shared host), so every change is divided by the drift: the geometric mean of the
reference peer's own changes (`--ref`) over every shape and layout both files time it on; without such
times, no correction. One number for the pair of files rather than the peer's change on each shape, as a
peer's time on one shape moves by more than the machine does: torch's blockwise path at 6144x7168x2048 took
159 us in H200 run 36 and 179 us in run 52, while its geomean over 19 shapes moved 1.6 %. A shape is
flagged `slower` or `faster` when its corrected change is beyond 1 +- the larger of the tolerance and its
noise, the wider spread of its round medians (max / min - 1) in the two runs. Records without a positive
time are left out.

Exit status: 0; 1 with --fail-on-slowdown when a shape is flagged slower; 2 when a file cannot be read or
the two cannot be compared (different platforms, a shape timed twice).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks import report

Key = tuple[int, int, int, str]


def _records(doc: dict, impl: str) -> dict[Key, dict]:
    """impl's records with a positive time, by (m, n, k, layout); a key timed twice is refused."""
    out: dict[Key, dict] = {}
    for r in doc["records"]:
        if r["impl"] != impl or not r["us"] > 0:
            continue
        key = (r["m"], r["n"], r["k"], r["layout"])
        if key in out:
            raise ValueError(f"{impl} is timed twice at {r['m']}x{r['n']}x{r['k']} {r['layout']}")
        out[key] = r
    return out


def _spread(rec: dict) -> float:
    """How far apart a record's round medians are (max / min - 1); 0 with fewer than two rounds."""
    rounds = [float(t) for t in rec.get("round_us") or [] if float(t) > 0]
    return max(rounds) / min(rounds) - 1 if len(rounds) > 1 else 0.0


def drift(old_ref: dict[Key, dict], new_ref: dict[Key, dict]) -> float | None:
    """Geomean of the reference's new / old time over the keys both files time it on; None without any."""
    common = old_ref.keys() & new_ref.keys()
    return statistics.geometric_mean([new_ref[k]["us"] / old_ref[k]["us"] for k in common]) if common else None


def compare(old: dict, new: dict, ours: str = "gemm", ref: str = "torch_blockwise", tolerance: float = 0.03) -> dict:
    """Rows for every shape and layout that both files time for `ours`, plus the keys timed in one only."""
    if old["platform"] != new["platform"]:
        raise ValueError(f"the two files are from different platforms: {old['platform']!r} and {new['platform']!r}")
    old_ours, new_ours = _records(old, ours), _records(new, ours)
    machine = drift(_records(old, ref), _records(new, ref))
    rows = []
    for key in sorted(old_ours.keys() & new_ours.keys(), key=lambda k: (k[3], k[:3])):
        change = new_ours[key]["us"] / old_ours[key]["us"]
        corrected = change / (machine or 1.0)
        noise = max(tolerance, _spread(old_ours[key]), _spread(new_ours[key]))
        verdict = "slower" if corrected > 1 + noise else "faster" if corrected < 1 - noise else ""
        m, n, k, layout = key
        rows.append(
            {
                "m": m,
                "n": n,
                "k": k,
                "layout": layout,
                "old_us": old_ours[key]["us"],
                "new_us": new_ours[key]["us"],
                "change": round(change, 4),
                "corrected": round(corrected, 4),
                "noise": round(noise, 4),
                "verdict": verdict,
            }
        )
    only = sorted(old_ours.keys() ^ new_ours.keys())
    # ours timed before and not now, on a shape the new run did take up (another implementation timed there,
    # or ours refused): a wrong result or a failure, not a narrower --shapes
    taken_up = {(r["m"], r["n"], r["k"], r["layout"]) for r in [*new["records"], *new.get("refused", [])]}
    lost = sorted((old_ours.keys() - new_ours.keys()) & taken_up)
    return {
        "ours": ours,
        "ref": ref,
        "drift": None if machine is None else round(machine, 4),
        "tolerance": tolerance,
        "rows": rows,
        "unmatched": [list(k) for k in only],
        "lost": [list(k) for k in lost],
    }


def table(result: dict) -> str:
    if result["drift"] is None:
        how = f"not corrected: no {result['ref']} times in both files"
    else:
        how = f"corrected by the drift {result['drift']:.3f} (geomean of {result['ref']}'s own new / old times)"
    lines = [
        f"{result['ours']}: new time / old time per shape, {how}; flagged beyond 1 +- max(tolerance "
        f"{result['tolerance']:g}, the round medians' spread)"
    ]
    for layout in sorted({r["layout"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["layout"] == layout]
        lines += ["", f"layout {layout}:"]
        lines.append(
            f"  {'M x N x K':<16}{'old us':>10}{'new us':>10}{'change':>8}{'corrected':>11}{'noise':>8}  verdict"
        )
        for r in rows:
            shape = f"{r['m']}x{r['n']}x{r['k']}"
            lines.append(
                f"  {shape:<16}{r['old_us']:>10.1f}{r['new_us']:>10.1f}{r['change']:>8.3f}{r['corrected']:>11.4f}"
                f"{r['noise']:>8.4f}  {r['verdict']}"
            )
        gm_change = statistics.geometric_mean([r["change"] for r in rows])
        gm_corrected = statistics.geometric_mean([r["corrected"] for r in rows])
        lines.append(f"  {'geomean':<36}{gm_change:>8.3f}{gm_corrected:>11.4f}")
    if result["unmatched"]:
        shapes = ", ".join(f"{m}x{n}x{k} {lay}" for m, n, k, lay in result["unmatched"])
        lines += ["", f"timed in one file only: {shapes}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Our time per shape in two results files, corrected for drift.")
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--ours", default="gemm", help="the implementation compared (default gemm)")
    p.add_argument("--ref", default="torch_blockwise", help="the peer whose own change corrects for drift")
    p.add_argument("--tolerance", type=float, default=0.03, help="smallest corrected change flagged (default 0.03)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument(
        "--fail-on-slowdown",
        action="store_true",
        help="exit 1 when a shape is flagged slower, or timed in OLD but not in NEW (refused or missing)",
    )
    args = p.parse_args(argv)
    try:
        result = compare(report.read(args.old), report.read(args.new), args.ours, args.ref, args.tolerance)
    except (report.SchemaError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    slower = [r for r in result["rows"] if r["verdict"] == "slower"]
    if args.fail_on_slowdown and result["lost"]:
        shapes = ", ".join(f"{m}x{n}x{k} {lay}" for m, n, k, lay in result["lost"])
        print(f"error: {args.ours} was timed in {args.old} but not in {args.new}: {shapes}", file=sys.stderr)
    return 1 if args.fail_on_slowdown and (slower or result["lost"]) else 0


if __name__ == "__main__":
    sys.exit(main())
