"""The `kernels` loader releases a variant is held to, and the oldest one each variant declares.

Users load our variants with whatever `kernels` they have, not the release the pipeline pins. The check
stage (`python -m scripts.check --loaders`) loads each built variant with every release listed in
requirements/loaders.txt, each installed apart under .cache/loaders/ ($GEMM_LOADERS_DIR) and put first
on the path of a fresh interpreter. The packages a release shares with this interpreter (huggingface_hub,
packaging, ...) are held to the versions installed here, so only the loader differs.

Why some ROCm variants declare a newer minimum: a variant is named after the ROCm release of the torch
it was built with (`torch.version.rocm`), and older loaders read that release differently.
- kernels 0.17 takes it from `torch.version.hip`, which from ROCm 10 on is HIP's own, lower version:
  it finds no variant of a ROCm >= 10 torch (0.18 reads `torch.version.rocm`).
- kernels 0.18 misreads a legacy name whose minor has two digits (rocm<M><MM>) as major <M><M>. 0.19.1
  special-cases the one such release that exists (7.14); any other would still be misread, which
  tests/docker/test_matrix.py catches for the matrix's entries.
docker/README.md gives the versions; tests/pipeline/test_loaders.py shows each case with each release.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
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


def minver(backend: str, rocm: str | None = None) -> str:
    """kernels-minver of a variant: the oldest release that finds and loads it (`rocm`: its ROCm
    major.minor, for the rocm backend)."""
    if backend != "rocm":
        return "0.17.0"
    if rocm is None:
        raise ValueError("a ROCm variant's minimum loader depends on its ROCm release: pass rocm=")
    version = Version(rocm)
    if len(str(version.minor)) > 1:
        return "0.19.1"  # rocm<M><MM>: only 0.19.1 reads it, and only for 7.14
    if version.major >= 10:
        return "0.18.3"  # HIP's version differs: 0.17 looks for the wrong name
    return "0.17.0"


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


@functools.cache
def _constraints() -> str:
    """`name==version` of every distribution installed here but kernels itself (read once a process)."""
    pins = {
        dist.metadata["Name"].lower(): dist.version
        for dist in importlib.metadata.distributions()
        if dist.metadata["Name"] and dist.metadata["Name"].lower() != "kernels"
    }
    return "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def install(release: str, cache: Path = CACHE) -> Path:
    """A directory holding kernels==`release` and the dependencies this interpreter lacks, installed
    once per set of installed packages (the directory name carries their hash)."""
    constraints = _constraints()
    target = cache / f"{release}-{hashlib.sha256(constraints.encode()).hexdigest()[:10]}"
    if (target / "kernels").is_dir():
        return target
    staging = cache / f".{target.name}-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging.parent / f"{staging.name}.txt").write_text(constraints)
    log(f"    installing kernels=={release} into {target}")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]
        + ["--constraint", str(staging.parent / f"{staging.name}.txt")]
        + ["--target", str(staging), f"kernels=={release}"],
        capture_output=True,
        text=True,
    )
    (staging.parent / f"{staging.name}.txt").unlink()
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise CheckError(f"pip could not install kernels=={release}:\n{proc.stderr[-2000:]}")
    # Complete or absent: another process may have finished the same install first; keep its copy.
    try:
        staging.rename(target)
    except OSError:
        if not (target / "kernels").is_dir():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    return target


def environment(loader_dir: Path) -> dict[str, str]:
    """This process's environment with the release installed in `loader_dir` first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(loader_dir), env.get("PYTHONPATH")]))
    return env


def must_load(release: str, variant_minver: str) -> bool:
    return Version(release) >= Version(variant_minver)
