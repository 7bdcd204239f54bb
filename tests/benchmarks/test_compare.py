"""benchmarks.compare on synthetic results files: our change corrected by the reference peer's, the noise
floor from the round medians, files that cannot be compared."""

from __future__ import annotations

import json

import pytest

from benchmarks import compare, report


def _record(m: int, layout: str, impl: str, us: float, rounds: list[float] | None = None) -> dict:
    return {
        "m": m, "n": 256, "k": 512, "layout": layout, "impl": impl, "us": us, "us_min": us, "us_max": us,
        "reps": 20, "tflops": 1.0, "pct_sol": None, "check": "elementwise", "outside_tol": 0,
        "max_abs_err": 0.0, "rel_err": 0.0, "round_us": rounds or [us, us, us],
    }  # fmt: skip


def _doc(records: list[dict], platform: str = "h200") -> dict:
    impls = {r["impl"]: {"what": r["impl"]} for r in records}
    doc = {"schema": report.SCHEMA, "platform": platform, "variant": "v", "date": "2026-12-03T00:00:00Z", "env": {},
           "config": {}, "sol": None, "impls": impls, "records": records, "refused": []}  # fmt: skip
    return report.validate(doc)


def _rows(result: dict) -> dict[tuple[int, str], dict]:
    return {(r["m"], r["layout"]): r for r in result["rows"]}


def test_a_slowdown_of_ours_alone_is_flagged_and_drift_is_not():
    old = _doc([_record(64, "natural", "gemm", 10.0), _record(64, "natural", "torch_blockwise", 20.0),
                _record(128, "natural", "gemm", 10.0), _record(128, "natural", "torch_blockwise", 20.0)])  # fmt: skip
    # 64: ours 10 % slower, torch unchanged; 128: both 10 % slower (the machine)
    new = _doc([_record(64, "natural", "gemm", 11.0), _record(64, "natural", "torch_blockwise", 20.0),
                _record(128, "natural", "gemm", 11.0), _record(128, "natural", "torch_blockwise", 22.0)])  # fmt: skip
    rows = _rows(compare.compare(old, new))
    assert rows[64, "natural"]["verdict"] == "slower" and rows[64, "natural"]["corrected"] == pytest.approx(1.1)
    assert rows[128, "natural"]["verdict"] == "" and rows[128, "natural"]["corrected"] == pytest.approx(1.0)
    assert rows[128, "natural"]["change"] == pytest.approx(1.1)


def test_a_change_within_the_round_medians_spread_is_noise():
    old = _doc(
        [_record(64, "natural", "gemm", 10.0, [9.0, 10.0, 11.0]), _record(64, "natural", "torch_blockwise", 20.0)]
    )
    new = _doc([_record(64, "natural", "gemm", 11.0), _record(64, "natural", "torch_blockwise", 20.0)])
    row = _rows(compare.compare(old, new))[64, "natural"]
    assert row["noise"] == pytest.approx(11 / 9 - 1, abs=1e-4) and row["verdict"] == ""


def test_seed_records_take_the_reference_from_the_natural_layout_and_faster_is_reported():
    old = _doc([_record(64, "seed", "gemm", 10.0), _record(64, "natural", "torch_blockwise", 20.0)])
    new = _doc([_record(64, "seed", "gemm", 8.0), _record(64, "natural", "torch_blockwise", 20.0)])
    row = _rows(compare.compare(old, new))[64, "seed"]
    assert row["ref_change"] == pytest.approx(1.0) and row["verdict"] == "faster"


def test_without_the_reference_the_plain_change_is_used_and_unmatched_shapes_are_listed():
    old = _doc([_record(64, "natural", "gemm", 10.0), _record(128, "natural", "gemm", 5.0)])
    new = _doc([_record(64, "natural", "gemm", 10.5), _record(256, "natural", "gemm", 5.0)])
    result = compare.compare(old, new)
    assert [(r["m"], r["ref_change"], r["corrected"]) for r in result["rows"]] == [(64, None, 1.05)]
    assert result["unmatched"] == [[128, 256, 512, "natural"], [256, 256, 512, "natural"]]
    assert "timed in one file only: 128x256x512 natural, 256x256x512 natural" in compare.table(result)


def test_cli_exit_status_table_and_json(tmp_path, capsys):
    old = _doc([_record(64, "natural", "gemm", 10.0), _record(64, "natural", "torch_blockwise", 20.0)])
    new = _doc([_record(64, "natural", "gemm", 12.0), _record(64, "natural", "torch_blockwise", 20.0)])
    paths = [tmp_path / "old.json", tmp_path / "new.json"]
    for path, doc in zip(paths, (old, new), strict=True):
        path.write_text(json.dumps(doc))
    args = [str(p) for p in paths]
    assert compare.main(args) == 0
    assert "64x256x512" in capsys.readouterr().out
    out = tmp_path / "cmp.json"
    assert compare.main([*args, "--fail-on-slowdown", "--json", str(out)]) == 1
    assert json.loads(out.read_text())["rows"][0]["verdict"] == "slower"


def test_unreadable_or_mismatched_files_are_refused_with_a_reason(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_doc([_record(64, "natural", "gemm", 10.0)])))
    cpu = tmp_path / "cpu.json"
    cpu.write_text(json.dumps(_doc([_record(64, "natural", "gemm", 10.0)], platform="cpu")))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert compare.main([str(good), str(bad)]) == 2
    assert "cannot read results file" in capsys.readouterr().err
    assert compare.main([str(good), str(cpu)]) == 2
    assert "different platforms" in capsys.readouterr().err
