"""benchmarks.lds_profile: the MI300X's own LDS bank-conflict counters per GEMM kernel (rocprofv3).

The profile itself needs an MI300X (the GPU job runs it); here: the counter CSV reader on rocprofv3's
long format, the kernel names, the summary, the refusal on a machine without a ROCm GPU, and the whole
command path with a stand-in profiler that writes what rocprofv3 writes.
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest

from benchmarks import lds_profile

HEADER = (
    '"Correlation_Id","Dispatch_Id","Agent_Id","Queue_Id","Process_Id","Thread_Id","Grid_Size","Kernel_Id",'
    '"Kernel_Name","Workgroup_Size","LDS_Block_Size","Scratch_Size","VGPR_Count","Accum_VGPR_Count","SGPR_Count",'
    '"Counter_Name","Counter_Value","Start_Timestamp","End_Timestamp"'
)
T256_NATURAL = "void gemm_rocm::gemm_kernel<gemm_rocm::TileCfg<256, 128, 4, 2, 16, 2>, 1, true>(gemm_rocm::Args)"
T64_SEED_BYTES = "void gemm_rocm::gemm_kernel<gemm_rocm::TileCfg<64, 64, 2, 2, 32, 2>, 0, false>(gemm_rocm::Args)"
REDUCE = "void gemm_rocm::splitk_reduce_kernel<4>(gemm_rocm::ReduceArgs)"
T128_SEED_MANGLED = "_ZN9gemm_rocm11gemm_kernelINS_7TileCfgILi128ELi128ELi4ELi2ELi16ELi2EEELi0ELb1EEEvNS_4ArgsE"


def _row(dispatch: int, kernel: str, counter: str, value: float) -> str:
    return f'{dispatch},{dispatch},"Agent 1",1,7,7,1024,3,"{kernel}",512,59392,0,220,0,48,"{counter}",{value},1,2'


def _write_csv(path: Path, rows: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([HEADER, *rows]) + "\n")


def test_counters_are_summed_per_kernel_over_dispatches_and_passes(tmp_path):
    _write_csv(
        tmp_path / "pass_1" / "lds_counter_collection.csv",
        [
            _row(1, T256_NATURAL, "SQ_LDS_BANK_CONFLICT", 10),
            _row(1, T256_NATURAL, "SQ_LDS_IDX_ACTIVE", 100),
            _row(2, T256_NATURAL, "SQ_LDS_BANK_CONFLICT", 30),
            _row(2, T256_NATURAL, "SQ_LDS_IDX_ACTIVE", 300),
            _row(3, REDUCE, "SQ_LDS_IDX_ACTIVE", 0),
        ],
    )
    _write_csv(tmp_path / "lds_counter_collection.csv", [_row(4, T64_SEED_BYTES, "SQ_INSTS_LDS", 7.5)])
    sums = lds_profile.read_counter_csvs(tmp_path)
    assert sums[T256_NATURAL] == {"SQ_LDS_BANK_CONFLICT": 40.0, "SQ_LDS_IDX_ACTIVE": 400.0, "dispatches": 2.0}
    assert sums[T64_SEED_BYTES] == {"SQ_INSTS_LDS": 7.5, "dispatches": 1.0}
    rows = {r["kernel"]: r for r in lds_profile.summarize(sums)}
    assert rows["t256x128 natural vec"]["conflict_share"] == pytest.approx(0.1)
    assert rows["t256x128 natural vec"]["dispatches"] == 2
    assert rows[REDUCE]["conflict_share"] is None  # LDS never active: no share, not 0
    table = lds_profile.format_table(lds_profile.summarize(sums))
    assert "t256x128 natural vec" in table and "10.0%" in table


def test_a_csv_without_the_counter_columns_is_refused_by_name(tmp_path):
    (tmp_path / "x_counter_collection.csv").write_text('"Kernel_Name","Value"\n"k",1\n')
    with pytest.raises(ValueError, match="Counter_Name, Counter_Value"):
        lds_profile.read_counter_csvs(tmp_path)


def test_a_truncated_csv_is_refused_with_its_line(tmp_path):
    _write_csv(tmp_path / "lds_counter_collection.csv", [_row(1, T256_NATURAL, "SQ_INSTS_LDS", 3), '1,1,"Agent 1"'])
    with pytest.raises(ValueError, match=r"counter_collection.csv:3: a short row"):
        lds_profile.read_counter_csvs(tmp_path)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (T256_NATURAL, "t256x128 natural vec"),
        (T64_SEED_BYTES, "t64x64 seed bytes"),
        (T128_SEED_MANGLED, "t128x128 seed vec"),
        (REDUCE, REDUCE),
    ],
)
def test_kernel_names_read_as_configurations(name, expected):
    assert lds_profile.describe_kernel(name) == expected


def test_a_machine_that_cannot_profile_writes_why_and_exits_zero(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: "no MI300X here")
    assert lds_profile.main(["--build-dir", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    report = json.loads((tmp_path / "o" / "lds_profile.json").read_text())
    assert report["available"] is False and report["reason"] == "no MI300X here"


def test_without_a_rocm_torch_the_reason_says_so():
    torch = pytest.importorskip("torch")
    if torch.version.hip is not None:
        pytest.skip("a ROCm build of torch: the reason depends on the GPU and the profiler")
    assert "ROCm" in lds_profile.unavailable_reason("rocprofv3")


def test_an_exception_still_writes_the_json_and_exits_one(tmp_path, monkeypatch):
    def broken(profiler):
        raise RuntimeError("hipGetDeviceProperties failed")

    monkeypatch.setattr(lds_profile, "unavailable_reason", broken)
    assert lds_profile.main(["--out", str(tmp_path / "o")]) == 1
    assert "hipGetDeviceProperties" in json.loads((tmp_path / "o" / "lds_profile.json").read_text())["error"]


def test_bad_shapes_are_a_usage_error(tmp_path, capsys):
    assert lds_profile.main(["--shapes", "12x", "--out", str(tmp_path)]) == 2
    assert "--shapes" in capsys.readouterr().err


# Per dispatch, what the stand-in profiler reports: distinct values, so that a counter read in the
# place of another shows.
FAKE_VALUES = {"SQ_LDS_BANK_CONFLICT": 2.0, "SQ_LDS_IDX_ACTIVE": 8.0, "SQ_INSTS_LDS": 10.0}


def _fake_profiler(tmp_path: Path, exit_code: int, kernels: list[str], sleep_s: float = 0, zero_lds=False) -> Path:
    """A stand-in for rocprofv3: checks the counters it is asked for, writes rocprofv3's CSV into -d's
    pass_1/, sleeps `sleep_s` in a child (as rocprofv3 runs the workload) and exits with `exit_code`
    (the workload itself is not run: it needs the GPU)."""
    values = dict(FAKE_VALUES, SQ_INSTS_LDS=0.0) if zero_lds else FAKE_VALUES
    rows = [_row(i + 1, k, c, values[c]) for i, k in enumerate(kernels) for c in lds_profile.COUNTERS]
    script = tmp_path / "fake_rocprofv3"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, pathlib\n"
        "argv = sys.argv[1:]\n"
        f"assert argv[argv.index('--pmc') + 1:argv.index('--pmc') + 4] == {list(lds_profile.COUNTERS)!r}, argv\n"
        "assert '--workload' in argv[argv.index('--'):], argv\n"
        "out = pathlib.Path(argv[argv.index('-d') + 1]) / 'pass_1'\n"
        "out.mkdir(parents=True)\n"
        f"(out / 'lds_counter_collection.csv').write_text({chr(10).join([HEADER, *rows])!r} + '\\n')\n"
        "import subprocess\n"
        f"subprocess.run(['sleep', '{sleep_s}'])\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_the_profiled_run_is_read_back_into_the_report(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    profiler = _fake_profiler(tmp_path, 0, [T256_NATURAL, REDUCE])
    out = tmp_path / "o"
    assert lds_profile.main(["--build-dir", str(tmp_path), "--out", str(out), "--profiler", str(profiler)]) == 0
    report = json.loads((out / "lds_profile.json").read_text())
    assert report["available"] is True and report["exit_code"] == 0
    kernels = {r["kernel"]: r for r in report["kernels"]}
    assert kernels["t256x128 natural vec"]["conflict_share"] == pytest.approx(0.25)  # 2 / 8
    assert kernels["t256x128 natural vec"]["gemm"] and not kernels[REDUCE]["gemm"]
    assert kernels[REDUCE]["SQ_INSTS_LDS"] == 10.0
    assert "IDX_ACTIVE" in report["conflict_share"]


def test_a_stale_csv_of_an_earlier_run_is_not_summed_in(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    out = tmp_path / "o"
    _write_csv(out / "raw" / "old_counter_collection.csv", [_row(9, T256_NATURAL, "SQ_LDS_BANK_CONFLICT", 1e6)])
    profiler = _fake_profiler(tmp_path, 0, [T256_NATURAL])
    assert lds_profile.main(["--out", str(out), "--profiler", str(profiler)]) == 0
    (row,) = json.loads((out / "lds_profile.json").read_text())["kernels"]
    assert row["SQ_LDS_BANK_CONFLICT"] == 2.0


def test_a_profiled_run_past_its_timeout_is_killed_and_reported(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    profiler = _fake_profiler(tmp_path, 0, [T256_NATURAL], sleep_s=60)
    out = tmp_path / "o"
    assert lds_profile.main(["--out", str(out), "--profiler", str(profiler), "--timeout", "2"]) == 1
    assert "ran past --timeout 2 s" in json.loads((out / "lds_profile.json").read_text())["error"]


def test_counters_that_read_zero_are_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    profiler = _fake_profiler(tmp_path, 0, [T256_NATURAL], zero_lds=True)
    out = tmp_path / "o"
    assert lds_profile.main(["--out", str(out), "--profiler", str(profiler)]) == 1
    assert "not readable" in json.loads((out / "lds_profile.json").read_text())["error"]


def test_a_failed_profiled_run_exits_one(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    profiler = _fake_profiler(tmp_path, 3, [T256_NATURAL])
    out = tmp_path / "o"
    assert lds_profile.main(["--build-dir", str(tmp_path), "--out", str(out), "--profiler", str(profiler)]) == 1
    assert "exited 3" in json.loads((out / "lds_profile.json").read_text())["error"]


def test_no_gemm_kernel_in_the_profile_exits_one(tmp_path, monkeypatch):
    monkeypatch.setattr(lds_profile, "unavailable_reason", lambda profiler: None)
    profiler = _fake_profiler(tmp_path, 0, [REDUCE])
    assert lds_profile.main(["--out", str(tmp_path / "o"), "--profiler", str(profiler)]) == 1


def test_the_profiler_is_found_in_torchs_rocm_home_when_not_on_path(tmp_path, monkeypatch):
    """Images that install ROCm as wheels have no /opt/rocm and no rocprofv3 on PATH: torch's ROCM_HOME/bin."""
    from torch.utils import cpp_extension

    home = tmp_path / "rocm"
    (home / "bin").mkdir(parents=True)
    exe = home / "bin" / "rocprofv3"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(cpp_extension, "ROCM_HOME", str(home))
    assert lds_profile.find_profiler("rocprofv3") == str(exe)
    monkeypatch.setattr(cpp_extension, "ROCM_HOME", None)
    assert lds_profile.find_profiler("rocprofv3") in (None, "/opt/rocm/bin/rocprofv3")
