"""benchmarks.compare on synthetic results files: our change corrected by the reference peer's, the noise
floor from the round medians, files that cannot be compared."""

from __future__ import annotations

import json

import pytest

from benchmarks import compare, report

Times = dict[tuple[int, str, str], "float | tuple[float, list[float]]"]


def results_doc(times: Times, platform: str = "h200") -> dict:
    """A valid results file: one record per (m, layout, impl) -> us, or (us, round medians); n=256, k=512."""
    records = []
    for (m, layout, impl), t in times.items():
        us, rounds = t if isinstance(t, tuple) else (t, [t, t, t])
        records.append(
            {
                "m": m,
                "n": 256,
                "k": 512,
                "layout": layout,
                "impl": impl,
                "us": us,
                "us_min": us,
                "us_max": us,
                "reps": 20,
                "tflops": 1.0,
                "pct_sol": None,
                "check": "elementwise",
                "outside_tol": 0,
                "max_abs_err": 0.0,
                "rel_err": 0.0,
                "round_us": rounds,
            }  # fmt: skip
        )
    doc = {"schema": report.SCHEMA, "platform": platform, "variant": "v", "date": "2026-12-03T00:00:00Z", "env": {},
           "config": {}, "sol": None, "impls": {impl: {} for (_, _, impl) in times}, "records": records,
           "refused": []}  # fmt: skip
    return report.validate(doc)


def ours_and_torch(ours: float, torch: float, m: int = 64, platform: str = "h200") -> dict:
    return results_doc({(m, "natural", "gemm"): ours, (m, "natural", "torch_blockwise"): torch}, platform)


def _rows(result: dict) -> dict[tuple[int, str], dict]:
    return {(r["m"], r["layout"]): r for r in result["rows"]}


def test_a_slowdown_of_ours_alone_is_flagged_and_drift_is_not():
    # 64: ours 10 % slower, torch unchanged; 128: both 10 % slower (the machine)
    old = results_doc({(64, "natural", "gemm"): 10.0, (64, "natural", "torch_blockwise"): 20.0,
                       (128, "natural", "gemm"): 10.0, (128, "natural", "torch_blockwise"): 20.0})  # fmt: skip
    new = results_doc({(64, "natural", "gemm"): 11.0, (64, "natural", "torch_blockwise"): 20.0,
                       (128, "natural", "gemm"): 11.0, (128, "natural", "torch_blockwise"): 22.0})  # fmt: skip
    rows = _rows(compare.compare(old, new))
    assert rows[64, "natural"]["verdict"] == "slower" and rows[64, "natural"]["corrected"] == pytest.approx(1.1)
    assert rows[128, "natural"]["verdict"] == "" and rows[128, "natural"]["corrected"] == pytest.approx(1.0)
    assert rows[128, "natural"]["change"] == pytest.approx(1.1)


def test_a_change_within_the_round_medians_spread_is_noise():
    old = results_doc({(64, "natural", "gemm"): (10.0, [9.0, 10.0, 11.0]), (64, "natural", "torch_blockwise"): 20.0})
    row = _rows(compare.compare(old, ours_and_torch(11.0, 20.0)))[64, "natural"]
    assert row["noise"] == pytest.approx(11 / 9 - 1, abs=1e-4) and row["verdict"] == ""


def test_seed_records_take_the_reference_from_the_natural_layout_and_faster_is_reported():
    old = results_doc({(64, "seed", "gemm"): 10.0, (64, "natural", "torch_blockwise"): 20.0})
    new = results_doc({(64, "seed", "gemm"): 8.0, (64, "natural", "torch_blockwise"): 20.0})
    row = _rows(compare.compare(old, new))[64, "seed"]
    assert row["ref_change"] == pytest.approx(1.0) and row["verdict"] == "faster"


def test_without_the_reference_the_plain_change_is_used_and_unmatched_shapes_are_listed():
    old = results_doc({(64, "natural", "gemm"): 10.0, (128, "natural", "gemm"): 5.0})
    new = results_doc({(64, "natural", "gemm"): 10.5, (256, "natural", "gemm"): 5.0})
    result = compare.compare(old, new)
    assert [(r["m"], r["ref_change"], r["corrected"]) for r in result["rows"]] == [(64, None, 1.05)]
    assert result["unmatched"] == [[128, 256, 512, "natural"], [256, 256, 512, "natural"]]
    assert "timed in one file only: 128x256x512 natural, 256x256x512 natural" in compare.table(result)


def test_cli_exit_status_table_and_json(tmp_path, capsys):
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (ours_and_torch(10.0, 20.0), ours_and_torch(12.0, 20.0)), strict=True):
        path.write_text(json.dumps(doc))
    args = [str(p) for p in paths]
    assert compare.main(args) == 0
    assert "64x256x512" in capsys.readouterr().out
    out = tmp_path / "cmp.json"
    assert compare.main([*args, "--fail-on-slowdown", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["rows"][0]["verdict"] == "slower"


def test_unreadable_or_mismatched_files_are_refused_with_a_reason(tmp_path, capsys):
    good, cpu, bad = tmp_path / "good.json", tmp_path / "cpu.json", tmp_path / "bad.json"
    good.write_text(json.dumps(ours_and_torch(10.0, 20.0)))
    cpu.write_text(json.dumps(ours_and_torch(10.0, 20.0, platform="cpu")))
    bad.write_text("{not json")
    assert compare.main([str(good), str(bad)]) == 2
    assert "cannot read results file" in capsys.readouterr().err
    assert compare.main([str(good), str(cpu)]) == 2
    assert "different platforms" in capsys.readouterr().err
