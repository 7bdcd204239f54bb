"""scripts.preflight on a recorded rocminfo output (two MI300X GPUs on a two-socket host)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import preflight

SAMPLE = Path(__file__).parent / "data" / "rocminfo_mi300x_2gpu.txt"


@pytest.fixture
def text() -> str:
    return SAMPLE.read_text()


@pytest.fixture
def dev_root(tmp_path) -> Path:
    root = tmp_path / "dev"
    (root / "dri").mkdir(parents=True)
    (root / "kfd").touch()
    return root


def test_parse_agents(text):
    agents = preflight.parse_rocminfo(text)
    assert [a.device_type for a in agents] == ["CPU", "CPU", "GPU", "GPU"]
    gpus = agents[2:]
    assert {a.name for a in gpus} == {"gfx942"}  # not the nested ISA "Name:" line
    assert {a.marketing_name for a in gpus} == {"AMD Instinct MI300X"}
    assert {a.compute_units for a in gpus} == {304}
    assert all(a.isas == ("gfx942",) for a in gpus)
    assert agents[0].name.startswith("AMD EPYC") and agents[0].arch == ""


def test_gpu_check_counts_matching_gpus(text):
    agents = preflight.parse_rocminfo(text)
    assert preflight.check_gpus(agents, "gfx942", 2).ok
    short = preflight.check_gpus(agents, "gfx942", 3)
    assert not short.ok and "at least 3 gfx942" in short.detail and "shows 2" in short.detail
    wrong = preflight.check_gpus(agents, "gfx950", 1)
    assert not wrong.ok and "gfx942" in wrong.detail  # names what it did see


def test_other_arch_is_not_counted(text):
    # One GPU reported as an MI250 (gfx90a): only one gfx942 remains.
    first = text.index("  Name:                    gfx942")
    mixed = text[:first] + text[first:].replace("gfx942", "gfx90a", 2)
    agents = preflight.parse_rocminfo(mixed)
    assert sorted(a.arch for a in agents if a.device_type == "GPU") == ["gfx90a", "gfx942"]
    assert not preflight.check_gpus(agents, "gfx942", 2).ok


def test_garbage_is_an_error():
    with pytest.raises(ValueError, match="HSA Agents"):
        preflight.parse_rocminfo("rocminfo: command failed\n")
    with pytest.raises(ValueError, match="no agents"):
        preflight.parse_rocminfo("==========\nHSA Agents\n==========\n")


def test_devices_and_disk(tmp_path, dev_root):
    assert preflight.check_devices(dev_root).ok
    missing = preflight.check_devices(tmp_path / "nodev")
    assert not missing.ok and "kfd" in missing.detail and "dri" in missing.detail
    assert preflight.check_disk([tmp_path], 0).ok
    low = preflight.check_disk([tmp_path / "not" / "yet"], 10**9)
    assert not low.ok and "GiB free" in low.detail


def test_main_passes_and_writes_json(tmp_path, dev_root):
    out = tmp_path / "report" / "preflight.json"
    argv = ["--rocminfo-file", str(SAMPLE), "--dev-root", str(dev_root), "--min-gpus", "2",
            "--min-free-gb", "0", "--path", str(tmp_path), "--json", str(out)]  # fmt: skip
    assert preflight.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["ok"] and [c["name"] for c in report["checks"]] == ["rocminfo", "devices", "disk"]


def test_main_fails_a_bad_runner(tmp_path, dev_root, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    argv = ["--rocminfo-file", str(SAMPLE), "--dev-root", str(dev_root), "--min-gpus", "8",
            "--min-free-gb", "0", "--path", str(tmp_path)]  # fmt: skip
    assert preflight.main(argv) == 1
    out = capsys.readouterr().out
    assert "preflight rocminfo: FAILED" in out and "::error title=preflight::" in out


@pytest.fixture
def no_rocminfo(tmp_path, monkeypatch):
    """A host without rocminfo, on PATH or in /opt/rocm."""
    monkeypatch.setattr(preflight.shutil, "which", lambda name: None)
    monkeypatch.setattr(preflight, "ROCMINFO_FALLBACK", tmp_path / "no-rocm" / "rocminfo")


def test_missing_rocminfo_fails(tmp_path, dev_root, monkeypatch, no_rocminfo):
    monkeypatch.setattr(preflight, "KFD_TOPOLOGY", tmp_path / "no-kfd")
    argv = ["--dev-root", str(dev_root), "--min-free-gb", "0", "--path", str(tmp_path)]
    assert preflight.main(argv) == 1


def _kfd_tree(root: Path, versions: list[int]) -> Path:
    for i, version in enumerate(versions):
        node = root / str(i)
        node.mkdir(parents=True)
        extra = "simd_count 1216\nsimd_per_cu 4\n" if version else "simd_count 0\n"
        (node / "properties").write_text(
            f"cpu_cores_count {0 if version else 96}\n{extra}gfx_target_version {version}\n"
        )
    return root


def test_without_rocminfo_the_kfd_topology_lists_the_gpus(tmp_path, dev_root, monkeypatch, capsys, no_rocminfo):
    """A host with the amdgpu driver and ROCm only inside the images: the GPUs come from sysfs."""
    monkeypatch.setattr(preflight, "KFD_TOPOLOGY", _kfd_tree(tmp_path / "kfd", [0, 90402, 90402, 90010]))
    agents = preflight.kfd_agents(preflight.KFD_TOPOLOGY)
    assert [(a.arch, a.device_type, a.compute_units) for a in agents] == [
        ("", "CPU", None), ("gfx942", "GPU", 304), ("gfx942", "GPU", 304), ("gfx90a", "GPU", 304)
    ]  # fmt: skip
    unreadable = preflight.KFD_TOPOLOGY / "9"  # a GPU outside this process's cgroup: skipped, as rocminfo does
    unreadable.mkdir()
    (unreadable / "properties").write_text("gfx_target_version 90402\n")
    real_read = Path.read_text

    def read_text(path, *a, **kw):
        if path.parent == unreadable:
            raise PermissionError(1, "Operation not permitted")
        return real_read(path, *a, **kw)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert len(preflight.kfd_agents(preflight.KFD_TOPOLOGY)) == 4
    argv = ["--dev-root", str(dev_root), "--min-free-gb", "0", "--path", str(tmp_path), "--min-gpus", "2"]
    assert preflight.main(argv) == 0, capsys.readouterr().out
    assert preflight.main([*argv[:-1], "3"]) == 1


def test_no_gpu_mode_checks_disk_only(tmp_path, capsys):
    assert preflight.main(["--no-gpu", "--min-free-gb", "0", "--path", str(tmp_path)]) == 0
    assert "rocminfo" not in capsys.readouterr().out


def test_reclaim_only_on_github_hosted_runners():
    check = preflight.reclaim_hosted_disk({"RUNNER_ENVIRONMENT": "self-hosted"})
    assert check.ok and "nothing removed" in check.detail
    assert "nothing removed" in preflight.reclaim_hosted_disk({}).detail


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arch", "mi300x"], "--arch"),
        (["--min-gpus", "0"], "--min-gpus"),
        (["--min-free-gb", "-1"], "--min-free-gb"),
    ],
)
def test_bad_arguments_name_the_argument(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        preflight.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_low_disk_prunes_docker_then_rechecks(tmp_path, monkeypatch, dev_root):
    """What is pruned leaves a neighbouring job's image alone: no `system prune --all` (its `until` is an
    image's creation date, so it removed images pulled minutes ago), and of the rocm/pytorch images only
    those docker/matrix.yaml no longer names."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "docker.log"
    current = sorted(preflight.matrix_images())[0]
    old = "rocm/pytorch:rocm6.4_ubuntu22.04_py3.10_pytorch_release_2.6.0"
    fake = bindir / "docker"
    fake.write_text(
        f'#!/bin/sh\necho "$@" >> "{log}"\n'
        f'if [ "$1 $2" = "image ls" ]; then printf "%s\\n" "{current}" "{old}" "rocm/pytorch:<none>"; fi\n'
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    argv = ["--rocminfo-file", str(SAMPLE), "--dev-root", str(dev_root), "--min-free-gb", "1e9",
            "--path", str(tmp_path), "--docker-prune"]  # fmt: skip
    assert preflight.main(argv) == 1  # still short after pruning
    calls = log.read_text().splitlines()
    assert calls == [
        "container prune --force --filter until=72h",
        "image prune --force",
        "builder prune --force --filter unused-for=72h",
        "image ls --format {{.Repository}}:{{.Tag}} rocm/pytorch",
        f"image rm {old}",
    ]
    log.unlink()
    argv[argv.index("1e9")] = "0"
    assert preflight.main(argv) == 0
    assert not log.exists()  # enough disk: nothing pruned


def test_the_matrix_images_read_without_pyyaml_are_the_matrix_parsers():
    from scripts import matrix

    assert preflight.matrix_images() == {e.image for e in matrix.load()}


def test_one_gpu_needs_the_runner_to_name_its_gpu_on_a_shared_host(tmp_path, dev_root, monkeypatch):
    """The recorded host has 2 MI300X: without a visibility variable every job's container would run on the
    first; with one, the check passes (and without --one-gpu it is not made)."""
    for var in preflight.VISIBILITY_VARS:
        monkeypatch.delenv(var, raising=False)
    argv = ["--rocminfo-file", str(SAMPLE), "--dev-root", str(dev_root), "--min-free-gb", "0",
            "--path", str(tmp_path), "--json", str(tmp_path / "p.json")]  # fmt: skip
    assert preflight.main(argv) == 0
    assert preflight.main([*argv, "--one-gpu"]) == 1
    report = json.loads((tmp_path / "p.json").read_text())
    failed = [c for c in report["checks"] if not c["ok"]]
    assert [c["name"] for c in failed] == ["one-gpu"] and "2 gfx942 GPUs" in failed[0]["detail"]
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "1")
    assert preflight.main([*argv, "--one-gpu"]) == 0
