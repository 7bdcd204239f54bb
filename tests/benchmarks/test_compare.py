"""benchmarks.compare on synthetic results files: our change corrected by the drift (the reference peer's
geomean change), the noise floor from the round medians, files that cannot be compared."""

from __future__ import annotations

import json

import pytest

from benchmarks import compare
from tests.benchmarks.results_files import ours_and_torch, results_doc


def _rows(result: dict) -> dict[tuple[int, str], dict]:
    return {(r["m"], r["layout"]): r for r in result["rows"]}


def two_shapes(ours64: float, torch64: float, ours128: float, torch128: float) -> dict:
    """Shapes 64 and 128 (x 256 x 512), natural layout, timed for gemm and torch_blockwise."""
    return results_doc({(64, "natural", "gemm"): ours64, (64, "natural", "torch_blockwise"): torch64,
                        (128, "natural", "gemm"): ours128, (128, "natural", "torch_blockwise"): torch128})  # fmt: skip


def test_a_slowdown_of_ours_alone_is_flagged_and_the_machines_drift_is_not():
    # torch 10 % slower on both shapes (the machine); ours 10 % slower on 128 (the drift), 21 % on 64
    result = compare.compare(two_shapes(10.0, 20.0, 10.0, 20.0), two_shapes(12.1, 22.0, 11.0, 22.0))
    rows = _rows(result)
    assert result["drift"] == pytest.approx(1.1)
    assert rows[64, "natural"]["verdict"] == "slower" and rows[64, "natural"]["corrected"] == pytest.approx(1.1)
    assert rows[128, "natural"]["verdict"] == "" and rows[128, "natural"]["corrected"] == pytest.approx(1.0)
    assert rows[128, "natural"]["change"] == pytest.approx(1.1)


def test_the_drift_is_one_number_so_a_peers_move_on_one_shape_is_not_ours():
    # torch moved 21 % on 64 only: the drift is its geomean (1.1), and ours, unchanged, is 9 % faster there
    result = compare.compare(two_shapes(10.0, 20.0, 10.0, 20.0), two_shapes(10.0, 24.2, 10.0, 20.0))
    assert result["drift"] == pytest.approx(1.1)
    assert {r["m"]: r["verdict"] for r in result["rows"]} == {64: "faster", 128: "faster"}


def test_a_change_within_the_round_medians_spread_is_noise():
    old = results_doc({(64, "natural", "gemm"): (10.0, [9.0, 10.0, 11.0]), (64, "natural", "torch_blockwise"): 20.0})
    row = _rows(compare.compare(old, ours_and_torch(11.0, 20.0)))[64, "natural"]
    assert row["noise"] == pytest.approx(11 / 9 - 1, abs=1e-4) and row["verdict"] == ""


def test_seed_records_are_corrected_by_the_same_drift():
    old = results_doc({(64, "seed", "gemm"): 10.0, (64, "natural", "torch_blockwise"): 20.0})
    new = results_doc({(64, "seed", "gemm"): 8.8, (64, "natural", "torch_blockwise"): 22.0})
    row = _rows(compare.compare(old, new))[64, "seed"]
    assert row["corrected"] == pytest.approx(0.8) and row["verdict"] == "faster"


def test_without_the_reference_nothing_is_corrected_and_unusable_or_unmatched_shapes_are_listed():
    old = results_doc({(64, "natural", "gemm"): 10.0, (128, "natural", "gemm"): 5.0, (32, "natural", "gemm"): 0.0})
    new = results_doc({(64, "natural", "gemm"): 10.5, (256, "natural", "gemm"): 5.0, (32, "natural", "gemm"): 1.0})
    result = compare.compare(old, new)
    assert result["drift"] is None
    assert [(r["m"], r["corrected"]) for r in result["rows"]] == [(64, 1.05)]
    assert result["unmatched"] == [[32, 256, 512, "natural"], [128, 256, 512, "natural"], [256, 256, 512, "natural"]]
    text = compare.table(result)
    assert "not corrected: no torch_blockwise times in both files" in text
    assert "timed in one file only: 32x256x512 natural, 128x256x512 natural, 256x256x512 natural" in text


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


def test_files_that_cannot_be_compared_are_refused_with_a_reason(tmp_path, capsys):
    good, cpu, bad, twice = (tmp_path / f"{name}.json" for name in ("good", "cpu", "bad", "twice"))
    good.write_text(json.dumps(ours_and_torch(10.0, 20.0)))
    cpu.write_text(json.dumps(ours_and_torch(10.0, 20.0, platform="cpu")))
    bad.write_text("{not json")
    doc = ours_and_torch(10.0, 20.0)
    doc["records"].append(dict(doc["records"][0]))
    twice.write_text(json.dumps(doc))
    for other, reason in ((bad, "cannot read results file"), (cpu, "different platforms"), (twice, "timed twice")):
        assert compare.main([str(good), str(other)]) == 2
        assert reason in capsys.readouterr().err


def test_the_printed_table_gives_peer_time_over_ours():
    """The text table (what the committed *.txt and run logs hold): a peer twice as slow reads (2.00x),
    twice as fast (0.50x), and the geomean row (1.00x) is theirs over ours too."""
    from benchmarks import report

    doc = results_doc({(64, "natural", "gemm"): 10.0, (64, "natural", "torch"): 20.0,
                       (128, "natural", "gemm"): 10.0, (128, "natural", "torch"): 5.0})  # fmt: skip
    text = report.table(doc)
    assert "20.0 (2.00x)" in text and "5.0 (0.50x)" in text, text
    geomean = next(line for line in text.splitlines() if line.strip().startswith("geomean"))
    assert geomean.rstrip().endswith("(1.00x)"), geomean


def test_fail_on_slowdown_fails_when_ours_is_no_longer_timed(tmp_path, capsys):
    """A shape ours was timed on before and not now (its result refused as wrong, or the run cut short) is
    not a pass: --fail-on-slowdown exits 1 and names it; without the flag it is listed and exits 0."""
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(two_shapes(10.0, 20.0, 10.0, 20.0)))
    new.write_text(json.dumps(results_doc({(64, "natural", "gemm"): 10.0, (64, "natural", "torch_blockwise"): 20.0,
                                           (128, "natural", "torch_blockwise"): 20.0})))  # fmt: skip
    assert compare.main([str(old), str(new)]) == 0
    assert compare.main([str(old), str(new), "--fail-on-slowdown"]) == 1
    assert "gemm was timed in" in capsys.readouterr().err
    # a new run that did not take the shape up at all (a narrower --shapes) loses nothing
    new.write_text(json.dumps(results_doc({(64, "natural", "gemm"): 10.0, (64, "natural", "torch_blockwise"): 20.0})))
    assert compare.main([str(old), str(new), "--fail-on-slowdown"]) == 0
