"""Two results files of one platform side by side: how our time moved per shape and layout, corrected for
the machine's drift by how a reference peer's time moved between the same two runs.

    python -m benchmarks.compare OLD.json NEW.json [--ours gemm] [--ref torch_blockwise] [--tolerance 0.03]
                                 [--json OUT.json] [--fail-on-slowdown]

Per shape and layout: change = new time / old time of ours; ref change = the same for the reference peer
(looked up on the natural layout when it has no record on this one); corrected = change / ref change. The
GPU's speed drifts between runs (clocks under a power cap, the neighbours of a shared host): torch's blockwise
path took 159 and 179 us at 6144x7168x2048 in two H200 runs of the same day (runs 36 and 52).
A shape is flagged `slower` (or `faster`) when its corrected change is beyond 1 +- the larger of the
tolerance and the noise, the widest spread of round medians among the four records involved.

Exit status: 0; 1 with --fail-on-slowdown when a shape is flagged slower; 2 when a file cannot be read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks import report

Key = tuple[int, int, int, str]


def _times(doc: dict, impl: str) -> dict[Key, dict]:
    return {(r["m"], r["n"], r["k"], r["layout"]): r for r in doc["records"] if r["impl"] == impl}


def _spread(rec: dict | None) -> float:
    """How far apart a record's round medians are (max / min - 1); 0 with fewer than two rounds."""
    rounds = [t for t in (rec or {}).get("round_us") or [] if t > 0]
    return max(rounds) / min(rounds) - 1 if len(rounds) > 1 else 0.0


def _ref_record(refs: dict[Key, dict], key: Key) -> dict | None:
    return refs.get(key) or refs.get((*key[:3], "natural"))


def compare(old: dict, new: dict, ours: str = "gemm", ref: str = "torch_blockwise", tolerance: float = 0.03) -> dict:
    """Rows for every shape and layout that both files time for `ours`, plus the keys found in only one."""
    if old["platform"] != new["platform"]:
        raise ValueError(f"the two files are from different platforms: {old['platform']!r} and {new['platform']!r}")
    old_ours, new_ours = _times(old, ours), _times(new, ours)
    old_ref, new_ref = _times(old, ref), _times(new, ref)
    rows = []
    for key in sorted(old_ours.keys() & new_ours.keys(), key=lambda k: (k[3], k[:3])):
        change = new_ours[key]["us"] / old_ours[key]["us"]
        ro, rn = _ref_record(old_ref, key), _ref_record(new_ref, key)
        ref_change = rn["us"] / ro["us"] if ro and rn else None
        corrected = change / ref_change if ref_change else change
        noise = max(tolerance, *(_spread(r) for r in (old_ours[key], new_ours[key], ro, rn)))
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
                "ref_change": None if ref_change is None else round(ref_change, 4),
                "corrected": round(corrected, 4),
                "noise": round(noise, 4),
                "verdict": verdict,
            }
        )
    only = sorted(old_ours.keys() ^ new_ours.keys())
    return {"ours": ours, "ref": ref, "tolerance": tolerance, "rows": rows, "unmatched": [list(k) for k in only]}


def table(result: dict) -> str:
    lines = [
        f"{result['ours']}: new time / old time per shape, corrected by {result['ref']}'s own change "
        f"(flagged beyond 1 +- max(tolerance {result['tolerance']:g}, the round medians' spread))"
    ]
    for layout in sorted({r["layout"] for r in result["rows"]}):
        rows = [r for r in result["rows"] if r["layout"] == layout]
        lines += [
            "",
            f"layout {layout}:",
            f"  {'M x N x K':<16}{'old us':>10}{'new us':>10}{'change':>8}{'ref':>8}"
            f"{'corrected':>11}{'noise':>7}  verdict",
        ]
        for r in rows:
            shape = f"{r['m']}x{r['n']}x{r['k']}"
            ref = "-" if r["ref_change"] is None else f"{r['ref_change']:.3f}"
            lines.append(
                f"  {shape:<16}{r['old_us']:>10.1f}{r['new_us']:>10.1f}{r['change']:>8.3f}{ref:>8}"
                f"{r['corrected']:>11.3f}{r['noise']:>7.3f}  {r['verdict']}"
            )
        gm_change = statistics.geometric_mean([r["change"] for r in rows])
        gm_corrected = statistics.geometric_mean([r["corrected"] for r in rows])
        lines.append(f"  {'geomean':<36}{gm_change:>8.3f}{'':>8}{gm_corrected:>11.3f}")
    if result["unmatched"]:
        lines += [
            "",
            "timed in one file only: " + ", ".join(f"{m}x{n}x{k} {lay}" for m, n, k, lay in result["unmatched"]),
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Our time per shape in two results files, corrected for drift.")
    p.add_argument("old", type=Path)
    p.add_argument("new", type=Path)
    p.add_argument("--ours", default="gemm", help="the implementation compared (default gemm)")
    p.add_argument("--ref", default="torch_blockwise", help="the peer whose own change corrects for drift")
    p.add_argument("--tolerance", type=float, default=0.03, help="smallest corrected change flagged (default 0.03)")
    p.add_argument("--json", type=Path, default=None, help="also write the rows here")
    p.add_argument("--fail-on-slowdown", action="store_true", help="exit 1 when a shape is flagged slower")
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
    return 1 if args.fail_on_slowdown and slower else 0


if __name__ == "__main__":
    sys.exit(main())
