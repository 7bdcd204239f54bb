"""PNG of a results file: TFLOP/s per shape per implementation, one panel per layout.

    python -m benchmarks.plot benchmarks/results/h200/<variant>.json [--out plot.png]

matplotlib is optional (requirements/dev.txt has it; a bare device machine may not): `benchmarks.run`
then skips the plot with a message and this command re-plots from the JSON elsewhere.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from . import report


class PlotUnavailable(RuntimeError):
    pass


def plot(doc: dict, out: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise PlotUnavailable(
            f"matplotlib is not installed ({e}); the JSON has every number: "
            "re-plot elsewhere with `python -m benchmarks.plot <results.json>`"
        ) from e

    records = doc["records"]
    layouts = [lay for lay in ("seed", "natural") if any(r["layout"] == lay for r in records)]
    if not layouts:
        raise PlotUnavailable("nothing to plot: the results have no records")
    impls = [i for i in doc["impls"] if any(r["impl"] == i for r in records)]
    colors = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(doc["impls"])}
    shapes_all = sorted({(r["m"], r["n"], r["k"]) for r in records}, key=lambda s: (s[0], s[2], s[1]))
    width_in = max(8.0, 0.55 * len(shapes_all) * max(1, len(impls)) / 2.5)
    fig, axes = plt.subplots(len(layouts), 1, figsize=(width_in, 4.2 * len(layouts)), squeeze=False)
    values = [r["tflops"] for r in records if r["tflops"] > 0]
    log = bool(values) and max(values) / min(values) > 30
    # CPU-sized numbers read better in GFLOP/s
    scale, unit = (1e3, "GFLOP/s") if values and max(values) < 1.0 else (1.0, "TFLOP/s")
    for ax, layout in zip(axes[:, 0], layouts, strict=False):
        shapes = [s for s in shapes_all if any((r["m"], r["n"], r["k"], r["layout"]) == (*s, layout) for r in records)]
        here = [i for i in impls if any(r["impl"] == i and r["layout"] == layout for r in records)]
        bar = 0.8 / max(1, len(here))
        by_key = {(r["m"], r["n"], r["k"], r["impl"]): r for r in records if r["layout"] == layout}
        for j, impl in enumerate(here):
            xs, ys = [], []
            for i, s in enumerate(shapes):
                rec = by_key.get((*s, impl))
                if rec is not None:
                    xs.append(i - 0.4 + bar * (j + 0.5))
                    ys.append(rec["tflops"] * scale)
            ax.bar(xs, ys, width=bar, label=doc["impls"][impl].get("label", impl), color=colors[impl])
        if doc.get("sol"):
            peak = doc["sol"]["peak_tflops"] * scale
            ax.axhline(peak, color="black", lw=0.8, ls="--", label="FP8 peak (speed of light)")
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([f"{m}x{n}x{k}" for m, n, k in shapes], rotation=60, ha="right", fontsize=7)
        ax.set_ylabel(f"{unit} (2MNK / t)")
        if log:
            ax.set_yscale("log")
        ax.set_title(f"layout: {layout}", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    env = doc.get("env", {})
    device = env.get("gpu") or env.get("cpu") or doc["platform"]
    fig.suptitle(
        f"gemm FP8 block-scaled GEMM on {device} ({doc['platform']}), variant {doc.get('variant')}, {doc['date'][:10]}",
        fontsize=10,
    )
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.plot", description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path, help="a results JSON written by benchmarks.run")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: beside the JSON, .png)")
    args = parser.parse_args(argv)
    try:
        doc = report.read(args.results)
        out = plot(doc, args.out or args.results.with_suffix(".png"))
    except (report.SchemaError, PlotUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
