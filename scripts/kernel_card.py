"""The kernel card (README.md on the Hub repository's `main` branch).

`render_card` is a pure function of its inputs (no dates, no host names), so re-rendering an
unchanged release gives the same bytes and the publisher makes no README commit.
Benchmark results are read from `benchmarks/results/<run>/*.json` when present (written by the
benchmark harness); the reader is tolerant: a JSON file may hold one record, a list of records, or
an object with a `results` list whose entries inherit the object's scalar fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# Preferred benchmark columns, in order; other scalar keys follow (up to MAX_BENCH_COLUMNS).
_BENCH_PREFERRED = (
    "run",
    "platform",
    "variant",
    "device",
    "backend",
    "layout",
    "impl",
    "m",
    "n",
    "k",
    "M",
    "N",
    "K",
    "time_us",
    "us",
    "ms",
    "tflops",
    "TFLOPS",
    "pct_sol",
    "speedup",
    "baseline",
)
MAX_BENCH_COLUMNS = 12
OURS = "gemm"  # the impl name of this kernel in benchmark records
MAX_BENCH_ROWS = 60


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.4g}" if abs(value) >= 1 else f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def load_benchmarks(results_dir: Path) -> list[dict[str, Any]]:
    """Rows (flat dicts of scalars) from results_dir/*/*.json; [] when absent or unreadable."""
    rows: list[dict[str, Any]] = []
    if not results_dir.is_dir():
        return rows
    for path in sorted(results_dir.glob("*/*.json")):
        if path.parent.name == "tmp":  # scratch output (git-ignored), not results
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        run = path.parent.name
        if isinstance(data, dict) and str(data.get("schema", "")).startswith("gemm-bench/"):
            rows += _gemm_bench_rows(data)
            continue
        if isinstance(data, dict) and isinstance(data.get("results"), list):
            common = {k: v for k, v in data.items() if _is_scalar(v)}
            records = [{**common, **r} for r in data["results"] if isinstance(r, dict)]
        elif isinstance(data, list):
            records = [r for r in data if isinstance(r, dict)]
        elif isinstance(data, dict):
            records = [data]
        else:
            records = []
        for record in records:
            flat = {k: v for k, v in record.items() if _is_scalar(v)}
            if flat:
                rows.append({"run": run, **flat})
    return rows


def _gemm_bench_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """benchmarks/ results (schema gemm-bench/1): our impl's records, with the ratio_vs_<peer> columns
    (peer time / our time: above 1 we are faster)."""
    records = [r for r in doc.get("records") or [] if isinstance(r, dict)]
    ours = [r for r in records if r.get("impl") == OURS] or records
    rows = []
    for r in ours:
        row = {
            "platform": doc.get("platform"),
            "layout": r.get("layout"),
            "impl": r.get("impl"),
            "m": r.get("m"),
            "n": r.get("n"),
            "k": r.get("k"),
            "us": r.get("us"),
            "tflops": r.get("tflops"),
            "pct_sol": r.get("pct_sol"),
        }
        row.update({k: v for k, v in sorted(r.items()) if k.startswith("ratio_vs_") and _is_scalar(v)})
        rows.append(row)
    return rows


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _bench_section(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No benchmark results were published with this release."
    note = ""
    if any(k.startswith("ratio_vs_") for row in rows for k in row):
        note = "\n\n`speedup vs X` is X's time divided by ours on the same shape and layout (above 1: we are faster)."
    keys: list[str] = []
    for row in rows:
        for k in row:
            if k not in keys:
                keys.append(k)
    ordered = [k for k in _BENCH_PREFERRED if k in keys] + [k for k in keys if k not in _BENCH_PREFERRED]
    columns = ordered[:MAX_BENCH_COLUMNS]
    shown = rows[:MAX_BENCH_ROWS]
    text = _table([_label(c) for c in columns], [[row.get(c) for c in columns] for row in shown])
    if len(rows) > len(shown):
        text += f"\n\n({len(rows) - len(shown)} more rows in `benchmarks/results/`.)"
    return text + note


_LABELS = {"us": "time (us)", "tflops": "TFLOP/s", "pct_sol": "% of peak", "m": "M", "n": "N", "k": "K"}


def _label(key: str) -> str:
    if key.startswith("ratio_vs_"):
        return f"speedup vs {key[len('ratio_vs_') :]}"
    return _LABELS.get(key, key)


def _variant_row(name: str, meta: dict[str, Any]) -> list[Any]:
    backend = meta.get("backend") or {}
    build = meta.get("build") or {}
    checks = meta.get("checks") or {}
    kernel = (meta.get("provenance") or {}).get("kernel") or {}
    image = build.get("image") or {}
    passed = [k for k, v in sorted(checks.items()) if isinstance(v, dict) and v.get("ok") is True]
    failed = [k for k, v in sorted(checks.items()) if isinstance(v, dict) and v.get("ok") is False]
    checks_text = ", ".join(passed) + (f" (FAILED: {', '.join(failed)})" if failed else "")
    abi = (checks.get("abi") or {}).get("manylinux", "")
    return [
        f"`{name}`",
        backend.get("type", ""),
        ", ".join(backend.get("archs") or []),
        build.get("torch", ""),
        build.get("compiler", ""),
        abi,
        checks_text,
        (kernel.get("commit") or "")[:12],
        (image.get("digest") or "")[:19] if isinstance(image, dict) else "",
    ]


def render_card(
    repo_id: str,
    version: int,
    variants: dict[str, dict[str, Any]],
    bench_rows: list[dict[str, Any]] | None = None,
    license_id: str | None = None,
) -> str:
    """Markdown for README.md. `variants` maps a variant name to its metadata.json contents."""
    license_id = license_id or next((m.get("license") for m in variants.values() if m.get("license")), "apache-2.0")
    variant_rows = [_variant_row(name, variants[name]) for name in sorted(variants)]
    variant_table = (
        _table(
            [
                "variant",
                "backend",
                "archs",
                "torch",
                "compiler",
                "ABI",
                "checks passed",
                "source commit",
                "builder image",
            ],
            variant_rows,
        )
        if variant_rows
        else "No variants are published yet."
    )
    return f"""---
license: {license_id.lower()}
tags:
- kernels
- fp8
- gemm
---

# gemm: FP8 block-scaled GEMM

An FP8 GEMM with per-block scaling (blocks of 128 along K, DeepSeek-V3 style) for AMD Instinct
MI300X (gfx942), with Hopper (sm_90a) and CPU variants, loadable with the Hugging Face
[`kernels`](https://github.com/huggingface/kernels) library. A variant is published only after the
ABI check (manylinux_2_28, Python limited API 3.9), a loader check and a smoke call (the table below
lists the checks each one passed), and each variant's `metadata.json` lists the sha256 of every
file (`digest`), checked again after upload.

## Usage

On MI300X use `kernels` 0.19.1 or newer: older releases miss some of the ROCm variants (0.17 names
the system's ROCm after `torch.version.hip`, 0.18.3 misreads the name of a ROCm release whose minor
has two digits).
Each variant's `metadata.json` gives its `kernels-minver` and, under `checks.loaders`, the releases it
was loaded with.

```python
import torch
from kernels import get_kernel

gemm = get_kernel("{repo_id}", version={version})
# kernels loads only from publishers the Hub marks as trusted; for any other, opt in for this repository:
# get_kernel("{repo_id}", version={version}, trust_remote_code=["{repo_id}"])

# Natural layout (what nn.Linear-style model code holds):
# x (M, K) fp8, w (N, K) fp8, x_scale (M, K/128) f32, w_scale (ceil(N/128), K/128) f32 -> out (M, N) bf16
out = gemm.gemm_natural(x, w, x_scale, w_scale)

# Competition ("seed") layout: a (K, M), b (K, N), a_scale (K/128, M), b_scale (K/128, ceil(N/128)) -> c (M, N) bf16
c = gemm.gemm(a, b, a_scale, b_scale)

# From bf16: quantize a weight in 128x128 blocks once, then an FP8 nn.Linear (activations quantized per
# row and 128 elements of K, one kernel launch on a GPU): (..., K) -> (..., N) bf16
w_fp8, w_scale = gemm.quantize_weight(weight)
y = gemm.linear(hidden, w_fp8, w_scale, bias)
```

## The op

For every m < M and n < N, with blocks of 128 along K:

    C[m, n] = sum over kb < K/128 of  a_scale[kb, m] * b_scale[kb, n // 128] * sum_{{k in block kb}} A[m, k] * B[n, k]

accumulated in fp32 and rounded once to bf16.

- K must be a positive multiple of 128; M and N are any sizes (N need not be a multiple of 128; M or N of
  0 gives an empty result).
- FP8 format: `float8_e4m3fnuz` on MI300X, `float8_e4m3fn` on Hopper; the CPU variant accepts both.
  `a`/`b` (or `x`/`w`) share one dtype; scales are float32 and may be negative.
- All tensors are contiguous on one device; the output is written in place when given
  (`c=` / `out=`) and allocated otherwise. The op runs on the current stream and works under
  `torch.compile` (a fake kernel is registered).
- Bad input raises a Python error naming the argument; the process is never aborted.

## Published variants (version {version})

{variant_table}

## Benchmarks

{_bench_section(bench_rows or [])}

The benchmark scripts are on the `v{version}` branch under `benchmarks/`.
"""
