"""The check stage's loader releases (requirements/loaders.txt): every release at or above a variant's
kernels-minver loads it, and ROCm's minimum is the oldest release that finds every matrix entry's
variant when torch.version.rocm and torch.version.hip differ (as they do from ROCm 10 on)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from scripts import check, loaders, matrix, variant
from scripts.common import CheckError
from tests.conftest import REPO_ROOT


def _copy_variant(variant_dir: Path, tmp_path: Path) -> Path:
    build = tmp_path / "build"
    shutil.copytree(variant_dir, build / variant_dir.name)
    return build / variant_dir.name


def test_loaders_file_lists_the_pinned_loader_and_every_minver():
    listed = loaders.releases()
    assert listed == sorted(listed, key=Version) and len(set(listed)) == len(listed)
    pinned = next(
        line.split("==")[1].strip()
        for line in (REPO_ROOT / "requirements" / "build.txt").read_text().splitlines()
        if line.startswith("kernels==")
    )
    assert pinned in listed, "the pipeline's own loader must be among those the check stage loads with"
    minimums = {loaders.minver("cpu"), loaders.minver("cuda")}
    minimums |= {loaders.minver("rocm", e.rocm) for e in matrix.load()}
    assert minimums <= set(listed), "each variant's minimum must be a release we load with"


def test_every_listed_release_loads_the_built_variant(variant_dir, tmp_path):
    vdir = _copy_variant(variant_dir, tmp_path)
    meta = json.loads((vdir / "metadata.json").read_text())
    backend, minver = meta["backend"]["type"], meta["kernels-minver"]
    verdict = check.loaders_verdict(vdir, vdir.parent, backend, minver)
    assert verdict["ok"] and list(verdict["releases"]) == loaders.releases()
    for release, result in verdict["releases"].items():
        assert result["kernels"] == release, "each interpreter imported the release it was given"
        assert result["required"] == (Version(release) >= Version(minver))
        if result["required"]:
            assert result["ok"] and Path(result["loaded"]).parent == vdir.resolve()
            assert not result["ran"] or result["within_tolerance"]


def test_a_modified_file_fails_the_check_through_the_newest_loader(variant_dir, tmp_path):
    """kernels 0.18.3 and later verify the files against metadata.json's digest; the check must fail."""
    vdir = _copy_variant(variant_dir, tmp_path)
    with (vdir / "reference.py").open("a") as fh:
        fh.write("\n# modified after the build\n")
    newest = loaders.releases()[-1]
    verdict = check.loaders_verdict(vdir, vdir.parent, "cpu", "0.17.0")
    assert not verdict["ok"] and not verdict["releases"][newest]["ok"]
    assert any(f.startswith(f"kernels {newest}:") and "digest" in f for f in verdict["failures"])


def test_the_check_records_a_failed_loader_verdict_before_it_fails(variant_dir, tmp_path, monkeypatch):
    """publish must see checks.loaders ok=false (not a missing check): the verdict is written first."""
    vdir = _copy_variant(variant_dir, tmp_path)
    newest = loaders.releases()[-1]
    real = check._run_smoke

    def newest_fails(build_dir, backend, loader_dir=None):
        if loader_dir is not None and loader_dir.name.startswith(newest):
            return subprocess.CompletedProcess([], 1, "", "ImportError: broken on purpose")
        return real(build_dir, backend, loader_dir)

    monkeypatch.setattr(check, "_run_smoke", newest_fails)
    with pytest.raises(CheckError, match=f"kernels {newest}: ImportError: broken on purpose"):
        check.check_variant(vdir, with_loaders=True)
    recorded = json.loads((vdir / "metadata.json").read_text())["checks"]
    assert recorded["smoke"]["ok"] and recorded["loaders"]["ok"] is False


def test_older_releases_honour_a_higher_minver(variant_dir, tmp_path):
    """A variant whose kernels-minver is above a release: that release refuses it, and the check records it."""
    vdir = _copy_variant(variant_dir, tmp_path)
    meta = json.loads((vdir / "metadata.json").read_text())
    newest = loaders.releases()[-1]
    meta["kernels-minver"] = newest  # metadata.json is outside the digest
    (vdir / "metadata.json").write_text(json.dumps(meta, indent=2))
    verdict = check.loaders_verdict(vdir, vdir.parent, meta["backend"]["type"], newest)
    assert verdict["ok"]
    for release, result in verdict["releases"].items():
        if release == newest:
            assert result["required"] and result["ok"]
        else:
            assert not result["required"] and not result["ok"]
            assert f"requires kernels>={newest}" in result["error"]


# Which variant each release picks, in a torch that reports ROCm `rocm` and HIP `hip` (set on a CPU
# torch before kernels is imported: the choice reads only torch.version, the platform and the names).
_CHOOSE = r"""
import json, sys
from pathlib import Path
import torch
torch.version.cuda, torch.version.rocm, torch.version.hip = None, sys.argv[2] or None, sys.argv[3]
import kernels
try:
    from kernels._internals.variants import get_variants_local, resolve_variant
except ImportError:
    from kernels.variants import get_variants_local, resolve_variant
chosen, _ = resolve_variant(get_variants_local(Path(sys.argv[1])))
print(json.dumps({"kernels": kernels.__version__, "chosen": chosen.variant_str if chosen else None}))
"""

# (ROCm, HIP) of each ROCm release in the matrix. ROCm 10.0's HIP 7.15 is in kernels 0.19.1's source,
# 10.1's HIP 7.16 in pytorch/pytorch#194256. For 7.14 HIP is taken to be 7.14.
HIP_OF_ROCM = {"7.14": "7.14.0", "10.0": "7.15.0", "10.1": "7.16.0"}


def _choices(build: Path, rocm: str, hip: str) -> dict[str, str | None]:
    picked = {}
    for release in loaders.releases():
        env = loaders.environment(loaders.install(release))
        proc = subprocess.run(
            [sys.executable, "-c", _CHOOSE, str(build), rocm, hip], capture_output=True, text=True, env=env
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        assert result["kernels"] == release
        picked[release] = result["chosen"]
    return picked


def test_rocm_minver_is_the_oldest_release_that_finds_every_matrix_variant(tmp_path):
    import torch

    rocm_releases = sorted({e.rocm for e in matrix.load()}, key=Version)
    assert set(rocm_releases) <= set(HIP_OF_ROCM), "add the new ROCm release's HIP version to HIP_OF_ROCM"
    # The matrix's ROCm variants, named for this interpreter's torch (the choice also matches torch).
    build = tmp_path / "build"
    names = {r: matrix.variant_name(torch.__version__, r) for r in rocm_releases}
    for name in names.values():
        (build / name).mkdir(parents=True)
    listed = loaders.releases()
    for rocm in rocm_releases:
        picked = _choices(build, rocm, HIP_OF_ROCM[rocm])
        assert picked[listed[-1]] == names[rocm], f"the newest loader must find ROCm {rocm}'s variant"
        # The variant's kernels-minver: the oldest release from which every later one finds it.
        oldest = next(r for i, r in enumerate(listed) if all(picked[later] == names[rocm] for later in listed[i:]))
        assert loaders.minver("rocm", rocm) == oldest, (rocm, picked)
    assert variant.named_backend(names[rocm_releases[0]]) == "rocm"


def test_the_build_names_a_rocm_variant_after_torch_version_rocm(monkeypatch):
    """On ROCm 10.0 torch reports HIP 7.15: the variant is still rocm100, the matrix entry's name."""
    import torch

    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "rocm", "10.0.0")
    monkeypatch.setattr(torch.version, "hip", "7.15.25432")
    assert variant.torch_backend().name == "rocm"
    assert variant.variant_name() == matrix.variant_name(torch.__version__, "10.0")


def test_a_variant_that_loads_but_computes_wrong_results_fails_the_smoke_and_loader_checks(variant_dir, tmp_path):
    """The checks call the op and compare with the fp32 reference: loading is not enough. The planted
    fault (every result 1.5x too large) is re-digested, so no loader refuses the files first."""
    vdir = _copy_variant(variant_dir, tmp_path)
    with (vdir / "__init__.py").open("a") as fh:
        fh.write("\n_exact_gemm = gemm\n\n\ndef gemm(*args, **kwargs):  # planted fault\n"
                 "    return _exact_gemm(*args, **kwargs) * 1.5\n")  # fmt: skip
    meta = json.loads((vdir / "metadata.json").read_text())
    meta["digest"] = check.digest_json(vdir)
    (vdir / "metadata.json").write_text(json.dumps(meta))
    check.verify_digest(vdir)
    with pytest.raises(CheckError, match="disagrees with the reference"):
        check.smoke_verdict(vdir, vdir.parent, meta["backend"]["type"])
    verdict = check.loaders_verdict(vdir, vdir.parent, meta["backend"]["type"], meta["kernels-minver"])
    assert not verdict["ok"] and verdict["failures"]
    for release, result in verdict["releases"].items():
        if result["required"]:  # an older release may not load the variant at all (no "ran" then)
            assert result.get("ran") and result.get("within_tolerance") is False and not result["ok"], release
