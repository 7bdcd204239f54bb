"""The results file (schema `gemm-bench/1`, documented in benchmarks/README.md), ratios and the terminal table."""

from __future__ import annotations

import json
import math
from pathlib import Path

SCHEMA = "gemm-bench/1"
RATIO_PREFIX = "ratio_vs_"

# Keys every record has, with their types (None allowed where marked).
RECORD_KEYS: dict[str, tuple[type, ...]] = {
    "m": (int,),
    "n": (int,),
    "k": (int,),
    "layout": (str,),
    "impl": (str,),
    "us": (float, int),
    "us_min": (float, int),
    "us_max": (float, int),
    "reps": (int,),
    "tflops": (float, int),
    "pct_sol": (float, int, type(None)),
    "check": (str,),
    "outside_tol": (int,),
    "max_abs_err": (float, int),
    "rel_err": (float, int),
}
TOP_KEYS: dict[str, tuple[type, ...]] = {
    "schema": (str,),
    "platform": (str,),
    "variant": (str, type(None)),
    "date": (str,),
    "env": (dict,),
    "config": (dict,),
    "sol": (dict, type(None)),
    "impls": (dict,),
    "records": (list,),
    "refused": (list,),
}


class SchemaError(ValueError):
    pass


def validate(doc: object) -> dict:
    """Raise SchemaError naming the first thing wrong with a results document; return it otherwise."""
    if not isinstance(doc, dict):
        raise SchemaError(f"results must be a JSON object, got {type(doc).__name__}")
    for key, types in TOP_KEYS.items():
        if key not in doc:
            raise SchemaError(f"results: missing key {key!r}")
        if not isinstance(doc[key], types):
            raise SchemaError(f"results[{key!r}] must be {'/'.join(t.__name__ for t in types)}")
    if doc["schema"] != SCHEMA:
        raise SchemaError(f"results['schema'] is {doc['schema']!r}, this code reads {SCHEMA!r}")
    if doc["sol"] is not None:
        for key in ("peak_tflops", "bandwidth_tbps", "source"):
            if key not in doc["sol"]:
                raise SchemaError(f"results['sol']: missing key {key!r}")
    for i, rec in enumerate(doc["records"]):
        if not isinstance(rec, dict):
            raise SchemaError(f"records[{i}] must be an object")
        for key, types in RECORD_KEYS.items():
            if key not in rec:
                raise SchemaError(f"records[{i}]: missing key {key!r}")
            if not isinstance(rec[key], types) or isinstance(rec[key], bool):
                raise SchemaError(f"records[{i}][{key!r}] must be {'/'.join(t.__name__ for t in types)}")
        for key, value in rec.items():
            if key.startswith(RATIO_PREFIX) and not isinstance(value, (float, int)):
                raise SchemaError(f"records[{i}][{key!r}] must be a number")
        if rec["impl"] not in doc["impls"]:
            raise SchemaError(f"records[{i}]: impl {rec['impl']!r} is not described in results['impls']")
    for i, ref in enumerate(doc["refused"]):
        for key in ("m", "n", "k", "layout", "impl", "reason"):
            if key not in ref:
                raise SchemaError(f"refused[{i}]: missing key {key!r}")
    return doc


def write(doc: dict, path: Path) -> Path:
    validate(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    return path


def read(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise SchemaError(f"cannot read results file {path}: {e}") from e
    return validate(doc)


def add_ratios(records: list[dict], natural_only: set[str]) -> None:
    """ratio_vs_<peer> = t_peer / t_this (> 1: this is faster), peer timed on the same shape and layout;
    peers that run only on the natural layout (`natural_only`) are looked up there for seed records."""
    times = {(r["m"], r["n"], r["k"], r["layout"], r["impl"]): r["us"] for r in records}
    impls = sorted({r["impl"] for r in records})
    for r in records:
        for peer in impls:
            if peer == r["impl"]:
                continue
            t = times.get((r["m"], r["n"], r["k"], r["layout"], peer))
            if t is None and peer in natural_only:
                t = times.get((r["m"], r["n"], r["k"], "natural", peer))
            if t is not None and r["us"] > 0:
                r[RATIO_PREFIX + peer] = round(t / r["us"], 4)


def _geomean(vals: list[float]) -> float:
    vals = [v for v in vals if v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else float("nan")


def _fmt_us(us: float) -> str:
    return f"{us:,.1f}" if us < 1e4 else f"{us:,.0f}"


def _fmt_tf(tf: float) -> str:
    return f"{tf:.1f}" if tf >= 10 else f"{tf:.3g}"


def table(doc: dict, ours: str = "gemm") -> str:
    """One block per layout: a row per shape; our time, TFLOP/s and % of speed of light, then each peer's
    time with (peer time / our time) beside it: above 1x we are faster."""
    lines: list[str] = []
    config = doc.get("config", {})
    lines.append(
        f"gemm on {doc['platform']} ({doc['env'].get('gpu') or doc['env'].get('cpu')}), variant {doc['variant']}, "
        f"shapes {config.get('shapes')}; (x) = peer time / {ours} time: above 1x {ours} is faster"
    )
    if config.get("note"):
        lines.append(f"note: {config['note']}")
    if doc.get("sol"):
        lines.append(f"%SOL against {doc['sol']['peak_tflops']} TFLOP/s, {doc['sol']['bandwidth_tbps']} TB/s")
    lines.append("")
    records = doc["records"]
    impls = doc["impls"]
    by_key = {(r["m"], r["n"], r["k"], r["layout"], r["impl"]): r for r in records}
    layouts = [lay for lay in ("seed", "natural") if any(r["layout"] == lay for r in records)]
    for layout in layouts:
        shapes = sorted(
            {(r["m"], r["n"], r["k"]) for r in records if r["layout"] == layout}
            | {(r["m"], r["n"], r["k"]) for r in doc["refused"] if r["layout"] == layout},
            key=lambda s: (s[0], s[2], s[1]),
        )
        peers = [i for i in impls if i != ours and any(r["impl"] == i and r["layout"] == layout for r in records)]
        head = ["M x N x K", f"{ours} us", "TFLOP/s", "%SOL"] + [f"{p} us (x)" for p in peers]
        rows = [head]
        ratios: dict[str, list[float]] = {p: [] for p in peers}
        for m, n, k in shapes:
            mine = by_key.get((m, n, k, layout, ours))
            row = [f"{m}x{n}x{k}"]
            if mine:
                pct = mine["pct_sol"]
                row += [_fmt_us(mine["us"]), _fmt_tf(mine["tflops"]), "-" if pct is None else f"{pct:.1f}"]
            else:
                row += [
                    "refused"
                    if any(
                        (f["m"], f["n"], f["k"], f["layout"], f["impl"]) == (m, n, k, layout, ours)
                        for f in doc["refused"]
                    )
                    else "-",
                    "-",
                    "-",
                ]
            for p in peers:
                rec = by_key.get((m, n, k, layout, p))
                if rec is None:
                    row.append("-")
                    continue
                cell = _fmt_us(rec["us"])
                if mine:
                    ratio = rec["us"] / mine["us"]
                    ratios[p].append(ratio)
                    cell += f" ({ratio:.2f}x)"
                row.append(cell)
            rows.append(row)
        if any(ratios.values()):
            mine_recs = [by_key[(m, n, k, layout, ours)] for m, n, k in shapes if (m, n, k, layout, ours) in by_key]
            geo = [
                "geomean",
                _fmt_us(_geomean([r["us"] for r in mine_recs])),
                _fmt_tf(_geomean([r["tflops"] for r in mine_recs])),
                "",
            ]
            geo += [f"({_geomean(ratios[p]):.2f}x)" if ratios[p] else "" for p in peers]
            rows.append(geo)
        widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
        lines.append(f"layout {layout}:")
        for j, row in enumerate(rows):
            lines.append(
                "  "
                + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=False)))
            )
            if j == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
        lines.append("")
    widened = [r for r in records if r["check"] != "elementwise"]
    if widened:
        lines.append(
            "accepted with the accumulation allowance (cuda: every element within the contract's tolerance "
            "plus 2^-10 x sum|terms|; a few near-zero outputs outside the plain rule, as Hopper's tensor cores give):"
        )
        for impl in dict.fromkeys(r["impl"] for r in widened):
            mine = [r for r in widened if r["impl"] == impl]
            worst = max(r["outside_tol"] / (r["m"] * r["n"]) for r in mine)
            lines.append(
                f"  {impl}: {len(mine)} of {sum(1 for r in records if r['impl'] == impl)} records; "
                f"max rel err {max(r['rel_err'] for r in mine):.3g}, at most {worst:.2%} of elements outside"
            )
        lines.append("")
    rounds = [(r, r.get("round_us") or []) for r in records]
    unsteady = [r for r, us in rounds if len(us) > 1 and max(us) > 1.1 * min(us)]
    if unsteady:
        lines.append("unsteady (round medians differ by more than 10%: read these numbers with care):")
        for r in unsteady:
            lines.append(f"  {r['m']}x{r['n']}x{r['k']} {r['layout']} {r['impl']}: {r['round_us']}")
        lines.append("")
    if doc["refused"]:
        lines.append("refused (no number from a wrong or failing result):")
        for f in doc["refused"]:
            lines.append(f"  {f['m']}x{f['n']}x{f['k']} {f['layout']} {f['impl']}: {f['reason']}")
        lines.append("")
    unavailable = {n: i for n, i in impls.items() if i.get("status") == "unavailable"}
    if unavailable:
        lines.append("not run on this platform: " + "; ".join(f"{n} ({i['reason']})" for n, i in unavailable.items()))
    return "\n".join(lines)
