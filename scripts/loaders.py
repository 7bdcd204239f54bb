"""The `kernels` loader releases a variant is held to, and the oldest one each backend declares.

Users load our variants with whatever `kernels` they have, not the release the pipeline pins. The check
stage (`python -m scripts.check --loaders`) loads each built variant with every release listed in
requirements/loaders.txt, each installed apart under .cache/loaders/<release>/ ($GEMM_LOADERS_DIR) and
put first on the path of a fresh interpreter.

Why ROCm's minimum is higher than the others': a variant is named after the ROCm release of the torch
it was built with (`torch.version.rocm`), and older loaders read that release differently.
- kernels 0.17 takes it from `torch.version.hip`, which from ROCm 10 on is HIP's own, lower version.
- kernels 0.18 takes it from `torch.version.rocm`, but misreads a legacy name whose minor has two
  digits (rocm<M><MM>) as major <M><M>.
- kernels 0.19.1 reads both right.
docker/README.md gives the versions; tests/pipeline/test_loaders.py shows each case with each release.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.version import Version

from .common import REPO_ROOT, CheckError, log

LOADERS_FILE = REPO_ROOT / "requirements" / "loaders.txt"
# Where the releases are installed; a container whose checkout is read-only points it elsewhere.
CACHE = Path(os.environ.get("GEMM_LOADERS_DIR") or REPO_ROOT / ".cache" / "loaders")

# kernels-minver in each backend's metadata.json: the oldest release that finds and loads its variants.
MINVER = {"cpu": "0.17.0", "cuda": "0.17.0", "rocm": "0.19.1"}


def minver(backend: str) -> str:
    return MINVER[backend]


def releases(path: Path = LOADERS_FILE) -> list[str]:
    """The releases pinned in requirements/loaders.txt (lines `kernels==X.Y.Z`), oldest first."""
    found = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, release = line.partition("==")
        if name.strip() != "kernels" or not sep:
            raise CheckError(f"{path}: {line!r} is not a pin of the form kernels==X.Y.Z")
        found.append(release.strip())
    if not found:
        raise CheckError(f"{path} lists no kernels release")
    return sorted(found, key=Version)


def install(release: str, cache: Path = CACHE) -> Path:
    """A directory holding kernels==`release` and its dependencies (not torch), installed once."""
    target = cache / release
    if (target / "kernels").is_dir():
        return target
    staging = cache / f".{release}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    log(f"    installing kernels=={release} into {target}")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
        + ["--target", str(staging), f"kernels=={release}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CheckError(f"pip could not install kernels=={release}:\n{proc.stderr[-2000:]}")
    # Complete or absent: a second check never sees half an install.
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    return target


def must_load(release: str, variant_minver: str) -> bool:
    return Version(release) >= Version(variant_minver)
