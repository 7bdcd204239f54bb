"""The kernel card (README.md on the Hub repository's `main` branch).

`render_card` is a pure function of its inputs (no dates, no host names), so re-rendering an
unchanged release gives the same bytes and the publisher makes no README commit.
Benchmark results: for each platform folder `benchmarks/results/<platform>/`, the committed results of
each variant, `<variant>.json` (schema gemm-bench/1, as the benchmark harness writes it and the GPU test
compares against). Other files there (a run's logs, sweeps, probes, dated copies) are working notes, not
the published numbers, and unreadable files are skipped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OURS = "gemm"  # the impl name of this kernel in benchmark records
MAX_BENCH_ROWS = 60  # per platform


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
    """Our records from each platform's committed per-variant results (module docstring); [] when none."""
    rows: list[dict[str, Any]] = []
    if not results_dir.is_dir():
        return rows
    for path in sorted(results_dir.glob("*/*.json")):
        if path.parent.name == "tmp":  # the harness's scratch output (git-ignored), not results
            continue
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("gemm-bench/"):
            continue
        if doc.get("variant") != path.stem:  # not the variant's committed file: a run's own copy or notes
            continue
        rows += _gemm_bench_rows(doc, platform=path.parent.name)
    return rows


def _gemm_bench_rows(doc: dict[str, Any], platform: str) -> list[dict[str, Any]]:
    """This kernel's records, with the ratio_vs_<peer> columns (peer time / our time: above 1 we are faster)."""
    # The harness lists its implementations and marks which are peers; ours (e.g. `linear`) are not compared.
    impls = doc.get("impls") if isinstance(doc.get("impls"), dict) else {}
    peers = {name for name, info in impls.items() if not isinstance(info, dict) or info.get("peer", True)}
    rows = []
    for r in doc.get("records") or []:
        if not isinstance(r, dict) or r.get("impl") != OURS:
            continue
        row = {
            "platform": platform,
            "variant": doc.get("variant"),
            "shape": f"{r.get('m')}x{r.get('n')}x{r.get('k')}",
            "layout": r.get("layout"),
            "us": r.get("us"),
            "tflops": r.get("tflops"),
        }
        row.update(
            {
                k: v
                for k, v in sorted(r.items())
                if k.startswith("ratio_vs_") and k[len("ratio_vs_") :] in peers and _is_scalar(v)
            }
        )
        rows.append(row)
    return rows


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _bench_section(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "No benchmark results were published with this release."
    parts = []
    for platform in sorted({r["platform"] for r in rows}):
        mine = [r for r in rows if r["platform"] == platform]
        ratios = sorted({k for r in mine for k in r if k.startswith("ratio_vs_")})
        columns = ["shape", "layout", "us", "tflops", *ratios]
        variants = ", ".join(f"`{v}`" for v in sorted({str(r["variant"]) for r in mine}))
        text = f"### {platform} ({variants})\n\n"
        text += _table([_label(c) for c in columns], [[r.get(c) for c in columns] for r in mine[:MAX_BENCH_ROWS]])
        if len(mine) > MAX_BENCH_ROWS:
            text += f"\n\n({len(mine) - MAX_BENCH_ROWS} more rows in `benchmarks/results/{platform}/`.)"
        parts.append(text)
    note = (
        "`speedup vs X` is X's time divided by ours on the same shape and layout (above 1: we are faster). "
        "A peer that takes only the natural layout (torch's blockwise FP8, per-tensor FP8 cuBLAS) is compared "
        "in seed rows with its natural-layout time: what a seed-layout caller gives up against operands "
        "already K-major; `torch_blockwise_t` is torch's path from the seed layout itself."
    )
    return "\n\n".join(parts) + "\n\n" + note


_LABELS = {"us": "time (us)", "tflops": "TFLOP/s", "shape": "M x N x K"}


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
