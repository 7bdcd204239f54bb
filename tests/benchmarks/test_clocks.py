"""benchmarks.clocks: reading nvidia-smi's samples and refusing to run without an NVIDIA GPU."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest
import torch

from benchmarks import clocks


def test_parse_samples_reads_numbers_and_skips_what_it_cannot():
    text = "1980, 512.34, 0x0000000000000000\n1755, 699.1, 0x0000000000000004\n1700, [N/A], 0x4\n1600, 70"
    samples = clocks.parse_samples(text)
    assert samples == [
        {"sm_mhz": 1980.0, "power_w": 512.34, "mask": 0},
        {"sm_mhz": 1755.0, "power_w": 699.1, "mask": 4},
    ]


def test_reasons_names_bits_and_keeps_unknown_ones():
    assert clocks.reasons(0) == []
    assert clocks.reasons(0x4 | 0x80) == ["sw_power_cap", "hw_power_brake"]
    assert clocks.reasons(0x1000 | 0x4) == ["sw_power_cap", "0x1000"]


def test_summarize_takes_medians_and_reasons_seen_in_a_quarter_of_the_samples():
    samples = [
        {"sm_mhz": m, "power_w": p, "mask": k}
        for m, p, k in [(1980, 400, 0), (1700, 700, 4), (1710, 698, 4), (1720, 701, 4), (1500, 690, 0x40)]
    ]
    stats = clocks.summarize(samples)
    assert stats["sm_mhz"] == 1710 and stats["power_w"] == 698 and stats["samples"] == 5
    assert stats["reasons"] == ["sw_power_cap"]  # hw_thermal in 1 of 5 samples: below a quarter
    assert clocks.summarize([]) == {"sm_mhz": None, "power_w": None, "reasons": [], "samples": 0}


def test_seconds_must_leave_room_for_samples(capsys):
    with pytest.raises(SystemExit):
        clocks.parse_args(["--seconds", "0.2"])
    assert "--seconds" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available() and torch.version.cuda is not None, reason="this machine has the GPU")
def test_without_an_nvidia_gpu_it_exits_2_with_the_reason(capsys):
    assert clocks.main(["--shapes", "128x128x128"]) == 2
    assert "NVIDIA GPU" in capsys.readouterr().err


def test_smi_id_is_the_pci_address_when_torch_gives_it():
    class Props:
        pci_domain_id, pci_bus_id, pci_device_id = 0, 0x19, 0

    assert clocks.smi_id(Props(), 3) == "00000000:19:00.0"
    assert clocks.smi_id(object(), 3) == "3"  # an older torch without the PCI fields: the index


def test_sampler_keeps_the_lines_of_its_window_only(tmp_path, monkeypatch):
    """A stand-in nvidia-smi printing a sample every 10 ms: the window holds what arrived inside it."""
    fake = tmp_path / "nvidia-smi"
    fake.write_text('#!/bin/sh\necho "warming up" >&2\nwhile true; do echo "1500, 690.5, 0x4"; sleep 0.01; done\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with clocks.Sampler("0", "clocks.sm,power.draw,clocks_event_reasons.active") as sampler:
        time.sleep(0.3)
        t0 = time.monotonic()
        time.sleep(0.3)
        t1 = time.monotonic()
        time.sleep(0.2)
    inside = clocks.parse_samples(sampler.window(t0, t1))
    assert 5 <= len(inside) < len(sampler.lines), (len(inside), len(sampler.lines))
    assert all(s == {"sm_mhz": 1500.0, "power_w": 690.5, "mask": 4} for s in inside)
    assert any(t < t0 for t, _ in sampler.lines) and any(t > t1 for t, _ in sampler.lines)
    assert "warming up" in sampler.errors
    assert sampler.proc.poll() is not None, "nvidia-smi left running"


class _FakeEvent:
    """A stand-in torch.cuda.Event on a fake device clock that advances by 1 ms per call launched."""

    now_ms = 0.0

    def __init__(self, enable_timing: bool = False) -> None:
        self.at = None

    def record(self) -> None:
        self.at = _FakeEvent.now_ms

    def synchronize(self) -> None:
        assert self.at is not None, "waited on an event never recorded"

    def elapsed_time(self, end: _FakeEvent) -> float:
        return end.at - self.at


class _FakeTorch:
    class cuda:  # noqa: N801 (mirrors torch.cuda)
        Event = _FakeEvent


def test_sustained_times_only_the_window_after_settling():
    launched = []

    def run_batch():
        launched.append(clocks.BATCH)
        _FakeEvent.now_ms += clocks.BATCH  # 1 ms of device time per call

    t_before = time.monotonic()
    us, calls, t0, t1 = clocks.sustained(run_batch, _FakeTorch, settle_s=0.05, seconds=0.1)
    assert us == pytest.approx(1000.0)  # 1 ms per call, whatever the host's pace
    assert 0 < calls < sum(launched), "the settling run's calls are not counted"
    assert calls % clocks.BATCH == 0
    assert t_before + 0.05 <= t0 < t1 and t1 - t0 >= 0.1


class _NoGraphs:
    """A stand-in torch whose CUDA graph capture fails: batched() falls back to plain launches."""

    class cuda:  # noqa: N801 (mirrors torch.cuda)
        synchronize = staticmethod(lambda: None)

        class CUDAGraph:
            def __init__(self) -> None:
                raise RuntimeError("no capture here")


def test_batched_without_a_graph_keeps_the_last_calls_output():
    """Where capture fails (here: no CUDA at all), the calls run one by one and the checked output is the
    last one's, not the warm-up's."""
    outputs = iter(range(100))

    run_batch, launch, last_output = clocks.batched(lambda: next(outputs), _NoGraphs)
    assert launch == "eager"
    run_batch()
    assert last_output() == 2 + clocks.BATCH  # three warm-up calls, then a batch
    run_batch()
    assert last_output() == 2 + 2 * clocks.BATCH


def test_batched_poisons_a_reused_output_so_only_the_timed_calls_fill_it():
    """Our kernel writes one preallocated output each call: a call that computes only during the warm-up
    must leave NaN for the check, not the warm-up's correct result."""
    buffer = torch.zeros(4)
    calls = iter(range(100))

    def computes_only_while_warming_up():
        if next(calls) < 3:
            buffer.fill_(1.0)
        return buffer

    run_batch, _, last_output = clocks.batched(computes_only_while_warming_up, _NoGraphs)
    run_batch()
    assert last_output() is buffer and torch.isnan(buffer).all()


@pytest.mark.skipif(
    not (torch.cuda.is_available() and torch.version.cuda is not None), reason="times on an NVIDIA GPU only"
)
def test_a_wrong_result_gets_no_row_and_fails_the_run(variant_dir, monkeypatch, tmp_path):
    """The real run on one small shape: our kernel's honest row; then the same run with `gemm` made to
    return zeros after its first call (so that only the timed calls are wrong): no row for it, the reason
    recorded, exit status 1, and the peer's row still there."""
    from benchmarks import impls

    argv = ["--shapes", "256x512x1024", "--impls", "gemm,torch_blockwise", "--seconds", "0.5"]
    argv += ["--build-dir", str(variant_dir.parent)]
    honest = tmp_path / "honest.json"
    assert clocks.main([*argv, "--out", str(honest)]) == 0
    doc = json.loads(honest.read_text())
    assert [r["impl"] for r in doc["rows"]][:1] == ["gemm"] and doc["wrong"] == []

    real = impls.BY_NAME["gemm"]

    def build_wrong(ctx, inp, layout):
        call, own_ref = real.build(ctx, inp, layout)
        calls = iter(range(1 << 30))

        def wrong_after_first():
            out = call()
            return out if next(calls) == 0 else out.zero_()

        return wrong_after_first, own_ref

    monkeypatch.setitem(impls.BY_NAME, "gemm", dataclasses.replace(real, build=build_wrong))
    sabotaged = tmp_path / "sabotaged.json"
    assert clocks.main([*argv, "--out", str(sabotaged)]) == 1
    doc = json.loads(sabotaged.read_text())
    assert [w["impl"] for w in doc["wrong"]] == ["gemm"]
    assert "gemm" not in {r["impl"] for r in doc["rows"]}
    assert {r["impl"] for r in doc["rows"]} <= {"torch_blockwise"}
